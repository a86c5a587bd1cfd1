#!/usr/bin/env bash
# End-to-end check of crewline's MCP server with a real smolagents ToolCallingAgent (scripted
# model, no network beyond loopback). Kept out of `cargo test` so the README's test command
# stays Rust-only; `.ci/run` calls it.
#
# Creates (or reuses) a virtualenv with the pinned smolagents[mcp] and mcp<2 from
# tests/smolagents/requirements.txt, builds the `mcp_server` example, and runs
# tests/smolagents/e2e.py against it. Exits non-zero on any failure.
#
# Environment: SMOLAGENTS_VENV (default target/smolagents-venv), PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
venv="${SMOLAGENTS_VENV:-target/smolagents-venv}"
requirements=tests/smolagents/requirements.txt
python="${PYTHON:-python3}"

# shellcheck source=.ci/venv.sh
source .ci/venv.sh
ensure_venv "$venv" "$requirements" "$python" smolagents

echo "== smolagents e2e: building the mcp_server example"
cargo build --locked --quiet -p crewline-mcp --example mcp_server
target_dir=$(cargo metadata --format-version 1 --no-deps --locked \
  | "$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

ledger_dir=$(mktemp -d -t crewline-mcp-e2e.XXXXXX)
trap 'rm -rf "$ledger_dir"' EXIT
echo "== smolagents e2e: ToolCallingAgent -> crewline MCP server (streamable HTTP, then stdio)"
RUST_LOG="${RUST_LOG:-warn}" "$venv/bin/python" tests/smolagents/e2e.py \
  --server "$target_dir/debug/examples/mcp_server" --ledger "$ledger_dir/ledger"
echo "== smolagents e2e: passed in $(( $(date +%s) - started ))s"
