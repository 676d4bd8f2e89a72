#!/usr/bin/env bash
# Creates the kind cluster for the end-to-end suite and installs everything it needs:
# gateway and operator images, PostgreSQL (CloudNativePG when its CRD is present, else the plain
# primary + standby in kind/postgres.yaml), the operator chart, and a Primary and a Standby pool.
#
# Needs docker, kind, kubectl and helm. Then: PGVS3_E2E_KIND=1 cargo test -p pgvs3-e2e --test e2e -- --ignored kind_fleet::
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${PGVS3_KIND_CLUSTER:-pgvs3}"
TAG="${PGVS3_IMAGE_TAG:-e2e}"
NAMESPACE=pgvs3-demo

if ! kind get clusters | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --config kind/cluster.yaml --wait 120s
fi
kubectl config use-context "kind-$CLUSTER"

docker build --target gateway -t "ghcr.io/pgvs3/pgvs3:$TAG" .
docker build --target operator -t "ghcr.io/pgvs3/pgvs3-operator:$TAG" .
kind load docker-image --name "$CLUSTER" "ghcr.io/pgvs3/pgvs3:$TAG" "ghcr.io/pgvs3/pgvs3-operator:$TAG"

kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
# Pools on CloudNativePG verify its TLS (verify-full against demo-ca) by default; the plain
# servers of kind/postgres.yaml speak no TLS, so there the pools say sslMode: disable, and
# accept that the password goes to a server nobody verified (a test cluster).
postgres_tls=
if kubectl get crd clusters.postgresql.cnpg.io >/dev/null 2>&1; then
    echo "CloudNativePG found: using docs/examples/cnpg-cluster.yaml"
    kubectl apply -f docs/examples/cnpg-cluster.yaml
    kubectl -n "$NAMESPACE" wait --for=condition=Ready cluster/demo --timeout=300s
else
    echo "no CloudNativePG: plain primary + standby from kind/postgres.yaml"
    postgres_tls='s|^    clusterName: demo$|    clusterName: demo\n    sslMode: disable\n    sendPasswordToUnverifiedServer: true|'
    kubectl apply -f kind/postgres.yaml
    kubectl -n "$NAMESPACE" rollout status statefulset/demo-primary --timeout=300s
    kubectl -n "$NAMESPACE" rollout status statefulset/demo-standby --timeout=300s
fi

helm upgrade --install pgvs3-operator charts/pgvs3-operator \
    --namespace pgvs3-system --create-namespace \
    --set image.tag="$TAG" --set image.pullPolicy=Never --wait --timeout 180s

for pool in docs/examples/gatewaypool-primary.yaml docs/examples/gatewaypool-standby.yaml; do
    sed -e "s|^  role:|  image: ghcr.io/pgvs3/pgvs3:$TAG\n  imagePullPolicy: Never\n  role:|" -e "${postgres_tls:-}" "$pool" |
        kubectl apply -f -
done
kubectl -n "$NAMESPACE" wait --for=condition=Ready gatewaypool/demo-primary gatewaypool/demo-standby --timeout=300s
kubectl get pgvs3 -A
