#!/usr/bin/env bash
# The real-node tier: gateway and operator pods that really run. A one-node Kubernetes from
# ../shared/kube/node (containerd, kubelet, scheduler, kube-proxy, bridge CNI, cluster DNS) on the
# control plane of ../shared/kube, images built from this checkout's debug binaries, then
# e2e/node-tier/scenario.sh (the chart, PostgreSQL primary + hot standby, two GatewayPools,
# Buckets, an OriginCache, S3/RESP/OJS from a pod, workload identity (curl, boto3 and
# aws-sdk-s3 with a ServiceAccount's token), the database password and the TLS certificate
# rotated under load, a gateway and the operator killed, a capacity run, scaling, autoscaling,
# a failover with the primary's Service moved, PodSecurity restricted). Everything is torn down on
# exit, also on failure, and the host must be as before. About 4-6 minutes; docs/operator.md says
# what it checks.
#   env: PGVS3_KUBE_SOURCE (default /work/shared/kube; its node/ is the kit),
#        PGVS3_KUBE_ASSETS (default ~/.cache/pgvs3-kube), PGVS3_HELM (default ~/.cache/pgvs3-tools/helm),
#        NODE_TIER_WAIT_SCALE (default 3: every wait's bound, a quiet machine's, times this)
# Where the kit is absent it says "not run" and exits 0; where it is present any failure fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"

source_dir="${PGVS3_KUBE_SOURCE:-/work/shared/kube}"
kit="$source_dir/node"
if [ ! -x "$kit/start-node.sh" ] || [ ! -x "$source_dir/start-apiserver.sh" ]; then
    echo "node tier: not run: no kube-node kit at $kit (set PGVS3_KUBE_SOURCE to a shared/kube with node/)"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "node tier: the kube-node kit needs root" >&2; exit 1; }
assets="${PGVS3_KUBE_ASSETS:-$HOME/.cache/pgvs3-kube}"
helm="${PGVS3_HELM:-$HOME/.cache/pgvs3-tools/helm}"
[ -x "$helm" ] || { echo "the tier needs helm at $helm (.ci/run installs it) or PGVS3_HELM" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "the tier needs kubectl on PATH" >&2; exit 1; }
# etcd for the control plane, and iptables before the host's state is taken below: the kit's
# start-node.sh installs iptables where it is missing, and on a fresh machine the "before" would
# then have no iptables tables at all while the "after" lists their (empty, ACCEPT) chains.
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi

ms() { date +%s%3N; }
export NODE_TIER_T0; NODE_TIER_T0=$(ms); TS=$NODE_TIER_T0
# quiet COMMAND...: its output only when it fails
quiet() { local log; log=$(mktemp); "$@" >"$log" 2>&1 || { local rc=$?; cat "$log" >&2; rm -f "$log"; return "$rc"; }; rm -f "$log"; }
step() { local now; now=$(ms); printf '[node-tier %6.1fs] %-58s %5.1fs\n' "$(( now - NODE_TIER_T0 ))e-3" "$*" "$(( now - TS ))e-3"; TS=$now; }

# The binaries `cargo test --workspace` builds (a no-op after .ci/run's build): a `cargo build -p`
# of either package would unify features differently and rebuild much of the dependency tree.
cargo test -q --locked --workspace --no-run
gateway="$CARGO_TARGET_DIR/debug/pgvs3" operator="$CARGO_TARGET_DIR/debug/pgvs3-operator"
# The load generator of the capacity run: .ci/run's `cargo test --workspace` built it already; a
# `cargo build -p pgvs3-e2e` would unify features differently and rebuild much, so only if absent.
loadgen="$CARGO_TARGET_DIR/debug/pgvs3-loadgen"
[ -x "$loadgen" ] || cargo build -q --locked -p pgvs3-e2e --bin pgvs3-loadgen
# aws-sdk-s3 with a ServiceAccount's token (the workload identity's pods): built with the tests too
web_identity="$CARGO_TARGET_DIR/debug/pgvs3-web-identity"
kube=$("$source_dir/unpack.sh" "$assets")
step "binaries built, kube binaries unpacked"

