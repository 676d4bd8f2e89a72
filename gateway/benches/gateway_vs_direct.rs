//! 4 KiB GET/PUT, 8 and 64 MiB GET, 10 and 64 MiB PUT through the gateway, next to the same SQL
//! statements issued directly with tokio-postgres on the same PostgreSQL, run side by side;
//! prints the ratios.
//!
//! `cargo bench -p pgvs3-gateway --bench gateway_vs_direct -- [--seconds N] [--clients N] [--json FILE]`
//!
//! For instruction counts per request (`valgrind --tool=callgrind`), `--requests N --side gateway`
//! runs a fixed number of operations on one side: the difference between two runs with different
//! N cancels the start-up and fixtures.

use pgvs3_testkit as common;

use common::raw;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pgvs3_gateway::pg::embedded::{EmbeddedOptions, EmbeddedPostgres};
use pgvs3_gateway::serve::RunningGateway;
use tokio_postgres::types::{Json, ToSql, Type};

/// The allocator `pgvs3` runs with (see src/main.rs), so the in-process gateway costs what it does there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ACCESS_KEY: &str = "BENCHROOTKEY00000001";
const SECRET_KEY: &str = "bench-secret";
const SMALL: usize = 4096;
/// The large bodies read, each a case of its own ("GET 8 MiB", ...): 8 MiB is issue 40's
/// one-client GET, 64 MiB the loadgen's large object.
const LARGE_GETS: [(usize, &str); 2] = [(8 << 20, "8 MiB"), (64 << 20, "64 MiB")];
/// The large bodies written ("PUT 10 MiB", ...).
const LARGE_PUTS: [(usize, &str); 2] = [(10 << 20, "10 MiB"), (64 << 20, "64 MiB")];
const SMALL_KEYS: usize = 1000;
/// The direct baseline skips hashing: it stores a fixed ETag.
const ETAG: &str = "0123456789abcdef0123456789abcdef";

