#!/usr/bin/env python3
"""The lakehouse cases of `just bench lake`, timed from the client: DuckDB (httpfs, ducklake,
iceberg) and pyiceberg against S3 endpoints that e2e/scripts/bench-lake.sh started.

    lake_bench.py CONFIG.json OUT.ndjson

CONFIG names the targets ({"pgvs3": {...}, "rclone": {...}, "garage": {...}}: endpoint host:port,
keys, bucket and the DuckLake ATTACH statement, for pgvs3 the one `pgvs3 lake attach-string`
printed), the Iceberg origin and cache endpoints, the fixtures and the budget (repeats, threads, snapshot count). Each case is run
`repeats` times after one untimed warm-up (except the cold cases) in a fresh DuckDB with its
external file cache off, so every byte comes from the server; a record per case and target:
{"group", "case", "target", "p50_ms", "rate", "mib_per_second", "bytes", "runs"}.
"""
import concurrent.futures
import json
import pathlib
import statistics
import sys
import threading
import time

import duckdb
import duckdb_ext

EXTENSIONS = pathlib.Path(list(duckdb_ext.__path__)[0]) / "extensions"
MIB = 1 << 20


def connect(target, extensions=("httpfs",)):
    """A DuckDB whose S3 secret is target's (its endpoint host:port and keys)."""
    keys = target["keys"]
    con = duckdb.connect()
    con.execute(f"SET extension_directory = '{EXTENSIONS}'")
    for extension in extensions:
        con.execute(f"LOAD {extension}")
    # Every read reaches the server: no cross-query cache of remote files in the client.
    con.execute("SET enable_external_file_cache = false")
    con.execute(f"CREATE SECRET files (TYPE s3, KEY_ID '{keys[0]}', SECRET '{keys[1]}', "
                f"ENDPOINT '{target['endpoint']}', URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')")
    return con


class Recorder:
    def __init__(self, path):
        self.out = open(path, "a")

    def record(self, group, case, target, seconds, operations=1, size=0):
        """seconds: per-run wall times; each run did `operations` requests of `size` bytes."""
        p50 = statistics.median(seconds)
        total = sum(seconds)
        entry = {"group": group, "case": case, "target": target, "p50_ms": p50 * 1000,
                 "rate": operations * len(seconds) / total if total else None,
                 "mib_per_second": size * operations * len(seconds) / MIB / total if size and total else None,
                 "bytes": size, "runs": len(seconds)}
        print(f"  {group:<9} {case:<44} {target:<13} p50 {p50 * 1000:10.1f} ms", file=sys.stderr)
        self.out.write(json.dumps(entry) + "\n")
        self.out.flush()


def answer(rows):
    """A query's rows as comparable text: floats to 12 significant digits, since DuckDB's parallel
    sums of doubles add in whatever order its threads finish (the last bits differ run to run)."""
    return json.dumps([[f"{v:.12g}" if isinstance(v, float) else v for v in row] for row in rows], default=str)


def timed(fn, repeats, warmup=True):
    if warmup:
        fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return runs


def objects(rec, config, name, target):
    """httpfs PUT then GET of small and large objects from a pool of threads, one DuckDB cursor
    each: the PUT writes an uncompressed Parquet file of distinct 8-byte hashes (incompressible),
    the GET reads each file back whole with read_blob."""
    con = connect(target)
    for label, rows, threads, count in config["objects"]:
        prefix = f"s3://{target['bucket']}/objects/{label}"
        size = None
        local = threading.local()

        def cursor():
            # One DuckDB connection per pool thread (a connection runs one query at a time).
            if not hasattr(local, "cursor"):
                local.cursor = con.cursor()
            return local.cursor

        def put(i):
            cursor().execute(
                f"COPY (SELECT hash(range + {i}) AS h FROM range({rows})) TO '{prefix}/{i}.parquet' "
                "(FORMAT parquet, COMPRESSION uncompressed)")

        def get(i):
            return cursor().execute(
                f"SELECT octet_length(content) FROM read_blob('{prefix}/{i}.parquet')").fetchone()[0]

        for op, fn in (("PUT", put), ("GET", get)):
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                def one(i):
                    start = time.perf_counter()
                    result = fn(i)
                    return time.perf_counter() - start, result
                list(pool.map(one, range(threads)))  # warm-up: connections, and the GETs' keys exist
                start = time.perf_counter()
                results = list(pool.map(one, range(count)))
                wall = time.perf_counter() - start
            if op == "GET":
                size = results[0][1]
            latencies = [seconds for seconds, _ in results]
            # The rate is the pool's (count requests in `wall`); the p50 the requests' own.
            rec.out.write(json.dumps({
                "group": "httpfs", "case": f"{op} {label} ({threads} threads)", "target": name,
                "p50_ms": statistics.median(latencies) * 1000, "rate": count / wall,
                "mib_per_second": (size or 0) * count / MIB / wall if size else None, "bytes": size,
                "runs": count}) + "\n")
            print(f"  httpfs    {op} {label} ({threads} threads){'':<20} {name:<13} {count / wall:10.1f} op/s",
                  file=sys.stderr)
        rec.out.flush()


