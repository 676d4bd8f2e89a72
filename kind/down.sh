#!/usr/bin/env bash
# Deletes the end-to-end kind cluster.
set -euo pipefail
kind delete cluster --name "${PGVS3_KIND_CLUSTER:-pgvs3}"
