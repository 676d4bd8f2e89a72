#!/usr/bin/env bash
# The origin cache against a constrained origin (the seed's latency-proxy table):
#   e2e/scripts/cache-bench.sh [SIZES] [REQUESTS]      e.g. 10MiB,100MiB 5
#   PGVS3_BIN_DIR=/path/to/release e2e/scripts/cache-bench.sh ...   (prebuilt binaries, no build)
# Origin: a pgvs3 gateway answering with 20 ms one-way latency and 50 MiB/s per request.
# Cache: a second pgvs3 gateway (own embedded PostgreSQL) whose bucket fronts the origin's.
# Cases per size, one worker: direct origin GET, the loadgen's cache cases (cold GET: each key
# read once through the cache after it was written straight to the origin; warm GET; the cache's
# write-back PUT acknowledgement), direct origin PUT; plus reads of an ordinary bucket of the
# cache's gateway (the local limit for warm reads). Prints p50s and the ratios the cache issue
# targets.
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes="${1:-10MiB,100MiB}"
requests="${2:-5}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
# PGVS3_BIN_DIR: run prebuilt pgvs3 and pgvs3-loadgen from there instead (A/B of two builds).
if [[ -n "${PGVS3_BIN_DIR:-}" ]]; then
    bin=$PGVS3_BIN_DIR
else
    cargo build --release --locked --bin pgvs3 --bin pgvs3-loadgen
    bin="$CARGO_TARGET_DIR/release"
fi

work=$(mktemp -d /tmp/pgvs3-cache-bench-XXXXXX)
chmod 755 "$work"
export PGVS3_ROOT_ACCESS_KEY=BENCHROOTKEY00000001 PGVS3_ROOT_SECRET_KEY=bench-secret-key
source e2e/scripts/gateway.sh
trap stop_all EXIT

start_cache_pair "$bin/pgvs3" "$bin/pgvs3-loadgen" "$work" bench-cache bench
origin=$cache_origin
cache=$gw_s3
keys=(--access-key "$PGVS3_ROOT_ACCESS_KEY" --secret-key "$PGVS3_ROOT_SECRET_KEY")

run() {
    local label=$1 endpoint=$2 bucket=$3
    shift 3
    echo "# $label" >&2
    "$bin/pgvs3-loadgen" s3 --endpoint "$endpoint" "${keys[@]}" --bucket "$bucket" --sizes "$sizes" \
        --workers 1 --keys "$requests" --requests "$requests" --timeout 600 --json "$work/$label.ndjson" "$@" >&2
}
run direct-get "$origin" bench --ops get
# The cache tier's own cases: cold reads (written straight to the origin, each key read once
# through the cache: every read is a miss), warm reads (the same after one pass), write-back PUTs.
echo "# cache" >&2
"$bin/pgvs3-loadgen" cache --endpoint "$cache" "${keys[@]}" --bucket bench-cache --origin-endpoint "$origin" \
    --origin-bucket bench --ops cold-get,warm-get,write-back-put --sizes "$sizes" --keys "$requests" \
    --requests "$requests" --workers 1 --timeout 600 --json "$work/cache.ndjson" >&2
# The same reads from an ordinary bucket of the cache's gateway: the local limit warm reads approach.
run local-get "$cache" plain --ops get
run direct-put "$origin" bench --ops put

python3 - "$work" "$sizes" <<'PY'
import json, sys, pathlib
work, sizes = pathlib.Path(sys.argv[1]), sys.argv[2].split(",")
p50 = {}
for file in ["direct-get", "cache", "local-get", "direct-put"]:
    for line in (work / f"{file}.ndjson").read_text().splitlines():
        record = json.loads(line)
        # "s3 get 10MiB" or "cache cold-get 10MiB": label by operation for the cache's cases.
        words = record["case"].split()
        label = words[1] if words[0] == "cache" else file
        p50[(label, words[-1])] = record["result"]["p50_ms"]
print(f"{'size':<8} {'direct GET':>11} {'cold GET':>10} {'warm GET':>10} {'local GET':>10} {'direct PUT':>11}"
      f" {'write-back':>11} {'warm x':>8} {'cold/direct':>12} {'put x':>7}")
for size in sizes:
    g = lambda label: p50[(label, size)]
    print(f"{size:<8} {g('direct-get'):>9.1f}ms {g('cold-get'):>8.1f}ms {g('warm-get'):>8.1f}ms"
          f" {g('local-get'):>8.1f}ms {g('direct-put'):>9.1f}ms {g('write-back-put'):>9.1f}ms"
          f" {g('direct-get') / g('warm-get'):>7.1f}x {g('cold-get') / g('direct-get'):>12.2f}"
          f" {g('direct-put') / g('write-back-put'):>6.1f}x")
PY