# What the host looks like before (ci-example.sh's check): links, routes, every iptables table,
# kubepods cgroups, the kernel tunables the kubelet touches. It must look the same after teardown.
host_state() {
    { ip -br link | awk '{print $1}' | grep -v '^veth'; ip route
      for t in filter nat mangle raw; do iptables -w -t $t -S; ip6tables -w -t $t -S; done 2>/dev/null | grep -v '^# Warning'
      ls -d /sys/fs/cgroup/*/kubepods 2>/dev/null
      sysctl vm.overcommit_memory kernel.panic kernel.panic_on_oops; } 2>&1 | sort
}
before=$(host_state)
run=$(mktemp -d /tmp/nt.XXXXXX)
teardown() {
    local rc=$? t; t=$(ms)
    if [ "$rc" != 0 ] && [ -f "$run/kubeconfig" ]; then
        echo "--- node tier diagnostics" >&2
        export KUBECONFIG="$run/kubeconfig"
        # Bounded: after a TERM the kubelet may be gone, and a log request to it would hang.
        local bounded=(kubectl --request-timeout=10s)
        "${bounded[@]}" get pgvs3,pods,services -A -o wide >&2 || true
        "${bounded[@]}" get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -n 25 >&2 || true
        timeout 15 "${bounded[@]}" -n pgvs3-system logs -l app.kubernetes.io/name=pgvs3-operator --tail=30 --prefix >&2 || true
        timeout 15 "${bounded[@]}" -n pgvs3-demo logs -l app.kubernetes.io/name=pgvs3-gateway --tail=10 --prefix | grep -v AWS_SECRET_ACCESS_KEY >&2 || true
    fi
    # the scenario's failures once more, after the diagnostics: the last lines of a log say why
    [ ! -s "$run/failures" ] || cat "$run/failures" >&2
    "$kit/stop-node.sh" "$run" >/dev/null 2>&1
    echo "[node-tier] node stopped in $(( ($(ms) - t) / 1000 ))s"
    "$kube/stop-apiserver.sh" "$run" >/dev/null 2>&1
    rm -rf "$run"
    if [ "$before" != "$(host_state)" ]; then
        echo "node tier: the host differs after teardown:" >&2
        diff <(echo "$before") <(host_state) >&2 || true
        rc=1
    fi
    echo "[node-tier] teardown $(( ($(ms) - t) / 1000 ))s; total $(( ($(ms) - NODE_TIER_T0) / 1000 ))s; $([ "$rc" = 0 ] && echo passed || echo FAILED)"
    exit "$rc"
}
trap teardown EXIT
trap 'exit 143' INT TERM  # a CI timeout's signal still tears down

WITH_KCM=1 quiet "$kube/start-apiserver.sh" "$run"
step "control plane (etcd, kube-apiserver, kube-controller-manager)"
quiet "$kit/start-node.sh" "$run"
export NODE_ENV="$run/node/node.env"
set -a; . "$NODE_ENV"; set +a
step "node Ready"

# Images from this checkout's binaries (stripped of debug info: same code, a tenth of the size).
quiet "$kit/build-postgres-image.sh" &
postgres_image=$!
# The workload identity's pod runs boto3 as an application would (e2e/node-tier/sdk.py): the
# clients venv's Python at its host path (it finds its standard library relative to itself), the
# standard library without its tests, GUI and tools, the extension modules boto3 can load (with
# the libraries they link), and boto3 with its dependencies only (PYTHONPATH): about 125 MB
# unpacked (standard library 54, boto3 and its dependencies 34, libpython 23).
# In the background, as the PostgreSQL image.
sdk_image() {
    venv="${PGVS3_TOOLS_DIR:-$HOME/.cache/pgvs3-tools}/clients-venv"
    [ -x "$venv/bin/python3" ] || { echo "the tier needs the clients venv at $venv (.ci/run installs it)" >&2; return 1; }
    read -r stdlib site <<<"$("$venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_path("stdlib"), sysconfig.get_path("purelib"))')"
    mkdir "$run/sdk"
    tar -C "$stdlib" --exclude=./test --exclude=./site-packages --exclude=./lib-dynload --exclude=./idlelib \
        --exclude=./tkinter --exclude=./turtledemo --exclude=./lib2to3 --exclude=./ensurepip \
        --exclude='./config-*' -cf - . | tar -C "$run/sdk" -xf -
    modules=$(find "$stdlib/lib-dynload" -name '*.so' ! -name '_test*' ! -name 'xx*' ! -name '_ctypes_test*' \
        ! -name '_tkinter*' ! -name '_curses*' ! -name '_sqlite3*' ! -name 'readline*' ! -name 'nis*' \
        ! -name '_dbm*' ! -name '_gdbm*' ! -name 'ossaudiodev*' ! -name 'spwd*' ! -name '_crypt*')
    extra="$run/sdk:$stdlib"
    for m in boto3 botocore s3transfer jmespath dateutil urllib3 six.py; do extra="$extra $site/$m:/opt/sdk/$m"; done
    # aws-sdk-s3's check (pgvs3-web-identity), stripped of debug info as the other images' binaries,
    # at a path that stays the same in the image (KEEP_PATHS) and outside /tmp (the pods' emptyDir)
    local stripped="$CARGO_TARGET_DIR/node-tier-sdk/pgvs3-web-identity"
    mkdir -p "${stripped%/*}"
    strip --strip-debug -o "$stripped" "$web_identity"
    # shellcheck disable=SC2086 # $modules: one path per word
    ENTRYPOINT=/bin/sleep KEEP_PATHS=1 EXTRA="$extra" IMAGE_ENV=PYTHONPATH=/opt/sdk quiet "$kit/build-image.sh" \
        localhost/pgvs3-node-tier/sdk:1 /bin/busybox "$(command -v curl)" "$(realpath "$venv/bin/python3")" \
        "$stripped" $modules
}
sdk_image &
sdk=$!
STRIP=1 CMD='["serve"]' quiet "$kit/build-image.sh" ghcr.io/pgvs3/pgvs3:node-tier "$gateway"
STRIP=1 CMD='["run"]' quiet "$kit/build-image.sh" ghcr.io/pgvs3/pgvs3-operator:node-tier "$operator"
ENTRYPOINT=/bin/sleep STRIP=1 quiet "$kit/build-image.sh" localhost/pgvs3-node-tier/client:1 /bin/busybox \
    "$(command -v curl)" "$(command -v redis-cli)" "$loadgen"
wait "$postgres_image"
wait "$sdk"
step "images: gateway, operator, PostgreSQL, client, SDK client"

NODE_TIER_FAILURES="$run/failures" HELM="$helm" timeout $(( 480 * ${NODE_TIER_WAIT_SCALE:-3} )) e2e/node-tier/scenario.sh .
