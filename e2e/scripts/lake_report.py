#!/usr/bin/env python3
"""The tables and chart of a `just bench lake` run: lake_report.py DIR.

Reads DIR/lake.ndjson (written by e2e/scripts/lake_bench.py) and DIR/machine.txt; writes
DIR/bench.md (pgvs3 vs rclone serve s3, and Garage if it ran, for DuckDB's httpfs, Parquet scans and
DuckLake; Iceberg and Parquet full scans direct vs cold and warm through the cache) and DIR/bench.png (every ratio on one chart). Prints
the Markdown. The table helpers are `just bench`'s (bench_report.py).
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_report import fmt, load, ratio, table  # noqa: E402


def main():
    out = pathlib.Path(sys.argv[1])
    records = load(out / "lake.ndjson")
    results = {(r["group"], r["case"], r["target"]): r for r in records}
    cases = list(dict.fromkeys((r["group"], r["case"]) for r in records))
    ratios = []
    sections = ["# pgvs3 lakehouse side by side", "", "```", (out / "machine.txt").read_text().strip(), "```", ""]

    rows = []
    # rclone always; Garage when the run had it (--with-garage).
    peers = [peer for peer in ("rclone", "garage") if any(r["target"] == peer for r in records)]
    for group, case in cases:
        if group in ("iceberg", "cached scan"):
            continue
        mine = results.get((group, case, "pgvs3"))
        row = [group, case, fmt(mine and mine["p50_ms"], 1), fmt(mine and mine["rate"], 1),
               fmt(mine and mine["mib_per_second"], 1)]
        for name in peers:
            peer = results.get((group, case, name))
            speed = ratio(mine and mine["rate"], peer and peer["rate"])
            row += [fmt(peer and peer["p50_ms"], 1), fmt(peer and peer["rate"], 1), fmt(speed, 2)]
            ratios.append((f"{group} {case} / {name}", speed))
        rows.append(row)
    if rows:
        header = ["group", "case", "pgvs3 p50 ms", "pgvs3 /s", "pgvs3 MiB/s"]
        for name in peers:
            header += [f"{name} p50 ms", f"{name} /s", f"pgvs3 / {name}"]
        sections += [f"## DuckDB on S3: pgvs3 vs {' and '.join(peers)}", "",
                     "Rates are requests (httpfs) or statements per second; pgvs3 / peer > 1: pgvs3 faster.", "",
                     table(header, rows), ""]

    rows = []
    for group, case in cases:
        if group != "iceberg":
            continue
        direct, cold, warm = (results.get((group, case, t)) for t in ["direct", "cache cold", "cache warm"])
        p50 = lambda r: r and r["p50_ms"]  # noqa: E731
        faster = ratio(p50(direct), p50(warm))
        rows.append([case, fmt(p50(direct), 1), fmt(p50(cold), 1), fmt(p50(warm), 1), fmt(faster, 1),
                     fmt(ratio(p50(cold), p50(direct)), 2)])
        ratios.append((f"iceberg {case}: warm cache / direct", faster))
        ratios.append((f"iceberg {case}: cold cache / direct", ratio(p50(direct), p50(cold))))
    if rows:
        sections += ["## Iceberg planning queries: direct from the constrained origin vs through the cache", "",
                     table(["query", "direct p50 ms", "cold ms", "warm p50 ms", "warm: × faster than direct",
                            "cold / direct (time)"], rows), ""]

    rows = []
    for group, case in cases:
        if group != "cached scan":
            continue
        by_target = {r["target"]: r for (g, c, _), r in results.items() if (g, c) == (group, case)}
        direct, warm = by_target.get("direct"), by_target.get("cache warm")
        colds = sorted((t for t in by_target if t.startswith("cache cold")), key=lambda t: int(t.split("(")[1].split()[0]))
        p50 = lambda r: r and r["p50_ms"]  # noqa: E731
        faster = ratio(p50(direct), p50(warm))
        row = [case, fmt(p50(direct), 1), fmt(direct and direct["mib_per_second"], 1)]
        for cold in colds:
            row += [fmt(p50(by_target[cold]), 1), fmt(ratio(p50(by_target[cold]), p50(direct)), 2)]
            ratios.append((f"{case}: {cold} / direct", ratio(p50(direct), p50(by_target[cold]))))
        row += [fmt(p50(warm), 1), fmt(faster, 1)]
        ratios.append((f"{case}: warm cache / direct", faster))
        rows.append(row)
        header = ["Parquet scan", "direct p50 ms", "direct MiB/s"]
        for cold in colds:
            header += [f"{cold[len('cache '):]} ms", "cold / direct (time)"]
        header += ["warm p50 ms", "warm: × faster than direct"]
    if rows:
        sections += ["## Parquet full scans: direct from the constrained origin vs through the cache", "",
                     table(header, rows), ""]

    chart = [(label, value) for label, value in ratios if value]
    if chart:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(chart) + 1.2))
        labels, values = zip(*reversed(chart))
        bars = ax.barh(labels, values, color=["#2a7" if v >= 1 else "#c54" for v in values])
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("speed ratio (log scale; right of 1 = pgvs3, or the cache, faster)")
        ax.tick_params(axis="y", labelsize=8)
        ax.set_title("pgvs3 lakehouse side by side (one run, same machine)")
        fig.tight_layout()
        fig.savefig(out / "bench.png", dpi=110)
        sections += ["![ratios](bench.png)", ""]
    text = "\n".join(sections)
    (out / "bench.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
