# Every routine task. `just --list` shows them.

export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", env_var("HOME") + "/.cache/pgvs3-target")

# Run the gateway on the embedded PostgreSQL (data in ./.pgvs3).
run *ARGS:
    cargo run --release --bin pgvs3 -- serve {{ARGS}}

# All tests (each test binary starts its own throwaway PostgreSQL); installs the clients they
# drive on first use (scripts/test).
test *ARGS:
    scripts/test {{ARGS}}

# What CI runs.
ci:
    bash .ci/run

# pgvs3 side by side with rclone, redis-server and the direct statements, in one run; a table of
# ratios and a chart (docs/benchmarks.md). `just bench --smoke` for a quick check of the harness;
# `--with-garage` adds Garage (built once with cargo install), `--full` the 1 GiB fixtures;
# `--only s3,resp,cold,ojs,direct` picks groups (`cold`: issue 39's fresh-directory cases alone).
# `just bench lake [--smoke] [--full]`: DuckDB httpfs, Parquet scans, DuckLake and Iceberg
# through the cache, beside rclone (e2e/scripts/bench-lake.sh).
bench *ARGS:
    e2e/scripts/bench.sh {{ARGS}}

# Gateway vs direct PostgreSQL, in-process: 4 KiB and 64 MiB GET/PUT (the direct column of `just bench`).
bench-direct *ARGS:
    cargo bench -p pgvs3-gateway --bench gateway_vs_direct -- {{ARGS}}

# Load against a fresh release gateway: `just load --ops get,put --sizes 4KiB,64MiB --duration 10`,
# `just load resp --pipeline 1,16`, `just load ojs --capacity`, `just load cache --sizes 10MiB`.
# With `--before-bin A --after-bin B [--protocols s3,resp,ojs,cache] [--repeats 4]`: the paired
# regression gate over every protocol (e2e/scripts/paired.sh).
load *ARGS:
    e2e/scripts/load.sh {{ARGS}}

# Small GETs beside large PUTs on one fresh gateway (admission fairness): `just mixed A B` with
# the pgvs3 and pgvs3-loadgen binaries, `--get-workers 300 --put-workers 50 --seconds 10`.
mixed PGVS3 LOADGEN *ARGS:
    e2e/scripts/mixed.sh {{PGVS3}} {{LOADGEN}} {{ARGS}}

# The benchmark fixtures (Parquet and binary; SET is smoke or full), checked against e2e/fixtures/manifest.json.
fixtures SET="full":
    "$(e2e/scripts/bench-venv.sh)" e2e/scripts/fixtures.py --set {{SET}}

# The origin cache against a constrained origin (20 ms one-way, 50 MiB/s): direct, cold, warm, write-back.
cache-bench SIZES="10MiB,100MiB" REQUESTS="5":
    e2e/scripts/cache-bench.sh {{SIZES}} {{REQUESTS}}

# The RESP part of `just bench`: pgvs3-loadgen and redis-benchmark against the gateway and
# redis-server (appendfsync always, and in memory).
resp-bench *ARGS:
    e2e/scripts/bench.sh --only resp {{ARGS}}

# Regenerate the CRDs (crds/ and the chart's copy) from the operator's types.
crds:
    cargo run -q -p pgvs3-operator --bin crdgen

# Regenerate gateway/schema.sql (the whole layout, pg_dump of a freshly migrated database).
schema:
    PGVS3_WRITE_SCHEMA=1 cargo test -q --locked -p pgvs3-gateway --test platform -- layout::schema_sql_is_current

# Re-pin the function files (gateway/migrations/functions.pin) after adding the numbered
# migration a function change needs; it refuses to re-pin without one.
pin:
    PGVS3_WRITE_PIN=1 cargo test -q --locked -p pgvs3-pg --lib -- function_files_are_pinned

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
    PGVS3_E2E_KIND=1 cargo test -p pgvs3-e2e --test e2e -- --ignored kind_fleet:: --test-threads 1

# OJS vs the raw SKIP LOCKED claim: enqueue, batch enqueue, fetch+ack at 1 and 16 workers.
bench-ojs *ARGS:
    cargo bench -p pgvs3-gateway --bench ojs_vs_direct -- {{ARGS}}

# The history checker's long run (docs/history-checker.md): SECONDS per workload, FAULTS 1 kills
# PostgreSQL -9 mid-run. Prints each workload's seed; PGVS3_HISTORY_SEED replays one.
history SECONDS="600" FAULTS="1":
    PGVS3_HISTORY_SECONDS={{SECONDS}} PGVS3_HISTORY_FAULTS={{FAULTS}} cargo test --locked -p pgvs3-gateway --test history -- --nocapture --test-threads 1
