# Sourced by the load, paired and bench scripts: gateways on fresh embedded PostgreSQL clusters,
# the load generator against them, and the clean-up of what a script started.

# Processes to stop when the script exits (`trap stop_all EXIT`), then the directory $work.
pids=()
stop_all() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "${work:?}"
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

#   wait_for DESCRIPTION COMMAND...
# Runs COMMAND until it succeeds (60 s at most); else shows the logs in $work and exits.
wait_for() {
    local what=$1
    shift
    for _ in $(seq 1 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "$what did not come up" >&2
    tail -20 "$work"/*.log >&2
    exit 1
}

#   start_garage DIR BUCKET
# Garage, built once into ~/.cache/pgvs3-tools with a target dir of its own that is deleted after
# (its dependencies would double the project's). One node on loopback ports, one zone, a 10 GB
# layout; a key and BUCKET, made with its CLI. Its defaults stand: no fsync of data or metadata
# (like rclone, unlike pgvs3, nothing is durable at the answer). Sets garage (the executable),
# garage_s3 (its endpoint) and garage_keys (the loadgen's --access-key/--secret-key flags).
garage_version=2.5.0
start_garage() {
    local dir=$1 bucket=$2 tools="$HOME/.cache/pgvs3-tools"
    garage="$tools/bin/garage"
    if ! "$garage" --version 2>/dev/null | grep -qwF "$garage_version"; then
        echo "installing garage $garage_version into $tools (cargo install: a long build)" >&2
        nice -n 19 cargo install --locked --root "$tools" --target-dir "$dir-build" "garage@$garage_version"
        rm -rf "$dir-build"
    fi
    mkdir -p "$dir"
    local port rpc_port admin_port
    port=$(free_port) rpc_port=$(free_port) admin_port=$(free_port)
    hex_secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
    cat >"$dir/garage.toml" <<TOML
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "lmdb"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc_port"
rpc_public_addr = "127.0.0.1:$rpc_port"
rpc_secret = "$(hex_secret)"

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$port"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$admin_port"
admin_token = "$(hex_secret)"
TOML
    garage_cli() { "$garage" -c "$dir/garage.toml" "$@"; }
    garage_cli server >"$dir.log" 2>&1 &
    pids+=($!)
    wait_for garage garage_cli status
    garage_cli layout assign -z bench -c 10G "$(garage_cli node id -q | cut -d@ -f1)" >/dev/null
    garage_cli layout apply --version 1 >/dev/null
    local key
    key=$(garage_cli key create bench)
    garage_keys=(--access-key "$(sed -n 's/^Key ID: *//p' <<<"$key")"
        --secret-key "$(sed -n 's/^Secret key: *//p' <<<"$key")")
    garage_cli bucket create "$bucket" >/dev/null
    garage_cli bucket allow --read --write --owner "$bucket" --key bench >/dev/null
    garage_s3="http://127.0.0.1:$port"
    wait_for "garage S3" curl -s -o /dev/null "$garage_s3/"
}

#   start_gateway PGVS3 DATA_DIR [serve flags...]
# PGVS3 is the gateway's executable. Every listener on an ephemeral loopback port. Sets gw_pid
# (also in pids), gw_s3, gw_metrics, gw_ojs, gw_resp, gw_database (a libpq connection string for
# its cluster) and gw_capacity (the loadgen's --capacity flags for this gateway: its database,
# metrics, pid, and a reaper drain).
start_gateway() {
    local pgvs3=$1 data=$2
    shift 2
    mkdir -p "$data"
    # As root, PostgreSQL runs as an unprivileged user that must be able to enter the directory.
    chmod 755 "$data"
    # The load generator's RESP and OJS clients send no credentials (environment, not flags:
    # an older gateway of a paired run ignores them).
    PGVS3_RESP_AUTH=none PGVS3_OJS_AUTH=none \
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
    gw_database="host=$(sed -n 5p "$pid_file") port=$(sed -n 4p "$pid_file") user=pgvs3 dbname=postgres"
    gw_capacity=(--capacity
        --capacity-database-url "$gw_database"
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
    # The origin is a gateway on loopback, which caches reach only when allowed.
    start_gateway "$pgvs3" "$dir/cache" --origin-allow-local-addresses || return 1
    "$pgvs3" admin --data-dir "$dir/cache/data" origin put --bucket "$cache_bucket" --endpoint "$cache_origin" \
        --origin-bucket "$origin_bucket" "${keys[@]}" --mode write-back --origin-allow-local-addresses "$@" >/dev/null
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
