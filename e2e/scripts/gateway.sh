# Sourced by the load and bench scripts: gateways on fresh embedded PostgreSQL clusters, and the
# clean-up of what a script started.

# Processes to stop when the script exits (`trap stop_all EXIT`), then the directory $work.
pids=()
stop_all() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "${work:?}"
}

#   start_gateway BIN DATA_DIR [serve flags...]
# Every listener on an ephemeral loopback port. Sets gw_pid (also in pids), gw_s3, gw_metrics,
# gw_ojs, gw_resp and gw_capacity (the loadgen's --capacity flags for this gateway: its
# database, metrics, pid, and a reaper drain).
start_gateway() {
    local bin=$1 data=$2
    shift 2
    mkdir -p "$data"
    # As root, PostgreSQL runs as an unprivileged user that must be able to enter the directory.
    chmod 755 "$data"
    "$bin/pgvs3" serve --data-dir "$data/data" --s3-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --resp-addr 127.0.0.1:0 --ojs-addr 127.0.0.1:0 "$@" >"$data/serve.log" 2>&1 &
    gw_pid=$!
    pids+=("$gw_pid")
    local line=""
    for _ in $(seq 1 600); do
        line=$(grep -s -m1 '^pgvs3 S3 endpoint:' "$data/serve.log" || true)
        [ -n "$line" ] && break
        kill -0 "$gw_pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$line" ] || { echo "the gateway did not start:" >&2; cat "$data/serve.log" >&2; return 1; }
    gw_s3=$(sed 's/^pgvs3 S3 endpoint: \(http:[^ ]*\).*/\1/' <<<"$line")
    gw_metrics=$(sed 's/.*(metrics: \(http:[^)]*\)).*/\1/' <<<"$line")
    gw_ojs=$(sed -n 's/.*OJS: \(http:[^ ]*\).*/\1/p' <<<"$line")
    gw_resp=$(sed -n 's/^pgvs3 RESP endpoint: \(redis:[^ ]*\).*/\1/p' "$data/serve.log")
    # The cluster's port and socket directory, from its postmaster.pid (lines 4 and 5).
    local pid_file="$data/data/pg/postmaster.pid"
    gw_capacity=(--capacity
        --capacity-database-url "host=$(sed -n 5p "$pid_file") port=$(sed -n 4p "$pid_file") user=pgvs3 dbname=postgres"
        --capacity-metrics-url "$gw_metrics" --capacity-gateway-pid "$gw_pid"
        --capacity-drain "'$bin/pgvs3' admin --data-dir '$data/data' maintenance --run-once --grace 0s")
}
