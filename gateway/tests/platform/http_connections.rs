//! The shared HTTP accept loop under hostile clients: silent and half-sent connections are
//! closed, connections beyond a listener's cap are answered at once and cost nothing, and the
//! admin port keeps answering while a data port is flooded.

use pgvs3_testkit as common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::raw::send;
use common::{TestGateway, eventually};
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

/// A GET of a large object (a presigned path, as a browser or `curl` would send) that we then
/// never read: the gateway's writes back up into its socket, its response stream and the
/// database connection behind it.
async fn unread_get(gw: &TestGateway, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(gw.gateway.s3_addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nhost: {}\r\n\r\n", gw.gateway.s3_addr);
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// A 32 MiB object (far more than socket buffers and the gateway's own hold) and a presigned
/// path that reads it.
async fn large_object(gw: &TestGateway) -> (String, usize) {
    const SIZE: usize = 32 << 20;
    gw.client.create_bucket().bucket("downloads").send().await.unwrap();
    common::s3::put_object(&gw.client, "downloads", "large", common::noise(SIZE, 7)).await;
    let signer = common::raw::Signer {
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    let path = signer.presign("GET", "/downloads/large", "3600", std::time::SystemTime::now());
    (path, SIZE)
}

/// The gateway's database sessions blocked on sending rows the gateway does not take: its
/// streams held back by their clients.
async fn sessions_held_by_clients(sql: &tokio_postgres::Client) -> i64 {
    sql.query_one(
        "SELECT count(*) AS held FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event = 'ClientWrite'",
        &[],
    )
    .await
    .unwrap()
    .get("held")
}

/// A client that asks for a download and never reads it used to hold the database connection
/// behind the download for as long as it kept the socket open: a few such sockets starved the
/// whole gateway. A response the client accepts nothing of for the idle timeout is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_whose_client_stops_reading_is_cut_and_frees_its_database_connection() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &["--http-idle-timeout", "2s", "--pool-size", "4"],
    )
    .await;
    let (path, size) = large_object(&gw).await;
    let sql = gw.sql().await;
    let mut unread = Vec::new();
    for _ in 0..2 {
        unread.push(unread_get(&gw, &path).await);
    }
    eventually(Duration::from_secs(30), "both downloads to stall", || async {
        (sessions_held_by_clients(&sql).await == 2).then_some(())
    })
    .await;
    // Still unread, the sockets open: only the gateway can end the stall.
    eventually(Duration::from_secs(60), "the stalled downloads to be cut", || async {
        (sessions_held_by_clients(&sql).await == 0).then_some(())
    })
    .await;
    for mut stream in unread {
        let (received, _) = until_closed(&mut stream, Duration::from_secs(30)).await;
        assert!(
            received.starts_with(b"HTTP/1.1 200 OK\r\n"),
            "{:?}",
            &received[..received.len().min(64)]
        );
        assert!(received.len() < size, "cut short: {} bytes", received.len());
    }
    // A client that reads gets the whole object.
    let whole = gw
        .client
        .get_object()
        .bucket("downloads")
        .key("large")
        .send()
        .await
        .unwrap();
    assert_eq!(whole.body.collect().await.unwrap().into_bytes().len(), size);
    gw.stop().await;
}

/// Review of session 31: an HTTP/2 client that opens downloads and never grants their streams
/// flow-control window (no WINDOW_UPDATE, while it answers PINGs) left the gateway no socket
/// write pending, so the send-stall bound never fired and each stream held its database
/// connection and its place in the download share for ever. Three such streams fill the
/// share of a pool of 4; the connection is cut after the idle timeout, everything they held
/// comes back, and another download proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_download_granted_no_window_is_cut_and_frees_what_it_held() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &["--http-idle-timeout", "2s", "--pool-size", "4"],
    )
    .await;
    let (path, size) = large_object(&gw).await;
    let sql = gw.sql().await;
    let s3 = gw.gateway.s3_addr;
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .initial_stream_window_size(0)
        .handshake(hyper_util::rt::TokioIo::new(TcpStream::connect(s3).await.unwrap()))
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let mut held = Vec::new();
    for _ in 0..3 {
        let request = http::Request::get(format!("http://{s3}{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.expect("the response head");
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), http::Version::HTTP_2);
        // Its body never read: the client's window for the stream stays 0.
        held.push(response);
    }
    eventually(Duration::from_secs(30), "the three downloads to stall", || async {
        (sessions_held_by_clients(&sql).await == 3).then_some(())
    })
    .await;
    // The responses still held, the client answering PINGs: only the gateway can end it.
    eventually(Duration::from_secs(60), "the stalled streams to be cut", || async {
        (sessions_held_by_clients(&sql).await == 0).then_some(())
    })
    .await;
    tokio::time::timeout(Duration::from_secs(30), connection)
        .await
        .expect("the server ended the connection")
        .unwrap()
        .expect_err("cut, not closed with GOAWAY");
    eventually(Duration::from_secs(10), "its connection slot back", || async {
        (gw.metric("pgvs3_http_connections{server=\"s3\"}").await == Some(0.0)).then_some(())
    })
    .await;
    // The download share is whole again: a client that reads gets the whole object.
    let whole = gw
        .client
        .get_object()
        .bucket("downloads")
        .key("large")
        .send()
        .await
        .unwrap();
    assert_eq!(whole.body.collect().await.unwrap().into_bytes().len(), size);
    drop(held);
    gw.stop().await;
}

