#!/usr/bin/env bash
# End-to-end check of crewline's task API with Smooth's own Python SDK (smooth-py): the SDK
# registers a tool, a platform call on loopback uses it, and the task ends with the call (no
# network beyond loopback, scripted model). Kept out of `cargo test` so the README's test
# command stays Rust-only; `.ci/run` calls it.
#
# Creates (or reuses) a virtualenv with the pinned smooth-py from tests/smooth/requirements.txt,
# builds the `remote_weather` example, and runs tests/smooth/e2e.py against it. Exits non-zero
# on any failure.
#
# Environment: SMOOTH_VENV (default target/smooth-venv), PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
venv="${SMOOTH_VENV:-target/smooth-venv}"
requirements=tests/smooth/requirements.txt
python="${PYTHON:-python3}"

# shellcheck source=.ci/venv.sh
source .ci/venv.sh
ensure_venv "$venv" "$requirements" "$python" smooth

echo "== smooth e2e: building the remote_weather example"
# --workspace resolves features as `.ci/run`'s `cargo build --workspace --examples` does, so
# after it this builds nothing.
cargo build --locked --quiet --workspace --example remote_weather
target_dir=$(cargo metadata --format-version 1 --no-deps --locked \
  | "$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

echo "== smooth e2e: smooth-py SmoothClient -> crewline task API, a platform call on /ws"
"$venv/bin/python" tests/smooth/e2e.py --server "$target_dir/debug/examples/remote_weather"
echo "== smooth e2e: passed in $(( $(date +%s) - started ))s"
