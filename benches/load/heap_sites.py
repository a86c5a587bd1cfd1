#!/usr/bin/env python3
"""Heap bytes per call by allocation site, from two heaptrack peak reports (N and 2N calls).

Usage: heap_sites.py SMALL.peaks LARGE.peaks N   (as written by benches/load/heap.sh)

Each peak's backtrace is named by the first frame in the project's own code (the site that
asked) and by the library that allocated (a WebSocket buffer, a channel, a task cell); the
difference between the two runs over N is what one more call holds at its peak.
"""
import collections
import re
import sys

# Library frames that say what an allocation is, nearest the allocation first.
KINDS = [
    ("tungstenite-", "/src/protocol/mod.rs", "WebSocket read buffer"),
    ("tungstenite-", "/src/protocol/frame/", "WebSocket write buffer"),
    ("tokio-", "/sync/mpsc/", "tokio channel"),
    ("tokio-", "/sync/oneshot.rs", "tokio oneshot"),
    ("tokio-", "/task/spawn.rs", "task cell"),
    ("tokio-", "/runtime/task/mod.rs", "task cell"),
    ("hyper-util-", "", "hyper-util client"),
    ("hyper-1", "", "hyper"),
    ("serde_json-", "", "serde_json"),
]
UNITS = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9}


def parse(path):
    """Bytes and allocations at the peak, by (kind, site)."""
    size, calls = collections.Counter(), collections.Counter()
    block = None

    def flush():
        if block is None:
            return
        kind = site = None
        for frame in block[2]:
            if kind is None:
                kind = next((k for a, b, k in KINDS if a in frame and b in frame), None)
            own = re.search(r"((?:crates|examples|benches)/[^ ]+\.rs:\d+)", frame)
            if own and ".cargo/registry" not in frame and "/rustc/" not in frame:
                site = own.group(1)
                break
        key = f"{kind or 'own'} @ {site or '(outside the project)'}"
        size[key] += block[0]
        calls[key] += block[1]

    for line in open(path):
        m = re.match(r"\s*([\d.]+)([BKMG]) consumed over (\d+) calls from:", line)
        if m:
            flush()
            block = [float(m.group(1)) * UNITS[m.group(2)], int(m.group(3)), []]
            continue
        m = re.match(r"\s+at (\S+)", line)
        if m and block is not None:
            block[2].append(m.group(1))
    flush()
    return size, calls


def main():
    small, small_calls = parse(sys.argv[1])
    large, large_calls = parse(sys.argv[2])
    n = float(sys.argv[3])
    keys = sorted(set(small) | set(large), key=lambda k: small[k] - large[k])
    print("| bytes per call | allocations per call | what @ where |")
    print("|---|---|---|")
    shown = 0.0
    for key in keys:
        per_call = (large[key] - small[key]) / n
        if abs(per_call) < 16:
            continue
        shown += per_call
        print(f"| {per_call:,.0f} | {(large_calls[key] - small_calls[key]) / n:.1f} | {key} |")
    print(f"| {shown:,.0f} | | all sites above |")


if __name__ == "__main__":
    main()