#[derive(Parser)]
struct Args {
    /// Seconds measured per case (after one second of warm-up).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Concurrent clients for 4 KiB cases.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Concurrent clients for the large (8, 10 and 64 MiB) cases.
    #[arg(long, default_value_t = 2)]
    large_clients: usize,
    /// Run only the cases whose name contains this (e.g. "GET 4"), for profiling one path.
    #[arg(long)]
    only: Option<String>,
    /// Leave out the cases whose name contains this (run apart with other flags, e.g. "GET 8 MiB"
    /// at one client).
    #[arg(long)]
    skip: Option<String>,
    /// Run exactly this many operations per case and side (no warm-up) instead of timing them.
    #[arg(long)]
    requests: Option<usize>,
    /// Measure only this side (for profiling one path); the other side's column reads 0.
    #[arg(long, value_enum, default_value_t = Side::Both)]
    side: Side,
    /// Install the log subscriber `pgvs3 serve` runs with (human format, `PGVS3_LOG`, default
    /// info), so each request's span costs what it costs in production.
    #[arg(long)]
    logs: bool,
    /// Bucket quotas in play: `none`; `elsewhere` (another bucket of the namespace has one, so
    /// every write runs the usage trigger but finds no usage row); `bench` (the bench bucket has
    /// one: every write also updates its usage row).
    #[arg(long, value_enum, default_value_t = QuotaCase::None)]
    quota: QuotaCase,
    /// Bucket notifications in play (docs/events.md): `none`; `queue` (every object written to
    /// the bench bucket enqueues an OJS job in its transaction); `webhook` (every one owes a
    /// webhook delivery, to an endpoint that refuses connections, so rows are retried).
    #[arg(long, value_enum, default_value_t = NotifyCase::None)]
    notify: NotifyCase,
    /// Append one JSON object per case to this file (NDJSON): `just bench` reads the direct
    /// column from it.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// `cargo bench` passes this; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Side {
    Both,
    Gateway,
    Direct,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum QuotaCase {
    None,
    Elsewhere,
    Bench,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum NotifyCase {
    None,
    Queue,
    Webhook,
}

struct Sample {
    ops: usize,
    latencies: Vec<Duration>,
    elapsed: Duration,
    /// CPU this process (client, and the gateway when it is in the path) spent while measuring.
    cpu: Duration,
}

/// User + system CPU time of this process so far. Unlike wall-clock rates it is barely moved by
/// other load on the machine, so it shows what the gateway itself costs per request.
fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

impl Sample {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
    fn cpu_us_per_op(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.ops.max(1) as f64
    }
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        sorted
            .get(((sorted.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or_default()
    }
}

/// How long each side of a case runs.
#[derive(Clone, Copy)]
enum Budget {
    /// One warm-up second, then this many measured seconds.
    Seconds(u64),
    /// Exactly this many operations, all measured.
    Requests(usize),
}

/// Runs `op` in `clients` closed loops for `budget`.
async fn measure<F, Fut>(clients: usize, budget: Budget, op: F) -> Sample
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let (warm_until, stop_at, count) = match budget {
        Budget::Seconds(seconds) => {
            let warm_until = started + Duration::from_secs(1);
            (warm_until, Some(warm_until + Duration::from_secs(seconds)), None)
        }
        Budget::Requests(count) => (started, None, Some(count)),
    };
    let tickets = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cpu_at_start = tokio::spawn(async move {
        tokio::time::sleep_until(warm_until.into()).await;
        process_cpu()
    });
    let workers = (0..clients).map(|client| {
        let (op, tickets) = (Arc::clone(&op), Arc::clone(&tickets));
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0;
            loop {
                let started = Instant::now();
                if stop_at.is_some_and(|stop_at| started >= stop_at)
                    || count.is_some_and(|count| tickets.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= count)
                {
                    break;
                }
                op(client, i).await;
                i += 1;
                if started >= warm_until {
                    latencies.push(started.elapsed());
                }
            }
            latencies
        })
    });
    let mut latencies = Vec::new();
    for worker in futures::future::join_all(workers).await {
        latencies.extend(worker.unwrap());
    }
    let cpu = process_cpu().saturating_sub(cpu_at_start.await.unwrap());
    Sample {
        ops: latencies.len(),
        latencies,
        elapsed: stop_at.map_or_else(|| started.elapsed(), |stop_at| stop_at - warm_until),
        cpu,
    }
}

/// [`measure`] on `side` of a case, or an empty sample when `--side` leaves that side out.
async fn measure_side<F, Fut>(args: &Args, side: Side, clients: usize, op: F) -> Sample
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    if args.side != Side::Both && args.side != side {
        return Sample {
            ops: 0,
            latencies: Vec::new(),
            elapsed: Duration::from_secs(1),
            cpu: Duration::ZERO,
        };
    }
    let budget = match args.requests {
        Some(count) => Budget::Requests(count),
        None => Budget::Seconds(args.seconds),
    };
    measure(clients, budget, op).await
}

/// A request shape signed once: its URI and headers, cloned for each request (both share
/// their bytes, so a clone is a few reference counts).
#[derive(Clone)]
struct Signed {
    uri: hyper::Uri,
    headers: hyper::HeaderMap,
}

struct Gateway {
    http: Client<HttpConnector, Full<Bytes>>,
    base: String,
    signer: raw::Signer,
    /// Signatures stay valid for the whole run: one per method and path keeps the client's CPU
    /// (which shares the machine with the gateway) out of the comparison.
    signed: std::sync::Mutex<HashMap<&'static str, HashMap<String, Signed>>>,
}

impl Gateway {
    fn request(&self, method: &'static str, path: &str, body: Bytes) -> hyper::Request<Full<Bytes>> {
        let signed = {
            let mut signed = self.signed.lock().unwrap();
            let by_path = signed.entry(method).or_default();
            match by_path.get(path) {
                Some(signed) => signed.clone(),
                None => {
                    let signed = self.sign(method, path);
                    by_path.insert(path.to_owned(), signed.clone());
                    signed
                }
            }
        };
        let mut request = hyper::Request::new(Full::new(body));
        *request.method_mut() = hyper::Method::from_bytes(method.as_bytes()).unwrap();
        *request.uri_mut() = signed.uri;
        *request.headers_mut() = signed.headers;
        request
    }

