#!/usr/bin/env bash
# The Python the benchmark scripts use (fixtures, report, chart): a venv under ~/.cache with
# pinned pyarrow, numpy and matplotlib from PyPI, created on first use. Prints its python.
set -euo pipefail
venv="${PGVS3_BENCH_VENV:-$HOME/.cache/pgvs3-tools/bench-venv}"
# The Parquet fixtures' recorded SHA-256 hold for exactly these versions.
requirements=("pyarrow==26.0.1" "numpy==2.4.6" "matplotlib==3.11.2")
if ! "$venv/bin/python" -c "import pyarrow, numpy, matplotlib; assert pyarrow.__version__ == '26.0.1'" 2>/dev/null; then
    echo "installing ${requirements[*]} into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${requirements[@]}" >&2
fi
echo "$venv/bin/python"