/// The other side of the HTTP/2 bound: a client that grants window as it reads, slowly (8 KiB
/// at a time, 16 KiB every 300 ms: a 256 KiB chunk of the body takes it about 5 s, past the
/// 3 s idle timeout), makes progress within each idle timeout and gets the whole object. The
/// bound times a piece of 16 KiB, not a chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_download_read_slowly_within_the_bound_is_not_cut() {
    use http_body_util::BodyExt;
    const SIZE: usize = 1 << 20;
    const WINDOW: u32 = 16 << 10;
    let gw = TestGateway::with_args(common::fresh_database().await, &["--http-idle-timeout", "3s"]).await;
    gw.client.create_bucket().bucket("downloads").send().await.unwrap();
    let object = common::noise(SIZE, 11);
    common::s3::put_object(&gw.client, "downloads", "slow", object.clone()).await;
    let signer = common::raw::Signer {
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    let path = signer.presign("GET", "/downloads/slow", "3600", std::time::SystemTime::now());
    let s3 = gw.gateway.s3_addr;
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .handshake(hyper_util::rt::TokioIo::new(TcpStream::connect(s3).await.unwrap()))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(format!("http://{s3}{path}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.expect("the response head");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    let mut body = response.into_body();
    let mut read = Vec::with_capacity(SIZE);
    // Each frame read releases its window; h2 grants it back once half the window is free.
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap_or_else(|err| panic!("cut after {} bytes: {err}", read.len()));
        if let Ok(data) = frame.into_data() {
            tokio::time::sleep(Duration::from_millis(300) * data.len() as u32 / WINDOW).await;
            read.extend_from_slice(&data);
        }
    }
    assert_eq!(read.len(), SIZE);
    assert!(read == object, "the object as stored");
    gw.stop().await;
}

/// Downloads hold their database connections within the stream share (the pool less a quarter),
/// as uploads do: however many clients read slowly, other requests (RESP, small S3 requests)
/// still find a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_downloads_leave_a_quarter_of_the_pool_to_other_requests() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--http-idle-timeout",
            "10m",
            "--pool-size",
            "4",
            "--resp-addr",
            "127.0.0.1:0",
        ],
    )
    .await;
    let (path, _) = large_object(&gw).await;
    let sql = gw.sql().await;
    let mut unread = Vec::new();
    for _ in 0..5 {
        unread.push(unread_get(&gw, &path).await);
    }
    // Three streams (4 less a quarter) hold connections; the others wait without one.
    eventually(Duration::from_secs(30), "the share's downloads to stall", || async {
        (sessions_held_by_clients(&sql).await == 3).then_some(())
    })
    .await;
    let mut resp = common::resp::RawResp::connect(gw.resp_addr()).await;
    assert_eq!(
        resp.command(&["SET", "k", "v"]).await,
        common::resp::Value::Simple("OK".into())
    );
    common::s3::put_object(&gw.client, "downloads", "small", b"small".to_vec()).await;
    let small = gw
        .client
        .get_object()
        .bucket("downloads")
        .key("small")
        .send()
        .await
        .unwrap();
    assert_eq!(small.body.collect().await.unwrap().into_bytes().as_ref(), b"small");
    assert_eq!(
        sessions_held_by_clients(&sql).await,
        3,
        "no fourth stream got a connection"
    );
    drop(unread);
    gw.stop().await;
}
