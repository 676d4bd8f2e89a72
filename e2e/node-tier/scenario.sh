#!/usr/bin/env bash
# scenario.sh REPO — the node tier's checks on a running kube-node-kit node (.ci/node-tier.sh
# starts the node, builds the images and calls this; by hand: NODE_ENV=RUN/node/node.env
# HELM=helm e2e/node-tier/scenario.sh .). Needs the images ghcr.io/pgvs3/{pgvs3,pgvs3-operator}:node-tier,
# localhost/kit/postgres:15 and localhost/pgvs3-node-tier/client:1 in the node's containerd.
#
# Dies at the first failed check, except the checks of issue 31's defects (a gateway pod seeing
# the database CA's private key, requests failing during a rolling update), which are reported at
# the end (or when a later check dies) and fail it then.
set -euo pipefail
REPO=$(cd "${1:?usage: scenario.sh REPO}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
set -a; . "${NODE_ENV:?NODE_ENV=RUN/node/node.env of the running node}"; set +a
HELM=${HELM:-helm}
NS=pgvs3-demo SYS=pgvs3-system
KUBELET_PODS=$(dirname "$NODE_ENV")/kubelet/pods

ms() { date +%s%3N; }
T0=${NODE_TIER_T0:-$(ms)}; TS=$(ms)
step() { local now; now=$(ms); printf '[node-tier %6.1fs] %-58s %5.1fs\n' "$(( now - T0 ))e-3" "$*" "$(( now - TS ))e-3"; TS=$now; }
defects=()
# record_failure LINE...: its lines on stderr and, where the caller asks (NODE_TIER_FAILURES=FILE), in FILE too:
# .ci/node-tier.sh prints them again after its diagnostics, so the log's tail says why
record_failure() { printf 'node tier FAILED: %s\n' "$@" | tee -a "${NODE_TIER_FAILURES:-/dev/null}" >&2; }
# the defects found so far, on any exit: a later failure must not hide them
report() { [ "${#defects[@]}" = 0 ] || record_failure "${defects[@]}"; }
die() { record_failure "$*"; report; exit 1; }
trap 'record_failure "scenario.sh line $LINENO: $BASH_COMMAND"; report' ERR
k() { kubectl -n "$NS" "$@"; }
# client.sh in the client pod, signed with the key AK/SK
pod() { k exec client -- env AK="${AK:-}" SK="${SK:-}" PINS="${pins:-}" sh /node-tier/client.sh "$@"; }
in_pod() { k exec client -- "$@"; }
secret() { k get secret "$1" -o jsonpath="{.data.$2}" | base64 -d; }
# Every bound below is a quiet machine's, times NODE_TIER_WAIT_SCALE (default 3): the tier runs on
# two cores shared with builds, where the apiserver tier's minute-long waits were not always enough
# (load average 25-28). A failed wait dies, and the teardown prints the resources, pods and Events.
scale=${NODE_TIER_WAIT_SCALE:-3}
# within SECONDS: the bound scaled, as kubectl's and helm's --timeout take it
within() { echo "$(( $1 * scale ))s"; }
# eventually SECONDS DESCRIPTION CONDITION: evaluates the shell CONDITION (twice a second) until it
# holds, for at most SECONDS (scaled); a failure says what the condition printed last
eventually() {
    local seconds=$(( $1 * scale )) what=$2 condition=$3 last
    local limit=$(( $(ms) + seconds * 1000 ))
    until last=$(eval "$condition" 2>&1); do
        [ "$(ms)" -lt "$limit" ] || die "timed out after ${seconds}s waiting for: $what${last:+ (last: $last)}"
        sleep 0.5
    done
}
pods_of() { k get pods -l "app.kubernetes.io/instance=$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'; }
# kill9 NAMESPACE POD: SIGKILL to the pod's first container through containerd (a crash, not a delete)
kill9() {
    local id
    id=$(kubectl -n "$1" get pod "$2" -o jsonpath='{.status.containerStatuses[0].containerID}')
    ctr -a "$CONTAINERD_ADDRESS" -n k8s.io tasks kill -s SIGKILL "${id#containerd://}" >/dev/null
}
ready_gateways() { k get gatewaypool "$1" -o jsonpath='{.status.readyReplicas}'; }
restarts() { kubectl -n "$1" get pod "$2" -o jsonpath='{.status.containerStatuses[0].restartCount}'; }

# --- PodSecurity `restricted` enforced where every pgvs3 pod runs --------------------------------
for ns in "$SYS" "$NS"; do
    kubectl create namespace "$ns" >/dev/null
    kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=restricted \
        pod-security.kubernetes.io/enforce-version=latest >/dev/null
done
# The admission plugin is really on: a pod that is not `restricted` is refused.
if k run psa-probe --image=localhost/kit/busybox:1.35 --restart=Never --dry-run=server -- true >/dev/null 2>&1; then
    die "PodSecurity admission let an unrestricted pod into $NS"
fi
step "namespaces labelled enforce=restricted (probe refused)"

# --- PostgreSQL: primary + streaming hot standby, TLS from the tier's own CA ---------------------
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
ec() { openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "$@" 2>/dev/null; }
ec -x509 -days 2 -subj /CN=demo-ca -keyout "$scratch/ca.key" -out "$scratch/ca.crt"
# issue NAME SERVICE...: $scratch/NAME.{crt,key}, a server certificate of the tier's CA for the Services
issue() { local name=$1 cn=$2 sans=""; shift
    for svc in "$@"; do sans="$sans,DNS:$svc,DNS:$svc.$NS.svc,DNS:$svc.$NS.svc.cluster.local"; done
    ec -subj "/CN=$cn" -keyout "$scratch/$name.key" -out "$scratch/$name.csr"
    openssl x509 -req -in "$scratch/$name.csr" -CA "$scratch/ca.crt" -CAkey "$scratch/ca.key" -CAcreateserial -days 2 \
        -extfile <(echo "subjectAltName=${sans#,}") -out "$scratch/$name.crt" 2>/dev/null; }
issue tls demo-rw demo-ro
# the primary pool serves S3, RESP and OJS over TLS (the standby pool plain): its first certificate
issue gateway demo-primary
# CloudNativePG's shapes: <cluster>-app (basic-auth), <cluster>-ca (ca.crt and ca.key).
k create secret generic demo-app --type=kubernetes.io/basic-auth --from-literal=username=app \
    --from-literal=password="$(openssl rand -hex 16)" >/dev/null
k label secret demo-app pgvs3.io/reload=true >/dev/null
k create secret generic demo-ca --from-file="$scratch/ca.crt" --from-file="$scratch/ca.key" >/dev/null
k create secret tls demo-server-tls --cert="$scratch/tls.crt" --key="$scratch/tls.key" >/dev/null
k create secret tls demo-gateway-tls --cert="$scratch/gateway.crt" --key="$scratch/gateway.key" --save-config >/dev/null
k label secret demo-gateway-tls pgvs3.io/reload=true >/dev/null
k create configmap node-tier-client --from-file="$HERE/client.sh" --from-file="$HERE/sdk.py" >/dev/null
# what the client pod trusts: the tier's CA (client.sh, redis-cli --tls, pgvs3-loadgen --ca-cert)
k create configmap node-tier-ca --from-file="$scratch/ca.crt" >/dev/null
k apply -f "$HERE/postgres.yaml" >/dev/null
step "CA, certificates, secrets; PostgreSQL applied"

# --- the operator's chart (its pods under `restricted` too) --------------------------------------
"$HELM" upgrade --install pgvs3-operator "$REPO/charts/pgvs3-operator" --namespace "$SYS" \
    --set image.tag=node-tier --set image.pullPolicy=Never --wait --timeout "$(within 120)" >/dev/null
step "helm install: operator pods Ready"

k rollout status statefulset/demo-primary --timeout="$(within 120)" >/dev/null
step "PostgreSQL primary Ready"
k rollout status statefulset/demo-standby --timeout="$(within 120)" >/dev/null
psql_at() { k exec "$1" -c postgres -- psql -U app -d app -tAc "$2"; }
[ "$(psql_at demo-standby-0 'select pg_is_in_recovery()')" = t ] || die "demo-standby-0 is not in recovery"
streaming() { psql_at demo-primary-0 "select count(*) from pg_stat_replication r join pg_stat_ssl s using (pid) where r.state = 'streaming' and s.ssl"; }
eventually 30 "the standby streaming from the primary over TLS" '[ "$(streaming)" = 1 ]'
# how long the clone waited for demo-rw (sometimes half a minute after the primary was Ready)
waits=$(k logs demo-standby-0 -c basebackup | grep -c 'no response' || true)
step "PostgreSQL hot standby streaming over TLS (clone waited: $waits unanswered pg_isready)"

# --- pools, Buckets, OriginCache, client --------------------------------------------------------
k apply -f "$HERE/fleet.yaml" >/dev/null
k wait --for=condition=Ready gatewaypool/demo-primary gatewaypool/demo-standby --timeout="$(within 180)" >/dev/null
k wait --for=condition=Ready pod/client --timeout="$(within 60)" >/dev/null
# client.sh reaches the pools' Services at their ClusterIPs, looked up here once (curl --resolve):
# the kit's DNS stand-in answers a name it has not looked up in the last second with a fresh
# request to the API server, and once took more than the client's 5 s while a rolling update
# kept the API server busy (docs/operator.md). A Service's ClusterIP does not change.
svc_ip() { k get service "$1" -o jsonpath='{.spec.clusterIP}'; }
pins="demo-primary:9000:$(svc_ip demo-primary) demo-standby:9000:$(svc_ip demo-standby)"
# the name the operator writes into a Bucket's endpoints (the workload identity's ConfigMap)
pins="$pins demo-primary.$NS.svc:9000:$(svc_ip demo-primary)"
step "GatewayPools demo-primary (2, TLS) and demo-standby (1) Ready"
k apply -f "$HERE/buckets.yaml" >/dev/null
k wait --for=condition=Ready bucket/photos bucket/upstream bucket/ledger --timeout="$(within 120)" >/dev/null
# the workload identity's ServiceAccounts and pods (their env is ledger's ConfigMap): they start
# while the checks below run
k apply -f "$HERE/identity.yaml" >/dev/null
k apply -f "$HERE/origincache.yaml" >/dev/null
k wait --for=condition=Ready origincache/mirror --timeout="$(within 120)" >/dev/null
step "Buckets photos, upstream, ledger and OriginCache mirror Ready"

# The first primary gateway printed the generated root key once (RESP's keyspace is the root's).
root_ak="" root_sk=""
for p in $(pods_of demo-primary); do
    log=$(k logs "$p")
    root_ak=${root_ak:-$(sed -n 's/^ *AWS_ACCESS_KEY_ID=//p' <<<"$log")}
    root_sk=${root_sk:-$(sed -n 's/^ *AWS_SECRET_ACCESS_KEY=//p' <<<"$log")}
done
[ -n "$root_ak" ] && [ -n "$root_sk" ] || die "no primary gateway's log shows the generated root key (RESP needs it)"

# --- S3 through the Services, from the client pod and from the host ------------------------------
AK=$(secret photos-credentials AWS_ACCESS_KEY_ID) SK=$(secret photos-credentials AWS_SECRET_ACCESS_KEY)
P=https://demo-primary:9000 S=http://demo-standby:9000 CA=/etc/node-tier-ca/ca.crt
text="hello from the node tier"
[ "$(pod put "$P/demo-photos/hello.txt" "$text")" = 200 ] || die "S3 PUT through demo-primary"
[ "$(pod get "$P/demo-photos/hello.txt")" = "200 $text" ] || die "S3 GET through demo-primary"
eventually 20 "the standby pool serving what the primary pool wrote" '[ "$(pod get "$S/demo-photos/hello.txt")" = "200 $text" ]'
code=$(pod put "$S/demo-photos/refused.txt" "no") ; [ "$code" = 403 ] || die "S3 PUT through demo-standby answered $code, not 403"
[ "$(pod get "$P/demo-photos/refused.txt" | cut -d' ' -f1)" = 404 ] || die "the standby's refused PUT left an object"
# from the host to the ClusterIP (kube-proxy's OUTPUT rules), over TLS with the Service's name
ip=$(svc_ip demo-primary)
got=$(curl -s --max-time 5 --cacert "$scratch/ca.crt" --resolve "demo-primary.$NS.svc:9000:$ip" \
    --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" \
    -H "x-amz-content-sha256: $(printf '' | sha256sum | cut -d' ' -f1)" "https://demo-primary.$NS.svc:9000/demo-photos/hello.txt")
[ "$got" = "$text" ] || die "S3 GET from the host to $ip:9000: '$got'"
# the OriginCache: an object put into the origin bucket is read through the cache bucket with its
# own key (the origin is the standby pool's plain Service: once it serves the object)
UAK=$(secret upstream-credentials AWS_ACCESS_KEY_ID) USK=$(secret upstream-credentials AWS_SECRET_ACCESS_KEY)
[ "$(AK=$UAK SK=$USK pod put "$P/demo-upstream/data.txt" "from the origin")" = 200 ] || die "S3 PUT into the origin bucket"
eventually 20 "the origin (demo-standby) serving the object" \
    '[ "$(AK=$UAK SK=$USK pod get "$S/demo-upstream/data.txt")" = "200 from the origin" ]'
got=$(AK=$(secret mirror-cache-credentials AWS_ACCESS_KEY_ID) SK=$(secret mirror-cache-credentials AWS_SECRET_ACCESS_KEY) \
    pod get "$P/demo-mirror/data.txt")
[ "$got" = "200 from the origin" ] || die "GET through the OriginCache's bucket: '$got'"
step "S3: primary write (HTTPS), standby read + 403, host→ClusterIP, OriginCache"

# --- workload identity (issue 37): pods with only their ServiceAccount's token -----------------
# Bucket ledger names ServiceAccount `app` (no static key); app-client and other-client
# (identity.yaml) have a projected token for audience pgvs3 and ledger's ConfigMap as their env.
# The exchange is the one an AWS SDK makes, by curl first (client.sh assume: each answer
# checked), then S3 with the session's credentials and x-amz-security-token; then boto3.
# as_pod POD client.sh-ARGS...: client.sh in POD, signed with AK/SK and the session token ST
as_pod() { local p=$1; shift; k exec "$p" -- env AK="${AK:-}" SK="${SK:-}" ST="${ST:-}" PINS="$pins" sh /node-tier/client.sh "$@"; }
! k get secret ledger-credentials >/dev/null 2>&1 || die "Bucket ledger (staticKey: false) has a credentials Secret"
k wait --for=condition=Ready pod/app-client pod/other-client --timeout="$(within 60)" >/dev/null
token=$(k get configmap ledger-identity -o jsonpath='{.data.AWS_WEB_IDENTITY_TOKEN_FILE}')
L=$(k get configmap ledger-identity -o jsonpath='{.data.AWS_ENDPOINT_URL}')/$(k get configmap ledger-identity -o jsonpath='{.data.BUCKET_NAME}')
# The Bucket is Ready once its role is in the catalog; the issuer's keys are the operator's other
# loop (every 15 s) and the gateways' catalog reload: tries are counted, not hidden.
tries=0
until answer=$(as_pod app-client assume "$token"); tries=$((tries + 1)); [ "${answer%% *}" = 200 ] || [ "$tries" -ge $(( 30 * scale )) ]; do sleep 1; done
[ "${answer%% *}" = 200 ] || die "AssumeRoleWithWebIdentity with app's token, $tries tries: $answer"
read -r _ SAK SSK SST <<<"$answer"
[ "${SAK#ASIA}" != "$SAK" ] && [ -n "$SSK" ] && [ -n "$SST" ] || die "AssumeRoleWithWebIdentity's credentials: key '$SAK', secret or token empty"
session() { AK=$SAK SK=$SSK ST=$SST as_pod app-client "$@"; }
got=$(session put "$L/from-app.txt" "written by app's session"); [ "$got" = 200 ] || die "S3 PUT into $L with app's session: $got"
got=$(session get "$L/from-app.txt"); [ "$got" = "200 written by app's session" ] || die "S3 GET from $L with app's session: $got"
# the session's key without its token
got=$(AK=$SAK SK=$SSK as_pod app-client get "$L/from-app.txt")
case "$got" in "400 "*InvalidToken*) ;; *) die "S3 GET with the session's key but no token answered '$got', not 400 InvalidToken" ;; esac
# another Bucket (photos, in the same namespace and pool) is not the role's
got=$(session get "$P/demo-photos/hello.txt")
case "$got" in "403 "*AccessDenied*) ;; *) die "S3 GET of another Bucket with app's session answered '$got', not 403 AccessDenied" ;; esac
got=$(session put "$P/demo-photos/from-app.txt" "no")
[ "$got" = 403 ] || die "S3 PUT into another Bucket with app's session answered $got, not 403"
# a ServiceAccount the Bucket does not name; a token of app for another audience
got=$(as_pod other-client assume "$token")
[ "$got" = "403 AccessDenied" ] || die "AssumeRoleWithWebIdentity with other's token answered '$got', not 403 AccessDenied"
got=$(as_pod app-client assume /var/run/secrets/other-audience/token)
[ "$got" = "400 InvalidIdentityToken" ] || die "AssumeRoleWithWebIdentity with a token for audience not-pgvs3 answered '$got', not 400 InvalidIdentityToken"
step "workload identity: app's pod read+write ($tries tries), other's AccessDenied, audience refused"
# the same with boto3 and nothing but the ConfigMap's environment (and the CA): the SDK's own
# web identity provider
role=$(k get configmap ledger-identity -o jsonpath='{.data.AWS_ROLE_ARN}')
got=$(k exec app-client -- python3.11 /node-tier/sdk.py 2>&1) || die "boto3 in app's pod: $got"
[ "$got" = "written-by-boto3 arn:aws:sts::000000000000:assumed-role/${role##*/}/${got##*/}" ] && [ "${got##*/}" != "" ] \
    || die "boto3 in app's pod: '$got'"