def scans(rec, config, name, target, uploaded):
    repeats = config["repeats"]
    for fixture, key in uploaded.items():
        url = f"s3://{target['bucket']}/{key}"
        size = config["fixture_sizes"][fixture]
        full = f"SELECT sum(amount), count(DISTINCT user_id), max(token), min(ts) FROM read_parquet('{url}')"
        filtered = f"SELECT count(*), sum(amount) FROM read_parquet('{url}') WHERE id BETWEEN 100000 AND 101000"
        for label, sql in (("full scan", full), ("filtered scan (id range)", filtered)):
            con = connect(target)
            runs = timed(lambda: con.execute(sql).fetchall(), repeats)
            rec.record("parquet", f"{label} {fixture}", name, runs, size=size if label == "full scan" else 0)


def ducklake(rec, config, name, target):
    repeats = config["repeats"]
    extensions = ("httpfs", "postgres", "ducklake")
    attach = target["attach"]

    con = connect(target, extensions)
    con.execute(attach)
    con.execute("USE lake")
    counter = iter(range(1_000_000))
    rec.record("ducklake", "CREATE TABLE", name,
               timed(lambda: con.execute(f"CREATE TABLE t{next(counter)} (id BIGINT, note VARCHAR)"), repeats))
    con.execute("CREATE TABLE appends (id BIGINT, note VARCHAR)")
    rec.record("ducklake", "32-row append", name, timed(
        lambda: con.execute("INSERT INTO appends SELECT range, 'row ' || range FROM range(32)"), repeats))
    tables = {}
    for fixture, path in config["ctas_fixtures"].items():
        size = config["fixture_sizes"][fixture]
        table = tables[fixture] = fixture.split(".")[0].replace("-", "_")
        # At most three bulk loads: each leaves its files behind until a cleanup.
        runs = timed(lambda: con.execute(
            f"CREATE OR REPLACE TABLE {table} AS FROM read_parquet('{path}')"), min(repeats, 3), warmup=False)
        rec.record("ducklake", f"CTAS {fixture}", name, runs, size=size)
    # A DuckDB-file catalog (rclone's) is held by one attach at a time.
    con.close()
    for fixture, table in tables.items():
        # A new DuckDB each time, its extensions loaded before the clock starts (loading them
        # is the client's own second, the same for every server).
        runs = []
        for _ in range(repeats):
            fresh = connect(target, extensions)
            start = time.perf_counter()
            fresh.execute(attach)
            fresh.execute(f"SELECT sum(amount), count(DISTINCT user_id), max(token) FROM lake.{table}").fetchall()
            runs.append(time.perf_counter() - start)
            fresh.close()
        rec.record("ducklake", f"fresh attach + full query {fixture}", name, runs)


ICEBERG_QUERIES = {
    "snapshots": "SELECT count(*) FROM iceberg_snapshots('{m}')",
    "count": "SELECT count(*) FROM iceberg_scan('{m}')",
    "one-partition filter": "SELECT count(*), sum(amount) FROM iceberg_scan('{m}') WHERE kind = 3",
    "group-by": "SELECT kind, count(*), sum(amount) FROM iceberg_scan('{m}') GROUP BY kind ORDER BY kind",
}


