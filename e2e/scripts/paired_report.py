#!/usr/bin/env python3
"""The verdict of a paired run (e2e/scripts/paired.sh): paired_report.py DIR --before A --after B ...

Reads DIR/runs.tsv (side, round, group, case, exit status of every run; case "-" for a side
whose gateways did not start) and DIR/SIDE-ROUND-GROUP-CASE.ndjson (the load generator's
records), prints one row per path (a loadgen case: "s3 get 4KiB", "resp set 4KiB P16", ...) with
the median p50 and rate of each side, the median of the per-round after/before ratios and their
spread, and writes DIR/paired.json. Exits 1 if any gate failed, naming each failing path.

The two runs of a round's pair ran seconds apart, so a round's ratio compares the sides under the
same machine load; the median over rounds is what is gated. Gates: median p50 ratio above 1.20,
median rate ratio below 0.80 (both reported but not gated with --smoke yes), any error, a path
missing from any run, a run that stopped early, a chosen protocol without a path.
"""
import argparse
import hashlib
import json
import pathlib
import statistics
import sys

P50_GATE = 0.20
RATE_GATE = -0.20


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def change(before, after):
    if before is None or after is None:
        return None
    return after / before - 1 if before else float("inf")


def median(results, key):
    return statistics.median(r[key] for r in results) if results else None


def round_changes(by_round, key):
    """after/before - 1 of each round that measured the path on both sides."""
    return [change(b[key], a[key]) for b, a in (
        (by_round["before"].get(r), by_round["after"].get(r)) for r in sorted(by_round["before"]))
        if b is not None and a is not None]


def fmt(value, spec, unit=""):
    return "–" if value is None else f"{value:{spec}}{unit}"


def spread(changes):
    """The lowest and highest of a path's per-round changes."""
    return f"[{min(changes):+.0%},{max(changes):+.0%}]" if changes else "–"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--loadgen", required=True)
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--smoke", choices=["yes", "no"], default="no")
    parser.add_argument("--protocols", required=True)
    parser.add_argument("--groups", nargs="+", required=True)
    args = parser.parse_args()
    out, repeats, gated = args.out, args.repeats, args.smoke == "no"

    runs = []
    for line in (out / "runs.tsv").read_text().splitlines():
        side, round_, group, case, status = line.split("\t")
        runs.append({"side": side, "round": int(round_), "group": int(group), "case": case, "status": int(status)})

    # case -> side -> round -> result; case -> (group, payload hashes).
    results, group_of, payloads = {}, {}, {}
    for run in runs:
        path = out / f"{run['side']}-{run['round']}-{run['group']}-{run['case']}.ndjson"
        for line in path.read_text().splitlines() if path.exists() else []:
            record = json.loads(line)
            case = record["case"]
            results.setdefault(case, {"before": {}, "after": {}})[run["side"]][run["round"]] = record["result"]
            group_of[case] = run["group"]
            if "payload_sha256" in record["config"]:
                payloads.setdefault(case, set()).add(record["config"]["payload_sha256"])

    failed = []
    # A run whose load generator stopped (status 1: it could not prepare or connect) leaves its
    # later paths missing on one side; status 2 means failed requests, counted by the paths.
    for run in runs:
        if run["status"] not in (0, 2):
            failed.append({"path": f"group {run['group']} ({args.groups[run['group']]})",
                           "reasons": [f"{run['side']} gateways of round {run['round']} did not start"
                                       if run["case"] == "-" else
                                       f"{run['side']} run of round {run['round']} exited {run['status']}"]})
    for protocol in args.protocols.split(","):
        if not any(case.split()[0] == protocol for case in results):
            failed.append({"path": protocol, "reasons": ["no path measured"]})

    header = (f"{'path':<30} {'p50 before':>11} {'p50 after':>10} {'change':>8} {'spread':>15} "
              f"{'rate before':>12} {'rate after':>11} {'change':>8} {'spread':>15}  verdict")
    print(header)
    cases = []
    for case in sorted(results, key=lambda c: (group_of[c], c)):
        b, a = list(results[case]["before"].values()), list(results[case]["after"].values())
        errors = sum(sum(r["errors"].values()) for r in b + a)
        p50 = [median(b, "p50_ms"), median(a, "p50_ms")]
        rate = [median(b, "rate"), median(a, "rate")]
        p50_changes, rate_changes = round_changes(results[case], "p50_ms"), round_changes(results[case], "rate")
        p50_change = statistics.median(p50_changes) if p50_changes else None
        rate_change = statistics.median(rate_changes) if rate_changes else None
        performance = [why for why, bad in [
            ("p50 +20%", p50_change is not None and p50_change > P50_GATE),
            ("rate -20%", rate_change is not None and rate_change < RATE_GATE)] if bad]
        reasons = ([f"{errors} errors"] if errors else []) + (
            [f"in {len(b)}/{repeats} before and {len(a)}/{repeats} after runs"]
            if len(b) != repeats or len(a) != repeats else []) + (performance if gated else [])
        if len(payloads.get(case, ())) > 1:
            reasons.append("sides sent different payloads")
        if reasons:
            failed.append({"path": case, "reasons": reasons})
        verdict = "FAIL: " + ", ".join(reasons) if reasons else "ok"
        if not gated and performance:
            verdict += f" ({', '.join(performance)}: not gated in a smoke)"
        print(f"{case:<30} {fmt(p50[0], '>9.2f', 'ms')} {fmt(p50[1], '>8.2f', 'ms')} {fmt(p50_change, '>+8.1%')} "
              f"{spread(p50_changes):>15} {fmt(rate[0], '>12.1f')} {fmt(rate[1], '>11.1f')} "
              f"{fmt(rate_change, '>+8.1%')} {spread(rate_changes):>15}  {verdict}")
        cases.append({"path": case, "group": group_of[case], "p50_ms": p50, "rate": rate,
                      "p50_change": p50_change, "rate_change": rate_change, "errors": errors,
                      "p50_round_changes": p50_changes, "rate_round_changes": rate_changes,
                      "payload_sha256": sorted(payloads.get(case, ())), "before": b, "after": a})

    report = {
        "before_bin": {"path": args.before, "sha256": sha256(args.before)},
        "after_bin": {"path": args.after, "sha256": sha256(args.after)},
        "loadgen_bin": {"path": args.loadgen, "sha256": sha256(args.loadgen)},
        "repeats": repeats, "smoke": not gated,
        "gates": {"p50_change_max": P50_GATE, "rate_change_min": RATE_GATE, "errors": 0, "performance_gated": gated},
        "protocols": args.protocols.split(","), "groups": args.groups, "runs": runs,
        "cases": cases, "failed_gates": failed,
    }
    (out / "paired.json").write_text(json.dumps(report, indent=2))
    if failed:
        print(f"FAILED: {len(failed)} of {len(cases)} paths or runs: "
              + "; ".join(f"{f['path']} ({', '.join(f['reasons'])})" for f in failed))
    else:
        print(f"passed: {len(cases)} paths over {len(args.groups)} groups, {repeats} rounds"
              + ("" if gated else " (smoke: performance not gated)"))
    print(f"report: {out / 'paired.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
