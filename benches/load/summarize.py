#!/usr/bin/env python3
"""Turns the JSON reports of benches/load/run.sh into the Markdown tables of BENCHMARKS.md and benches/history/diary.md.

Usage: python3 benches/load/summarize.py [--pair A B] benches/load/results/<run>

Each table sets two implementations side by side, A then B, and the ratio B / A: by default
A = crewline and B = the Python reference; `--pair crewline asyncopenai` sets crewline's two
LLM clients side by side.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NAME = re.compile(r"^(crewline|reference|asyncopenai|floor)-(\w+)-d(\d+)-n(\d+)\.json$")


def load_mock_stats(directory: Path):
    """The model's connection counts per run (`<run>.mock.json`, written by run.sh with TLS)."""
    stats = {}
    for path in sorted(directory.glob("*.mock.json")):
        match = NAME.match(path.name.replace(".mock.json", ".json"))
        if not match:
            continue
        impl, scenario, delay, sessions = match.groups()
        try:
            stats[(scenario, int(delay), int(sessions), impl)] = json.loads(path.read_text())
        except ValueError:
            continue
    return stats


def load(directory: Path):
    runs = {}
    for path in sorted(directory.glob("*.json")):
        match = NAME.match(path.name)
        if not match:
            continue
        impl, scenario, delay, sessions = match.groups()
        try:
            report = json.loads(path.read_text())
        except ValueError:
            report = {"failed": True}
        runs[(scenario, int(delay), int(sessions), impl)] = report
    return runs


def fmt(value, digits=2):
    if value is None:
        return "–"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:.0f}"
        return f"{value:.{digits}f}"
    return str(value)


def ratio(b, a):
    """b / a, as the tables print it."""
    if b is None or a is None or a <= 0:
        return "–"
    if b / a >= 10:
        return f"{b / a:.0f}×"
    return f"{b / a:.1f}×" if b / a >= 2 else f"{b / a:.2f}×"


def server(report, key):
    usage = report.get("server") or {}
    return usage.get(key)


def status(report):
    if report is None:
        return "not run"
    if report.get("failed"):
        return "run failed/timed out"
    errors = report.get("errors", 0)
    lost = report.get("turns_not_run", 0)
    if errors or lost:
        return f"{errors} errors, {report.get('turns_completed', 0)}/{report['sessions'] * report['turns_per_session']} turns"
    return "ok"


def main() -> None:
    args = sys.argv[1:]
    first, second = "crewline", "reference"
    if args[:1] == ["--pair"]:
        first, second, args = args[1], args[2], args[3:]
    directory = Path(args[0])
    runs = load(directory)
    mock_stats = load_mock_stats(directory)
    keys = sorted({(s, d) for (s, d, _, _) in runs})
    machine = directory / "machine.txt"
    if machine.exists():
        print("```")
        print(machine.read_text().strip())
        print("```\n")
    for scenario, delay in keys:
        sizes = sorted({n for (s, d, n, _) in runs if (s, d) == (scenario, delay)})
        print(f"### {scenario}, {delay} ms per chunk\n")
        print(
            f"| sessions | TTFC p50 / p99 (ms) {first} | {second} | CPU ms/turn {first} | {second} | ratio "
            f"| KiB/session {first} | {second} | ratio | turns/s {first} | {second} | status {first} | {second} |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            c = runs.get((scenario, delay, n, first))
            r = runs.get((scenario, delay, n, second))

            def ttfc(report):
                if not report or report.get("failed") or not report["time_to_first_chunk"]["count"]:
                    return "–"
                t = report["time_to_first_chunk"]
                return f"{fmt(t['p50_ms'])} / {fmt(t['p99_ms'])}"

            def get(report, key):
                if not report or report.get("failed"):
                    return None
                return server(report, key)

            def tps(report):
                if not report or report.get("failed"):
                    return None
                return report.get("turns_per_sec")

            c_cpu, r_cpu = get(c, "cpu_ms_per_turn"), get(r, "cpu_ms_per_turn")
            c_mem, r_mem = get(c, "memory_per_session_kib"), get(r, "memory_per_session_kib")
            print(
                f"| {n} | {ttfc(c)} | {ttfc(r)} | {fmt(c_cpu, 3)} | {fmt(r_cpu, 3)} | {ratio(r_cpu, c_cpu)} "
                f"| {fmt(c_mem, 1)} | {fmt(r_mem, 1)} | {ratio(r_mem, c_mem)} | {fmt(tps(c), 1)} | {fmt(tps(r), 1)} "
                f"| {status(c)} | {status(r)} |"
            )
        print()
        interrupted = [
            (n, impl, runs[(scenario, delay, n, impl)])
            for n in sizes
            for impl in (first, second)
            if (scenario, delay, n, impl) in runs
            and runs[(scenario, delay, n, impl)].get("turns_interrupted")
        ]
        if interrupted:
            print("| sessions | impl | interrupted turns | interrupt → last chunk p50 / p99 / max (ms) | interrupt → end p99 (ms) | chunks after interrupt |")
            print("|---|---|---|---|---|---|")
            for n, impl, report in interrupted:
                last = report["interrupt_to_last_chunk"]
                end = report["interrupt_to_end"]
                print(
                    f"| {n} | {impl} | {report['turns_interrupted']} | {fmt(last['p50_ms'], 3)} / {fmt(last['p99_ms'], 3)} / "
                    f"{fmt(last['max_ms'], 3)} | {fmt(end['p99_ms'], 3)} | {report['chunks_after_interrupt']} |"
                )
            print()
        connected = [
            (n, impl, mock_stats[(scenario, delay, n, impl)])
            for n in sizes
            for impl in (first, second)
            if (scenario, delay, n, impl) in mock_stats
        ]
        if connected:
            print("Connections to the model (the mock's `/_mock/stats` after the run, warm-up included):\n")
            print("| sessions | impl | opened | open at most at once | open at the end | h2 / http/1.1 (TLS) | TLS handshakes failed | requests |")
            print("|---|---|---|---|---|---|---|---|")
            for n, impl, stats in connected:
                print(
                    f"| {n} | {impl} | {fmt(stats.get('connections'))} | {fmt(stats.get('connections_open_peak'))} "
                    f"| {fmt(stats.get('connections_open'))} | {fmt(stats.get('connections_h2'))} / {fmt(stats.get('connections_http1'))} "
                    f"| {fmt(stats.get('tls_handshakes_failed'))} | {fmt(stats.get('requests'))} |"
                )
            print()


if __name__ == "__main__":
    main()