step "workload identity: boto3 in app's pod (web identity provider) PUT, GET, GetCallerIdentity"
# and with aws-sdk-s3 (Rust): pgvs3-web-identity, the same environment, its credentials from the
# web identity exchange (e2e/src/web_identity.rs); refused at that exchange in other's pod
got=$(k exec app-client -- pgvs3-web-identity 2>&1) || die "aws-sdk-s3 in app's pod: $got"
[ "$got" = "written-by-aws-sdk-s3 arn:aws:sts::000000000000:assumed-role/${role##*/}/pgvs3-e2e" ] \
    || die "aws-sdk-s3 in app's pod: '$got'"
if got=$(k exec other-client -- pgvs3-web-identity 2>&1); then die "aws-sdk-s3 in other's pod succeeded: '$got'"; fi
case "$got" in *"AssumeRoleWithWebIdentity: 403 AccessDenied"*) ;; *) die "aws-sdk-s3 in other's pod: '$got', not AccessDenied" ;; esac
step "workload identity: aws-sdk-s3 in app's pod PUT, GET, GetCallerIdentity; other's AccessDenied"

# --- RESP --------------------------------------------------------------------------------------
resp() { local host=$1 user=$2 pass=$3 tls=(); shift 3
    [ "$host" != demo-primary ] || tls=(--tls --cacert "$CA")
    in_pod redis-cli --no-auth-warning "${tls[@]}" -h "$host" -p 6379 --user "$user" --pass "$pass" "$@"; }
