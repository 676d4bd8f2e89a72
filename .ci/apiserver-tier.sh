#!/usr/bin/env bash
# The operator's real-apiserver tier (operator/tests/apiserver*.rs): etcd + kube-apiserver +
# kube-controller-manager from ../shared/kube, the operator process as the chart's
# ServiceAccount, a real PostgreSQL and real gateway processes; and the chart as helm renders
# it (operator/tests/operator/chart.rs). A few minutes.
#   env: PGVS3_KUBE_SOURCE (default /work/shared/kube), PGVS3_KUBE_ASSETS (default ~/.cache/pgvs3-kube),
#        PGVS3_TIER_WAIT (seconds a scenario waits for a condition before it fails, printing the
#        pgvs3 resources' conditions and the latest Events; default 180: the tier runs on two
#        cores shared with builds), PGVS3_TIER_TIMEOUT (seconds for the whole tier, default 1800)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"

source_dir="${PGVS3_KUBE_SOURCE:-/work/shared/kube}"
assets="${PGVS3_KUBE_ASSETS:-$HOME/.cache/pgvs3-kube}"
# Unpacked once; unpack.sh skips binaries whose digest already matches.
"$source_dir/unpack.sh" "$assets" >/dev/null
if ! command -v etcd >/dev/null 2>&1; then
    echo "installing etcd-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq etcd-server >/dev/null
fi
command -v kubectl >/dev/null || { echo "the tier needs kubectl on PATH" >&2; exit 1; }
helm="${PGVS3_HELM:-$HOME/.cache/pgvs3-tools/helm}"
[ -x "$helm" ] || { echo "the tier needs helm at $helm (.ci/run installs it) or PGVS3_HELM" >&2; exit 1; }

# The tier is the ignored tests of the operator's test binary (without PGVS3_KUBE_ASSETS they
# report themselves as not run); it also runs the gateway binary as a process. Both are built by
# `cargo test --workspace` (nothing to build after CI's build): with `-p pgvs3-operator` cargo
# would unify features differently and rebuild much of the tree.
PGVS3_KUBE_ASSETS="$assets" PGVS3_HELM="$helm" timeout "${PGVS3_TIER_TIMEOUT:-1800}" \
    cargo test -q --locked --workspace --test operator -- --ignored --test-threads=2
