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

# OJS vs the raw SKIP LOCKED claim: enqueue, batch enqueue, fetch+ack at 1 and 16 workers.
bench-ojs *ARGS:
    cargo bench -p pgvs3-gateway --bench ojs_vs_direct -- {{ARGS}}