[ "$(resp demo-primary "$AK" "$SK" PING)" = PONG ] || die "RESP AUTH with a Bucket's key + PING"
[ "$(resp demo-primary "$root_ak" "$root_sk" SET node-tier:greeting "$text")" = OK ] || die "RESP SET on demo-primary"
[ "$(resp demo-primary "$root_ak" "$root_sk" GET node-tier:greeting)" = "$text" ] || die "RESP GET on demo-primary"
eventually 20 "RESP GET on demo-standby" '[ "$(resp demo-standby "$root_ak" "$root_sk" GET node-tier:greeting)" = "$text" ]'
got=$(resp demo-standby "$root_ak" "$root_sk" SET node-tier:greeting no)
case "$got" in READONLY*) ;; *) die "RESP SET on demo-standby answered '$got', not READONLY" ;; esac
step "RESP: SET/GET on primary (TLS), GET + READONLY on standby"

# --- OJS ---------------------------------------------------------------------------------------
ojs() { local method=$1 url=$2 body=${3:-}
    in_pod curl -s -w '\n%{http_code}' --max-time 5 --cacert "$CA" -X "$method" -H "Authorization: Bearer node-tier-ojs-token" \
        -H 'Content-Type: application/openjobspec+json' ${body:+-d "$body"} "$url"; }
