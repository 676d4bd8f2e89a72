#!/bin/sh
# Runs inside the node tier's client pod (busybox sh, curl, redis-cli; .ci/node-tier.sh mounts it
# from a ConfigMap): S3 requests signed with SigV4 by curl, and the load loop. `https://` URLs are
# verified against the tier's CA (ConfigMap node-tier-ca).
#   env AK, SK: the access key to sign with; ST: a session's token (x-amz-security-token), with
#             AK/SK a session's credentials (client.sh assume)
#   env PINS: "host:port:address ..." — names curl uses without a DNS lookup (curl --resolve;
#             TLS still verifies the name). The tier pins the pools' Services to their
#             ClusterIPs: the kit's DNS stand-in once took over 5 s to answer during a rolling
#             update (docs/operator.md, "the rolling update's 000/28"), which is the kit's, not
#             the gateways'.
#   client.sh put URL TEXT        -> prints the HTTP status of a PUT of TEXT
#   client.sh get URL             -> prints "<status> <body>"
#   client.sh load URL N TAG      PUT URL/load-<i> then GET it back, i = 1..N (or until the file
#                                 /tmp/stop-TAG exists); appends i to /tmp/acked-TAG for every
#                                 PUT answered 200; prints a summary, then each failed request
#                                 with curl's timings
# A request that got no HTTP answer at all is status 000 with curl's exit code (000/7 refused,
# 000/28 past the 5 s limit, 000/56 reset) and fails like any other: nothing is retried. Each
# failure is listed with how far the request got (seconds: dns, tcp, tls, first byte, total):
# a phase that never completed shows 0.
#   client.sh verify URL TAG      GETs every acknowledged key; prints "lost=<n>" and each loss
#   client.sh assume TOKEN_FILE   STS AssumeRoleWithWebIdentity as an AWS SDK sends it (an unsigned
#                                 form POST to AWS_ENDPOINT_URL_STS, role AWS_ROLE_ARN: the env of
#                                 the Bucket's identity ConfigMap) with the token in TOKEN_FILE;
#                                 prints "<status> <key id> <secret> <session token>", or
#                                 "<status> <error code>" when refused
set -u
EMPTY_SHA=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
CA=/etc/node-tier-ca/ca.crt
# curl's -w: the status, then how far the request got
TIMINGS='%{http_code} dns=%{time_namelookup} tcp=%{time_connect} tls=%{time_appconnect} first=%{time_starttransfer} total=%{time_total}'
resolve=""
for pin in ${PINS:-}; do resolve="$resolve --resolve $pin"; done

# s3 OUTPUT CURL_ARGS...: one signed request, its body to OUTPUT; sets $code (000/<curl's exit
# code> without an answer) and $timings
s3() {
    out=$1; shift
    [ -z "${ST:-}" ] || set -- -H "x-amz-security-token: $ST" "$@"
    # shellcheck disable=SC2086 # $resolve: one word per option and value
    timings=$(curl -s -o "$out" -w "$TIMINGS" --max-time 5 --cacert "$CA" $resolve \
        --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" --user "$AK:$SK" "$@")
    exit_code=$?
    code=${timings%% *}
    [ "$code" = 000 ] && code="000/$exit_code"
}

put() {
    body=/tmp/body.$$
    printf '%s' "$2" > "$body"
    s3 /dev/null -H "x-amz-content-sha256: $(sha256sum "$body" | cut -d' ' -f1)" -T "$body" "$1"
    rm -f "$body"
}

get() {
    s3 /tmp/get.$$ -H "x-amz-content-sha256: $EMPTY_SHA" "$1"
    got="$code $(cat /tmp/get.$$ 2>/dev/null)"
    rm -f /tmp/get.$$
}

case "$1" in
put) put "$2" "$3"; echo "$code" ;;
get) get "$2"; echo "$got" ;;
load)
    url=$2 n=$3 tag=$4 acked=0 put_failed=0 get_failed=0 i=1
    : > "/tmp/acked-$tag"; : > "/tmp/failed-$tag"
    # failed REQUEST: one line per failed request, its status and timings
    failed() { echo "$1 load-$i $(date +%H:%M:%S) $code ${timings#* }" >> "/tmp/failed-$tag"; }
    while [ "$i" -le "$n" ] && [ ! -e "/tmp/stop-$tag" ]; do
        text="$tag-$i"
        put "$url/load-$i" "$text"
        if [ "$code" = 200 ]; then
            echo "$i" >> "/tmp/acked-$tag"; acked=$((acked + 1))
            get "$url/load-$i"
            [ "$got" = "200 $text" ] || { get_failed=$((get_failed + 1)); failed get; }
        else
            put_failed=$((put_failed + 1)); failed put
            # a client's back-off: without it an outage (no ready gateway: refused at once)
            # would spend the whole budget N in a few seconds
            sleep 0.1
        fi
        i=$((i + 1))
    done
    # failures by request and status (000: no HTTP answer), e.g. "put:000/28x2"
    failures=$(awk '{print $1 ":" $4}' "/tmp/failed-$tag" | sort | uniq -c | awk '{printf " %sx%s", $2, $1}')
    echo "requests=$((i - 1 + acked)) acked=$acked put_failed=$put_failed get_failed=$get_failed${failures:+ (}${failures# }${failures:+)}"
    cat "/tmp/failed-$tag"
    ;;
verify)
    url=$2 tag=$3 lost=0
    for i in $(cat "/tmp/acked-$tag"); do
        get "$url/load-$i"
        [ "$got" = "200 $tag-$i" ] || { lost=$((lost + 1)); echo "load-$i: $got"; }
    done
    echo "lost=$lost of $(wc -l < "/tmp/acked-$tag")"
    ;;
assume)
    # the answer's XML, one element looked up at a time (busybox has no XML parser)
    xml() { sed -n "s:.*<$1>\([^<]*\)</$1>.*:\1:p" /tmp/sts.$$ | head -n1; }
    # shellcheck disable=SC2086 # $resolve: one word per option and value
    code=$(curl -s -o /tmp/sts.$$ -w '%{http_code}' --max-time 5 --cacert "$CA" $resolve \
        --data-urlencode Action=AssumeRoleWithWebIdentity --data-urlencode Version=2011-06-15 \
        --data-urlencode "RoleArn=$AWS_ROLE_ARN" --data-urlencode RoleSessionName=node-tier \
        --data-urlencode "WebIdentityToken@$2" "$AWS_ENDPOINT_URL_STS/")
    if [ "$code" = 200 ]; then
        echo "$code $(xml AccessKeyId) $(xml SecretAccessKey) $(xml SessionToken)"
    else
        echo "$code $(xml Code)"
    fi
    rm -f /tmp/sts.$$
    ;;
*) echo "client.sh: unknown command $1" >&2; exit 2 ;;
esac
