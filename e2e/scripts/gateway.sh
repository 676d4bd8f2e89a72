# Sourced by the load, paired and bench scripts: gateways on fresh embedded PostgreSQL clusters,
# the load generator against them, and the clean-up of what a script started.

# Processes to stop when the script exits (`trap stop_all EXIT`), then the directory $work.
pids=()
stop_all() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "${work:?}"
}

#   start_gateway PGVS3 DATA_DIR [serve flags...]
# PGVS3 is the gateway's executable. Every listener on an ephemeral loopback port. Sets gw_pid
# (also in pids), gw_s3, gw_metrics, gw_ojs, gw_resp and gw_capacity (the loadgen's --capacity
# flags for this gateway: its database, metrics, pid, and a reaper drain).
start_gateway() {
    local pgvs3=$1 data=$2
    shift 2
    mkdir -p "$data"
    # As root, PostgreSQL runs as an unprivileged user that must be able to enter the directory.
    chmod 755 "$data"
    "$pgvs3" serve --data-dir "$data/data" --s3-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
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
        --capacity-drain "'$pgvs3' admin --data-dir '$data/data' maintenance --run-once --grace 0s")
}

#   start_cache_pair PGVS3 LOADGEN DIR CACHE_BUCKET ORIGIN_BUCKET [origin put flags...]
# Two gateways of PGVS3, each on its own cluster: an origin in DIR/origin that answers like a
# remote store (PGVS3_BENCH_ORIGIN_LATENCY each way, default 20ms; PGVS3_BENCH_ORIGIN_BANDWIDTH
# bytes/s per request, default 50 MiB/s) holding ORIGIN_BUCKET, and a cache in DIR/cache whose
# CACHE_BUCKET fronts it in write-back mode. Sets cache_origin (the origin's S3 endpoint) and
# the gw_* of the cache gateway. Needs PGVS3_ROOT_ACCESS_KEY and PGVS3_ROOT_SECRET_KEY.
start_cache_pair() {
    local pgvs3=$1 loadgen=$2 dir=$3 cache_bucket=$4 origin_bucket=$5
    shift 5
    local keys=(--access-key "$PGVS3_ROOT_ACCESS_KEY" --secret-key "$PGVS3_ROOT_SECRET_KEY")
    mkdir -p "$dir"
    chmod 755 "$dir"
    start_gateway "$pgvs3" "$dir/origin" --simulate-latency "${PGVS3_BENCH_ORIGIN_LATENCY:-20ms}" \
        --simulate-bandwidth "${PGVS3_BENCH_ORIGIN_BANDWIDTH:-52428800}" || return 1
    cache_origin=$gw_s3
    # The origin bucket must exist before the cache verifies it: one small object creates it.
    "$loadgen" s3 --endpoint "$cache_origin" "${keys[@]}" --bucket "$origin_bucket" --ops put --sizes 4KiB \
        --requests 1 --workers 1 >/dev/null || return 1
    start_gateway "$pgvs3" "$dir/cache" || return 1
    "$pgvs3" admin --data-dir "$dir/cache/data" origin put --bucket "$cache_bucket" --endpoint "$cache_origin" \
        --origin-bucket "$origin_bucket" "${keys[@]}" --mode write-back "$@" >/dev/null
}

#   start_target PGVS3 LOADGEN PROTOCOL DIR
# Fresh gateways of PGVS3 for LOADGEN's PROTOCOL cases (s3, resp, ojs, or cache: cold/warm GETs
# and write-back PUTs of 1 MiB and more through a cache bucket in front of a constrained origin,
# see start_cache_pair), their data in DIR. Sets `target` (the loadgen flags that address them)
# and gw_capacity (the cache's, for `cache`); the caller stops them (stop_all). Needs
# PGVS3_ROOT_ACCESS_KEY and PGVS3_ROOT_SECRET_KEY.
start_target() {
    local pgvs3=$1 loadgen=$2 protocol=$3 dir=$4
    local keys=(--access-key "$PGVS3_ROOT_ACCESS_KEY" --secret-key "$PGVS3_ROOT_SECRET_KEY")
    case $protocol in
        cache) start_cache_pair "$pgvs3" "$loadgen" "$dir" loadgen origin --write-back-threshold 1MiB || return 1 ;;
        s3 | resp | ojs) start_gateway "$pgvs3" "$dir" || return 1 ;;
        *) echo "start_target: unknown protocol $protocol" >&2; return 2 ;;
    esac
    case $protocol in
        s3) target=(--endpoint "$gw_s3" "${keys[@]}") ;;
        cache) target=(--endpoint "$gw_s3" "${keys[@]}" --origin-endpoint "$cache_origin" --origin-bucket origin) ;;
        resp) target=(--url "$gw_resp") ;;
        ojs) target=(--url "$gw_ojs") ;;
    esac
}

#   run_load PGVS3 LOADGEN PROTOCOL DIR [loadgen flags...]
# LOADGEN's PROTOCOL cases against fresh gateways of PGVS3 (start_target) whose data lives in DIR,
# stopped and deleted on return. A `--capacity` flag becomes the gateway's capacity flags.
# Returns the load generator's status (2: some request failed).
run_load() (
    pgvs3=$1 loadgen=$2 protocol=$3 work=$4
    shift 4
    pids=()
    trap stop_all EXIT
    start_target "$pgvs3" "$loadgen" "$protocol" "$work" || exit 1
    local flags=()
    for flag in "$@"; do
        if [ "$flag" = --capacity ]; then flags+=("${gw_capacity[@]}"); else flags+=("$flag"); fi
    done
    "$loadgen" "$protocol" "${target[@]}" "${flags[@]}"
)
