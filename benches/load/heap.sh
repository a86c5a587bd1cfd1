#!/usr/bin/env bash
# Heap bytes per call of crewline's `voice_agent` and of the floor (benches/floor), counted by
# heaptrack at a call's pace: N calls, then 2N, 3 text turns each, a turn every THINK_MS; the
# difference of the two peaks over N is what one more call holds. Both servers are built with
# the system allocator (feature `system-allocator`) so that heaptrack sees every allocation,
# and with line tables so that each site is named (benches/load/heap_sites.py).
#
#   benches/load/heap.sh OUT_DIR            # N=1000, THINK_MS=4000
#   N=500 benches/load/heap.sh /tmp/heap
#
# Needs heaptrack (Debian's package) and release builds in $CARGO_TARGET_DIR (default
# target-heap): it builds them unless SKIP_BUILD=1. Not run by CI.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1; mkdir -p "$OUT"
N=${N:-1000}; THINK_MS=${THINK_MS:-4000}
T=${CARGO_TARGET_DIR:-$ROOT/target-heap}
if [[ -z "${SKIP_BUILD:-}" ]]; then
  (cd "$ROOT" && CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_PROFILE_RELEASE_STRIP=none \
    CARGO_TARGET_DIR=$T cargo build --release --features system-allocator --example voice_agent \
    -p crewline-suite && CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_PROFILE_RELEASE_STRIP=none \
    CARGO_TARGET_DIR=$T cargo build --release -p crewline-floor --features system-allocator \
    && CARGO_TARGET_DIR=$T cargo build --release -p crewline-cli --bin crewline)
fi
R=$T/release
MP=18961; CP=18962
run() { # who n
  local who=$1 n=$2 out=$OUT/$1-$2 server
  "$R/crewline" mock-llm --port $MP --chunks 8 --record-limit 100 >/dev/null 2>&1 & local mock=$!
  sleep 0.5
  if [[ $who == floor ]]; then
    server=$R/crewline-floor
    heaptrack -o "$out" "$server" --port $CP --llm-url http://127.0.0.1:$MP/v1/chat/completions >/dev/null 2>&1 &
    for _ in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/$CP) 2>/dev/null && break; sleep 0.5; done
  else
    server=$R/examples/voice_agent
    OPENAI_API_KEY=sk-mock OPENAI_BASE_URL=http://127.0.0.1:$MP/v1 RUST_LOG=warn \
      heaptrack -o "$out" "$server" --port $CP --service-delay-ms 0 >/dev/null 2>&1 &
    for _ in $(seq 1 120); do curl -fsS -o /dev/null http://127.0.0.1:$CP/ready 2>/dev/null && break; sleep 0.5; done
  fi
  local wrapper=$!
  sleep 1
  "$R/crewline" load --url ws://127.0.0.1:$CP/ws --sessions "$n" --turns 3 --scenario text \
    --ramp-per-sec 1000 --think-ms "$THINK_MS" --turn-timeout-secs 120 >"$out.load" 2>&1
  # The server itself (heaptrack's wrapper is a shell): SIGINT, then heaptrack writes its file.
  pkill -INT -f "^$server " || true
  wait "$wrapper" 2>/dev/null || true
  kill "$mock"; wait "$mock" 2>/dev/null || true
  heaptrack_print -f "$out.zst" -p 1 -a 0 -T 0 -l 0 -n 300 -s 100 >"$out.peaks" 2>/dev/null
  echo "$who $n: $(grep -E 'peak heap memory' "$out.peaks") $(grep -o 'first chunk.*' "$out.load")"
}
for who in crewline floor; do run $who "$N"; run $who $((2 * N)); done
for who in crewline floor; do
  echo "== $who: heap per call by site"
  python3 "$ROOT/benches/load/heap_sites.py" "$OUT/$who-$N.peaks" "$OUT/$who-$((2 * N)).peaks" "$N"
done
