#!/usr/bin/python3
"""Draws `dblock bench --scenario scale --json` output as one SVG and prints the same figures as a
Markdown table, so the chart in the docs and the table beside it come from one file.

Usage: tools/bench_chart.py --out doc/scale.svg LABEL=FILE.json [LABEL=FILE.json ...] > table.md
Needs python3-matplotlib (Debian).
"""
import argparse
import json

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

matplotlib.rcParams["svg.hashsalt"] = "dblock"  # stable ids: the checked-in file changes only with its data
matplotlib.rcParams["svg.fonttype"] = "none"


def rows_of(results, scenario):
    return [r for r in results if r["scenario"] == scenario]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("inputs", nargs="+", help="LABEL=FILE.json")
    args = parser.parse_args()
    runs = []
    for spec in args.inputs:
        label, path = spec.split("=", 1)
        with open(path, encoding="utf-8") as f:
            runs.append((label, json.load(f)))

    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    table, renew, handoff, threads = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    for label, results in runs:
        rows = rows_of(results, "scale rows")
        if rows:
            x = [int(r["rows"]) for r in rows]
            table.plot(x, [r["p50_ms"] for r in rows], "o-", label=f"{label} p50")
            table.plot(x, [r["p99_ms"] for r in rows], "o--", label=f"{label} p99")
        renewals = rows_of(results, "scale renew")
        if renewals:
            renew.plot([int(r["locks"]) for r in renewals], [r["p50_ms"] for r in renewals], "o-", label=label)
        handoffs = rows_of(results, "scale handoff")
        handoff.plot([int(r["waiters"]) for r in handoffs], [r["p50_ms"] for r in handoffs], "o-", label=f"{label} p50")
        handoff.plot([int(r["waiters"]) for r in handoffs], [r["p99_ms"] for r in handoffs], "o--", label=f"{label} p99")
        by_threads = rows_of(results, "scale threads")
        threads.plot([r["threads"] for r in by_threads], [r["ops_per_sec"] for r in by_threads], "o-", label=label)
    for ax, title, xlabel, ylabel, logy in (
            (table, "Acquire+release latency vs lock-table size", "rows in the lock table", "ms", False),
            (renew, "One renewal cycle vs locks held", "locks held by one manager", "ms per cycle", True),
            (handoff, "Hand-off latency vs waiters on one name", "waiters", "ms, release to next grant", False),
            (threads, "Uncontended throughput vs client threads", "threads", "cycles/s", False)):
        ax.set_title(title, fontsize=10)
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    figure.suptitle("dblock bench --scenario scale (2 cores, servers on the same host)", fontsize=11)
    figure.tight_layout()
    figure.savefig(args.out, metadata={"Date": None} if args.out.endswith(".svg") else None)

    print("| backend | scenario | size | cycles/s (renew: locks/s) | p50 ms | p99 ms | server CPU ms per hand-off |")
    print("|---|---|---|---|---|---|---|")
    for label, results in runs:
        for r in results:
            size = r.get("rows") or r.get("locks") or r.get("waiters") or r["threads"]
            size_name = {"scale rows": "rows", "scale renew": "locks", "scale handoff": "waiters",
                         "scale threads": "threads"}[r["scenario"]]
            cpu = r.get("server_cpu_ms_per_handoff", "–")
            print(f"| {label} | {r['scenario'].split()[1]} | {int(size):,} {size_name} | {r['ops_per_sec']:,.0f} "
                  f"| {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {cpu} |")


if __name__ == "__main__":
    main()
