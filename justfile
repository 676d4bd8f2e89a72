# Every routine task. `just --list` shows them.

export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", env_var("HOME") + "/.cache/pgvs3-target")

# Run the gateway on the embedded PostgreSQL (data in ./.pgvs3).
run *ARGS:
    cargo run --release --bin pgvs3 -- serve {{ARGS}}

# All tests (each test binary starts its own throwaway PostgreSQL).
test *ARGS:
    cargo test --workspace {{ARGS}}

# What CI runs.
ci:
    bash .ci/run

# Gateway vs direct PostgreSQL: 4 KiB and 64 MiB GET/PUT (see docs/benchmarks.md).
bench *ARGS:
    cargo bench -p pgvs3-gateway --bench gateway_vs_direct -- {{ARGS}}

# Load against a fresh release gateway: `just load --ops get,put --sizes 4KiB,64MiB --duration 10`.
# With `--before-bin A --after-bin B [--repeats 3]`: the paired regression gate (e2e/scripts/paired.sh).
load *ARGS:
    e2e/scripts/load.sh {{ARGS}}

# The origin cache against a constrained origin (20 ms one-way, 50 MiB/s): direct, cold, warm, write-back.
cache-bench SIZES="10MiB,100MiB" REQUESTS="5":
    e2e/scripts/cache-bench.sh {{SIZES}} {{REQUESTS}}

# redis-benchmark: the gateway's RESP vs redis-server (appendfsync always, and in-memory), 4 KiB GET/SET.
resp-bench REQUESTS="20000":
    bash scripts/resp-bench.sh {{REQUESTS}}

# Regenerate the CRDs (crds/ and the chart's copy) from the operator's types.
crds:
    cargo run -q -p pgvs3-operator --bin crdgen

# Print what the operator would apply for the resources in a file.
render FILE:
    cargo run -q -p pgvs3-operator --bin pgvs3-operator -- render -f {{FILE}}

# Lint and render the operator chart.
chart:
    helm lint --strict charts/pgvs3-operator
    helm template pgvs3-operator charts/pgvs3-operator --namespace pgvs3-system --include-crds

# The kind end-to-end suite (needs docker, kind, kubectl, helm): cluster up, then the tests.
e2e-kind:
    kind/up.sh
    PGVS3_E2E_KIND=1 cargo test -p pgvs3-e2e --test kind_fleet -- --ignored --test-threads 1

# OJS vs the raw SKIP LOCKED claim: enqueue, batch enqueue, fetch+ack at 1 and 16 workers.
bench-ojs *ARGS:
    cargo bench -p pgvs3-gateway --bench ojs_vs_direct -- {{ARGS}}
