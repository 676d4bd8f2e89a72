#!/usr/bin/env bash
# The regression gate: the same loadgen cases against two gateway binaries, each run on fresh
# embedded PostgreSQL clusters of its own, alternating which goes first, several times.
#   e2e/scripts/paired.sh --before-bin A --after-bin B [--protocols s3,resp,ojs,cache]
#       [--repeats 4] [--seconds 5] [--warmup 2] [--out DIR] [--smoke]
#       [--s3 FLAGS] [--resp FLAGS] [--ojs FLAGS] [--cache FLAGS]
# Case groups per protocol (each group is one `just load PROTOCOL FLAGS` run: run_load in
# gateway.sh, a fresh gateway, or for `cache` a cache gateway in front of a constrained origin
# gateway, both of the side's binary):
#   s3:    put, get, head, list of 4 KiB at 16 workers; put, get of 10 MiB at 4 workers
#   resp:  set, get, mget, incr of 4 KiB at 16 connections, pipeline depth 1 and 16
#   ojs:   enqueue, batch enqueue of 100, fetch+ack cycle at 16 workers
#   cache: cold GET, warm GET, write-back PUT of 10 MiB, 8 requests each, one worker
# `--s3 "FLAGS"` (and --resp, --ojs, --cache) replaces that protocol's groups with one group of
# these loadgen flags. Each round runs every group on both sides back to back, the first side
# alternating from round to round (keep --repeats even: each side goes first equally often). Per case (path) it reports the median p50 and rate of each side
# and their change, and fails a path whose median p50 rose more than 20% or whose median rate fell
# more than 20%, that had any error, or that is missing from any run, naming each failing path.
# Writes DIR/paired.json (binaries' and payloads' SHA-256, every group's flags, every run's
# figures, failed gates).
# --smoke: a second of debug-built load per protocol (CI): the harness and every path are checked,
# errors and missing paths fail, performance changes are reported but not gated.
set -euo pipefail
cd "$(dirname "$0")/../.."
usage="usage: $0 --before-bin A --after-bin B [--protocols s3,resp,ojs,cache] [--repeats N] [--seconds S]
    [--warmup S] [--out DIR] [--smoke] [--s3|--resp|--ojs|--cache \"LOADGEN FLAGS\"]"
before="" after="" repeats=4 seconds=5 warmup=2 out="" smoke=no protocols=s3,resp,ojs,cache
declare -A override=()
while [ $# -gt 0 ]; do
    case "$1" in
        --before-bin) before=$2; shift 2 ;;
        --after-bin) after=$2; shift 2 ;;
        --protocols) protocols=$2; shift 2 ;;
        --repeats) repeats=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --smoke) smoke=yes; shift ;;
        --s3 | --resp | --ojs | --cache) override[${1#--}]=$2; shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
[ -x "$before" ] && [ -x "$after" ] || { echo "$usage" >&2; exit 2; }
before=$(realpath "$before") after=$(realpath "$after")

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
if [ "$smoke" = yes ]; then
    # The loadgen `cargo test --workspace` builds (nothing to build after CI's test run).
    cargo test --workspace --locked --no-run -q
    loadgen="$CARGO_TARGET_DIR/debug/pgvs3-loadgen"
    seconds=0.3 warmup=0 workers=2 keys=20 large=1MiB large_workers=2 large_keys=2 prefill=1000 cached=2
else
    cargo build --release --locked --bin pgvs3-loadgen
    loadgen="$CARGO_TARGET_DIR/release/pgvs3-loadgen"
    # A fetch+ack cycle must not drain its queue: room for 4,000 jobs a second.
    prefill=$(awk -v s="$seconds" -v w="$warmup" 'BEGIN { n = int((s + w) * 4000); print (n > 20000 ? n : 20000) }')
    workers=16 keys=1000 large=10MiB large_workers=4 large_keys=8 cached=8
fi
groups=("s3 --ops put,get,head,list --sizes 4KiB --workers $workers --keys $keys"
    "s3 --ops put,get --sizes $large --workers $large_workers --keys $large_keys --timeout 300"
    "resp --ops set,get,mget,incr --sizes 4KiB --pipeline 1,16 --workers $workers --keys $((keys * 10))"
    "ojs --ops enqueue,batch,cycle --workers $workers --prefill $prefill"
    "cache --ops cold-get,warm-get,write-back-put --sizes $large --keys $cached --requests $cached --workers 1 --timeout 600")
# Keep the chosen protocols' groups, each replaced by its override if one was given.
chosen=()
for protocol in ${protocols//,/ }; do
    case $protocol in s3 | resp | ojs | cache) ;; *) echo "unknown protocol $protocol; $usage" >&2; exit 2 ;; esac
    if [ -n "${override[$protocol]:-}" ]; then
        chosen+=("$protocol ${override[$protocol]}")
    else
        for group in "${groups[@]}"; do [ "${group%% *}" = "$protocol" ] && chosen+=("$group"); done
    fi
done
timing=(--duration "$seconds" --warmup "$warmup")

out=${out:-$(mktemp -d /tmp/pgvs3-paired-XXXXXX)}
mkdir -p "$out"
[ -e "$out/paired.json" ] && { echo "$out/paired.json exists; choose a fresh --out" >&2; exit 2; }
export PGVS3_ROOT_ACCESS_KEY=PAIREDROOTKEY0000001 PGVS3_ROOT_SECRET_KEY=paired-secret-key
source e2e/scripts/gateway.sh

# One run: group $3 of binary $1's side ($2) in round $4, on fresh gateways; its status is kept
# (a load generator that stopped early leaves paths missing, which the report fails).
run_side() {
    local pgvs3=$1 side=$2 index=$3 round=$4
    local status=0 flags
    read -r -a flags <<<"${chosen[$index]}"
    echo "# round $round, $side: ${chosen[$index]}" >&2
    run_load "$pgvs3" "$loadgen" "${flags[0]}" "$(mktemp -d /tmp/pgvs3-paired-run-XXXXXX)" "${flags[@]:1}" \
        "${timing[@]}" --json "$out/$side-$round-$index.ndjson" >&2 || status=$?
    printf '%s\t%s\t%s\t%s\n' "$side" "$round" "$index" "$status" >>"$out/runs.tsv"
}
for round in $(seq 1 "$repeats"); do
    for index in "${!chosen[@]}"; do
        if [ $((round % 2)) -eq 1 ]; then
            run_side "$before" before "$index" "$round"; run_side "$after" after "$index" "$round"
        else
            run_side "$after" after "$index" "$round"; run_side "$before" before "$index" "$round"
        fi
    done
done

python3 e2e/scripts/paired_report.py "$out" --before "$before" --after "$after" --loadgen "$loadgen" \
    --repeats "$repeats" --smoke "$smoke" --protocols "$protocols" --groups "${chosen[@]}"