status() { tail -n1 <<<"$1"; }
field() { head -n -1 <<<"$1" | python3 -c "import json, sys; d = json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$2"; }
O=https://demo-primary:8080/ojs/v1 OS=http://demo-standby:8080/ojs/v1
job='{"type":"node.tier","args":["hello"],"queue":"node-tier"}'
out=$(ojs POST "$O/jobs" "$job"); [ "$(status "$out")" = 201 ] || die "OJS enqueue on demo-primary: $out"
id=$(field "$out" "['job']['id']")
eventually 20 "OJS job lookup on demo-standby" '[ "$(status "$(ojs GET "$OS/jobs/$id")")" = 200 ]'
out=$(ojs POST "$OS/jobs" "$job"); case "$(status "$out")" in 2*) die "OJS enqueue on demo-standby was accepted: $out" ;; esac
out=$(ojs POST "$O/workers/fetch" '{"queues":["node-tier"]}')
[ "$(field "$out" "['jobs'][0]['id']")" = "$id" ] || die "OJS fetch on demo-primary: $out"
out=$(ojs POST "$O/workers/ack" "{\"job_id\":\"$id\"}"); [ "$(status "$out")" = 200 ] || die "OJS ack: $out"
step "OJS: enqueue/fetch/ack on primary, lookup + refusal on standby"

