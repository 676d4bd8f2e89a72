//! The lakehouse workload the system exists for. DuckLake: the lake's catalog in the gateway's
//! own PostgreSQL, its Parquet files in a pgvs3 bucket, attached with the statements
//! `pgvs3 lake attach-string` prints. DuckDB (from the clients' venv that `scripts/test`
//! installs, with its httpfs, postgres and ducklake extensions) creates, appends, updates,
//! deletes, evolves the schema, travels in time, merges and cleans up files, with a second
//! writer beside it; the files it drops are deleted over S3 and the reaper frees their bodies. A
//! standby gateway reads the lake from its replica, and a point-in-time restore of the database
//! brings back the lake of that instant, files and catalog together. Iceberg: a pyiceberg table
//! on an origin gateway read by DuckDB's iceberg extension directly and through a cache bucket,
//! warm reads without an origin request, appends written through.

use pgvs3_testkit as common;

use std::time::Duration;

use common::certs::TestCa;
use common::s3::read_object;
use common::{ROOT_ACCESS_KEY, TestGateway};
use pgvs3_gateway::pg::embedded::{EmbeddedOptions, EmbeddedPostgres};

const BIN: &str = env!("CARGO_BIN_EXE_pgvs3");

/// The statements `pgvs3 lake attach-string` prints for `gw`'s database and bucket `bucket`.
async fn attach_string(gw: &TestGateway, bucket: &str, extra: &[&str]) -> String {
    let output = tokio::process::Command::new(BIN)
        .args([
            "lake",
            "attach-string",
            "--bucket",
            bucket,
            "--endpoint",
            &gw.endpoint(),
        ])
        .args(extra)
        .args(["--database-url", &gw.database_url, "--master-key", common::MASTER_KEY])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "pgvs3 lake attach-string: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Runs a Python script with DuckDB and its extensions; returns its stdout.
async fn python(dir: &std::path::Path, script: &str, args: &[&str]) -> String {
    let output = python_command(dir, script, args)
        .output()
        .await
        .unwrap_or_else(|err| panic!("python3 could not start: {err}; run the tests with scripts/test"));
    assert!(
        output.status.success(),
        "the lake script failed (a missing module? scripts/test installs DuckDB and its extensions):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The command that runs `script` (written into `dir`) with `args`.
fn python_command(dir: &std::path::Path, script: &str, args: &[&str]) -> tokio::process::Command {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let path = dir.join(format!(
        "lake-{}.py",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&path, script).unwrap();
    let mut command = tokio::process::Command::new("python3");
    command.arg(&path).args(args).kill_on_drop(true);
    command
}

/// What the DuckLake scripts start with: `session()` opens a connection with the extensions
/// loaded and the lake of the attach statement in the file argv[1] in use; `one` runs a query
/// for its first row.
const DUCKLAKE_SESSION: &str = r#"
import json, pathlib, sys, threading
import duckdb, duckdb_ext

extensions = pathlib.Path(list(duckdb_ext.__path__)[0]) / "extensions"
attach = open(sys.argv[1]).read()

def session():
    con = duckdb.connect()
    con.execute(f"SET extension_directory = '{extensions}'")
    for extension in ("httpfs", "postgres", "ducklake"):
        con.execute(f"LOAD {extension}")
    con.execute(attach)
    con.execute("USE lake")
    return con

def one(con, sql):
    return con.execute(sql).fetchone()
"#;

/// A script that starts a DuckLake session (`DUCKLAKE_SESSION`) and goes on with `body`.
fn ducklake_script(body: &str) -> String {
    format!("{DUCKLAKE_SESSION}{body}")
}

const SCRIPT: &str = r#"

def snapshot(con):
    return one(con, "SELECT max(snapshot_id) FROM lake.snapshots()")[0]

con = session()
con.execute("CREATE TABLE events AS SELECT range AS id, range % 7 AS kind, md5(range::VARCHAR) AS digest FROM range(300000)")
created = snapshot(con)
con.execute("INSERT INTO events SELECT range + 300000, 7, 'appended' FROM range(32)")
con.execute("UPDATE events SET kind = 100 WHERE id < 10")
con.execute("DELETE FROM events WHERE id >= 299990 AND id < 300000")
con.execute("ALTER TABLE events ADD COLUMN note VARCHAR")
con.execute("UPDATE events SET note = 'first' WHERE id = 0")
evolved = snapshot(con)

# A second writer, on a connection of its own, appends while this one appends too.
other = session()
errors = []
def append(connection, first):
    try:
        for batch in range(5):
            start = first + batch * 20_000
            connection.execute(
                f"INSERT INTO events SELECT range, 8, md5(range::VARCHAR), NULL FROM range({start}, {start + 20_000})")
    except Exception as error:
        errors.append(str(error))
writers = [threading.Thread(target=append, args=(connection, first))
           for connection, first in ((con, 1_000_000), (other, 2_000_000))]
for writer in writers: writer.start()
for writer in writers: writer.join()

rows, ids, kinds = one(con, "SELECT count(*), sum(id), count(DISTINCT kind) FROM events")
at_creation = one(con, f"SELECT count(*), max(id) FROM events AT (VERSION => {created})")
noted = one(con, "SELECT note FROM events WHERE id = 0")[0]
no_note_then = one(con, f"SELECT count(*) FROM events AT (VERSION => {evolved - 1}) WHERE id = 0")[0]
writer_rows = one(other, "SELECT count(*) FROM events WHERE kind = 8")[0]

files_before = one(con, "SELECT count(*) FROM ducklake_list_files('lake', 'events')")[0]
con.execute("CALL ducklake_merge_adjacent_files('lake')")
con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
files_after = one(con, "SELECT count(*) FROM ducklake_list_files('lake', 'events')")[0]
after_cleanup = one(con, "SELECT count(*), sum(id) FROM events")
data_files = sorted({path for row in con.execute(
    "SELECT data_file, delete_file FROM ducklake_list_files('lake', 'events')").fetchall() for path in row if path})
print(json.dumps({
    "rows": rows, "ids": ids, "kinds": kinds, "at_creation": list(at_creation), "noted": noted,
    "no_note_then": no_note_then, "writer_rows": writer_rows, "errors": errors,
    "files_before": files_before, "files_after": files_after, "after_cleanup": list(after_cleanup),
    "data_files": data_files,
}))
"#;

/// The attach string keeps every setting of the gateway's database URL: with
/// `sslmode=verify-full` and `sslrootcert`, DuckDB checks the server's certificate against that
/// CA, and refuses the server once the file names another CA (it used to get a string without
/// them, and connected to whatever answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_attach_string_keeps_the_database_urls_tls_checks() {
    let ca = TestCa::new("lake-pg");
    let server = ca.issue("server", "localhost", "DNS:localhost");
    let cluster = common::tls_cluster("lake", &server);
    let (admin, connection) = tokio_postgres::connect(&cluster.url("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute("CREATE ROLE lake LOGIN SUPERUSER PASSWORD 'lake-secret'")
        .await
        .unwrap();
    admin.batch_execute("CREATE DATABASE lake OWNER lake").await.unwrap();
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.join("root.crt");
    std::fs::copy(ca.ca_cert(), &root).unwrap();
    let url = format!(
        "postgres://lake:lake-secret@localhost:{}/lake?sslmode=verify-full&sslrootcert={}",
        cluster.port,
        root.display()
    );
    let gw = TestGateway::with_args(url, &[]).await;
    gw.client.create_bucket().bucket("lake").send().await.unwrap();
    let attach = attach_string(&gw, "lake", &[]).await;
    assert!(
        attach.contains("sslmode=verify-full") && attach.contains(&format!("sslrootcert={}", root.display())),
        "{attach}"
    );
    std::fs::write(dir.join("attach.sql"), &attach).unwrap();
    let script = ducklake_script(
        "con = session()\ncon.execute(\"CREATE TABLE t AS SELECT 42 AS x\")\nprint(one(con, \"SELECT x FROM t\")[0])\n",
    );
    let attach_path = dir.join("attach.sql");
    let attach_arg = attach_path.to_str().unwrap();
    assert_eq!(python(&dir, &script, &[attach_arg]).await.trim(), "42");

    // The same string, the CA file now another CA's: DuckDB refuses the server.
    std::fs::copy(TestCa::new("lake-pg-other").ca_cert(), &root).unwrap();
    let output = python_command(&dir, &script, &[attach_arg]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "DuckDB accepted a certificate from another CA"
    );
    assert!(stderr.contains("certificate verify failed"), "{stderr}");
    gw.stop().await;
}

/// Lakes in two buckets of one database: each its own catalog schema, so the second is not
/// refused for the first's DATA_PATH (one lake per database, as it was).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lakes_in_two_buckets_share_the_database() {
    let gw = TestGateway::start().await;
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-two-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut args = Vec::new();
    for bucket in ["lake", "sales-2"] {
        gw.client.create_bucket().bucket(bucket).send().await.unwrap();
        let path = dir.join(format!("{bucket}.sql"));
        std::fs::write(
            &path,
            attach_string(&gw, bucket, &["--alias", &bucket.replace('-', "_")]).await,
        )
        .unwrap();
        args.push(path.to_str().unwrap().to_owned());
    }
    let script = ducklake_script(
        r#"
con = duckdb.connect()
con.execute(f"SET extension_directory = '{extensions}'")
for extension in ("httpfs", "postgres", "ducklake"):
    con.execute(f"LOAD {extension}")
for path in sys.argv[1:]:
    con.execute(open(path).read())
con.execute("CREATE TABLE lake.t AS SELECT range AS x FROM range(10)")
con.execute("CREATE TABLE sales_2.t AS SELECT range AS x FROM range(3)")
print(one(con, "SELECT (SELECT count(*) FROM lake.t), (SELECT count(*) FROM sales_2.t)"))
"#,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(python(&dir, &script, &args).await.trim(), "(10, 3)");
    let files: Vec<String> = gw
        .sql()
        .await
        .query(
            "SELECT path FROM ducklake_sales_2.ducklake_data_file ORDER BY path",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("path"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
}

/// The embedded database keeps its port across restarts (recorded in the data dir), so an
/// attach string printed once stays valid; and it is reached over loopback TCP with the
/// superuser's password, which works for any OS user (the socket directory is private).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_embedded_database_keeps_its_port_and_answers_over_tcp() {
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-port-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = || EmbeddedOptions {
        data_dir: dir.clone(),
        pg_bin: None,
        memory_budget: Some(1 << 30),
        shared_buffers: Some(32 << 20),
        tls: None,
    };
    let mut first = EmbeddedPostgres::start(options()).await.unwrap();
    let port = first.port();
    first.stop().await.unwrap();
    let mut second = EmbeddedPostgres::start(options()).await.unwrap();
    assert_eq!(second.port(), port, "the second start took another port");
    let config = pgvs3_gateway::pg::embedded::tcp_config(&dir, port).unwrap();
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one("SELECT inet_server_port() AS port, current_user::text AS name", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i32>("port"), row.get::<_, String>("name")),
        (i32::from(port), "pgvs3".to_owned())
    );
    second.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ducklake_keeps_its_catalog_and_its_files_in_one_database() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("lake").send().await.unwrap();
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let attach = attach_string(&gw, "lake", &[]).await;
    assert!(attach.contains(&format!("KEY_ID '{ROOT_ACCESS_KEY}'")), "{attach}");
    assert!(
        attach.contains("ATTACH 'ducklake:postgres:")
            && attach.contains("(DATA_PATH 's3://lake/', METADATA_SCHEMA 'ducklake_lake')")
    );
    std::fs::write(dir.join("attach.sql"), &attach).unwrap();

    let out = python(
        &dir,
        &ducklake_script(SCRIPT),
        &[dir.join("attach.sql").to_str().unwrap()],
    )
    .await;
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("{out}"));
    let base: i64 = (0..299_990).sum::<i64>() + (300_000..300_032).sum::<i64>();
    let writers: i64 = (1_000_000..1_100_000).sum::<i64>() + (2_000_000..2_100_000).sum::<i64>();
    assert_eq!(
        report["errors"],
        serde_json::json!([]),
        "both writers committed: {report}"
    );
    assert_eq!(report["rows"], 299_990 + 32 + 200_000, "{report}");
    assert_eq!(report["ids"], base + writers, "{report}");
    assert_eq!(
        report["writer_rows"], 200_000,
        "the second connection sees the first's rows too"
    );
    assert_eq!(
        report["kinds"],
        7 + 3,
        "kinds 0-6, the updated 100, the appended 7 and 8: {report}"
    );
    assert_eq!(
        report["at_creation"],
        serde_json::json!([300_000, 299_999]),
        "time travel: {report}"
    );
    assert_eq!(
        (report["noted"].as_str(), report["no_note_then"].as_i64()),
        (Some("first"), Some(1))
    );
    assert_eq!(
        report["after_cleanup"],
        serde_json::json!([299_990 + 32 + 200_000, base + writers])
    );
    assert!(
        report["files_after"].as_i64() < report["files_before"].as_i64(),
        "merging joined the small appends: {report}"
    );

    // The catalog is in the gateway's own database, beside the objects.
    let sql = gw.sql().await;
    let snapshots: i64 = sql
        .query_one("SELECT count(*) FROM ducklake_lake.ducklake_snapshot", &[])
        .await
        .unwrap()
        .get("count");
    assert!(snapshots >= 1);
    // Every file the catalog names is an object of the bucket, and the cleaned-up ones are gone.
    let mut listed = Vec::new();
    let mut token = None;
    loop {
        let page = gw
            .client
            .list_objects_v2()
            .bucket("lake")
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        listed.extend(page.contents().iter().filter_map(|o| o.key.clone()));
        token = page.next_continuation_token;
        if token.is_none() {
            break;
        }
    }
    let mut named: Vec<&str> = report["data_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file.as_str().unwrap().strip_prefix("s3://lake/").unwrap())
        .collect();
    named.sort_unstable();
    let mut parquet: Vec<&str> = listed
        .iter()
        .map(String::as_str)
        .filter(|key| key.ends_with(".parquet"))
        .collect();
    parquet.sort_unstable();
    assert_eq!(
        parquet, named,
        "the bucket holds exactly the data and delete files the catalog names"
    );

    // The dropped files' bodies were retired by their DELETEs; the reaper frees them.
    let store = &gw.gateway.store;
    let (retired, _) = store.reaper_backlog().await.unwrap();
    assert!(retired > 0, "the merged-away files retired their bodies");
    let reaped = store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(reaped.bodies as i64, retired, "{reaped:?}");
    assert_eq!(store.reaper_backlog().await.unwrap().0, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes a small lake on a primary and reads it back on its standby: the catalog from the
/// standby's PostgreSQL, the files from a gateway bound to that standby.
const WRITE: &str = r#"
import pathlib, sys
import duckdb, duckdb_ext
con = duckdb.connect()
con.execute(f"SET extension_directory = '{pathlib.Path(list(duckdb_ext.__path__)[0]) / 'extensions'}'")
for extension in ("httpfs", "postgres", "ducklake"):
    con.execute(f"LOAD {extension}")
con.execute(open(sys.argv[1]).read())
con.execute(sys.argv[2])
print(con.execute(sys.argv[3]).fetchone()[0])
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_gateway_reads_the_lake_from_its_replica() {
    let (primary, standby) = common::primary_and_standby("lake");
    let writer = TestGateway::on(primary.url("postgres")).await;
    writer.client.create_bucket().bucket("lake").send().await.unwrap();
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-standby-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("attach.sql"), attach_string(&writer, "lake", &[]).await).unwrap();
    let written = python(
        &dir,
        WRITE,
        &[
            dir.join("attach.sql").to_str().unwrap(),
            "CREATE TABLE lake.readings AS SELECT range AS id, range * 2 AS twice FROM range(100000)",
            "SELECT sum(twice) FROM lake.readings",
        ],
    )
    .await;
    assert_eq!(written.trim(), (0..100_000i64).map(|i| i * 2).sum::<i64>().to_string());

    let reader = TestGateway::with_args(standby.url("postgres"), &["--catalog-poll", "100ms"]).await;
    let (replica, connection) = tokio_postgres::connect(&standby.url("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    common::eventually(Duration::from_secs(30), "the lake to replay", || async {
        let row = replica
            .query_opt(
                "SELECT count(*) FROM ducklake_lake.ducklake_table WHERE table_name = 'readings'",
                &[],
            )
            .await
            .ok()??;
        (row.get::<_, i64>("count") == 1).then_some(())
    })
    .await;
    let attach = attach_string(&reader, "lake", &["--read-only"]).await;
    assert!(attach.contains("READ_ONLY"), "{attach}");
    std::fs::write(dir.join("attach-standby.sql"), attach).unwrap();
    let read = python(
        &dir,
        WRITE,
        &[
            dir.join("attach-standby.sql").to_str().unwrap(),
            "SELECT 1",
            "SELECT sum(twice) FROM lake.readings WHERE id >= 0",
        ],
    )
    .await;
    assert_eq!(read.trim(), written.trim(), "the standby serves the same lake");
    // The standby gateway served the files: its own S3 requests, not the primary's.
    let gets = reader
        .metric("pgvs3_requests_total{operation=\"GetObject\",protocol=\"s3\",status=\"206\"}")
        .await
        .unwrap_or(0.0)
        + reader
            .metric("pgvs3_requests_total{operation=\"GetObject\",protocol=\"s3\",status=\"200\"}")
            .await
            .unwrap_or(0.0);
    assert!(gets > 0.0, "the standby gateway served the Parquet reads");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A primary that archives its WAL, and a base backup of it taken before the lake exists; the
/// base is restored to a named restore point on request. Both live on a thread of their own
/// (a server stops with the thread that started it), which stops them and removes their
/// directories when the test is done.
struct ArchivingCluster {
    primary: common::ClusterAddress,
    steps: std::sync::mpsc::Sender<PitrStep>,
}

enum PitrStep {
    /// Stop the primary, then recover the base up to the restore point and promote it.
    Restore {
        target: String,
        reply: std::sync::mpsc::Sender<common::ClusterAddress>,
    },
    Finish(std::sync::mpsc::Sender<()>),
}

fn address(server: &EmbeddedPostgres) -> common::ClusterAddress {
    let socket_dir = match &server.connect_config().get_hosts()[0] {
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
    };
    common::ClusterAddress {
        socket_dir,
        port: server.port(),
    }
}

/// Appends settings to a cluster's postgresql.auto.conf (read at the next start; the launcher's
/// own `-c` settings do not name these).
fn configure(cluster_dir: &std::path::Path, settings: &[(&str, String)]) {
    use std::io::Write;
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(cluster_dir.join("postgresql.auto.conf"))
        .unwrap();
    for (name, value) in settings {
        writeln!(conf, "{name} = '{}'", value.replace('\'', "''")).unwrap();
    }
}

impl ArchivingCluster {
    fn start() -> ArchivingCluster {
        let base = std::env::temp_dir().join(format!("pgvs3-test-{}-pitr-lake", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (sender, receiver) = std::sync::mpsc::channel();
        let (steps, step_receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let options = |dir: &str| EmbeddedOptions {
                data_dir: base.join(dir),
                pg_bin: None,
                memory_budget: Some(1 << 30),
                shared_buffers: Some(32 << 20),
                tls: None,
            };
            // The archive sits beside the cluster, in the data dir the server account owns.
            let archive = base.join("primary").join("wal-archive");
            let archive = archive.display().to_string();
            let mut primary = runtime
                .block_on(EmbeddedPostgres::start(options("primary")))
                .expect("start the primary");
            runtime.block_on(primary.stop()).unwrap();
            configure(
                primary.cluster_dir(),
                &[
                    ("archive_mode", "on".into()),
                    (
                        "archive_command",
                        format!("mkdir -p {archive} && test ! -f {archive}/%f && cp %p {archive}/%f"),
                    ),
                ],
            );
            runtime
                .block_on(primary.restart())
                .expect("restart the primary archiving");
            // The base backup: pg_basebackup (through the standby launcher), stopped at once so
            // it holds the primary as it was before any lake.
            let mut restored = runtime
                .block_on(EmbeddedPostgres::start_standby(options("base"), &primary))
                .expect("take the base backup");
            runtime.block_on(restored.stop()).unwrap();
            sender.send(address(&primary)).unwrap();
            for step in step_receiver {
                match step {
                    PitrStep::Restore { target, reply } => {
                        runtime.block_on(primary.stop()).unwrap();
                        let cluster = restored.cluster_dir().to_owned();
                        std::fs::remove_file(cluster.join("standby.signal")).unwrap();
                        std::fs::write(cluster.join("recovery.signal"), "").unwrap();
                        configure(
                            &cluster,
                            &[
                                ("primary_conninfo", String::new()),
                                ("restore_command", format!("cp {archive}/%f %p")),
                                ("recovery_target_name", target),
                                ("recovery_target_action", "promote".into()),
                            ],
                        );
                        runtime.block_on(restored.restart()).expect("recover the base");
                        reply.send(address(&restored)).unwrap();
                    }
                    PitrStep::Finish(done) => {
                        runtime.block_on(restored.stop()).unwrap();
                        runtime.block_on(primary.stop()).unwrap();
                        let _ = std::fs::remove_dir_all(&base);
                        let _ = done.send(());
                        return;
                    }
                }
            }
        });
        let primary = receiver.recv().expect("archiving cluster thread");
        ArchivingCluster { primary, steps }
    }

    fn restore(&self, target: &str) -> common::ClusterAddress {
        let (reply, restored) = std::sync::mpsc::channel();
        self.steps
            .send(PitrStep::Restore {
                target: target.to_owned(),
                reply,
            })
            .unwrap();
        restored.recv().expect("the restore")
    }

    fn finish(self) {
        let (done, finished) = std::sync::mpsc::channel();
        self.steps.send(PitrStep::Finish(done)).unwrap();
        finished.recv().expect("the clusters stop");
    }
}

/// Writes a lake, holds a second writer's CTAS open (its files written, its catalog commit not)
/// while the test names a restore point, then commits it and goes on writing, merging and
/// cleaning up, so files the restore point's catalog names are deleted afterwards.
const BEFORE_AND_AFTER: &str = r#"

def state(con):
    rows, ids = one(con, "SELECT count(*), sum(id) FROM events")
    files = sorted({path for row in con.execute(
        "SELECT data_file, delete_file FROM ducklake_list_files('lake', 'events')").fetchall() for path in row if path})
    return {"rows": rows, "ids": int(ids), "snapshot": one(con, "SELECT max(snapshot_id) FROM lake.snapshots()")[0],
            "files": files}

con = session()
con.execute("CREATE TABLE events AS SELECT range AS id, md5(range::VARCHAR) AS digest FROM range(100000)")
con.execute("INSERT INTO events SELECT range, 'appended' FROM range(100000, 100032)")
con.execute("DELETE FROM events WHERE id % 10 = 3 AND id < 1000")
at_restore_point = state(con)

half = session()
half.execute("BEGIN")
half.execute("CREATE TABLE half AS SELECT range AS id FROM range(1000000)")
print("READY " + json.dumps(at_restore_point), flush=True)
sys.stdin.readline()
half.execute("COMMIT")

con.execute("INSERT INTO events SELECT range, 'late' FROM range(200000, 200032)")
con.execute("UPDATE events SET digest = 'late' WHERE id < 100")
con.execute("DELETE FROM events WHERE id >= 50000 AND id < 60000")
con.execute("CALL ducklake_merge_adjacent_files('lake')")
con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
after = state(con)
after["half"] = one(con, "SELECT count(*) FROM half")[0]
print(json.dumps(after), flush=True)
"#;

/// Reads the restored lake: its state, every data file the catalog names read whole, the
/// tables it has; then collects the orphaned files and writes one row.
const RESTORED: &str = r#"
import json, pathlib, sys
import duckdb, duckdb_ext
con = duckdb.connect()
con.execute(f"SET extension_directory = '{pathlib.Path(list(duckdb_ext.__path__)[0]) / 'extensions'}'")
for extension in ("httpfs", "postgres", "ducklake"):
    con.execute(f"LOAD {extension}")
con.execute(open(sys.argv[1]).read())
con.execute("USE lake")
one = lambda sql: con.execute(sql).fetchone()
rows, ids = one("SELECT count(*), sum(id) FROM events")
files = sorted({path for row in con.execute(
    "SELECT data_file, delete_file FROM ducklake_list_files('lake', 'events')").fetchall() for path in row if path})
data_files = [row[0] for row in con.execute("SELECT data_file FROM ducklake_list_files('lake', 'events')").fetchall()]
stored_rows = sum(one(f"SELECT count(*) FROM read_parquet('{path}')")[0] for path in data_files)
tables = sorted(row[0] for row in con.execute(
    "SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'").fetchall())
snapshot = one("SELECT max(snapshot_id) FROM lake.snapshots()")[0]
con.execute("CALL ducklake_delete_orphaned_files('lake', cleanup_all => true)")
con.execute("INSERT INTO events VALUES (-1, 'after the restore')")
print(json.dumps({
    "rows": rows, "ids": int(ids), "files": files, "stored_rows": stored_rows, "tables": tables,
    "snapshot": snapshot, "rows_after_write": one("SELECT count(*) FROM events")[0],
}))
"#;

/// The Parquet keys of bucket `lake`.
async fn parquet_keys(gw: &TestGateway) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let page = gw
            .client
            .list_objects_v2()
            .bucket("lake")
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        keys.extend(
            page.contents()
                .iter()
                .filter_map(|o| o.key.clone())
                .filter(|key| key.ends_with(".parquet")),
        );
        token = page.next_continuation_token;
        if token.is_none() {
            break;
        }
    }
    keys.sort_unstable();
    keys
}

fn keys_of(files: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file.as_str().unwrap().strip_prefix("s3://lake/").unwrap().to_owned())
        .collect();
    keys.sort_unstable();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_point_in_time_restore_brings_back_the_lake_of_that_instant() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let cluster = ArchivingCluster::start();
    let gw = TestGateway::on(cluster.primary.url("postgres")).await;
    gw.client.create_bucket().bucket("lake").send().await.unwrap();
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-pitr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("attach.sql"), attach_string(&gw, "lake", &[]).await).unwrap();

    let mut child = python_command(
        &dir,
        &ducklake_script(BEFORE_AND_AFTER),
        &[dir.join("attach.sql").to_str().unwrap()],
    )
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .spawn()
    .expect("python3 (run the tests with scripts/test)");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("the writers reach the restore point")
        .unwrap()
        .expect("the script printed its state (see its stderr)");
    let at_point: serde_json::Value = serde_json::from_str(ready.strip_prefix("READY ").unwrap()).unwrap();

    // The open CTAS has written its files (objects committed in the database) but not its
    // catalog rows: the restore point falls in the middle of a table being written.
    let sql = gw.sql().await;
    let named_at_point = keys_of(&at_point["files"]);
    let in_flight: Vec<String> = parquet_keys(&gw)
        .await
        .into_iter()
        .filter(|key| !named_at_point.contains(key))
        .collect();
    assert!(
        !in_flight.is_empty(),
        "the open CTAS wrote files before the restore point"
    );
    let point_lsn: String = sql
        .query_one("SELECT pg_create_restore_point('lake')::text AS restore_point", &[])
        .await
        .unwrap()
        .get("restore_point");
    stdin.write_all(b"go\n").await.unwrap();
    let after = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("the writers finish")
        .unwrap()
        .expect("the script printed its final state");
    assert!(child.wait().await.unwrap().success(), "the writers' script failed");
    let after: serde_json::Value = serde_json::from_str(&after).unwrap();
    assert_eq!(
        after["half"], 1_000_000,
        "the held CTAS committed after the restore point"
    );
    assert_ne!(after["rows"], at_point["rows"], "{after}");
    let now_stored = parquet_keys(&gw).await;
    let deleted: Vec<&String> = named_at_point.iter().filter(|key| !now_stored.contains(key)).collect();
    assert!(
        !deleted.is_empty(),
        "cleanup deleted files the restore point's catalog names: {after}"
    );

    // Every WAL segment up to the restore point reaches the archive.
    let segment: String = sql
        .query_one(
            "SELECT pg_walfile_name($1::text::pg_lsn) AS segment FROM pg_switch_wal()",
            &[&point_lsn],
        )
        .await
        .unwrap()
        .get("segment");
    common::eventually(Duration::from_secs(60), "the WAL to be archived", || async {
        let row = sql
            .query_one(
                "SELECT coalesce(last_archived_wal, '') AS archived FROM pg_stat_archiver",
                &[],
            )
            .await
            .ok()?;
        (row.get::<_, String>("archived") >= segment).then_some(())
    })
    .await;
    drop(sql);
    gw.stop().await;

    // The base backup recovered to the restore point, the primary stopped: a gateway on the
    // restored database serves the lake of that instant.
    let restored = cluster.restore("lake");
    let restored_url = restored.url("postgres");
    let (client, connection) = tokio_postgres::connect(&restored_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    common::eventually(Duration::from_secs(120), "the restore to promote", || async {
        let row = client
            .query_one("SELECT pg_is_in_recovery() AS in_recovery", &[])
            .await
            .ok()?;
        (!row.get::<_, bool>("in_recovery")).then_some(())
    })
    .await;
    let gw = TestGateway::on(restored_url).await;
    std::fs::write(dir.join("attach-restored.sql"), attach_string(&gw, "lake", &[]).await).unwrap();
    let stored_before_orphans = parquet_keys(&gw).await;
    let read = python(&dir, RESTORED, &[dir.join("attach-restored.sql").to_str().unwrap()]).await;
    let read: serde_json::Value = serde_json::from_str(read.trim()).unwrap_or_else(|_| panic!("{read}"));
    for field in ["rows", "ids", "snapshot", "files"] {
        assert_eq!(read[field], at_point[field], "{field} at the restore point: {read}");
    }
    assert_eq!(read["tables"], serde_json::json!(["events"]), "no half-written table");
    assert_eq!(
        read["stored_rows"].as_i64().unwrap(),
        100_032,
        "the data files hold every row written before the point (deleted ones masked by delete files)"
    );
    assert_eq!(read["rows_after_write"], at_point["rows"].as_i64().unwrap() + 1);
    // Every file the catalog names is back, whole, and what the open CTAS had written is
    // there too (orphans DuckLake collects).
    for key in &named_at_point {
        assert!(stored_before_orphans.contains(key), "{key} restored");
        let body = read_object(&gw.client, "lake", key).await;
        assert!(
            body.starts_with(b"PAR1") && body.ends_with(b"PAR1"),
            "{key} is a whole Parquet file"
        );
    }
    assert!(in_flight.iter().all(|key| stored_before_orphans.contains(key)));
    let stored = parquet_keys(&gw).await;
    assert!(
        in_flight.iter().all(|key| !stored.contains(key)),
        "ducklake_delete_orphaned_files collected the uncommitted table's files"
    );
    gw.stop().await;
    drop(client);
    cluster.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes (`create`: four partitioned appends) or appends to (`append`: 32 rows of kind 9) an
/// Iceberg table `db.events` with pyiceberg, its SQLite catalog in a file and its files in
/// bucket `warehouse` at the given endpoint; prints the table's metadata location.
const ICEBERG_WRITE: &str = r#"
import sys
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
catalog_db, endpoint, key, secret, mode = sys.argv[1:6]
catalog = SqlCatalog("lake", uri=f"sqlite:///{catalog_db}", warehouse="s3://warehouse/", **{
    "s3.endpoint": endpoint, "s3.access-key-id": key, "s3.secret-access-key": secret, "s3.region": "us-east-1"})
def rows(ids, kind):
    return pa.table({"id": pa.array(ids, pa.int64()), "kind": pa.array([kind(i) for i in ids], pa.int64()),
                     "digest": pa.array([f"d{i}" for i in ids])})
if mode == "create":
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "kind", LongType()),
                    NestedField(3, "digest", StringType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="kind"))
    table = catalog.create_table("db.events", schema=schema, partition_spec=spec)
    for batch in range(4):
        table.append(rows(range(batch * 10_000, (batch + 1) * 10_000), lambda i: i % 4))
else:
    table = catalog.load_table("db.events")
    table.append(rows(range(1_000_000, 1_000_032), lambda i: 9))
print(table.metadata_location)
"#;

/// Iceberg planning and scan queries from DuckDB's iceberg extension on the table whose
/// metadata file is argv[2], through the S3 endpoint argv[1]; prints their results.
const ICEBERG_READ: &str = r#"
import json, pathlib, sys
import duckdb, duckdb_ext
endpoint, metadata, key, secret = sys.argv[1:5]
con = duckdb.connect()
con.execute(f"SET extension_directory = '{pathlib.Path(list(duckdb_ext.__path__)[0]) / 'extensions'}'")
for extension in ("httpfs", "avro", "iceberg"):
    con.execute(f"LOAD {extension}")
con.execute(f"CREATE SECRET files (TYPE s3, KEY_ID '{key}', SECRET '{secret}', ENDPOINT '{endpoint}', "
            "URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')")
queries = {
    "snapshots": f"SELECT count(*) FROM iceberg_snapshots('{metadata}')",
    "count": f"SELECT count(*), sum(id) FROM iceberg_scan('{metadata}')",
    "one_partition": f"SELECT count(*), min(id) FROM iceberg_scan('{metadata}') WHERE kind = 2",
    "group_by": f"SELECT kind, count(*) FROM iceberg_scan('{metadata}') GROUP BY kind ORDER BY kind",
}
print(json.dumps({name: [list(row) for row in con.execute(sql).fetchall()] for name, sql in queries.items()}))
"#;

/// Every S3 request a gateway has answered (the sum of its request counters).
async fn requests_served(gw: &TestGateway) -> f64 {
    let host = gw.gateway.admin_addr.to_string();
    let metrics = common::raw::send(gw.gateway.admin_addr, "GET", "/metrics", &[("host".into(), host)], b"").await;
    metrics
        .body
        .lines()
        .filter(|line| line.starts_with("pgvs3_requests_total{") && line.contains("protocol=\"s3\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_iceberg_table_reads_warm_through_the_cache_without_the_origin() {
    use pgvs3_gateway::store::{CacheMode, Origin};
    let origin = TestGateway::start().await;
    origin.client.create_bucket().bucket("warehouse").send().await.unwrap();
    // The cache bucket has the origin bucket's name, so the absolute s3://warehouse/ paths in
    // Iceberg's metadata resolve through whichever gateway the client talks to.
    let settings = Origin {
        endpoint: origin.endpoint(),
        region: "us-east-1".into(),
        origin_bucket: "warehouse".into(),
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        path_style: true,
        mode: CacheMode::WriteBack,
        ttl: Duration::from_secs(3600),
        negative_ttl: Duration::ZERO,
        fill_concurrency: 8,
        size_limit: None,
        // Iceberg's metadata and these small data files are all written through.
        write_back_threshold: 64 << 20,
        range_chunk: 1 << 20,
    };
    let mut caches = Vec::new();
    for _ in 0..2 {
        let cache = TestGateway::start().await;
        cache
            .gateway
            .store
            .catalog()
            .put_origin("warehouse", &settings)
            .await
            .unwrap();
        caches.push(cache);
    }
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-iceberg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let catalog = dir.join("catalog.db");
    let catalog = catalog.to_str().unwrap();
    let write = |endpoint: String, mode: &'static str| {
        let dir = dir.clone();
        async move {
            python(
                &dir,
                ICEBERG_WRITE,
                &[catalog, &endpoint, ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY, mode],
            )
            .await
            .trim()
            .to_owned()
        }
    };
    let read = |gw: &TestGateway, metadata: &str| {
        let (dir, endpoint, metadata) = (dir.clone(), gw.gateway.s3_addr.to_string(), metadata.to_owned());
        async move {
            let out = python(
                &dir,
                ICEBERG_READ,
                &[&endpoint, &metadata, ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY],
            )
            .await;
            serde_json::from_str::<serde_json::Value>(out.trim()).unwrap_or_else(|_| panic!("{out}"))
        }
    };

    let metadata = write(origin.endpoint(), "create").await;
    assert!(metadata.starts_with("s3://warehouse/"), "{metadata}");
    let direct = read(&origin, &metadata).await;
    let ids: i64 = (0..40_000).sum();
    assert_eq!(direct["snapshots"], serde_json::json!([[4]]), "{direct}");
    assert_eq!(direct["count"], serde_json::json!([[40_000, ids]]), "{direct}");
    assert_eq!(direct["one_partition"], serde_json::json!([[10_000, 2]]), "{direct}");
    assert_eq!(
        direct["group_by"],
        serde_json::json!([[0, 10_000], [1, 10_000], [2, 10_000], [3, 10_000]])
    );

    let cache = &caches[0];
    let before_cold = requests_served(&origin).await;
    let cold = read(cache, &metadata).await;
    assert_eq!(cold, direct, "cold through the cache");
    let after_cold = requests_served(&origin).await;
    assert!(after_cold > before_cold, "a cold read fills from the origin");
    let warm = read(cache, &metadata).await;
    assert_eq!(warm, direct, "warm through the cache");
    assert_eq!(
        requests_served(&origin).await,
        after_cold,
        "a warm read makes no origin request"
    );

    // An append through the cache bucket reaches the origin before it is acknowledged: the
    // origin and the other cache gateway read the new snapshot.
    let appended = write(cache.endpoint(), "append").await;
    assert_ne!(appended, metadata);
    let expected_count = serde_json::json!([[40_032, ids + (1_000_000..1_000_032).sum::<i64>()]]);
    for gw in [&origin, &caches[1]] {
        let after = read(gw, &appended).await;
        assert_eq!(after["snapshots"], serde_json::json!([[5]]), "{after}");
        assert_eq!(after["count"], expected_count, "{after}");
        assert_eq!(after["one_partition"], direct["one_partition"]);
    }
    for gw in caches {
        gw.stop().await;
    }
    origin.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
