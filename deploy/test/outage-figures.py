#!/usr/bin/env python3
"""The figures of deploy/test/provider-outage.sh, from `crewline load`'s turn log and report and
the two mock providers' /_mock/stats: per window of the first provider's fault schedule (each
phase, then recovered): turns started, completed, failed, p50/p99 time to first chunk, and the
requests each provider received and per turn. Standard library only.

The last line printed is
`provider outage: N turns started, K completed, L failed; R requests per turn`;
the exit status is 1 when a turn failed (an agent error, no chunk, lost or timed out)."""

import argparse
import bisect
import json
import math
import sys

FAILED = {"agent_error", "no_chunks", "lost", "timed_out", "connect_failed"}


def percentile(values, q):
    """Nearest-rank percentile, or None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def fmt_ms(value):
    return "-" if value is None else f"{value:.1f}"


def attempts(stats):
    """A provider's attempts: requests read plus connections reset before one was."""
    return stats["requests"] + stats["connections_reset"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", required=True, help="crewline load --json")
    parser.add_argument("--turn-log", required=True, help="crewline load --turn-log")
    parser.add_argument("--provider-1", required=True, help="its /_mock/stats at the end")
    parser.add_argument("--provider-2", required=True, help="its /_mock/stats at the end")
    parser.add_argument(
        "--samples", help="lines `unix_ms stats` of the second provider, once a second"
    )
    args = parser.parse_args()

    with open(args.report) as f:
        report = json.load(f)
    began = report["began_unix_ms"]
    with open(args.turn_log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    with open(args.provider_1) as f:
        first = json.load(f)
    with open(args.provider_2) as f:
        second = json.load(f)
    samples = []
    if args.samples:
        with open(args.samples) as f:
            for line in f:
                at, _, stats = line.partition(" ")
                try:
                    samples.append((int(at), attempts(json.loads(stats))))
                except (ValueError, KeyError):
                    continue
    samples.sort()

    schedule = first.get("schedule") or {}
    start = schedule.get("started_unix_ms")
    if start is None:
        print("the first provider's schedule never started (no request reached it)")
        return 1
    # Windows in unix ms: each phase, then recovered until the end of the run.
    windows = []
    for phase in schedule["phases"]:
        to = phase["to_ms"]
        if to is not None and to == phase["from_ms"]:
            continue  # a phase of no length (DOWN_SECS=0, say)
        windows.append(
            {
                "name": phase["fault"],
                "from": start + phase["from_ms"],
                "to": None if to is None else start + to,
                "first": phase["requests"] + phase["connections_reset"],
            }
        )
    if windows and windows[-1]["to"] is not None:
        windows.append({"name": "recovered", "from": windows[-1]["to"], "to": None})
    # The schedule starts at the first request to reach the first provider, a moment after
    # the first turn began: the turns before it belong to the first phase.
    if windows:
        windows[0]["from"] = 0

    def second_attempts_at(unix_ms):
        """The second provider's attempts at `unix_ms`, from the nearest sample before it."""
        if unix_ms is None:
            return attempts(second)
        i = bisect.bisect_right(samples, (unix_ms, math.inf))
        return samples[i - 1][1] if i > 0 else 0

    # The first provider counts its requests per phase exactly; after the schedule, the rest.
    phase_attempts = sum(p["requests"] + p["connections_reset"] for p in schedule["phases"])

    total_started = total_completed = total_failed = 0
    print(
        f"{'window':<14} {'from s':>7} {'to s':>7} {'turns':>6} {'ok':>6} {'failed':>6} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'req p1':>7} {'req p2':>7} {'req/turn':>8}"
    )
    for window in windows:
        lo, hi = window["from"], window["to"]
        turns = [
            r
            for r in records
            if r.get("turn") is not None
            and lo <= began + r["at_ms"] < (hi if hi is not None else math.inf)
        ]
        ok = sum(1 for r in turns if r["outcome"] == "ok")
        failed = sum(1 for r in turns if r["outcome"] in FAILED)
        firsts = [r["first_chunk_ms"] for r in turns if r.get("first_chunk_ms") is not None]
        if window["name"] == "recovered":
            p1 = attempts(first) - phase_attempts
        else:
            p1 = window["first"]
        p2 = second_attempts_at(hi) - second_attempts_at(lo)
        per_turn = (p1 + p2) / len(turns) if turns else None
        total_started += len(turns)
        total_completed += ok
        total_failed += failed
        rel = lambda t: "end" if t is None else f"{max(0, t - start) / 1000:.0f}"
        print(
            f"{window['name']:<14} {rel(lo):>7} {rel(hi):>7} {len(turns):>6} "
            f"{ok:>6} {failed:>6} {fmt_ms(percentile(firsts, 0.5)):>8} "
            f"{fmt_ms(percentile(firsts, 0.99)):>8} {fmt_ms(max(firsts) if firsts else None):>8} "
            f"{p1:>7} {p2:>7} {'-' if per_turn is None else f'{per_turn:.2f}':>8}"
        )
    connect_failed = sum(1 for r in records if r["outcome"] == "connect_failed")
    total_requests = attempts(first) + attempts(second)
    started = report["turns_started"]
    per_turn = total_requests / started if started else 0.0
    print(
        f"providers: first {first['requests']} requests + {first['connections_reset']} "
        f"connections reset {json.dumps(first['requests_by_fault'])}; second "
        f"{second['requests']} requests {json.dumps(second['requests_by_fault'])}"
    )
    if report.get("server"):
        server = report["server"]
        print(
            f"crew: CPU {server.get('cpu_ms_per_turn') or 0:.3f} ms/turn, "
            f"RSS peak {server['rss_peak_mib']:.1f} MiB"
        )
    for sample in report.get("error_samples", []):
        print(f"error: {sample}")
    failed = (
        report["turns_with_agent_error"]
        + report["turns_without_chunks"]
        + report["turns_lost"]
        + report["turns_timed_out"]
        + connect_failed
    )
    print(
        f"provider outage: {started} turns started, {report['turns_ok']} completed, "
        f"{failed} failed; {per_turn:.2f} requests per turn"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