# --- what gateway pods can read: the database CA's certificate, never its private key -------------
for pool in demo-primary demo-standby; do
    for p in $(pods_of "$pool"); do
        vols="$KUBELET_PODS/$(k get pod "$p" -o jsonpath='{.metadata.uid}')/volumes"
        # what each mounted Secret shows inside the container: the entries at the top of its volume
        compgen -G "$vols/kubernetes.io~secret/*/ca.crt" >/dev/null || die "gateway pod $p has no ca.crt mounted ($vols)"
        for key in "$vols"/kubernetes.io~secret/*/ca.key; do
            [ -e "$key" ] || continue
            volume=${key%/ca.key}; volume=${volume##*/}
            defects+=("gateway pod $p can read the database CA's private key: ca.key in its volume $volume (issue 31 defect 2: mount ca.crt only)")
        done
    done
done
step "gateway pods' Secret volumes: ca.crt present, ca.key checked"

# --- load through demo-primary's Service from the client pod (client.sh load) ------------------
AK=$(secret photos-credentials AWS_ACCESS_KEY_ID) SK=$(secret photos-credentials AWS_SECRET_ACCESS_KEY)
# load_start TAG MAX: the loop in the background; load_finish TAG: stop it, wait, verify every
# acknowledged write; sets $summary, $lost, $acked, $failed (PUTs and GETs that did not succeed)
# and $failures (one line per failed request, with curl's timings)
load_start() { pod load "$P/demo-photos" "$2" "$1" > "$scratch/load-$1.out" 2>&1 & load_pid=$!; }
acked_so_far() { in_pod sh -c "wc -l < /tmp/acked-$1" 2>/dev/null || echo 0; }
load_finish() {
    in_pod touch "/tmp/stop-$1"
    wait "$load_pid" || die "the load loop failed: $(cat "$scratch/load-$1.out")"
    summary=$(grep '^requests=' "$scratch/load-$1.out")
    failures=$(grep -v '^requests=' "$scratch/load-$1.out" || true)
    local verify; verify=$(pod verify "$P/demo-photos" "$1")
    lost=$(tail -n1 <<<"$verify" | sed -n 's/^lost=\([0-9]*\).*/\1/p')
    [ "$lost" = 0 ] || die "acknowledged writes lost ($1): $verify"
    acked=$(sed -n 's/.* acked=\([0-9]*\).*/\1/p' <<<"$summary")
    failed=$(( $(sed -n 's/.*put_failed=\([0-9]*\) get_failed=\([0-9]*\).*/\1 + \2/p' <<<"$summary") ))
}

