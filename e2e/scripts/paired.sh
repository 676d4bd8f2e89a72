#!/usr/bin/env bash
# The regression gate: the same loadgen cases against two gateway binaries, each run on fresh
# embedded PostgreSQL clusters of its own, alternating which goes first, several times.
#   e2e/scripts/paired.sh --before-bin A --after-bin B [--protocols s3,resp,ojs,cache]
#       [--repeats 4] [--seconds 5] [--warmup 2] [--out DIR] [--smoke]
#       [--s3 FLAGS] [--resp FLAGS] [--ojs FLAGS] [--cache FLAGS]
# Case groups per protocol (a group's cases run on one pair of fresh gateways per round: each
# side's gateways on clusters of their own, or for `cache` a cache gateway in front of a
# constrained origin gateway, see start_target in gateway.sh):
#   s3:    put, get, head, list of 4 KiB at 16 workers; put, get of 10 MiB at 4 workers
#   resp:  set, get, mget, incr of 4 KiB at 16 connections, pipeline depth 1 and 16
#   ojs:   enqueue, batch enqueue of 100, fetch+ack cycle at 16 workers
#   cache: cold GET, warm GET, write-back PUT of 10 MiB, 8 requests each, one worker
# `--s3 "FLAGS"` (and --resp, --ojs, --cache) replaces that protocol's groups with one group of
# these loadgen flags. Both sides' gateways are up together; each case (path) runs on one side
# and right after on the other, the first side alternating from case to case and round to round
# (keep --repeats even: each side goes first equally often). So the two runs of a pair share the
# machine's load of that moment, and a path is judged by its per-round after/before ratios: it
# fails when the median ratio of p50 rose more than 20% or that of rate fell more than 20%, on any
# error, or when it is missing from any run, naming each failing path. The spread of the ratios
# is reported beside them.
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
# A used --out would mix an earlier attempt's runs into this report (runs.tsv is appended to).
for used in paired.json runs.tsv; do
    [ -e "$out/$used" ] && { echo "$out/$used exists; choose a fresh --out" >&2; exit 2; }
done
export PGVS3_ROOT_ACCESS_KEY=PAIREDROOTKEY0000001 PGVS3_ROOT_SECRET_KEY=paired-secret-key
source e2e/scripts/gateway.sh

# The single cases of a group's loadgen flags, one line each: every combination of its --sizes,
# --pipeline and --ops values (ops innermost, the order one loadgen run takes them in).
cases_of() {
    local lines=("$1") option line value next
    for option in --sizes --pipeline --ops; do
        next=()
        for line in "${lines[@]}"; do
            if [[ " $line " =~ ^(.*\ $option\ )([^ ]+)(\ .*)$ ]]; then
                local head=${BASH_REMATCH[1]# } values=${BASH_REMATCH[2]} tail=${BASH_REMATCH[3]% }
                for value in ${values//,/ }; do next+=("$head$value$tail"); done
            else
                next+=("$line")
            fi
        done
        lines=("${next[@]}")
    done
    printf '%s\n' "${lines[@]}"
}

# One round of group $1: fresh gateways of both binaries side by side, then each case on one side
# and at once on the other, the first side alternating from case to case and round to round, so
# both sides of a case run seconds apart under the same machine load. Every run's status goes to
# runs.tsv (a load generator that stopped early leaves paths missing, which the report fails; a
# side whose gateways did not start is recorded as case "-").
run_group() (
    index=$1 round=$2
    read -r -a flags <<<"${chosen[$index]}"
    protocol=${flags[0]}
    work=$(mktemp -d /tmp/pgvs3-paired-run-XXXXXX)
    # As root, PostgreSQL runs as an unprivileged user that must be able to enter the directory.
    chmod 755 "$work"
    pids=()
    trap stop_all EXIT
    declare -A targets=()
    # The side whose cluster starts first alternates too (the second start finds less free memory).
    starts=(before after)
    [ $((round % 2)) -eq 0 ] && starts=(after before)
    for side in "${starts[@]}"; do
        pgvs3=$before
        [ $side = after ] && pgvs3=$after
        if ! start_target "$pgvs3" "$loadgen" "$protocol" "$work/$side" >&2; then
            printf '%s\t%s\t%s\t-\t1\n' "$side" "$round" "$index" >>"$out/runs.tsv"
            exit 0
        fi
        targets[$side]="${target[*]}"
    done
    mapfile -t cases < <(cases_of "${chosen[$index]#"$protocol "}")
    for case in "${!cases[@]}"; do
        order=(before after)
        [ $(((round + case) % 2)) -eq 0 ] && order=(after before)
        for side in "${order[@]}"; do
            echo "# round $round, $side: $protocol ${cases[$case]}" >&2
            # The run before may have left gigabytes of dirty pages (large PUTs): written out
            # now, or the kernel writes them back during this run and bills it for them (the
            # 10 MiB PUT's second side ran at half the first's rate, whichever binary it was).
            sync
            read -r -a case_flags <<<"${cases[$case]}"
            read -r -a side_target <<<"${targets[$side]}"
            status=0
            "$loadgen" "$protocol" "${side_target[@]}" "${case_flags[@]}" "${timing[@]}" \
                --json "$out/$side-$round-$index-$case.ndjson" >&2 || status=$?
            printf '%s\t%s\t%s\t%s\t%s\n' "$side" "$round" "$index" "$case" "$status" >>"$out/runs.tsv"
        done
    done
)
for round in $(seq 1 "$repeats"); do
    for index in "${!chosen[@]}"; do run_group "$index" "$round"; done
done

python3 e2e/scripts/paired_report.py "$out" --before "$before" --after "$after" --loadgen "$loadgen" \
    --repeats "$repeats" --smoke "$smoke" --protocols "$protocols" --groups "${chosen[@]}"
