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
    cargo run --release -p pgvs3-gateway --example bench -- {{ARGS}}

# Load against a fresh release gateway: `just load --ops get,put --sizes 4KiB,64MiB --duration 10`.
load *ARGS:
    e2e/scripts/load.sh {{ARGS}}

# redis-benchmark: the gateway's RESP vs redis-server (appendfsync always, and in-memory), 4 KiB GET/SET.
resp-bench REQUESTS="20000":
    bash scripts/resp-bench.sh {{REQUESTS}}