# --- rolling update under load: the database password rotated ------------------------------------
# The pool's credentials Secret is labelled pgvs3.io/reload: the operator rolls both pools at once
# (maxUnavailable 0). Every request must succeed through the roll and nothing acknowledged be lost.
load_start roll 2000
eventually 60 "the load running" '[ "$(acked_so_far roll)" -ge 10 ]'
old_pods=$(pods_of demo-primary | sort)
password=$(openssl rand -hex 16)
psql_at demo-primary-0 "alter role app password '$password'" >/dev/null
k patch secret demo-app --type=merge -p "{\"stringData\":{\"password\":\"$password\"}}" >/dev/null
rolled() { [ -z "$(comm -12 <(pods_of demo-primary | sort) <(echo "$old_pods"))" ] && [ "$(pods_of demo-primary | wc -l)" = 2 ]; }
eventually 120 "demo-primary's gateways all replaced (old ones terminated)" rolled
k rollout status deployment/demo-primary --timeout="$(within 60)" >/dev/null
load_finish roll
[ "$failed" = 0 ] || defects+=("rolling update under load (database password rotated): $failed requests failed ($summary): $failures")
step "password rotated under load, pods replaced: $summary, lost=0"

# --- rolling update under load: the pool's TLS certificate replaced ------------------------------
# A renewal (cert-manager writes the new pair into the same Secret): the gateways reload it and,
# its digest being in the pod template, the operator rolls them. Every request must succeed, and
# every connection then gets the new certificate.
# served_serials N: the serial of the certificate of N new TLS connections from the host to the ClusterIP
served_serials() { local n
    for n in $(seq "$1"); do
        openssl s_client -connect "$ip:9000" -servername "demo-primary.$NS.svc" </dev/null 2>/dev/null \
            | openssl x509 -noout -serial
    done | sort -u; }
old_serial=$(openssl x509 -noout -serial -in "$scratch/gateway.crt")
[ "$(served_serials 2)" = "$old_serial" ] || die "demo-primary does not serve its first certificate"
issue gateway demo-primary
new_serial=$(openssl x509 -noout -serial -in "$scratch/gateway.crt")
load_start tls 2000
eventually 60 "the load running" '[ "$(acked_so_far tls)" -ge 10 ]'
old_pods=$(pods_of demo-primary | sort)
k create secret tls demo-gateway-tls --cert="$scratch/gateway.crt" --key="$scratch/gateway.key" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
eventually 120 "demo-primary's gateways all replaced after the renewal" rolled
k rollout status deployment/demo-primary --timeout="$(within 60)" >/dev/null
eventually 30 "every connection served the renewed certificate" '[ "$(served_serials 6)" = "$new_serial" ]'
load_finish tls
[ "$failed" = 0 ] || defects+=("rolling update under load (TLS certificate renewed): $failed requests failed ($summary): $failures")
step "TLS certificate renewed under load, pods replaced, new one served: $summary, lost=0"

