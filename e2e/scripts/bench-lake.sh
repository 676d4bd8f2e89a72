#!/usr/bin/env bash
# `just bench lake`: the lakehouse workload timed from the client, pgvs3 beside rclone serve s3,
# and Iceberg through the origin cache; then a table of ratios and a chart.
#   e2e/scripts/bench-lake.sh [--smoke] [--full] [--with-garage] [--only GROUPS] [--fixtures A,B] [--repeats N] [--snapshots N] [--out DIR]
#   PGVS3_BIN_DIR=/path/to/release e2e/scripts/bench-lake.sh ...   (a prebuilt pgvs3, no build)
# - httpfs: DuckDB PUTs (COPY of an incompressible Parquet file) and GETs (read_blob) of 4 KiB
#   objects from 64 threads and of 8 MiB objects from 16, one DuckDB connection per thread.
# - parquet: a full scan (four of the six columns) and a filtered scan (an id range: one row group) of the
#   10 MiB Parquet fixture; --full adds the 100 MiB and 1 GiB fixtures (--fixtures: these instead).
# - ducklake: CREATE TABLE, a 32-row append, a bulk CTAS of the fixtures and a fresh ATTACH + full
#   query; on pgvs3 the catalog is in its PostgreSQL (`pgvs3 lake attach-string`), on rclone in a
#   local DuckDB file (it has no database).
# - iceberg: a pyiceberg table of N snapshots (default 100) written to an origin pgvs3 that
#   answers with 20 ms one-way latency (PGVS3_BENCH_ORIGIN_LATENCY), then DuckDB's planning
#   queries (snapshots, count, one-partition filter, group-by) direct, cold and warm through a
#   cache bucket of another pgvs3 in front of it.
# - cached-scan: the full scan of each fixture written straight to that origin: direct, cold through
#   caches with 8 and with 32 fill slots, and warm.
# --only: these groups (comma-separated; default all five). --with-garage: Garage beside rclone.
# --smoke: the debug binary, the 1 MiB fixture, few requests and 3 snapshots: about a minute, no
# performance claim (CI). Needs the clients' venv that scripts/test installs (DuckDB and its
# extensions, pyiceberg, boto3, the AWS CLI, rclone). Results: DIR/lake.ndjson, DIR/bench.md,
# DIR/bench.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
smoke=no full=no with_garage=no repeats=5 groups=httpfs,parquet,ducklake,iceberg,cached-scan snapshots=100 out="" only_fixtures=""
usage="usage: $0 [--smoke] [--full] [--with-garage] [--only GROUPS] [--fixtures A,B] [--repeats N] [--snapshots N] [--out DIR]"
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=yes; shift ;;
        --full) full=yes; shift ;;
        --with-garage) with_garage=yes; shift ;;
        --only) groups=$2; shift 2 ;;
        --fixtures) only_fixtures=$2; shift 2 ;;
        --repeats) repeats=$2; shift 2 ;;
        --snapshots) snapshots=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
clients="${PGVS3_TOOLS_DIR:-$HOME/.cache/pgvs3-tools}/clients-venv"
[ -d "$clients/bin" ] && export PATH="$clients/bin:$PATH"
python3 -c "import duckdb, duckdb_ext, pyiceberg.catalog.sql, boto3" 2>/dev/null \
    || { echo "DuckDB, pyiceberg or boto3 missing: run scripts/test once (it installs the clients' venv)" >&2; exit 1; }
for tool in rclone aws; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/test once" >&2; exit 1; }
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
if [ "$smoke" = yes ]; then
    profile=debug fixtures=events-1MiB.parquet repeats=1 snapshots=3
    # 4 KiB and 8 MiB objects: label, rows of 8-byte hashes, threads, requests.
    objects='[["4KiB", 400, 8, 16], ["8MiB", 1048576, 2, 2]]'
else
    profile=release fixtures=events-10MiB.parquet
    [ "$full" = yes ] && fixtures+=,events-100MiB.parquet,events-1GiB.parquet
    objects='[["4KiB", 400, 64, 2048], ["8MiB", 1048576, 16, 64]]'
