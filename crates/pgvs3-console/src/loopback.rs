//! One HTTP/1.1 request to a listener of this gateway on loopback (OJS, admin): a connection of
//! its own, within a deadline, the answer's body read up to a bound.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;

const DEADLINE: Duration = Duration::from_secs(15);

/// `method path` with `headers`: the status and at most `max` bytes of body (more is an error).
pub async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    max: usize,
) -> Result<(StatusCode, Bytes), String> {
    let exchange = async {
        let unreachable = |err: &dyn std::fmt::Display| format!("{addr} could not be reached: {err}");
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|err| unreachable(&err))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| unreachable(&err))?;
        tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, addr.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::new())).map_err(|err| err.to_string())?;
        let response = sender.send_request(request).await.map_err(|err| unreachable(&err))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), max)
            .collect()
            .await
            .map_err(|_| {
                format!(
                    "the answer of {addr} is larger than the console reads ({} MiB)",
                    max >> 20
                )
            })?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(DEADLINE, exchange)
        .await
        .map_err(|_| format!("{addr} did not answer in time"))?
}
