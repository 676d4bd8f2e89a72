#!/usr/bin/env bash
# The paired gate of session credentials against static keys (issue 37): the same S3 cases
# through one gateway, signed with the root's static key and with a session of an STS role,
# each round both, alternating which goes first.
#   e2e/scripts/session-bench.sh [--pgvs3 BIN] [--loadgen BIN] [--rounds 4] [--seconds 5]
#       [--warmup 2] [--workers 16] [--out DIR]
# (defaults: the release binaries of $CARGO_TARGET_DIR, which must be built:
# `cargo build --release --locked --bin pgvs3 --bin pgvs3-loadgen`)
# One gateway on a fresh embedded cluster; an OpenID issuer whose RSA key is made here with the
# openssl CLI (registered with `pgvs3 admin oidc-issuer put`, as a cluster's /openid/v1/jwks
# would be), role `loadgen` (`pgvs3 admin role create`: ServiceAccount bench/loadgen may assume
# it; s3:* on bucket `loadgen`) and a ServiceAccount-shaped token of bench/loadgen signed with
# the key. The session side is `pgvs3-loadgen s3 --role-arn … --web-identity-token-file …`: one
# AssumeRoleWithWebIdentity before the run, then every request signed with the session's key
# and its x-amz-security-token. Cases: PUT and GET of 4 KiB (1000 keys). Prints each round's
# session/static ratios of rate and p50 and their medians; every run's NDJSON is in DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pgvs3-target}"
pgvs3="$CARGO_TARGET_DIR/release/pgvs3" loadgen="$CARGO_TARGET_DIR/release/pgvs3-loadgen"
rounds=4 seconds=5 warmup=2 workers=16 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --pgvs3) pgvs3=$2; shift 2 ;;
        --loadgen) loadgen=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --workers) workers=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) sed -n '5,8p' "$0" >&2; exit 2 ;;
    esac
done
[ -x "$pgvs3" ] && [ -x "$loadgen" ] || { echo "no executable $pgvs3 or $loadgen" >&2; exit 2; }
out=${out:-$(mktemp -d /tmp/pgvs3-session-bench-XXXXXX)}
mkdir -p "$out"
export PGVS3_ROOT_ACCESS_KEY=SESSIONBENCHROOT0001 PGVS3_ROOT_SECRET_KEY=session-bench-secret
source e2e/scripts/gateway.sh
work=$(mktemp -d /tmp/pgvs3-session-bench-run-XXXXXX)
chmod 755 "$work"
trap stop_all EXIT
start_gateway "$pgvs3" "$work/gw"
admin() { "$pgvs3" admin --data-dir "$work/gw/data" "$@" >/dev/null; }

# The issuer's key, its key set, the role, and a token of bench/loadgen (valid for 2 hours).
issuer=https://kubernetes.default.svc.cluster.local
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
python3 - "$work" "$issuer" <<'PY'
import base64, json, subprocess, sys, time
work, issuer = sys.argv[1], sys.argv[2]
b64 = lambda data: base64.urlsafe_b64encode(data).rstrip(b"=").decode()
modulus = subprocess.check_output(["openssl", "rsa", "-in", f"{work}/sa.key", "-noout", "-modulus"], text=True)
n = bytes.fromhex(modulus.strip().split("=", 1)[1])
json.dump({"keys": [{"use": "sig", "kty": "RSA", "kid": "bench", "alg": "RS256", "n": b64(n), "e": "AQAB"}]},
          open(f"{work}/jwks.json", "w"))
now = int(time.time())
claims = {"iss": issuer, "sub": "system:serviceaccount:bench:loadgen", "aud": ["pgvs3"], "iat": now, "nbf": now,
          "exp": now + 7200, "kubernetes.io": {"namespace": "bench", "serviceaccount": {"name": "loadgen", "uid": "u"}}}
signing_input = b64(json.dumps({"alg": "RS256", "kid": "bench"}).encode()) + "." + b64(json.dumps(claims).encode())
signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", f"{work}/sa.key"], input=signing_input.encode(),
                           capture_output=True, check=True).stdout
open(f"{work}/token", "w").write(signing_input + "." + b64(signature))
PY
cat >"$work/policy.json" <<'JSON'
{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*",
  "Resource": ["arn:aws:s3:::loadgen", "arn:aws:s3:::loadgen/*"]}]}
JSON
admin oidc-issuer put --issuer "$issuer" --jwks-file "$work/jwks.json"
admin role create loadgen --issuer "$issuer" --subject system:serviceaccount:bench:loadgen \
    --policy-file "$work/policy.json"
static=(--access-key "$PGVS3_ROOT_ACCESS_KEY" --secret-key "$PGVS3_ROOT_SECRET_KEY")
session=(--role-arn arn:aws:iam::000000000000:role/loadgen --web-identity-token-file "$work/token")
# The bucket, the root's; then the session's first PUT (the gateway reads the issuer and the role
# from the catalog: a few tries at most)
"$loadgen" s3 --endpoint "$gw_s3" "${static[@]}" --ops put --requests 1 --workers 1 >/dev/null
for try in $(seq 1 30); do
    "$loadgen" s3 --endpoint "$gw_s3" "${session[@]}" --ops put --requests 1 --workers 1 >"$work/probe.out" 2>&1 && break
    [ "$try" -lt 30 ] || { echo "the session side never worked:" >&2; cat "$work/probe.out" >&2; exit 1; }
    sleep 1
done

for round in $(seq 1 "$rounds"); do
    order=(static session)
    [ $((round % 2)) -eq 0 ] && order=(session static)
    for side in "${order[@]}"; do
        credentials=("${static[@]}")
        [ "$side" = session ] && credentials=("${session[@]}")
        echo "# round $round: $side" >&2
        "$loadgen" s3 --endpoint "$gw_s3" "${credentials[@]}" --ops put,get --sizes 4KiB --keys 1000 \
            --workers "$workers" --duration "$seconds" --warmup "$warmup" --json "$out/$side-$round.ndjson" >&2
    done
done

python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def cases(side, round):
    return {c["case"]: c["result"] for c in map(json.loads, open(f"{out}/{side}-{round}.ndjson"))}
runs = [(cases("static", r), cases("session", r)) for r in range(1, rounds + 1)]
print("| case | static req/s (median) | session req/s (median) | session/static rate per round | median | p50 ratio (median) |")
print("|---|---|---|---|---|---|")
for case in runs[0][0]:
    rate = [s[case]["rate"] / t[case]["rate"] for t, s in runs]
    p50 = [s[case]["p50_ms"] / t[case]["p50_ms"] for t, s in runs]
    print("| %s | %.0f | %.0f | %s | %.2f | %.2f |" % (
        case, statistics.median(t[case]["rate"] for t, _ in runs), statistics.median(s[case]["rate"] for _, s in runs),
        ", ".join("%.2f" % r for r in rate), statistics.median(rate), statistics.median(p50)))
errors = sum(sum(r["errors"].values()) for pair in runs for side in pair for r in side.values())
print("errors: %d; runs in %s" % (errors, out))
sys.exit(1 if errors else 0)
PY
