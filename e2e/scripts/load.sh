#!/usr/bin/env bash
# Runs pgvs3-loadgen against a fresh gateway on its own embedded PostgreSQL.
#   e2e/scripts/load.sh [--debug] [s3|resp|ojs|cache] [loadgen flags...]
#   e.g. --ops get,put --sizes 4KiB,64MiB --duration 10;  resp --pipeline 1,16;  ojs --capacity;
#   cache --sizes 10MiB --keys 5 --requests 5 --workers 1 (a cache gateway in front of a
#   constrained origin gateway, see start_cache_pair in gateway.sh)
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
case "${1:-}" in s3|resp|ojs|cache) protocol=$1; shift ;; esac

source e2e/scripts/gateway.sh
export PGVS3_ROOT_ACCESS_KEY=LOADGENROOTKEY000001 PGVS3_ROOT_SECRET_KEY=loadgen-secret-key
run_load "$bin/pgvs3" "$bin/pgvs3-loadgen" "$protocol" "$(mktemp -d /tmp/pgvs3-load-XXXXXX)" "$@"