# --- a gateway killed (SIGKILL) mid-load: nothing acknowledged is lost, the pool recovers --------
load_start kill 2000
eventually 60 "the load running" '[ "$(acked_so_far kill)" -ge 30 ]'
victim=$(k get pods -l app.kubernetes.io/instance=demo-primary -o jsonpath='{.items[0].metadata.name}')
before=$(restarts "$NS" "$victim")
kill9 "$NS" "$victim"
at_kill=$(acked_so_far kill)
eventually 60 "$victim restarted" '[ "$(restarts "$NS" "$victim")" -gt "$before" ]'
eventually 90 "demo-primary back to 2 ready gateways" '[ "$(ready_gateways demo-primary)" = 2 ]'
recovered=$(acked_so_far kill)
eventually 60 "20 more writes acknowledged once the pool recovered" '[ "$(acked_so_far kill)" -ge $(( recovered + 20 )) ]'
load_finish kill
step "gateway SIGKILLed after $at_kill acked writes, recovered: $summary, lost=0"

# --- a capacity run: pgvs3-loadgen in the client pod against the primary pool's Service ---------
# Short and bounded (2 cases of 5 s after 1 s of warm-up, 8 workers, 4 KiB objects over HTTPS);
# debug builds on a shared 2-core node: a smoke figure of the path through kube-proxy, not a
# benchmark (docs/benchmarks.md).
in_pod pgvs3-loadgen s3 --endpoint "$P" --ca-cert "$CA" --access-key "$AK" --secret-key "$SK" \
    --bucket demo-photos --ops put,get --sizes 4KiB --keys 200 --workers 8 --duration 5 --warmup 1 --timeout 30 \
    --json /tmp/capacity.json > "$scratch/capacity.out" 2>&1 || die "pgvs3-loadgen: $(tail -n 20 "$scratch/capacity.out")"
