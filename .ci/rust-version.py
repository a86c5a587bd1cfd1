#!/usr/bin/env python3
"""Checks that the workspace's declared rust-version is true: it is the toolchain CI builds,
lints and tests with (an older one is not claimed, since no older toolchain is checked here),
and no dependency in Cargo.lock declares a newer one."""
import json
import re
import subprocess
import sys


def minor(version):
    """'1.95' or '1.95.0' -> (1, 95)."""
    major, minor_, *_ = (int(x) for x in re.findall(r"\d+", version))
    return (major, minor_)


metadata = json.loads(
    subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        check=True, capture_output=True, text=True,
    ).stdout
)
members = set(metadata["workspace_members"])
declared = {p["rust_version"] for p in metadata["packages"] if p["id"] in members}
if len(declared) != 1 or None in declared:
    sys.exit(f"workspace members declare different or missing rust-versions: {sorted(map(str, declared))}")
declared = declared.pop()

rustc = subprocess.run(["rustc", "--version"], check=True, capture_output=True, text=True).stdout
tested = re.search(r"rustc (\d+\.\d+)", rustc).group(1)
if minor(tested) != minor(declared):
    sys.exit(
        f"rust-version says {declared} but CI builds with rustc {tested}: set "
        f"[workspace.package] rust-version to the toolchain the workspace is tested with"
    )

newer = sorted(
    (p["name"], p["version"], p["rust_version"])
    for p in metadata["packages"]
    if p["id"] not in members and p["rust_version"] and minor(p["rust_version"]) > minor(declared)
)
if newer:
    for name, version, needs in newer:
        print(f"{name} {version} needs rust {needs}", file=sys.stderr)
    sys.exit(f"dependencies above need a newer rust than the declared {declared}")

highest = max(
    (minor(p["rust_version"]) for p in metadata["packages"] if p["id"] not in members and p["rust_version"]),
    default=(1, 0),
)
print(f"rust-version {declared}: CI's rustc {tested}; the highest a dependency needs is {highest[0]}.{highest[1]}")
