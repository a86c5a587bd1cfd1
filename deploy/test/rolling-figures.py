#!/usr/bin/env python3
"""The figures of deploy/test/rolling-restart.sh, from `crewline load`'s turn log and the
restart times: turns started vs completed, calls refused, errors and the p99 time to first
chunk in each window (before the first restart, during each restart from SIGTERM until HAProxy
sees the replica UP again, between restarts, after the last). Standard library only.

The last line printed is `rolling restart: N calls, M turns started, K completed, L lost`;
the exit status is 1 when a turn was lost or timed out, a call was refused, or a turn carried
an agent error."""

import argparse
import json
import math
import sys

COMPLETED = {"ok", "agent_error", "no_chunks"}
LOST = {"lost", "timed_out"}


def p99(values):
    """Nearest-rank 99th percentile, or None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def fmt_ms(value):
    return "-" if value is None else f"{value:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--report", required=True, help="crewline load --json")
    parser.add_argument("--turn-log", required=True, help="crewline load --turn-log")
    parser.add_argument("--restarts", required=True, help="name term exited up status (unix ms)")
    parser.add_argument("--haproxy-stats", help="HAProxy's `show stat` CSV at the end")
    args = parser.parse_args()

    with open(args.report) as f:
        report = json.load(f)
    began = report["began_unix_ms"]
    with open(args.turn_log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    restarts = []
    with open(args.restarts) as f:
        for line in f:
            name, term, exited, up, status = line.split()
            restarts.append(
                {
                    "name": name,
                    "term": int(term) - began,
                    "exited": int(exited) - began,
                    "up": int(up) - began,
                    "status": int(status),
                }
            )

    # Windows over the run, in ms since it began: each restart from SIGTERM to UP again.
    windows = []
    start = 0.0
    for i, restart in enumerate(restarts):
        label = "before the restarts" if i == 0 else f"between {restarts[i - 1]['name']} and {restart['name']}"
        windows.append((label, start, restart["term"]))
        windows.append((f"restart {restart['name']}", restart["term"], restart["up"]))
        start = restart["up"]
    windows.append(("after the restarts" if restarts else "whole run", start, math.inf))

    print(
        f"{'window':<24} {'from s':>7} {'to s':>7} {'turns':>6} {'done':>6} {'lost':>5} "
        f"{'refused':>7} {'errors':>6} {'TTFC p99 ms':>11} {'max ms':>7}"
    )
    for label, lo, hi in windows:
        inside = [r for r in records if lo <= r["at_ms"] < hi]
        turns = [r for r in inside if r["turn"] is not None]
        done = [r for r in turns if r["outcome"] in COMPLETED]
        lost = [r for r in turns if r["outcome"] in LOST]
        refused = [r for r in inside if r["outcome"] == "connect_failed"]
        errors = len(lost) + len(refused) + sum(r["outcome"] == "agent_error" for r in turns)
        ttfc = [r["first_chunk_ms"] for r in done if r["first_chunk_ms"] is not None]
        to = "end" if hi == math.inf else f"{hi / 1000:.1f}"
        print(
            f"{label:<24} {lo / 1000:>7.1f} {to:>7} {len(turns):>6} {len(done):>6} "
            f"{len(lost):>5} {len(refused):>7} {errors:>6} {fmt_ms(p99(ttfc)):>11} "
            f"{fmt_ms(max(ttfc, default=None)):>7}"
        )
    for restart in restarts:
        print(
            f"{restart['name']}: drained and exited in {(restart['exited'] - restart['term']) / 1000:.2f} s "
            f"(status {restart['status']}), UP again {(restart['up'] - restart['exited']) / 1000:.2f} s later"
        )

    turns = [r for r in records if r["turn"] is not None]
    started = len(turns)
    completed = sum(r["outcome"] in COMPLETED for r in turns)
    lost = sum(r["outcome"] in LOST for r in turns)
    refused = sum(r["outcome"] == "connect_failed" for r in records)
    agent_errors = sum(r["outcome"] == "agent_error" for r in turns)
    no_chunks = sum(r["outcome"] == "no_chunks" for r in turns)
    last_up = max((r["up"] for r in restarts), default=0)
    last_turn = max((r["at_ms"] for r in turns), default=0)
    print(
        f"calls refused {refused}, turns with agent.error {agent_errors}, without chunks "
        f"{no_chunks}; report: turns started {report['turns_started']}, errors {report['errors']}"
    )
    if args.haproxy_stats:
        with open(args.haproxy_stats) as f:
            lines = f.read().splitlines()
        head = lines[0].lstrip("# ").split(",")
        rows = {}
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            rows[(row.get("pxname"), row.get("svname"))] = row
        backend = rows.get(("crew", "BACKEND"), {})
        frontend = rows.get(("calls", "FRONTEND"), {})
        print(
            f"HAProxy: {backend.get('wretr', '?')} retries, {backend.get('wredis', '?')} "
            f"redispatches, {frontend.get('hrsp_5xx', '?')} 5xx answers to callers"
        )
    if last_turn < last_up:
        print("warning: the load ended before the last replica was UP again; raise CALLS or DURATION_SECS")
    print(f"rolling restart: {args.calls} calls, {started} turns started, {completed} completed, {lost} lost")
    failed = lost > 0 or completed != started or refused > 0 or agent_errors > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
