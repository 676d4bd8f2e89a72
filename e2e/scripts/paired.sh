#!/usr/bin/env bash
# The regression gate: the same loadgen cases against two gateway binaries, each run on a fresh
# embedded PostgreSQL of its own, alternating which goes first, several times.
#   e2e/scripts/paired.sh --before-bin A --after-bin B [--repeats 3] [--out DIR] [loadgen s3 flags...]
# Per case it reports the median p50 and rate of each side and their change, and fails a case
# whose median p50 rose more than 20% or whose median rate fell more than 20%, or that had any
# error. Writes DIR/paired.json (binaries' SHA-256, flags, every run's samples, failed gates).
set -euo pipefail
cd "$(dirname "$0")/../.."
before="" after="" repeats=3 out=""
flags=()
while [ $# -gt 0 ]; do
    case "$1" in
        --before-bin) before=$2; shift 2 ;;
        --after-bin) after=$2; shift 2 ;;
        --repeats) repeats=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) flags+=("$1"); shift ;;
    esac
done
[ -x "$before" ] && [ -x "$after" ] || { echo "usage: $0 --before-bin A --after-bin B [--repeats N] [loadgen flags]" >&2; exit 2; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
cargo build --release --locked --bin pgvs3-loadgen
loadgen="$CARGO_TARGET_DIR/release/pgvs3-loadgen"
out=${out:-$(mktemp -d /tmp/pgvs3-paired-XXXXXX)}
mkdir -p "$out"
[ -e "$out/paired.json" ] && { echo "$out/paired.json exists; choose a fresh --out" >&2; exit 2; }
export PGVS3_ROOT_ACCESS_KEY=PAIREDROOTKEY0000001 PGVS3_ROOT_SECRET_KEY=paired-secret-key

# One run: a fresh gateway from binary $1 on its own cluster, the cases, then a clean stop.
run_side() {
    local bin=$1 label=$2 round=$3
    local data
    data=$(mktemp -d /tmp/pgvs3-paired-run-XXXXXX)
    chmod 755 "$data"
    "$bin" serve --data-dir "$data/data" --s3-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --resp-addr off --ojs-addr off >"$data/serve.log" 2>&1 &
    local pid=$! endpoint=""
    for _ in $(seq 1 600); do
        endpoint=$(sed -n 's/^pgvs3 S3 endpoint: \(http:[^ ]*\).*/\1/p' "$data/serve.log")
        [ -n "$endpoint" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$endpoint" ] || { cat "$data/serve.log" >&2; kill "$pid" 2>/dev/null; exit 1; }
    echo "# round $round: $label" >&2
    "$loadgen" s3 --endpoint "$endpoint" --access-key "$PGVS3_ROOT_ACCESS_KEY" \
        --secret-key "$PGVS3_ROOT_SECRET_KEY" --json "$out/$label-$round.ndjson" "${flags[@]}" >&2 || true
    kill -TERM "$pid"
    wait "$pid" || true
    rm -rf "$data"
}

for round in $(seq 1 "$repeats"); do
    if [ $((round % 2)) -eq 1 ]; then
        run_side "$before" before "$round"; run_side "$after" after "$round"
    else
        run_side "$after" after "$round"; run_side "$before" before "$round"
    fi
done

python3 - "$out" "$before" "$after" "$repeats" "${flags[@]}" <<'PY'
import hashlib, json, pathlib, statistics, sys
out, before, after, repeats, flags = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
runs = {"before": {}, "after": {}}
for side in runs:
    for round in range(1, repeats + 1):
        path = out / f"{side}-{round}.ndjson"
        for line in (path.read_text().splitlines() if path.exists() else []):
            record = json.loads(line)
            runs[side].setdefault(record["case"], []).append(record["result"])
cases, failed = [], []
print(f"{'case':<24} {'p50 before':>11} {'p50 after':>10} {'change':>8} {'rate before':>12} {'rate after':>11} {'change':>8}  verdict")
for case in sorted(set(runs["before"]) | set(runs["after"])):
    b, a = runs["before"].get(case, []), runs["after"].get(case, [])
    errors = sum(sum(r["errors"].values()) for r in b + a)
    complete = len(b) == repeats and len(a) == repeats
    p50 = [statistics.median(r["p50_ms"] for r in side) if side else float("nan") for side in (b, a)]
    rate = [statistics.median(r["rate"] for r in side) if side else float("nan") for side in (b, a)]
    p50_change = p50[1] / p50[0] - 1 if p50[0] else float("inf")
    rate_change = rate[1] / rate[0] - 1 if rate[0] else float("-inf")
    reasons = [why for why, bad in [("p50 +20%", p50_change > 0.20), ("rate -20%", rate_change < -0.20),
                                    (f"{errors} errors", errors > 0), ("incomplete", not complete)] if bad]
    if reasons:
        failed.append({"case": case, "reasons": reasons})
    print(f"{case:<24} {p50[0]:>9.2f}ms {p50[1]:>8.2f}ms {p50_change:>+7.1%} {rate[0]:>12.1f} {rate[1]:>11.1f} "
          f"{rate_change:>+7.1%}  {'FAIL: ' + ', '.join(reasons) if reasons else 'ok'}")
    cases.append({"case": case, "p50_ms": p50, "rate": rate, "p50_change": p50_change,
                  "rate_change": rate_change, "errors": errors, "before": b, "after": a})
report = {"before_bin": {"path": before, "sha256": sha256(before)}, "after_bin": {"path": after, "sha256": sha256(after)},
          "repeats": repeats, "loadgen_flags": flags, "complete": all(c["before"] and c["after"] for c in cases),
          "cases": cases, "failed_gates": failed}
(out / "paired.json").write_text(json.dumps(report, indent=2))
print(f"report: {out / 'paired.json'}")
sys.exit(1 if failed else 0)
PY
