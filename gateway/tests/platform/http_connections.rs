//! The shared HTTP accept loop under hostile clients: silent and half-sent connections are
//! closed, connections beyond a listener's cap are answered at once and cost nothing, and the
//! admin port keeps answering while a data port is flooded.

use pgvs3_testkit as common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::TestGateway;
use common::raw::send;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection (or `limit` passes): what it sent, and how long
/// the close took.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let read = tokio::time::timeout(limit, stream.read_to_end(&mut received)).await;
    match read {
        Ok(Ok(_)) => {}
        // A reset is a close as well.
        Ok(Err(err)) => assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}"),
        Err(_) => panic!("the server kept the connection open for {limit:?}"),
    }
    (received, started.elapsed())
}

async fn healthz(addr: SocketAddr) -> u16 {
    send(addr, "GET", "/healthz", &[("host".into(), addr.to_string())], b"")
        .await
        .status
}

#[tokio::test]
async fn connections_that_send_no_request_in_time_are_closed() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &["--http-first-request-timeout", "500ms"],
    )
    .await;
    let s3 = gw.gateway.s3_addr;
    let ojs = gw.gateway.ojs_addr.expect("OJS is on");
    // Nothing at all; half a request line; a cut-off HTTP/2 preface; a head without its end.
    let openings: [&[u8]; 4] = [
        b"",
        b"GET / HT",
        b"PRI * HTTP/2.0\r\n",
        b"GET / HTTP/1.1\r\nhost: x\r\n",
    ];
    for addr in [s3, ojs] {
        for opening in openings {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(opening).await.unwrap();
            let (received, took) = until_closed(&mut stream, Duration::from_secs(10)).await;
            assert!(received.is_empty(), "no answer to half a request: {received:?}");
            assert!(
                took >= Duration::from_millis(400),
                "closed after {took:?}, before the deadline"
            );
        }
    }
    assert_eq!(
        gw.metric("pgvs3_http_connections_refused_total{reason=\"first_request_timeout\",server=\"s3\"}")
            .await,
        Some(4.0)
    );
    // A client that does send in time is served, on the same listener.
    gw.client.list_buckets().send().await.expect("served");
    gw.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_are_told_to_slow_down_and_the_admin_port_still_answers() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &["--s3-max-connections", "8", "--http-first-request-timeout", "60s"],
    )
    .await;
    let s3 = gw.gateway.s3_addr;
    let admin = gw.gateway.admin_addr;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(s3).await.unwrap());
    }
    common::eventually(Duration::from_secs(10), "eight S3 connections open", || async {
        (gw.metric("pgvs3_http_connections{server=\"s3\"}").await == Some(8.0)).then_some(())
    })
    .await;
    for _ in 0..3 {
        let mut extra = TcpStream::connect(s3).await.unwrap();
        let (received, _) = until_closed(&mut extra, Duration::from_secs(10)).await;
        let text = String::from_utf8_lossy(&received);
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(text.contains("<Code>SlowDown</Code>"), "{text}");
        assert!(text.to_ascii_lowercase().contains("retry-after: 1"), "{text}");
    }
    assert_eq!(healthz(admin).await, 200, "the admin port has its own budget");
    assert_eq!(
        gw.metric("pgvs3_http_connections_refused_total{reason=\"limit\",server=\"s3\"}")
            .await,
        Some(3.0)
    );
    // The slots come back as the held connections close.
    drop(held);
    common::eventually(Duration::from_secs(10), "the held connections' slots back", || async {
        (gw.metric("pgvs3_http_connections{server=\"s3\"}").await == Some(0.0)).then_some(())
    })
    .await;
    gw.client.list_buckets().send().await.expect("served again");
    gw.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--http-idle-timeout", "1s"]).await;
    let admin = gw.gateway.admin_addr;
    let mut stream = TcpStream::connect(admin).await.unwrap();
    stream
        .write_all(format!("GET /healthz HTTP/1.1\r\nhost: {admin}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // Kept alive after the answer, then closed once idle for the timeout.
    let (_, took) = until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    gw.stop().await;
}

/// Review of session 28, item 2: HTTP/2 connections were only PINGed, so a client that answers
/// PINGs kept an idle h2c connection for ever, and 4,096 of them filled `--s3-max-connections`.
/// An HTTP/2 connection with no request open for the idle timeout is now sent GOAWAY and
/// closed, as an idle HTTP/1.1 one is; one that keeps sending requests stays open.
#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--http-idle-timeout", "1s"]).await;
    let s3 = gw.gateway.s3_addr;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(TcpStream::connect(s3).await.unwrap()),
    )
    .await
    .unwrap();
    let mut connection = tokio::spawn(connection);
    // Busy for longer than the idle timeout: never idle for it, so kept open.
    for _ in 0..8 {
        let request = http::Request::get(format!("http://{s3}/"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender
            .send_request(request)
            .await
            .expect("served on the same connection");
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!(response.status(), 403, "an unsigned ListBuckets");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(!connection.is_finished(), "a busy connection is kept");
    // Then idle: the server ends it (the client answers its PINGs all along).
    tokio::time::timeout(Duration::from_secs(20), &mut connection)
        .await
        .expect("the server closed the idle HTTP/2 connection")
        .unwrap()
        .expect("closed with GOAWAY, not an error");
    common::eventually(Duration::from_secs(10), "its slot back", || async {
        (gw.metric("pgvs3_http_connections{server=\"s3\"}").await == Some(0.0)).then_some(())
    })
    .await;
    gw.stop().await;
}

/// Review of session 28, item 2: one client address could hold every connection a listener
/// takes. With `--http-max-connections-per-ip 4`, a fifth connection from 127.0.0.1 is
/// answered 503 and closed at once (counted as `per_ip_limit`), while another address
/// (127.0.0.2) is still served, and the address gets its slots back as its connections close.
#[tokio::test]
async fn connections_beyond_one_addresses_cap_are_refused_and_others_still_served() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--http-max-connections-per-ip",
            "4",
            "--http-first-request-timeout",
            "60s",
        ],
    )
    .await;
    let s3 = gw.gateway.s3_addr;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(s3).await.unwrap());
    }
    common::eventually(Duration::from_secs(10), "four S3 connections open", || async {
        (gw.metric("pgvs3_http_connections{server=\"s3\"}").await == Some(4.0)).then_some(())
    })
    .await;
    for _ in 0..2 {
        let mut extra = TcpStream::connect(s3).await.unwrap();
        let (received, _) = until_closed(&mut extra, Duration::from_secs(10)).await;
        let text = String::from_utf8_lossy(&received);
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(text.contains("<Code>SlowDown</Code>"), "{text}");
    }
    assert_eq!(
        gw.metric("pgvs3_http_connections_refused_total{reason=\"per_ip_limit\",server=\"s3\"}")
            .await,
        Some(2.0)
    );
    // Another client address has its own four.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = socket.connect(s3).await.unwrap();
    other
        .write_all(format!("GET / HTTP/1.1\r\nhost: {s3}\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (received, _) = until_closed(&mut other, Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&received);
    assert!(
        text.starts_with("HTTP/1.1 403"),
        "an unsigned ListBuckets, served: {text}"
    );
    drop(held);
    common::eventually(Duration::from_secs(10), "the held connections' slots back", || async {
        (gw.metric("pgvs3_http_connections{server=\"s3\"}").await == Some(0.0)).then_some(())
    })
    .await;
    gw.client.list_buckets().send().await.expect("served again");
    gw.stop().await;
}
