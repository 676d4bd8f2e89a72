#!/usr/bin/env bash
# redis-benchmark against the pgvs3 gateway and, side by side in the same run, against a local
# redis-server with `appendfsync always` (the durable peer) and one without persistence
# (in-memory). GET/SET with 4 KiB values at -c 1, -c 64 and -c 64 -P 16.
#
# Usage: scripts/resp-bench.sh [requests-per-case]   (needs redis-server and redis-tools)
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS="${1:-20000}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
WORK="$(mktemp -d /tmp/pgvs3-resp-bench.XXXXXX)"
# As root, the embedded PostgreSQL runs as an unprivileged user that must reach its data dir.
chmod 755 "$WORK"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in redis-server redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

cargo build --release -p pgvs3-gateway --bin pgvs3
GW_PORT=16380; DURABLE_PORT=16381; MEMORY_PORT=16382

# The embedded PostgreSQL refuses to run as root; pgvs3 handles that itself.
"$CARGO_TARGET_DIR/release/pgvs3" serve --data-dir "$WORK/pgvs3" --s3-addr 127.0.0.1:0 \
    --admin-addr 127.0.0.1:0 --resp-addr "127.0.0.1:$GW_PORT" --pool-size 64 >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)
mkdir -p "$WORK/durable" "$WORK/memory"
redis-server --port "$DURABLE_PORT" --dir "$WORK/durable" --appendonly yes --appendfsync always \
    --save "" --daemonize no >"$WORK/durable.log" 2>&1 &
PIDS+=($!)
redis-server --port "$MEMORY_PORT" --dir "$WORK/memory" --appendonly no --save "" \
    --daemonize no >"$WORK/memory.log" 2>&1 &
PIDS+=($!)

for port in $GW_PORT $DURABLE_PORT $MEMORY_PORT; do
    up=no
    for _ in $(seq 1 600); do
        if redis-cli -p "$port" PING 2>/dev/null | grep -q PONG; then up=yes; break; fi
        sleep 0.1
    done
    [ "$up" = yes ] || { echo "nothing answers on port $port" >&2; tail -20 "$WORK"/*.log >&2; exit 1; }
done

run() { # port clients pipeline test → requests per second
    # One client waits for each durable write: a tenth of the requests is plenty.
    local requests=$REQUESTS
    [ "$2" = 1 ] && requests=$((REQUESTS / 10))
    redis-benchmark -p "$1" -c "$2" -P "$3" -t "$4" -d 4096 -r 100000 -n "$requests" --csv 2>/dev/null \
        | awk -F'","' 'NR == 2 { print int($2) }'
}

printf '| case | pgvs3 | redis appendfsync always | redis in-memory | pgvs3 / durable | pgvs3 / in-memory |\n'
printf '|---|---:|---:|---:|---:|---:|\n'
for test in set get; do
    for shape in "1 1" "64 1" "64 16"; do
        read -r clients pipeline <<<"$shape"
        gw=$(run $GW_PORT "$clients" "$pipeline" "$test")
        durable=$(run $DURABLE_PORT "$clients" "$pipeline" "$test")
        memory=$(run $MEMORY_PORT "$clients" "$pipeline" "$test")
        printf '| %s 4 KiB -c %s -P %s | %s | %s | %s | %.2f | %.2f |\n' "${test^^}" "$clients" "$pipeline" \
            "$gw" "$durable" "$memory" "$(echo "$gw / $durable" | bc -l)" "$(echo "$gw / $memory" | bc -l)"
    done
done
