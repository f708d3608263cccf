#!/usr/bin/python3
"""dblock next to the lock libraries a user could pick instead, on the same servers, alternating.

Peers: OpenStack tooz (Debian's python3-tooz: its PostgreSQL driver takes pg_advisory_lock, its
MySQL driver GET_LOCK) and node's advisory-lock (npm, pg_advisory_lock). Each figure is one
thread doing uncontended acquire+release cycles on 64 rotating names for --seconds; dblock's comes
from `dblock bench --json` in the mode that matches the peer (advisory mode against advisory-lock
peers, GET_LOCK mode against tooz's MySQL driver), and in table mode for reference. The rounds
alternate dblock and each peer, and the ratio printed is the median over the rounds of dblock's
figure over the peer's from the same round.

Usage: tools/peers/peers.py --dblock build/release/dblock --pg URI --mysql URI [--rounds 3]
       [--seconds 3] [--json]
Needs python3-tooz, python3-psycopg2, python3-pymysql, node and npm (tools/peers/run.sh installs
them); dblock's tables migrated in both databases.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))


def dblock_figure(dblock, dsn, mode, seconds):
    """One thread, uncontended, `dblock bench --json`: dblock's cycles per second."""
    out = subprocess.run([dblock, "--dsn", dsn, "bench", "--json", "--scenario", "uncontended", "--mode", mode,
                          "--threads", "1", "--duration", f"{round(seconds * 1000)}ms"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)[0]["ops_per_sec"]


def tooz_figure(uri, seconds, tag):
    """tooz: coordinator started once, then get_lock/acquire/release per cycle (its documented use)."""
    import tooz.coordination
    coordinator = tooz.coordination.get_coordinator(uri, f"peers-{os.getpid()}".encode())
    coordinator.start()
    try:
        cycles, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            lock = coordinator.get_lock(f"peers/{tag}/{cycles % 64}".encode())
            if not lock.acquire(blocking=False):
                raise RuntimeError("tooz: an uncontended lock was not granted")
            lock.release()
            cycles += 1
        return cycles / (time.monotonic() - started)
    finally:
        coordinator.stop()


def node_figure(uri, seconds, node_dir):
    """npm advisory-lock 2.0.0: mutex(name).tryLock() then unlock(), as its README shows."""
    out = subprocess.run(["node", os.path.join(HERE, "advisory_lock_peer.js"), uri, str(seconds)], check=True,
                         capture_output=True, text=True, cwd=node_dir, env={**os.environ, "NODE_PATH":
                                                                            os.path.join(node_dir, "node_modules")})
    return float(out.stdout.strip())


def tooz_uri(dsn, scheme):
    """dblock's URI without dblock's own parameters, in tooz's scheme."""
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit((scheme, parts.netloc, parts.path, "", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dblock", required=True)
    parser.add_argument("--pg", required=True, help="postgresql:// URI with dblock's tables migrated")
    parser.add_argument("--mysql", required=True, help="mysql:// URI with dblock's tables migrated")
    parser.add_argument("--node-dir", required=True, help="a directory with advisory-lock and pg installed by npm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    pg_plain = tooz_uri(args.pg, "postgresql")
    # Each comparison: (label, peer figure, dblock DSN, dblock mode)
    comparisons = [
        ("tooz, PostgreSQL driver (pg_advisory_lock)", lambda: tooz_figure(pg_plain, args.seconds, "tooz-pg"),
         args.pg, "advisory"),
        ("tooz, MySQL driver (GET_LOCK)", lambda: tooz_figure(tooz_uri(args.mysql, "mysql"), args.seconds, "tooz-my"),
         args.mysql, "advisory"),
        ("npm advisory-lock 2.0.0 (pg_advisory_lock)", lambda: node_figure(pg_plain, args.seconds, args.node_dir),
         args.pg, "advisory"),
    ]
    results = []
    for label, peer, dsn, mode in comparisons:
        dblock_runs, dblock_table_runs, peer_runs, ratios = [], [], [], []
        for _ in range(args.rounds):  # alternating: dblock, peer, dblock (table mode)
            ours = dblock_figure(args.dblock, dsn, mode, args.seconds)
            theirs = peer()
            dblock_table_runs.append(dblock_figure(args.dblock, dsn, "table", args.seconds))
            dblock_runs.append(ours)
            peer_runs.append(theirs)
            ratios.append(ours / theirs)
        results.append({"peer": label, "peer_ops_per_sec": peer_runs, "dblock_mode": mode,
                        "dblock_ops_per_sec": dblock_runs, "dblock_table_ops_per_sec": dblock_table_runs,
                        "ratio_median": statistics.median(ratios),
                        "table_ratio_median": statistics.median(t / p for t, p in zip(dblock_table_runs, peer_runs))})
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
        return
    span = lambda values: f"{min(values):,.0f}–{max(values):,.0f}"
    print(f"1 thread, uncontended acquire+release cycles/s, {args.rounds} alternating rounds of {args.seconds:g} s\n")
    print(f"| peer | peer cycles/s | dblock, same kind of lock | dblock ÷ peer | dblock table mode | ÷ peer |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['peer']} | {span(r['peer_ops_per_sec'])} | {span(r['dblock_ops_per_sec'])} ({r['dblock_mode']}) "
              f"| **{r['ratio_median']:.1f}×** | {span(r['dblock_table_ops_per_sec'])} | {r['table_ratio_median']:.1f}× |")


if __name__ == "__main__":
    main()