    fn sign(&self, method: &str, path: &str) -> Signed {
        let hash = if method == "PUT" {
            "UNSIGNED-PAYLOAD".to_owned()
        } else {
            raw::sha256_hex(b"")
        };
        let mut headers = hyper::HeaderMap::new();
        for (name, value) in self.signer.sign(method, path, &[], &hash, SystemTime::now()) {
            // hyper's client writes Host from the URI.
            if name != "host" {
                headers.insert(
                    hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
        }
        Signed {
            uri: format!("{}{path}", self.base).parse().unwrap(),
            headers,
        }
    }

    async fn send(&self, request: hyper::Request<Full<Bytes>>) -> usize {
        let response = self.http.request(request).await.expect("gateway answers");
        assert!(response.status().is_success(), "{}", response.status());
        let mut body = response.into_body();
        let mut bytes = 0;
        while let Some(frame) = body.frame().await {
            bytes += frame.unwrap().data_ref().map_or(0, |d| d.len());
        }
        bytes
    }
}

fn payload(len: usize) -> Bytes {
    Bytes::from(common::noise(len, 0x2545_F491_4F6C_DD1D))
}

fn report(args: &Args, name: &str, bytes: usize, gateway: &Sample, direct: &Sample) -> anyhow::Result<()> {
    let mib = |s: &Sample| s.rate() * bytes as f64 / (1 << 20) as f64;
    if let Some(path) = &args.json {
        use std::io::Write;
        let side = |s: &Sample| {
            serde_json::json!({
                "rate": s.rate(),
                "mib_per_second": mib(s),
                "p50_ms": s.percentile(0.5).as_secs_f64() * 1e3,
                "p99_ms": s.percentile(0.99).as_secs_f64() * 1e3,
                "cpu_us_per_op": s.cpu_us_per_op(),
            })
        };
        let clients = if bytes > SMALL {
            args.large_clients
        } else {
            args.clients
        };
        let record = serde_json::json!({ "case": name, "bytes": bytes, "clients": clients, "seconds": args.seconds,
                                         "gateway": side(gateway), "direct": side(direct) });
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(file, "{record}")?;
    }
    println!(
        "{name:<14} {:>10.0} {:>10.0} {:>7.2} {:>9.1} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>9.1}",
        gateway.rate(),
        direct.rate(),
        gateway.rate() / direct.rate(),
        mib(gateway),
        mib(direct),
        gateway.percentile(0.5).as_secs_f64() * 1e3,
        direct.percentile(0.5).as_secs_f64() * 1e3,
        gateway.percentile(0.99).as_secs_f64() * 1e3,
        direct.percentile(0.99).as_secs_f64() * 1e3,
        gateway.cpu_us_per_op(),
        direct.cpu_us_per_op(),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = args
        .logs
        .then(|| pgvs3_gateway::telemetry::init(pgvs3_gateway::config::LogFormat::Human));
    let data_dir = std::env::temp_dir().join(format!("pgvs3-bench-{}", std::process::id()));
    let mut server = EmbeddedPostgres::start(EmbeddedOptions {
        data_dir: data_dir.clone(),
        pg_bin: None,
        memory_budget: None,
        shared_buffers: None,
        tls: None,
    })
    .await?;
    let config = server.connect_config();
    let socket = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
    };
    let url = format!("host={socket} port={} user=pgvs3 dbname=postgres", server.port());
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: pgvs3_gateway::config::ServeArgs,
    }
    let pool_size = (args.clients * 2).to_string();
    let serve = Cli::parse_from([
        "pgvs3",
        "--database-url",
        &url,
        "--master-key",
        "bench",
        "--s3-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--resp-addr",
        "off",
        "--ojs-addr",
        "off",
        "--root-access-key",
        ACCESS_KEY,
        "--root-secret-key",
        SECRET_KEY,
        "--pool-size",
        &pool_size,
    ])
    .serve;
    let gateway_handle = RunningGateway::start(&serve).await?;
    let addr = gateway_handle.s3_addr;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let gateway = Arc::new(Gateway {
        http: Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build(connector),
        base: format!("http://{addr}"),
        signer: raw::Signer {
            access_key: ACCESS_KEY.into(),
            secret_key: SECRET_KEY.into(),
            host: addr.to_string(),
        },
        signed: Default::default(),
    });
    gateway.send(gateway.request("PUT", "/bench", Bytes::new())).await;
    let catalog = gateway_handle.store.catalog();
    match args.quota {
        QuotaCase::None => {}
        QuotaCase::Elsewhere => {
            gateway.send(gateway.request("PUT", "/bench-other", Bytes::new())).await;
            catalog.set_bucket_quota("bench-other", Some(1 << 40), None).await?;
        }
        QuotaCase::Bench => catalog.set_bucket_quota("bench", Some(1 << 40), None).await?,
    }
    let rule = match args.notify {
        NotifyCase::None => None,
        NotifyCase::Queue => Some(r#"{"id": "bench", "queue": "bench-events", "events": ["s3:ObjectCreated:*"]}"#),
        NotifyCase::Webhook => Some(r#"{"id": "bench", "webhook": "bench", "events": ["s3:ObjectCreated:*"]}"#),
    };
    if let Some(rule) = rule {
        let sql = gateway_handle.store.pool().get().await?;
        sql.execute(
            "SELECT pgvs3.put_webhook_target('bench', 'http://127.0.0.1:9/', NULL)",
            &[],
        )
        .await?;
        sql.execute(
            "UPDATE pgvs3.buckets SET notifications = jsonb_build_object('rules', jsonb_build_array($1::text::jsonb))
              WHERE name = 'bench'",
            &[&rule],
        )
        .await?;
        sql.execute(
            "SELECT pgvs3.ensure_event_triggers(namespace) FROM pgvs3.buckets WHERE name = 'bench'",
            &[],
        )
        .await?;
    }
    let wanted = |case: &str| {
        args.only.as_deref().is_none_or(|only| case.contains(only))
            && args.skip.as_deref().is_none_or(|skip| !case.contains(skip))
    };
    let small = payload(SMALL);
    // Only made when its cases run: under valgrind they would dwarf a small case's requests.
    let large_gets: Vec<(usize, &str, Bytes)> = LARGE_GETS
        .iter()
        .filter(|(_, size)| wanted(&format!("GET {size}")))
        .map(|&(len, size)| (len, size, payload(len)))
        .collect();
    let large_puts: Vec<(usize, &str, Bytes)> = LARGE_PUTS
        .iter()
        .filter(|(_, size)| wanted(&format!("PUT {size}")))
        .map(|&(len, size)| (len, size, payload(len)))
        .collect();
    // The 4 KiB GET case's objects, only when it runs (1,000 PUTs before a large case run apart).
    let small_keys = if wanted("GET 4 KiB") { SMALL_KEYS } else { 0 };
    for i in 0..small_keys {
        gateway
            .send(gateway.request("PUT", &format!("/bench/small-{i}"), small.clone()))
            .await;
    }
    for (_, size, body) in &large_gets {
        gateway
            .send(gateway.request("PUT", &format!("/bench/{}", large_key(size)), body.clone()))
            .await;
    }

    // The direct baseline: the gateway's own statements, on a pool of the same size.
    let direct = Arc::new(pgvs3_gateway::pg::pool(url.parse()?, args.clients * 2)?);
    let bucket_id: i64 = direct
        .get()
        .await?
        .query_one("SELECT id FROM pgvs3.buckets WHERE name = 'bench'", &[])
        .await?
        .get("id");
    let get_sql = "SELECT o.size, o.etag, o.last_modified, o.meta, o.inline, o.body_id, o.key IS NOT NULL
                     FROM pgvs3.buckets b LEFT JOIN s3p.objects o ON o.bucket_id = b.id AND o.key = $2
                          AND (o.expires_at IS NULL OR o.expires_at > now()) WHERE b.id = $1";
    let put_sql = "INSERT INTO s3p.objects AS o (bucket_id, key, size, etag, last_modified, meta, inline, body_id)
                   SELECT $1, $2, $3, $4, clock_timestamp(), $5, $6, $7 FROM pgvs3.buckets WHERE id = $1
                   ON CONFLICT (bucket_id, key) DO UPDATE SET size = EXCLUDED.size, etag = EXCLUDED.etag,
                      last_modified = EXCLUDED.last_modified, meta = EXCLUDED.meta, inline = EXCLUDED.inline,
                      body_id = EXCLUDED.body_id, expires_at = NULL RETURNING last_modified";
    // The gateway's own statement: rows of up to 32 chunks, each row's chunks an array.
    let chunk_rows_sql: &'static str = Box::leak(pgvs3_gateway::store::chunk_rows_statement("s3p").into_boxed_str());
    let meta = serde_json::json!({});

    println!(
        "{:<14} {:>10} {:>10} {:>7} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "case",
        "gw op/s",
        "sql op/s",
        "ratio",
        "gw MiB/s",
        "sql MiB/s",
        "gw p50",
        "sql p50",
        "gw p99",
        "sql p99",
        "gw cpuµs",
        "sql cpuµs"
    );
    let (seconds, clients) = (args.seconds, args.clients);

    if wanted("GET 4 KiB") {
        let gw = Arc::clone(&gateway);
        let gw_get = measure_side(&args, Side::Gateway, clients, move |c, i| {
            let gw = Arc::clone(&gw);
            async move {
                let n = gw
                    .send(gw.request(
                        "GET",
                        &format!("/bench/small-{}", (c * 7919 + i) % SMALL_KEYS),
                        Bytes::new(),
                    ))
                    .await;
                assert_eq!(n, SMALL);
            }
        })
        .await;
        let pool = Arc::clone(&direct);
        let sql_get = measure_side(&args, Side::Direct, clients, move |c, i| {
            let pool = Arc::clone(&pool);
            async move {
                let client = pool.get().await.unwrap();
                let statement = client.prepare_cached(get_sql).await.unwrap();
                let key = format!("small-{}", (c * 7919 + i) % SMALL_KEYS);
                let row = client.query_one(&statement, &[&bucket_id, &key]).await.unwrap();
                assert_eq!(row.get::<_, Option<&[u8]>>("inline").map(<[u8]>::len), Some(SMALL));
            }
        })
        .await;
        report(&args, "GET 4 KiB", SMALL, &gw_get, &sql_get)?;
    }

    if wanted("PUT 4 KiB") {
        let gw = Arc::clone(&gateway);
        let body = small.clone();
        let gw_put = measure_side(&args, Side::Gateway, clients, move |c, i| {
            let (gw, body) = (Arc::clone(&gw), body.clone());
            async move {
                gw.send(gw.request("PUT", &format!("/bench/put-{c}-{}", i % 100), body))
                    .await;
            }
        })
        .await;
        let pool = Arc::clone(&direct);
        let body = small.clone();
        let meta_for_put = meta.clone();
        let sql_put = measure_side(&args, Side::Direct, clients, move |c, i| {
            let (pool, body, meta) = (Arc::clone(&pool), body.clone(), meta_for_put.clone());
            async move {
                let client = pool.get().await.unwrap();
                let statement = client.prepare_cached(put_sql).await.unwrap();
                let key = format!("sqlput-{c}-{}", i % 100);
                let params: [&(dyn ToSql + Sync); 7] = [
                    &bucket_id,
                    &key,
                    &(SMALL as i64),
                    &ETAG,
                    &Json(&meta),
                    &Some(&body[..]),
                    &None::<i64>,
                ];
                client.query_one(&statement, &params).await.unwrap();
            }
        })
        .await;
        report(&args, "PUT 4 KiB", SMALL, &gw_put, &sql_put)?;
    }

    let large_clients = args.large_clients;
    for (len, size, _) in large_gets {
        let get_case = format!("GET {size}");
        let path = format!("/bench/{}", large_key(size));
        let gw = Arc::clone(&gateway);
        let gw_large_get = measure_side(&args, Side::Gateway, large_clients, move |_, _| {
            let (gw, path) = (Arc::clone(&gw), path.clone());
            async move {
                assert_eq!(gw.send(gw.request("GET", &path, Bytes::new())).await, len);
            }
        })
        .await;
        // What the gateway sends for a whole chunked body (store/bodies.rs `read_chunks`): the
        // object's row, then one prepared range scan of its chunks, 32 to a row, each row's
        // bytes counted and dropped where the gateway decodes them into a frame.
        let pool = Arc::clone(&direct);
        let last_seq = ((len - 1) / pgvs3_gateway::store::CHUNK_SIZE) as i32;
        let sql_large_get = measure_side(&args, Side::Direct, large_clients, move |_, _| {
            let pool = Arc::clone(&pool);
            async move {
                let client = pool.get().await.unwrap();
                let statement = client.prepare_cached(get_sql).await.unwrap();
                let row = client
                    .query_one(&statement, &[&bucket_id, &large_key(size)])
                    .await
                    .unwrap();
                let body_id: i64 = row.get("body_id");
                let statement = client.prepare_cached(chunk_rows_sql).await.unwrap();
                let params: [&(dyn ToSql + Sync); 3] = [&body_id, &0i32, &last_seq];
                let rows = client.query_raw(&statement, params).await.unwrap();
                let bytes = rows
                    .map(|row| {
                        row.unwrap()
                            .get::<_, Vec<&[u8]>>("data")
                            .iter()
                            .map(|c| c.len())
                            .sum::<usize>()
                    })
                    .fold(0, |a, b| async move { a + b })
                    .await;
                assert_eq!(bytes, len);
            }
        })
        .await;
        report(&args, &get_case, len, &gw_large_get, &sql_large_get)?;
    }

    for (len, size, body) in large_puts {
        let put_case = format!("PUT {size}");
        let gw = Arc::clone(&gateway);
        let gw_body = body.clone();
        let gw_large_put = measure_side(&args, Side::Gateway, large_clients, move |c, _| {
            let (gw, body) = (Arc::clone(&gw), gw_body.clone());
            async move {
                gw.send(gw.request("PUT", &format!("/bench/large-put-{c}"), body)).await;
            }
        })
        .await;
        let pool = Arc::clone(&direct);
        let meta = meta.clone();
        let sql_large_put = measure_side(&args, Side::Direct, large_clients, move |c, _| {
            let (pool, body, meta) = (Arc::clone(&pool), body.clone(), meta.clone());
            async move {
                // As the gateway writes a body (store/staging.rs): a batch of chunks per
                // transaction, each committed without waiting for the disk, the last batch in
                // the transaction that writes the row and commits synchronously (its flush
                // covers every batch before it). The lease rows are left out.
                let mut client = pool.get().await.unwrap();
                let body_id: i64 = client
                    .query_one("SELECT nextval('s3p.body_ids') AS body_id", &[])
                    .await
                    .unwrap()
                    .get("body_id");
                let chunks_per_batch =
                    pgvs3_gateway::store::UPLOAD_BATCH_BYTES.div_ceil(pgvs3_gateway::store::CHUNK_SIZE);
                let chunks: Vec<&[u8]> = body.chunks(pgvs3_gateway::store::CHUNK_SIZE).collect();
                let batches: Vec<&[&[u8]]> = chunks.chunks(chunks_per_batch).collect();
                let mut seq = 0i32;
                for (n, batch) in batches.iter().enumerate() {
                    let last = n + 1 == batches.len();
                    let tx = client.transaction().await.unwrap();
                    if !last {
                        tx.batch_execute("SET LOCAL synchronous_commit = off").await.unwrap();
                    }
                    let sink = tx
                        .copy_in("COPY s3p.chunks (body_id, seq, data) FROM STDIN (FORMAT binary)")
                        .await
                        .unwrap();
                    let writer = tokio_postgres::binary_copy::BinaryCopyInWriter::new(
                        sink,
                        &[Type::INT8, Type::INT4, Type::BYTEA],
                    );
                    futures::pin_mut!(writer);
                    for chunk in batch.iter() {
                        writer.as_mut().write(&[&body_id, &seq, chunk]).await.unwrap();
                        seq += 1;
                    }
                    writer.finish().await.unwrap();
                    if last {
                        let key = format!("sql-large-put-{c}");
                        let params: [&(dyn ToSql + Sync); 7] = [
                            &bucket_id,
                            &key,
                            &(len as i64),
                            &ETAG,
                            &Json(&meta),
                            &None::<&[u8]>,
                            &Some(body_id),
                        ];
                        tx.query_one(put_sql, &params).await.unwrap();
                    }
                    tx.commit().await.unwrap();
                }
            }
        })
        .await;
        report(&args, &put_case, len, &gw_large_put, &sql_large_put)?;
    }
    println!(
        "({clients} clients for 4 KiB, {} for 8, 10 and 64 MiB; {seconds} s each; latencies in ms; cpuµs = CPU of this \
         process (client + in-process gateway) per op, PostgreSQL's own CPU not included)",
        args.large_clients
    );

    gateway_handle.shutdown().await?;
    server.stop().await?;
    std::fs::remove_dir_all(&data_dir)?;
    Ok(())
}

/// The object a large GET case reads.
fn large_key(size: &str) -> String {
    format!("large-{}", size.replace(' ', ""))
}
