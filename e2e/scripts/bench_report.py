#!/usr/bin/env python3
"""The tables and chart of a `just bench` run: bench_report.py DIR.

Reads DIR/*.ndjson (written by e2e/scripts/bench.sh) and writes DIR/bench.md (Markdown tables of
rates and ratios, the capacity figures of pgvs3's cases, the machine) and DIR/bench.png (every
ratio on one chart). Prints the Markdown.
"""
import json
import pathlib
import sys

MIB = 1 << 20


def load(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_case(records):
    return {r["case"]: r for r in records}


def by_direct_case(records):
    """gateway_vs_direct's records by case, a case's two sides joined when each ran on its own
    (`--side`: the side left out reads a rate of 0)."""
    cases = {}
    for record in records:
        joined = cases.setdefault(record["case"], record)
        if joined is not record:
            for side in ("gateway", "direct"):
                if record[side]["rate"]:
                    joined[side] = record[side]
    return cases


def fmt(value, digits=0):
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# loadgen case → the gateway_vs_direct case measuring the same request directly.
DIRECT_S3 = {"s3 get 4KiB": "GET 4 KiB", "s3 put 4KiB": "PUT 4 KiB", "s3 get 8MiB": "GET 8 MiB",
             "s3 put 10MiB": "PUT 10 MiB", "s3 get 64MiB": "GET 64 MiB", "s3 put 64MiB": "PUT 64 MiB"}


def main():
    out = pathlib.Path(sys.argv[1])
    ratios = []  # (label, value) for the chart
    sections = ["# pgvs3 side by side", "", "```", (out / "machine.txt").read_text().strip(), "```", ""]

    pgvs3, direct_s3 = by_case(load(out / "s3-pgvs3.ndjson")), by_direct_case(load(out / "direct-s3.ndjson"))
    # The S3 peers that ran (Garage only with --with-garage), each with its own columns.
    peers = {name: cases for name in ["rclone", "garage"] if (cases := by_case(load(out / f"s3-{name}.ndjson")))}
    if pgvs3:
        rows = []
        for case, mine in pgvs3.items():
            direct = direct_s3.get(DIRECT_S3.get(case, ""), {}).get("direct")
            m = mine["result"]
            workers = mine["config"]["budget"]["workers"]
            row, errors = [case, str(workers), fmt(m["rate"], 1), fmt(m["mib_per_second"], 1), fmt(m["p50_ms"], 2)], 0
            for name, cases in peers.items():
                peer = cases.get(case, {}).get("result")
                row += [fmt(peer and peer["rate"], 1), fmt(peer and peer["p50_ms"], 2),
                        fmt(ratio(m["rate"], peer and peer["rate"]), 2)]
                errors += sum((peer or {}).get("errors", {}).values())
                ratios.append((f"S3 {case[3:]} / {name}", ratio(m["rate"], peer and peer["rate"])))
            rows.append(row + [fmt(direct and direct["rate"], 1), fmt(ratio(m["rate"], direct and direct["rate"]), 2),
                               str(sum(m["errors"].values()) + errors)])
            ratios.append((f"S3 {case[3:]} / direct SQL", ratio(m["rate"], direct and direct["rate"])))
        peer_columns = [column for name in peers for column in [f"{name} op/s", f"{name} p50 ms", f"pgvs3 / {name}"]]
        sections += [f"## S3: pgvs3 vs {' vs '.join(f'{name} serve s3' if name == 'rclone' else name for name in peers)}"
                     " vs the direct statements", "",
                     table(["case", "workers", "pgvs3 op/s", "pgvs3 MiB/s", "pgvs3 p50 ms", *peer_columns,
                            "direct op/s", "pgvs3 / direct", "errors"], rows), ""]
    if direct_s3:
        rows = [[case, fmt(r["gateway"]["rate"]), fmt(r["direct"]["rate"]), fmt(ratio(r["gateway"]["rate"], r["direct"]["rate"]), 2),
                 fmt(r["gateway"]["mib_per_second"], 1), fmt(r["direct"]["mib_per_second"], 1),
                 fmt(r["gateway"]["p50_ms"], 2), fmt(r["direct"]["p50_ms"], 2), str(r["clients"])]
                for case, r in direct_s3.items()]
        sections += ["### In-process gateway vs the direct statements (gateway_vs_direct)", "",
                     table(["case", "gateway op/s", "direct op/s", "ratio", "gateway MiB/s", "direct MiB/s",
                            "gateway p50 ms", "direct p50 ms", "clients"], rows), ""]
    # The CPU split of pgvs3's S3 cases (capacity mode): where a request's CPU goes.
    rows = [[case, fmt(cpu["gateway_us"], 1), fmt(cpu["postgres_us"], 1), fmt(cpu["client_us"], 1),
             fmt(ratio(cpu["gateway_us"], cpu["postgres_us"]), 2), str(cpu["requests"])]
            for case, mine in pgvs3.items() if (cpu := mine.get("cpu"))]
    if rows:
        sections += ["### CPU per request (pgvs3's S3 cases, measured seconds only)", "",
                     table(["case", "gateway µs", "PostgreSQL µs", "client µs", "gateway / PostgreSQL",
                            "requests"], rows), ""]

    # 10 MiB PUTs beside 4 KiB GETs (beside_pair in bench.sh): both halves of the mix per server.
    beside = {t: {half: next(iter(load(out / f"beside-{t}-{half}.ndjson")), None) for half in ["put", "get"]}
              for t in ["pgvs3", "rclone"]}
    if beside["pgvs3"]["put"]:
        rows = []
        for target, halves in beside.items():
            put, get = (halves[h] and halves[h]["result"] for h in ["put", "get"])
            cpu = halves["put"] and halves["put"].get("cpu")
            rows.append([target, fmt(put and put["mib_per_second"], 1), fmt(put and put["p50_ms"], 1),
                         fmt(get and get["rate"]), fmt(get and get["p50_ms"], 2),
                         fmt(cpu and cpu["gateway_us"] / 1000, 1), fmt(cpu and cpu["postgres_us"] / 1000, 1),
                         str(sum((put or {}).get("errors", {}).values()) + sum((get or {}).get("errors", {}).values()))])
        alone = pgvs3.get("s3 put 10MiB", {}).get("result")
        mine, peer = (beside[t]["put"] and beside[t]["put"]["result"]["mib_per_second"] for t in ["pgvs3", "rclone"])
        ratios.append(("S3 put 10MiB beside GETs / rclone", ratio(mine, peer)))
        sections += ["### 10 MiB PUT (8 workers) beside 4 KiB GETs (16 workers)", "",
                     f"pgvs3's 10 MiB PUT alone: {fmt(alone and alone['mib_per_second'], 1)} MiB/s. "
                     "CPU per PUT is the server's whole CPU over the PUTs' window (the GETs' included).", "",
                     table(["server", "PUT MiB/s", "PUT p50 ms", "GET op/s", "GET p50 ms", "gateway ms / PUT",
                            "PostgreSQL ms / PUT", "errors"], rows), ""]

    resp = {t: by_case(load(out / f"resp-{t}.ndjson")) for t in ["pgvs3", "redis-always", "redis-memory"]}
    if resp["pgvs3"]:
        rows = []
        for case, mine in resp["pgvs3"].items():
            m = mine["result"]["items_per_second"]
            always = resp["redis-always"].get(case, {}).get("result", {}).get("items_per_second")
            memory = resp["redis-memory"].get(case, {}).get("result", {}).get("items_per_second")
            rows.append([case, fmt(m), fmt(mine["result"]["p50_ms"], 2), fmt(always), fmt(memory),
                         fmt(ratio(m, always), 2), fmt(ratio(m, memory), 2)])
            ratios.append((f"RESP {case[5:]} / redis always", ratio(m, always)))
        sections += ["## RESP (pgvs3-loadgen, commands/s)", "",
                     table(["case", "pgvs3", "pgvs3 p50 ms", "redis appendfsync always", "redis in memory",
                            "pgvs3 / always", "pgvs3 / in memory"], rows), ""]
    bench = load(out / "redis-benchmark.ndjson")
    if bench:
        rates = {(r["target"], r["case"]): r["rate"] for r in bench}
        p99s = {(r["target"], r["case"]): r.get("p99_ms") for r in bench}
        rows = []
        for case in dict.fromkeys(r["case"] for r in bench):
            m, a, mem = (rates.get((t, case)) for t in ["pgvs3", "redis-always", "redis-memory"])
            rows.append([case, fmt(m), fmt(p99s.get(("pgvs3", case)), 1), fmt(a),
                         fmt(p99s.get(("redis-always", case)), 1), fmt(mem), fmt(ratio(m, a), 2),
                         fmt(ratio(m, mem), 2)])
            ratios.append((f"redis-benchmark {case} / redis always", ratio(m, a)))
        sections += ["## RESP (redis-benchmark, requests/s; p99 in ms)", "",
                     table(["case", "pgvs3", "pgvs3 p99", "redis appendfsync always", "always p99",
                            "redis in memory", "pgvs3 / always", "pgvs3 / in memory"], rows), ""]

    ojs, direct_ojs = by_case(load(out / "ojs-pgvs3.ndjson")), by_case(load(out / "direct-ojs.ndjson"))
    if ojs:
        rows = []
        for case, mine in ojs.items():
            workers = mine["config"]["budget"]["workers"]
            raw = direct_ojs.get(f"fetch+ack, {workers} worker(s)", {}).get("direct") if case == "ojs cycle" else None
            m = mine["result"]["items_per_second"]
            rows.append([case, str(workers), fmt(m), fmt(mine["result"]["p50_ms"], 2), fmt(raw and raw["rate"]),
                         fmt(ratio(m, raw and raw["rate"]), 2)])
            if raw:
                ratios.append((f"OJS fetch+ack / raw SKIP LOCKED", ratio(m, raw["rate"])))
        sections += ["## OJS (pgvs3-loadgen, jobs/s)", "",
                     table(["case", "workers", "pgvs3 jobs/s", "p50 ms", "raw SKIP LOCKED jobs/s", "pgvs3 / raw"], rows),
                     ""]

    rows = []
    for name in ["s3-pgvs3", "resp-pgvs3", "ojs-pgvs3"]:
        for record in load(out / f"{name}.ndjson"):
            capacity = record.get("capacity")
            if not capacity:
                continue
            before, after, drained = capacity["before"], capacity["after"], capacity.get("after_drain")
            wal = after["wal_position"] - before["wal_position"]
            rows.append([record["case"], fmt((after["database_bytes"] - before["database_bytes"]) / MIB, 1),
                         fmt(wal / MIB, 1), str(after["checkpoints"] - before["checkpoints"]),
                         fmt((after.get("gateway_rss_bytes") or 0) / MIB),
                         fmt(drained and (drained["database_bytes"] - before["database_bytes"]) / MIB, 1)])
    if rows:
        sections += ["## Capacity (pgvs3's cases)", "",
                     "Each case's warm-up and measured seconds, on a gateway fresh for each group of cases.", "",
                     table(["case", "database Δ MiB", "WAL MiB", "checkpoints", "gateway RSS after MiB",
                            "database Δ after drain MiB"], rows), ""]

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
        ax.set_xlabel("pgvs3 rate / peer rate (log scale; right of 1 = pgvs3 faster)")
        ax.tick_params(axis="y", labelsize=8)
        ax.set_title("pgvs3 side by side (one run, same machine)")
        fig.tight_layout()
        fig.savefig(out / "bench.png", dpi=110)
        sections += ["![ratios](bench.png)", ""]
    text = "\n".join(sections)
    (out / "bench.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
