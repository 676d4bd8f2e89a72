#!/usr/bin/env bash
# Small requests beside large uploads, on one fresh gateway: do 4 KiB GETs keep flowing while
# 10 MiB PUTs stream in? (the fairness of S3 admission, docs/operations.md "Admission control").
#   e2e/scripts/mixed.sh PGVS3 LOADGEN [--get-workers 300] [--put-workers 50] [--seconds 10] [--resp-waiters 0] [-- serve flags]
# --resp-waiters N keeps N RESP clients blocked in `BLPOP key 0` throughout (issue 30: a
# blocked client must cost a registration, not a slot or a database connection).
# Prints each side's loadgen table (rate, latency, errors by kind: `503 SlowDown` is admission
# turning requests away).
set -euo pipefail
cd "$(dirname "$0")/../.."
pgvs3=$(realpath "$1") loadgen=$(realpath "$2")
shift 2
get_workers=300 put_workers=50 seconds=10 resp_waiters=0
while [ $# -gt 0 ]; do
    case "$1" in
        --get-workers) get_workers=$2; shift 2 ;;
        --put-workers) put_workers=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --resp-waiters) resp_waiters=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "unknown flag $1" >&2; exit 2 ;;
    esac
done
source e2e/scripts/gateway.sh
export PGVS3_ROOT_ACCESS_KEY=LOADGENROOTKEY000001 PGVS3_ROOT_SECRET_KEY=loadgen-secret-key
export AWS_ACCESS_KEY_ID=$PGVS3_ROOT_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$PGVS3_ROOT_SECRET_KEY
work=$(mktemp -d /tmp/pgvs3-mixed-XXXXXX) dir=$work
trap stop_all EXIT
start_gateway "$pgvs3" "$dir" "$@"
if [ "$resp_waiters" -gt 0 ]; then
    python3 - "$gw_resp" "$resp_waiters" <<'EOF' &
import socket, sys, time, urllib.parse
url, count = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2])
waiters = []
for _ in range(count):
    waiter = socket.create_connection((url.hostname, url.port))
    waiter.sendall(b"*3\r\n$5\r\nBLPOP\r\n$7\r\nwaiters\r\n$1\r\n0\r\n")
    waiters.append(waiter)
print(f"{count} RESP clients blocked in BLPOP", flush=True)
time.sleep(3600)
EOF
    pids+=($!)
    sleep 2
fi
# The PUTs run past both ends of the GETs' window (their seeding included).
"$loadgen" s3 --endpoint "$gw_s3" --duration "$seconds" --warmup 1 --bucket small --ops get --sizes 4KiB --keys 1000 --workers "$get_workers" >"$dir/get.txt" 2>&1 &
gets=$!
"$loadgen" s3 --endpoint "$gw_s3" --duration "$((seconds + 10))" --warmup 0 --bucket large --ops put --sizes 10MiB --keys 50 --workers "$put_workers" >"$dir/put.txt" 2>&1 &
puts=$!
status=0
wait "$gets" || status=$?
wait "$puts" || status=$?
echo "== 4 KiB GET, $get_workers workers, beside 10 MiB PUTs and $resp_waiters blocked RESP clients"; cat "$dir/get.txt"
echo "== 10 MiB PUT, $put_workers workers"; cat "$dir/put.txt"
exit "$status"
