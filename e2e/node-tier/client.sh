#!/bin/sh
# Runs inside the node tier's client pod (busybox sh, curl, redis-cli; .ci/node-tier.sh mounts it
# from a ConfigMap): S3 requests signed with SigV4 by curl, and the load loop. `https://` URLs are
# verified against the tier's CA (ConfigMap node-tier-ca).
#   env AK, SK: the access key to sign with
#   client.sh put URL TEXT        -> prints the HTTP status of a PUT of TEXT
#   client.sh get URL             -> prints "<status> <body>"
#   client.sh load URL N TAG      PUT URL/load-<i> then GET it back, i = 1..N (or until the file
#                                 /tmp/stop-TAG exists); appends i to /tmp/acked-TAG for every
#                                 PUT answered 200; prints a summary
# A request that got no HTTP answer at all (status 000; curl's exit code is recorded beside it,
# e.g. 000/7 refused, 000/56 reset) is sent once more, as the AWS SDKs retry connection errors;
# every such retry is counted and printed (retried=...), and a request that fails again counts
# as failed.
#   client.sh verify URL TAG      GETs every acknowledged key; prints "lost=<n>" and each loss
set -u
EMPTY_SHA=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
CA=/etc/node-tier-ca/ca.crt

put() {
    body=/tmp/body.$$
    printf '%s' "$2" > "$body"
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$CA" --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" \
        -H "x-amz-content-sha256: $(sha256sum "$body" | cut -d' ' -f1)" -T "$body" "$1")
    exit_code=$?
    rm -f "$body"
    if [ "$code" = 000 ]; then echo "000/$exit_code"; else echo "$code"; fi
}

get() {
    out=/tmp/get.$$
    code=$(curl -s -o "$out" -w '%{http_code}' --max-time 5 --cacert "$CA" --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" \
        -H "x-amz-content-sha256: $EMPTY_SHA" "$1")
    exit_code=$?
    [ "$code" = 000 ] && code="000/$exit_code"
    echo "$code $(cat "$out" 2>/dev/null)"
    rm -f "$out"
}

case "$1" in
put) put "$2" "$3" ;;
get) get "$2" ;;
load)
    url=$2 n=$3 tag=$4 acked=0 put_failed=0 get_failed=0 i=1
    : > "/tmp/acked-$tag"; : > "/tmp/failed-$tag"; : > "/tmp/retried-$tag"
    while [ "$i" -le "$n" ] && [ ! -e "/tmp/stop-$tag" ]; do
        text="$tag-$i"
        code=$(put "$url/load-$i" "$text")
        case "$code" in 000/*) echo "put:$code" >> "/tmp/retried-$tag"; code=$(put "$url/load-$i" "$text") ;; esac
        if [ "$code" = 200 ]; then
            echo "$i" >> "/tmp/acked-$tag"; acked=$((acked + 1))
            got=$(get "$url/load-$i")
            case "$got" in 000/*) echo "get:${got%% *}" >> "/tmp/retried-$tag"; got=$(get "$url/load-$i") ;; esac
            [ "$got" = "200 $text" ] || { get_failed=$((get_failed + 1)); echo "get:${got%% *}" >> "/tmp/failed-$tag"; }
        else
            put_failed=$((put_failed + 1)); echo "put:$code" >> "/tmp/failed-$tag"
            # a client's back-off: without it an outage (no ready gateway: refused at once)
            # would spend the whole budget N in a few seconds
            sleep 0.1
        fi
        i=$((i + 1))
    done
    # failures by request and status (000: no HTTP answer), e.g. "put:000x2"
    failures=$(sort "/tmp/failed-$tag" | uniq -c | awk '{printf " %sx%s", $2, $1}')
    retries=$(sort "/tmp/retried-$tag" | uniq -c | awk '{printf " %sx%s", $2, $1}')
    echo "requests=$((i - 1 + acked)) acked=$acked put_failed=$put_failed get_failed=$get_failed${failures:+ (}${failures# }${failures:+)} retried=$(wc -l < "/tmp/retried-$tag")${retries:+ (}${retries# }${retries:+)}"
    ;;
verify)
    url=$2 tag=$3 lost=0
    for i in $(cat "/tmp/acked-$tag"); do
        got=$(get "$url/load-$i")
        [ "$got" = "200 $tag-$i" ] || { lost=$((lost + 1)); echo "load-$i: $got"; }
    done
    echo "lost=$lost of $(wc -l < "/tmp/acked-$tag")"
    ;;
*) echo "client.sh: unknown command $1" >&2; exit 2 ;;
esac
