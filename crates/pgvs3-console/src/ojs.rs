//! The gateway's OJS listener as the jobs pages reach it: HTTP/1.1 on loopback with the
//! operator's bearer token (`--ojs-token`), one request a connection, within a deadline and a
//! body bound. Only root-key sessions get here (docs/console.md, "Jobs").

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// The most of one OJS answer the console reads (a dead-letter page of 100 jobs with their args
/// and errors fits many times over).
const MAX_ANSWER: usize = 8 << 20;
const DEADLINE: Duration = Duration::from_secs(15);

#[derive(Clone)]
pub struct Ojs {
    pub addr: SocketAddr,
    pub token: Option<String>,
}

impl Ojs {
    /// `method` on `/ojs/v1{path}` as tenant `tenant`: the JSON answer, or the OJS error's
    /// code and message.
    pub async fn call(&self, method: Method, path: &str, tenant: &str) -> Result<Value, String> {
        tokio::time::timeout(DEADLINE, self.exchange(method, path, tenant))
            .await
            .map_err(|_| "the OJS listener did not answer in time".to_owned())?
    }

    async fn exchange(&self, method: Method, path: &str, tenant: &str) -> Result<Value, String> {
        let unreachable = |err: &dyn std::fmt::Display| format!("the OJS listener could not be reached: {err}");
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|err| unreachable(&err))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| unreachable(&err))?;
        tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(format!("/ojs/v1{path}"))
            .header(header::HOST, self.addr.to_string())
            .header("x-ojs-tenant", tenant);
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Full::new(Bytes::new())).map_err(|err| err.to_string())?;
        let response = sender.send_request(request).await.map_err(|err| unreachable(&err))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|_| {
                format!(
                    "the OJS answer is larger than the console reads ({} MiB)",
                    MAX_ANSWER >> 20
                )
            })?
            .to_bytes();
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
