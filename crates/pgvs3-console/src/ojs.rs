//! The gateway's OJS listener as the jobs pages reach it: HTTP/1.1 on loopback with the
//! operator's bearer token (`--ojs-token`), one request a connection, within a deadline and a
//! body bound. Only root-key sessions get here (docs/console.md, "Jobs").

use std::net::SocketAddr;

use http::Method;
use serde_json::Value;

/// The most of one OJS answer the console reads (a dead-letter page of 100 jobs with their args
/// and errors fits many times over).
const MAX_ANSWER: usize = 8 << 20;

#[derive(Clone)]
pub struct Ojs {
    pub addr: SocketAddr,
    pub token: Option<crate::Token>,
}

impl Ojs {
    /// `method` on `/ojs/v1{path}` as tenant `tenant`: the JSON answer, or the OJS error's
    /// code and message.
    pub async fn call(&self, method: Method, path: &str, tenant: &str) -> Result<Value, String> {
        // A token the gateway configured but cannot name now (the root key is gone) is sent
        // empty, and refused like any wrong one.
        let bearer = self
            .token
            .as_ref()
            .map(|token| format!("Bearer {}", token().unwrap_or_default()));
        let mut headers = vec![("x-ojs-tenant", tenant)];
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer));
        }
        let (status, body) =
            crate::loopback::request(self.addr, method, &format!("/ojs/v1{path}"), &headers, MAX_ANSWER).await?;
        let value: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).map_err(|_| format!("the OJS listener answered {status} without JSON"))?
        };
        if status.is_success() {
            return Ok(value);
        }
        let error = &value["error"];
        Err(format!(
            "{} ({}): {}",
            error["code"].as_str().unwrap_or("error"),
            status.as_u16(),
            error["message"].as_str().unwrap_or("")
        ))
    }
}
