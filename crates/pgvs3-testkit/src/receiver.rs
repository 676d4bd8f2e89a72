//! A webhook receiver for the outbox tests: an HTTP server on 127.0.0.1 that records every
//! request it is sent and answers a status the test sets; it can be taken down (its port
//! refuses connections, open connections are cut) and brought back up on the same port.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

#[derive(Clone, Debug)]
pub struct Received {
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

pub struct Receiver {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    status: Arc<AtomicU16>,
    server: Option<JoinSet<()>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut receiver = Receiver {
            addr: listener.local_addr().unwrap(),
            received: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
            server: None,
        };
        receiver.serve(listener);
        receiver
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What it answers from now on (requests are recorded whatever it answers).
    pub fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Down: the listener closed and every open connection cut.
    pub async fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.abort_all();
            while server.join_next().await.is_some() {}
        }
    }

    /// Up again, on the same port.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = TcpListener::bind(self.addr)
            .await
            .expect("the receiver's port is free again");
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        let received = Arc::clone(&self.received);
        let status = Arc::clone(&self.status);
        let mut server = JoinSet::new();
        server.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let received = Arc::clone(&received);
                let status = Arc::clone(&status);
                connections.spawn(async move {
                    let service = service_fn(move |request: http::Request<Incoming>| {
                        let received = Arc::clone(&received);
                        let status = Arc::clone(&status);
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            received.lock().unwrap().push(Received {
                                headers: parts.headers,
                                body: String::from_utf8_lossy(&body).into_owned(),
                            });
                            let mut response = http::Response::new(Full::new(Bytes::new()));
                            *response.status_mut() = http::StatusCode::from_u16(status.load(Ordering::SeqCst)).unwrap();
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // `connections` is dropped (its tasks aborted) when this task is.
        });
        self.server = Some(server);
    }
}

/// Checks a delivery's `<prefix>-signature` against HMAC-SHA256(secret, "<timestamp>.<body>").
pub fn signed_by(delivery: &Received, prefix: &str, secret: &str) -> bool {
    use hmac::{KeyInit, Mac};
    let timestamp = delivery.header(&format!("{prefix}-timestamp"));
    let Some(hex) = delivery.header(&format!("{prefix}-signature")).strip_prefix("sha256=") else {
        return false;
    };
    let Ok(claimed) = hex::decode(hex) else { return false };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.{}", delivery.body).as_bytes());
    mac.verify_slice(&claimed).is_ok()
}
