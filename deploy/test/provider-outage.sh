#!/usr/bin/env bash
# A model provider outage under load that must drop no call: two mock providers (`crewline
# mock-llm`), the first on a fault schedule (down for DOWN_SECS, then SLOW_MS to its first byte
# for SLOW_SECS, then healthy), one `voice_agent` crew whose model is the first with the second
# as its fallback (`--fallback-base-url`, `--hedge-after-ms HEDGE_AFTER_MS`),
# and `crewline load` at a call's pace (CALLS calls, a turn every TURN_EVERY_MS) through the
# whole schedule and RECOVERED_SECS after it. Figures (deploy/test/outage-figures.py), per
# window of the schedule: turns started and completed, failed, p50/p99 time to first chunk,
# requests at each provider and per turn (the price of the fallback and of hedging). The last
# line is
#   provider outage: N turns started, K completed, L failed; R requests per turn
# and the exit status is non-zero when a turn failed.
#
#   deploy/test/provider-outage.sh                           # 1,000 calls, release builds
#   CALLS=200 PROFILE=debug deploy/test/provider-outage.sh    # a quick look
#   FALLBACK=0 CALLS=200 deploy/test/provider-outage.sh      # the same outage without fallback
#   HEDGE_AFTER_MS=off deploy/test/provider-outage.sh         # fallback without hedging
#
# Knobs (environment): CALLS (1000), TURN_EVERY_MS (3000), DOWN_SECS (20), SLOW_SECS (20),
# SLOW_MS (3000: the slow provider's time to first byte), RECOVERED_SECS (20), HEDGE_AFTER_MS
# (500; `off`: no hedging), FALLBACK (1; 0 runs the crew on the first provider alone), CHUNKS (8)
# and CHUNK_DELAY_MS (20) per answer, PROFILE (release or debug), SKIP_BUILD=1, KEEP=1 (keep
# the work directory), CREWLINE and VOICE_AGENT (the binaries; default: the PROFILE builds in
# $CARGO_TARGET_DIR or target/). Linux, loopback only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PROFILE=${PROFILE:-release}
CALLS=${CALLS:-1000}
TURN_EVERY_MS=${TURN_EVERY_MS:-3000}
DOWN_SECS=${DOWN_SECS:-20}
SLOW_SECS=${SLOW_SECS:-20}
SLOW_MS=${SLOW_MS:-3000}
RECOVERED_SECS=${RECOVERED_SECS:-20}
HEDGE_AFTER_MS=${HEDGE_AFTER_MS:-500}
FALLBACK=${FALLBACK:-1}
CHUNKS=${CHUNKS:-8}
CHUNK_DELAY_MS=${CHUNK_DELAY_MS:-20}

for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "provider-outage: $tool is missing" >&2; exit 2; }
done
case "$PROFILE" in
  release) PROFILE_FLAG=(--release) ;;
  debug) PROFILE_FLAG=() ;;
  *) echo "provider-outage: PROFILE must be release or debug" >&2; exit 2 ;;
esac
if [[ -z "${SKIP_BUILD:-}" && -z "${CREWLINE:-}" ]]; then
  (cd "$ROOT" && cargo build "${PROFILE_FLAG[@]}" -p crewline-cli --bin crewline &&
    cargo build "${PROFILE_FLAG[@]}" --example voice_agent)
fi
CREWLINE=${CREWLINE:-$TARGET/$PROFILE/crewline}
VOICE_AGENT=${VOICE_AGENT:-$TARGET/$PROFILE/examples/voice_agent}
ulimit -n "$(ulimit -Hn)" || true

