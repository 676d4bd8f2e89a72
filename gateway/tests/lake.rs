//! DuckLake on pgvs3, the workload the system exists for: the lake's catalog in the gateway's
//! own PostgreSQL, its Parquet files in a pgvs3 bucket, attached with the statements
//! `pgvs3 lake attach-string` prints. DuckDB (from the clients' venv that `scripts/test`
//! installs, with its httpfs, postgres and ducklake extensions) creates, appends, updates,
//! deletes, evolves the schema, travels in time, merges and cleans up files, with a second
//! writer beside it; the files it drops are deleted over S3 and the reaper frees their bodies.

mod common;

use std::time::Duration;

use common::{ROOT_ACCESS_KEY, TestGateway};

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
    let path = dir.join("lake.py");
    std::fs::write(&path, script).unwrap();
    let output = tokio::process::Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|err| panic!("python3 could not start: {err}; run the tests with scripts/test"));
    assert!(
        output.status.success(),
        "the DuckLake script failed (a missing module? scripts/test installs DuckDB and its extensions):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const SCRIPT: &str = r#"
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ducklake_keeps_its_catalog_and_its_files_in_one_database() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("lake").send().await.unwrap();
    let dir = std::env::temp_dir().join(format!("pgvs3-lake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let attach = attach_string(&gw, "lake", &[]).await;
    assert!(attach.contains(&format!("KEY_ID '{ROOT_ACCESS_KEY}'")), "{attach}");
    assert!(attach.contains("ATTACH 'ducklake:postgres:") && attach.contains("(DATA_PATH 's3://lake/')"));
    std::fs::write(dir.join("attach.sql"), &attach).unwrap();

    let out = python(&dir, SCRIPT, &[dir.join("attach.sql").to_str().unwrap()]).await;
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
        .query_one("SELECT count(*) FROM ducklake_snapshot", &[])
        .await
        .unwrap()
        .get(0);
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
            .query_opt("SELECT count(*) FROM ducklake_table WHERE table_name = 'readings'", &[])
            .await
            .ok()??;
        (row.get::<_, i64>(0) == 1).then_some(())
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
