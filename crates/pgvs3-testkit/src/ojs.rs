//! A plain HTTP client for the OJS endpoint, as any OJS SDK talks to it.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::TestGateway;

#[derive(Clone)]
pub struct Ojs {
    pub addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    pub token: Option<String>,
    /// Sent as `X-OJS-Tenant` when set.
    pub tenant: Option<String>,
}

impl Ojs {
    pub fn of(gateway: &TestGateway) -> Ojs {
        Ojs {
            addr: gateway.gateway.ojs_addr.expect("OJS listener"),
            client: Client::builder(TokioExecutor::new()).build_http(),
            token: None,
            tenant: None,
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let (status, _, body) = self.exchange(method, path, body).await;
        (status, body)
    }

    pub async fn exchange(&self, method: &str, path: &str, body: Option<Value>) -> (u16, http::HeaderMap, Value) {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", "application/openjobspec+json");
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(tenant) = &self.tenant {
            request = request.header("x-ojs-tenant", tenant);
        }
        let payload = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let response = self
            .client
            .request(request.body(Full::new(payload)).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(body)).await
    }

    /// The same client, acting as `tenant`.
    pub fn as_tenant(&self, tenant: &str) -> Ojs {
        Ojs {
            tenant: Some(tenant.to_string()),
            ..self.clone()
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None).await
    }

    pub async fn fetch(&self, queue: &str, worker: &str) -> Option<Value> {
        let (status, body) = self
            .post(
                "/ojs/v1/workers/fetch",
                json!({ "queues": [queue], "worker_id": worker }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["jobs"].as_array().and_then(|jobs| jobs.first().cloned())
    }
}
