#!/usr/bin/env bash
# Runs pgvs3-loadgen against a fresh release gateway on its own embedded PostgreSQL.
#   e2e/scripts/load.sh [loadgen s3 flags...]     e.g. --ops get,put --sizes 4KiB,64MiB --duration 10
set -euo pipefail
cd "$(dirname "$0")/../.."
# `--before-bin A --after-bin B`: the paired regression gate instead of one run.
case " $* " in *" --before-bin "*|*" --after-bin "*) exec e2e/scripts/paired.sh "$@" ;; esac
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
cargo build --release --locked --bin pgvs3 --bin pgvs3-loadgen
bin="$CARGO_TARGET_DIR/release"

data_dir=$(mktemp -d /tmp/pgvs3-load-XXXXXX)
# As root, PostgreSQL runs as `postgres`, which must be able to enter the directory.
chmod 755 "$data_dir"
log="$data_dir/serve.log"
export PGVS3_ROOT_ACCESS_KEY=LOADGENROOTKEY000001 PGVS3_ROOT_SECRET_KEY=loadgen-secret-key
"$bin/pgvs3" serve --data-dir "$data_dir/data" --s3-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 >"$log" 2>&1 &
serve_pid=$!
trap 'kill -TERM $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null; rm -rf "$data_dir"' EXIT
for _ in $(seq 1 600); do
    endpoint=$(sed -n 's/^pgvs3 S3 endpoint: \(http:[^ ]*\).*/\1/p' "$log")
    [ -n "$endpoint" ] && break
    kill -0 $serve_pid 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
done
[ -n "$endpoint" ] || { echo "gateway did not start"; cat "$log"; exit 1; }
"$bin/pgvs3-loadgen" s3 --endpoint "$endpoint" --access-key "$PGVS3_ROOT_ACCESS_KEY" \
    --secret-key "$PGVS3_ROOT_SECRET_KEY" "$@"