# one line per case: "<case> <req/s> req/s p50 <ms> p99 <ms> errors <n>"; a case with errors fails
capacity=$(in_pod cat /tmp/capacity.json | python3 -c '
import json, sys
for line in sys.stdin:
    c = json.loads(line); r = c["result"]
    print("%s %.0f req/s p50 %.1f ms p99 %.1f ms errors %d" % (c["case"], r["rate"], r["p50_ms"], r["p99_ms"], sum(r["errors"].values())))
')
echo "$capacity" | sed 's/^/[node-tier capacity] /'
[ "$(grep -c ' errors 0$' <<<"$capacity")" = 2 ] || die "the capacity run had errors or not two cases: $capacity"
step "capacity run: pgvs3-loadgen s3 put,get (4 KiB, 8 workers, 5 s each) through the Service"

# --- the operator's leader killed; a scale 1 → 3 → 1 is still reconciled -------------------------
leader=$(kubectl -n "$SYS" get lease -o jsonpath='{.items[0].spec.holderIdentity}')
kubectl -n "$SYS" get pod "$leader" >/dev/null 2>&1 || die "the operator's Lease names '$leader', not a pod"
before=$(restarts "$SYS" "$leader")
kill9 "$SYS" "$leader"
k patch gatewaypool demo-standby --type=merge -p '{"spec":{"replicas":3}}' >/dev/null
eventually 60 "demo-standby scaled to 3 ready gateways" '[ "$(ready_gateways demo-standby)" = 3 ]'
[ "$(pods_of demo-standby | wc -l)" = 3 ] || die "demo-standby has $(pods_of demo-standby | wc -l) pods, not 3"
eventually 60 "operator pod $leader restarted" '[ "$(restarts "$SYS" "$leader")" -gt "$before" ]'
kubectl -n "$SYS" wait --for=condition=Ready "pod/$leader" --timeout="$(within 60)" >/dev/null
step "operator leader SIGKILLed; standby scaled 1 → 3 (leader now $(kubectl -n "$SYS" get lease -o jsonpath='{.items[0].spec.holderIdentity}'))"
k patch gatewaypool demo-standby --type=merge -p '{"spec":{"replicas":1}}' >/dev/null
eventually 90 "demo-standby back to 1 pod" '[ "$(pods_of demo-standby | wc -l)" = 1 ]'
eventually 30 "demo-standby status 1 ready gateway" '[ "$(ready_gateways demo-standby)" = 1 ]'
[ "$(pod get "$S/demo-photos/hello.txt")" = "200 $text" ] || die "S3 GET through demo-standby after scaling down"
step "standby scaled 3 → 1: pods followed, still serving"

# --- autoscaling on: the HPA is the pool's, and the replica count is handed over without a dip ----
pods_before=$(pods_of demo-primary | sort)
k patch gatewaypool demo-primary --type=merge \
    -p '{"spec":{"replicas":null,"autoscaling":{"minReplicas":2,"maxReplicas":3,"targetCPUUtilizationPercentage":80}}}' >/dev/null
eventually 30 "the HorizontalPodAutoscaler demo-primary" 'k get hpa demo-primary'
hpa=$(k get hpa demo-primary -o json)
python3 - "$hpa" "$(k get gatewaypool demo-primary -o jsonpath='{.metadata.uid}')" <<'PY' || die "the HPA demo-primary: $hpa"
import json, sys
hpa, uid = json.loads(sys.argv[1]), sys.argv[2]
owner, = hpa["metadata"]["ownerReferences"]
assert (owner["kind"], owner["name"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == \
    ("GatewayPool", "demo-primary", uid, True, True), owner
target = hpa["spec"]["scaleTargetRef"]
assert (target["kind"], target["name"]) == ("Deployment", "demo-primary"), target
assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 3), hpa["spec"]
PY
[ "$(k get deployment demo-primary -o jsonpath='{.spec.replicas}')" = 2 ] || die "autoscaling on changed demo-primary's replicas"
[ "$(pods_of demo-primary | sort)" = "$pods_before" ] || die "autoscaling on replaced or added demo-primary's pods"
step "autoscaling on: HPA owned by the pool (controller, blockOwnerDeletion), 2 replicas kept"

# --- failover: the primary stopped, the standby promoted, the primary's Service moved to it ------
# What CloudNativePG does on a failover, by hand: the primary stops (a fast shutdown, which sends
# the standby all of its WAL first, so nothing acknowledged may be lost), the standby is
# promoted and `demo-rw` then leads to it. The primary pool's gateways reach it through the same
# Service name, without a restart; requests in between may fail (unacknowledged).
restarts_before=$(for p in $(pods_of demo-primary); do restarts "$NS" "$p"; done)
load_start failover 100000
eventually 60 "the load running" '[ "$(acked_so_far failover)" -ge 10 ]'
k scale statefulset demo-primary --replicas=0 >/dev/null
# the pod's SIGTERM is a smart shutdown, which waits for the gateways' sessions: make it fast
k exec demo-primary-0 -c postgres -- sh -c 'pg_ctl stop -m fast' >/dev/null 2>&1 || true
k wait --for=delete pod/demo-primary-0 --timeout="$(within 60)" >/dev/null
at_stop=$(acked_so_far failover)
[ "$(psql_at demo-standby-0 'select pg_promote()')" = t ] || die "pg_promote() on demo-standby-0"
k patch service demo-rw --type=merge -p '{"spec":{"selector":{"role":"standby"}}}' >/dev/null
eventually 90 "demo-primary's gateways ready on the promoted server" '[ "$(ready_gateways demo-primary)" = 2 ]'
moved=$(acked_so_far failover)
eventually 60 "20 more writes acknowledged after the failover" '[ "$(acked_so_far failover)" -ge $(( moved + 20 )) ]'
load_finish failover
[ "$(resp demo-primary "$root_ak" "$root_sk" SET node-tier:failover yes)" = OK ] || die "RESP SET on demo-primary after the failover"
[ "$(for p in $(pods_of demo-primary); do restarts "$NS" "$p"; done)" = "$restarts_before" ] \
    || die "demo-primary's gateways restarted for the failover"
step "failover: primary stopped after $at_stop acked writes, standby promoted, demo-rw moved: $summary, lost=0"
# The standby pool's gateways (PGVS3_REQUIRE_ROLE=standby) now sit on a primary: unready, so its
# Service routes nothing to them.
eventually 60 "demo-standby unready on a primary" '[ "$(ready_gateways demo-standby)" = 0 ] || [ -z "$(ready_gateways demo-standby)" ]'
# HPA acting needs the resource metrics API (a metrics server), which the kit does not run: the
# HPA controller says so, and the replica count stays where the hand-over left it.
eventually 60 "the HPA reporting it cannot get CPU metrics" \
    '[ "$(k get hpa demo-primary -o jsonpath="{.status.conditions[?(@.type==\"ScalingActive\")].reason}")" = FailedGetResourceMetric ]'
step "standby pool unready on the promoted server; HPA: FailedGetResourceMetric (no metrics server)"

# --- every pod admitted under `restricted`, and still conforming ---------------------------------
for ns in "$SYS" "$NS"; do
    warn=$(kubectl label --dry-run=server --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=restricted 2>&1 >/dev/null)
    [ -z "$warn" ] || die "pods in $ns violate PodSecurity restricted: $warn"
done
gateways=$(k get pods -l app.kubernetes.io/name=pgvs3-gateway -o name | wc -l)
operators=$(kubectl -n "$SYS" get pods -o name | wc -l)
step "PodSecurity restricted: $gateways gateway + $operators operator pods admitted, none violating"

report
[ "${#defects[@]}" = 0 ] || exit 1