def iceberg_table(config):
    """The table the planning queries read: `snapshots` appends of a few thousand rows, partitioned
    by kind, written with pyiceberg (SQLite catalog) straight to the origin. Returns its metadata."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField

    iceberg = config["iceberg"]
    catalog = SqlCatalog("bench", uri=f"sqlite:///{iceberg['catalog']}", warehouse="s3://warehouse/", **{
        "s3.endpoint": f"http://{iceberg['origin']}", "s3.access-key-id": config["keys"][0],
        "s3.secret-access-key": config["keys"][1], "s3.region": "us-east-1"})
    catalog.create_namespace("bench")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "kind", LongType()),
                    NestedField(3, "amount", DoubleType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="kind"))
    table = catalog.create_table("bench.events", schema=schema, partition_spec=spec)
    rows = 4096
    for snapshot in range(iceberg["snapshots"]):
        ids = range(snapshot * rows, (snapshot + 1) * rows)
        table.append(pa.table({"id": pa.array(ids, pa.int64()), "kind": pa.array([i % 4 for i in ids], pa.int64()),
                               "amount": pa.array([i * 0.5 for i in ids], pa.float64())}))
    return table.metadata_location


def iceberg(rec, config):
    iceberg = config["iceberg"]
    start = time.perf_counter()
    metadata = iceberg_table(config)
    print(f"  iceberg   {iceberg['snapshots']} snapshots written in {time.perf_counter() - start:.1f}s",
          file=sys.stderr)
    extensions = ("httpfs", "avro", "iceberg")
    repeats = iceberg["repeats"]
    results = {}
    for target, endpoint, cold in (("direct", iceberg["origin"], False), ("cache cold", iceberg["cache"], True),
                                   ("cache warm", iceberg["cache"], False)):
        for query, sql in ICEBERG_QUERIES.items():
            con = connect({"endpoint": endpoint, "keys": config["keys"]}, extensions)
            sql = sql.format(m=metadata)
            # Cold: the first read of each query's files through the cache (the earlier queries'
            # metadata is already in it), once; the others after one untimed run.
            runs = timed(lambda: con.execute(sql).fetchall(), 1 if cold else repeats, warmup=not cold)
            results.setdefault(query, set()).add(answer(con.execute(sql).fetchall()))
            rec.record("iceberg", query, target, runs)
    for query, answers in results.items():
        assert len(answers) == 1, f"{query}: direct, cold and warm disagree: {answers}"


def cached_scans(rec, config):
    """The full scan of each fixture written straight to the constrained origin: direct, cold
    through a cache bucket (once, per fill concurrency: each cache gateway sees the file first
    here), and warm through the first cache."""
    import boto3
    iceberg = config["iceberg"]
    origin = boto3.client("s3", endpoint_url=f"http://{iceberg['origin']}", region_name="us-east-1",
                          aws_access_key_id=config["keys"][0], aws_secret_access_key=config["keys"][1])
    repeats = iceberg["repeats"]
    for fixture, path in config["scan_fixtures"].items():
        key = f"scans/{fixture}"
        origin.upload_file(path, "warehouse", key)
        size = config["fixture_sizes"][fixture]
        sql = (f"SELECT sum(amount), count(DISTINCT user_id), max(token), min(ts) "
               f"FROM read_parquet('s3://warehouse/{key}')")
        answers = set()
        cases = [("direct", iceberg["origin"], False)]
        cases += [(f"cache cold ({slots} fill slots)", endpoint, True) for slots, endpoint in iceberg["cold_caches"]]
        cases += [("cache warm", iceberg["cold_caches"][0][1], False)]
        for target, endpoint, cold in cases:
            con = connect({"endpoint": endpoint, "keys": config["keys"]})
            runs = timed(lambda: answers.add(answer(con.execute(sql).fetchall())),
                         1 if cold else repeats, warmup=not cold)
            rec.record("cached scan", f"full scan {fixture}", target, runs, size=size)
        assert len(answers) == 1, f"{fixture}: direct, cold and warm disagree: {answers}"


def main():
    config = json.loads(pathlib.Path(sys.argv[1]).read_text())
    rec = Recorder(sys.argv[2])
    groups = config["groups"]
    targets = config["targets"]
    uploaded = {}
    if "parquet" in groups:
        import boto3
        for name, target in targets.items():
            keys = target["keys"]
            s3 = boto3.client("s3", endpoint_url=f"http://{target['endpoint']}", region_name="us-east-1",
                              aws_access_key_id=keys[0], aws_secret_access_key=keys[1])
            for fixture, path in config["scan_fixtures"].items():
                s3.upload_file(path, target["bucket"], f"fixtures/{fixture}")
            uploaded[name] = {fixture: f"fixtures/{fixture}" for fixture in config["scan_fixtures"]}
    # Each group of cases on every target in turn, so a change in the machine's load (other
    # builds) lands on both sides of a ratio rather than on one target's whole run.
    for group, run in (("httpfs", objects), ("parquet", scans), ("ducklake", ducklake)):
        if group not in groups:
            continue
        for name, target in targets.items():
            print(f"# {group}: {name}", file=sys.stderr)
            if run is scans:
                scans(rec, config, name, target, uploaded[name])
            else:
                run(rec, config, name, target)
    if "iceberg" in groups:
        print("# iceberg: direct from the constrained origin, then through the cache", file=sys.stderr)
        iceberg(rec, config)
    if "cached-scan" in groups:
        print("# cached scan: Parquet direct from the constrained origin, then through the cache", file=sys.stderr)
        cached_scans(rec, config)


if __name__ == "__main__":
    main()