WORK=$(mktemp -d "${TMPDIR:-/tmp}/crewline-outage.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]:-}"; do
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [[ -z "${KEEP:-}" ]]; then rm -rf "$WORK"; else echo "work directory kept: $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_ms() { date +%s%3N; }
# shellcheck source=deploy/test/lib.sh
source "$ROOT/deploy/test/lib.sh"

# Three free loopback ports at once (held together, so they differ): two providers, the crew.
read -r M1 M2 CREW _ < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks: s.close()')

# The providers. The schedule's clock starts at the first completion request (the crew's first
# turn): start-up and health checks do not eat into the outage.
SCHEDULE="down for ${DOWN_SECS}s, stall:$SLOW_MS for ${SLOW_SECS}s"
MOCK_ARGS=(--chunks "$CHUNKS" --chunk-delay-ms "$CHUNK_DELAY_MS" --record-limit 1000)
"$CREWLINE" mock-llm --port "$M1" "${MOCK_ARGS[@]}" --fault-schedule "$SCHEDULE" \
  >"$WORK/provider-1.log" 2>&1 &
PIDS+=($!)
"$CREWLINE" mock-llm --port "$M2" "${MOCK_ARGS[@]}" >"$WORK/provider-2.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$M1/health" 30
wait_ready "http://127.0.0.1:$M2/health" 30

CREW_ARGS=(--port "$CREW" --service-delay-ms 0 --model mock-gpt)
if ((FALLBACK)); then
  CREW_ARGS+=(--fallback-base-url "http://127.0.0.1:$M2/v1")
  if [[ "$HEDGE_AFTER_MS" != off ]]; then CREW_ARGS+=(--hedge-after-ms "$HEDGE_AFTER_MS"); fi
fi
OPENAI_API_KEY=sk-mock-not-a-key OPENAI_BASE_URL="http://127.0.0.1:$M1/v1" \
  RUST_LOG=${RUST_LOG:-info} "$VOICE_AGENT" "${CREW_ARGS[@]}" >"$WORK/crew.log" 2>&1 &
CREW_PID=$!
PIDS+=("$CREW_PID")
if ! wait_ready "http://127.0.0.1:$CREW/ready" 60; then
  log "the crew did not start:"
  cat "$WORK/crew.log" >&2
  exit 1
fi
log "providers :$M1 (\"$SCHEDULE\") and :$M2, crew :$CREW (${CREW_ARGS[*]})"
grep -m3 -i "provider\|listening" "$WORK/crew.log" >&2 || true

# Enough turns per call to cover the schedule and RECOVERED_SECS after it.
SPAN_MS=$(((DOWN_SECS + SLOW_SECS + RECOVERED_SECS) * 1000))
TURNS=$(((SPAN_MS + TURN_EVERY_MS - 1) / TURN_EVERY_MS + 1))
RAMP=$((CALLS < 1000 ? CALLS : 1000))
log "load: $CALLS calls x $TURNS turns, a turn every $TURN_EVERY_MS ms per call"

# The second provider's counters once a second, for its requests in each window (the first
# counts its own per phase of its schedule; while down it answers no one, not even this).
(
  while true; do
    stats=$(curl -fsS --max-time 2 "http://127.0.0.1:$M2/_mock/stats" | tr -d '\n') &&
      printf '%s %s\n' "$(now_ms)" "$stats"
    sleep 1
  done
) >"$WORK/stats.log" 2>/dev/null &
PIDS+=($!)

load_status=0
"$CREWLINE" load --url "ws://127.0.0.1:$CREW/ws" --sessions "$CALLS" --turns "$TURNS" \
  --think-ms "$TURN_EVERY_MS" --ramp-per-sec "$RAMP" --turn-timeout-secs 30 \
  --connect-timeout-secs 30 --turn-log "$WORK/turns.jsonl" --json "$WORK/report.json" \
  --pid "$CREW_PID" >"$WORK/load.txt" 2>"$WORK/load.log" || load_status=$?
if ((load_status != 0)); then
  log "crewline load failed (status $load_status):"
  cat "$WORK/load.log" >&2
  exit 1
fi
cat "$WORK/load.txt" >&2
curl -fsS "http://127.0.0.1:$M1/_mock/stats" >"$WORK/provider-1-stats.json"
curl -fsS "http://127.0.0.1:$M2/_mock/stats" >"$WORK/provider-2-stats.json"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)," \
  "$PROFILE build, fallback $FALLBACK, hedge $( ((FALLBACK)) && echo "$HEDGE_AFTER_MS" || echo off)" >&2
python3 "$ROOT/deploy/test/outage-figures.py" --report "$WORK/report.json" \
  --turn-log "$WORK/turns.jsonl" --provider-1 "$WORK/provider-1-stats.json" \
  --provider-2 "$WORK/provider-2-stats.json" --samples "$WORK/stats.log"
