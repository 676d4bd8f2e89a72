#!/usr/bin/env bash
# Runs pgvs3-loadgen against a fresh gateway on its own embedded PostgreSQL.
#   e2e/scripts/load.sh [--debug] [s3|resp|ojs] [loadgen flags...]
#   e.g. --ops get,put --sizes 4KiB,64MiB --duration 10;  resp --pipeline 1,16;  ojs --capacity
# The endpoint (and, with --capacity, the gateway's database, metrics, pid and reaper drain) are
# filled in. A release build unless --debug: then the binaries `cargo test --workspace` builds
# (what CI's smoke uses, so it builds nothing more).
set -euo pipefail
cd "$(dirname "$0")/../.."
# `--before-bin A --after-bin B`: the paired regression gate instead of one run.
case " $* " in *" --before-bin "*|*" --after-bin "*) exec e2e/scripts/paired.sh "$@" ;; esac
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
if [ "${1:-}" = --debug ]; then
    shift
    cargo test --workspace --locked --no-run -q
    bin="$CARGO_TARGET_DIR/debug"
else
    cargo build --release --locked --bin pgvs3 --bin pgvs3-loadgen
    bin="$CARGO_TARGET_DIR/release"
fi
protocol=s3
case "${1:-}" in s3|resp|ojs) protocol=$1; shift ;; esac
flags=()
capacity=no
for flag in "$@"; do
    if [ "$flag" = --capacity ]; then capacity=yes; else flags+=("$flag"); fi
done

work=$(mktemp -d /tmp/pgvs3-load-XXXXXX)
source e2e/scripts/gateway.sh
trap stop_all EXIT
export PGVS3_ROOT_ACCESS_KEY=LOADGENROOTKEY000001 PGVS3_ROOT_SECRET_KEY=loadgen-secret-key
start_gateway "$bin" "$work"
[ "$capacity" = yes ] && flags+=("${gw_capacity[@]}")
case $protocol in
    s3) target=(--endpoint "$gw_s3" --access-key "$PGVS3_ROOT_ACCESS_KEY" --secret-key "$PGVS3_ROOT_SECRET_KEY") ;;
    resp) target=(--url "$gw_resp") ;;
    ojs) target=(--url "$gw_ojs") ;;
esac
"$bin/pgvs3-loadgen" "$protocol" "${target[@]}" "${flags[@]}"