fi
fixtures=${only_fixtures:-$fixtures}
if [[ -n "${PGVS3_BIN_DIR:-}" ]]; then
    bin=$PGVS3_BIN_DIR
elif [ "$smoke" = yes ]; then
    # The binary `cargo test --workspace` builds (nothing to build after CI's test run).
    cargo test --workspace --locked --no-run -q
    bin="$CARGO_TARGET_DIR/debug"
else
    cargo build --release --locked --bin pgvs3
    bin="$CARGO_TARGET_DIR/release"
fi
bench_python=$(e2e/scripts/bench-venv.sh)
declare -A fixture
while read -r name path; do fixture[$name]=$path; done < <("$bench_python" e2e/scripts/fixtures.py --names "$fixtures")

work=$(mktemp -d /tmp/pgvs3-bench-lake-XXXXXX)
# As root, the embedded PostgreSQL runs as an unprivileged user that must reach its data dir.
chmod 755 "$work"
out=${out:-/tmp/pgvs3-bench-lake-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$out"
rm -f "$out/lake.ndjson"
source e2e/scripts/gateway.sh
trap stop_all EXIT
export AWS_ACCESS_KEY_ID=BENCHROOTKEY00000001 AWS_SECRET_ACCESS_KEY=bench-secret-key AWS_DEFAULT_REGION=us-east-1
export PGVS3_ROOT_ACCESS_KEY=$AWS_ACCESS_KEY_ID PGVS3_ROOT_SECRET_KEY=$AWS_SECRET_ACCESS_KEY
mb() { aws --endpoint-url "$1" s3 mb "s3://$2" >/dev/null; }

# pgvs3, with the lake's catalog in its own PostgreSQL.
start_gateway "$bin/pgvs3" "$work/pgvs3" --pool-size 64
pgvs3_s3=$gw_s3
mb "$pgvs3_s3" bench
"$bin/pgvs3" lake attach-string --data-dir "$work/pgvs3/data" --bucket bench --endpoint "$pgvs3_s3" >"$work/attach.sql"

# rclone serve s3 over a local directory; its DuckLake catalog is a local DuckDB file.
rclone_port=$(free_port)
mkdir -p "$work/rclone/bench"
rclone serve s3 --auth-key "$AWS_ACCESS_KEY_ID,$AWS_SECRET_ACCESS_KEY" --addr "127.0.0.1:$rclone_port" \
    "$work/rclone" >"$work/rclone.log" 2>&1 &
pids+=($!)
wait_for rclone curl -s -o /dev/null "http://127.0.0.1:$rclone_port/"

# Garage (--with-garage): the same cases as rclone, its DuckLake catalog a local DuckDB file too.
garage_s3=""
[ "$with_garage" = yes ] && start_garage "$work/garage" bench

# The Iceberg origin (a pgvs3 answering like a remote store) and a cache bucket in front of it,
# named like the origin's bucket so Iceberg's absolute s3://warehouse/ paths resolve through both.
start_gateway "$bin/pgvs3" "$work/origin" --simulate-latency "${PGVS3_BENCH_ORIGIN_LATENCY:-20ms}"
origin_s3=$gw_s3
mb "$origin_s3" warehouse
# Two caches, with 8 origin fills at once (the default) and with 32: the cold full scans compare them.
cold_caches=()
for slots in 8 32; do
    # Its origin is a gateway on loopback, which caches reach only when allowed.
    start_gateway "$bin/pgvs3" "$work/cache-$slots" --fill-concurrency "$slots" --origin-allow-local-addresses
    cold_caches+=("[$slots, \"${gw_s3#http://}\"]")
    # The Iceberg cases run through the default one.
    [ "$slots" = 8 ] && cache_s3=${gw_s3#http://}
    "$bin/pgvs3" admin --data-dir "$work/cache-$slots/data" origin put --bucket warehouse --endpoint "$origin_s3" \
        --origin-bucket warehouse --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" \
        --mode write-back --fill-concurrency "$slots" --origin-allow-local-addresses >/dev/null
done

fixture_pairs=()
for name in "${!fixture[@]}"; do fixture_pairs+=("$name=${fixture[$name]}"); done
WORK=$work REPEATS=$repeats SNAPSHOTS=$snapshots OBJECTS=$objects PGVS3_S3=${pgvs3_s3#http://} \
    RCLONE_S3=127.0.0.1:$rclone_port ORIGIN_S3=${origin_s3#http://} CACHE_S3=$cache_s3 \
    LAKE_GROUPS=$groups GARAGE_S3=${garage_s3#http://} GARAGE_KEYS="${garage_keys[*]:-}" COLD_CACHES="[$(IFS=,; echo "${cold_caches[*]}")]" \
    python3 - "${fixture_pairs[@]}" >"$work/config.json" <<'PY'
import json, os, sys
env = os.environ
fixtures = dict(pair.split("=", 1) for pair in sys.argv[1:])
repeats = int(env["REPEATS"])
keys = [env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]]
print(json.dumps({
    "keys": keys,
    "repeats": repeats,
    "groups": env["LAKE_GROUPS"].split(","),
    "objects": json.loads(env["OBJECTS"]),
    "targets": {
        "pgvs3": {"endpoint": env["PGVS3_S3"], "bucket": "bench", "keys": keys, "attach": open(f"{env['WORK']}/attach.sql").read()},
        "rclone": {"endpoint": env["RCLONE_S3"], "bucket": "bench", "keys": keys,
                   "attach": f"ATTACH 'ducklake:{env['WORK']}/rclone-catalog.ducklake' AS lake (DATA_PATH 's3://bench/')"},
    } | ({"garage": {"endpoint": env["GARAGE_S3"], "bucket": "bench", "keys": env["GARAGE_KEYS"].split()[1::2],
                    "attach": f"ATTACH 'ducklake:{env['WORK']}/garage-catalog.ducklake' AS lake (DATA_PATH 's3://bench/')"}}
         if env["GARAGE_S3"] else {}),
    "scan_fixtures": fixtures,
    "ctas_fixtures": fixtures,
    "fixture_sizes": {name: os.path.getsize(path) for name, path in fixtures.items()},
    "iceberg": {"origin": env["ORIGIN_S3"], "cache": env["CACHE_S3"], "snapshots": int(env["SNAPSHOTS"]),
                "cold_caches": json.loads(env["COLD_CACHES"]),
                "repeats": max(1, min(repeats, 3)), "catalog": f"{env['WORK']}/iceberg-catalog.db"},
}, indent=1))
PY
python3 e2e/scripts/lake_bench.py "$work/config.json" "$out/lake.ndjson"

# The machine and the versions next to the figures.
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mode: $([ "$smoke" = yes ] && echo smoke || echo full), $bin/pgvs3, $repeats runs per case"
    echo "cpu: $(nproc) x $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
    echo "memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "load average: $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
    echo "pgvs3: $("$bin/pgvs3" --version) ($(git rev-parse --short HEAD))"
    echo "postgresql: $("$(ls -d /usr/lib/postgresql/*/bin/postgres | sort -V | tail -1)" --version)"
    echo "rclone: $(rclone version | head -1)"
    [ -z "$garage_s3" ] || echo "garage: $("$garage" --version | head -1) (cargo install --locked, rustc 1.95)"
    echo "duckdb: $(python3 -c 'import duckdb; print(duckdb.__version__)'), pyiceberg $(python3 -c 'import pyiceberg; print(pyiceberg.__version__)')"
    echo "iceberg origin: ${PGVS3_BENCH_ORIGIN_LATENCY:-20ms} one-way latency, $snapshots snapshots"
} >"$out/machine.txt"
"$bench_python" e2e/scripts/lake_report.py "$out"
echo "results: $out (${SECONDS}s)" >&2
