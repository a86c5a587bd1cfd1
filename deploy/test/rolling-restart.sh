#!/usr/bin/env bash
# A rolling restart under load that must lose no call: three `voice_agent --scripted` replicas
# behind HAProxy (deploy/test/haproxy.cfg.in: health checks on /ready, WebSocket pass-through,
# retries to another replica), with a real redis-server; `crewline load --open-loop` sends
# calls through HAProxy while each replica in turn gets SIGTERM, drains, exits, is started
# again on the same port and waits until HAProxy sees it UP. Figures from the turn log
# (deploy/test/rolling-figures.py): turns started vs completed, calls refused, errors, p99 time
# to first chunk before, during and after each restart. The last line is
#   rolling restart: N calls, M turns started, K completed, L lost
# and the exit status is non-zero when anything was lost, refused or failed.
#
#   deploy/test/rolling-restart.sh                 # 3,000 calls over about a minute
#   CALLS=300 DURATION_SECS=20 deploy/test/rolling-restart.sh      # a quick look
#
# Knobs (environment): CALLS (3000), TURNS per call (4), THINK_MS between a call's turns
# (1000), DURATION_SECS over which the calls arrive (60), FIRST_RESTART_SECS (10), SETTLE_SECS
# after a replica is UP before the next is restarted (3), BALANCE (HAProxy's algorithm,
# leastconn; roundrobin sends more calls to a draining replica, to see the retries work),
# HAPROXY_TEMPLATE (another configuration with the same placeholders), SKIP_BUILD=1, KEEP=1
# (keep the work directory), CREWLINE and VOICE_AGENT (the binaries; default: release builds
# in $CARGO_TARGET_DIR or target/). Linux, loopback only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
CALLS=${CALLS:-3000}
TURNS=${TURNS:-4}
THINK_MS=${THINK_MS:-1000}
DURATION_SECS=${DURATION_SECS:-60}
FIRST_RESTART_SECS=${FIRST_RESTART_SECS:-10}
SETTLE_SECS=${SETTLE_SECS:-3}
BALANCE=${BALANCE:-leastconn}
HAPROXY_TEMPLATE=${HAPROXY_TEMPLATE:-$ROOT/deploy/test/haproxy.cfg.in}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}

for tool in "$HAPROXY" "$REDIS_SERVER" python3 curl; do
  command -v "$tool" >/dev/null || { echo "rolling-restart: $tool is missing" >&2; exit 2; }
done
if [[ -z "${SKIP_BUILD:-}" && -z "${CREWLINE:-}" ]]; then
  (cd "$ROOT" && cargo build --release -p crewline-cli --bin crewline &&
    cargo build --release --example voice_agent)
fi
CREWLINE=${CREWLINE:-$TARGET/release/crewline}
VOICE_AGENT=${VOICE_AGENT:-$TARGET/release/examples/voice_agent}
ulimit -n "$(ulimit -Hn)" || true

WORK=$(mktemp -d "${TMPDIR:-/tmp}/crewline-rolling.XXXXXX")
PIDS=()
REPLICA_PIDS=()
cleanup() {
  for pid in "${REPLICA_PIDS[@]:-}" "${PIDS[@]:-}"; do
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

# Six free loopback ports at once (held together, so they differ): redis, HAProxy, replicas.
read -r REDIS_PORT FRONT_PORT P1 P2 P3 _ < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks: s.close()')
PORTS=("$P1" "$P2" "$P3")

# redis: loopback, with the settings docs/deploying.md gives (append-only file fsynced every
# second, no eviction), so a Redis restart loses nothing it acknowledged and crewline's check at
# connect accepts it. The replicas get its address; they do not use it yet.
"$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --appendonly yes --appendfsync everysec \
  --maxmemory-policy noeviction --dir "$WORK" >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
export CREWLINE_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"

start_replica() { # index
  local i=$1
  RUST_LOG=${RUST_LOG:-info} "$VOICE_AGENT" --scripted --port "${PORTS[$i]}" \
    --service-delay-ms 0 >>"$WORK/replica-$((i + 1)).log" 2>&1 &
  REPLICA_PIDS[i]=$!
}

for i in 0 1 2; do start_replica "$i"; done
for i in 0 1 2; do wait_ready "http://127.0.0.1:${PORTS[$i]}/ready" 30; done

start_haproxy "$BALANCE"
log "redis :$REDIS_PORT, replicas :$P1 :$P2 :$P3, HAProxy :$FRONT_PORT"

RATE=$(((CALLS + DURATION_SECS - 1) / DURATION_SECS))
log "load: $CALLS calls x $TURNS turns, $THINK_MS ms apart, $RATE calls/s"
"$CREWLINE" load --url "ws://127.0.0.1:$FRONT_PORT/ws" --open-loop --sessions "$CALLS" \
  --turns "$TURNS" --think-ms "$THINK_MS" --ramp-per-sec "$RATE" --turn-timeout-secs 30 \
  --connect-timeout-secs 30 --turn-log "$WORK/turns.jsonl" --json "$WORK/report.json" \
  >"$WORK/load.txt" 2>"$WORK/load.log" &
LOAD_PID=$!
PIDS+=("$LOAD_PID")

sleep "$FIRST_RESTART_SECS"
: >"$WORK/restarts.txt"
for i in 0 1 2; do
  name="r$((i + 1))"
  term=$(now_ms)
  kill -TERM "${REPLICA_PIDS[$i]}"
  status=0
  wait "${REPLICA_PIDS[$i]}" || status=$?
  exited=$(now_ms)
  log "$name: SIGTERM, drained and exited (status $status) in $((exited - term)) ms"
  start_replica "$i"
  wait_up "$name" 60
  up=$(now_ms)
  log "$name: started again, UP in HAProxy $((up - exited)) ms after the exit"
  echo "$name $term $exited $up $status" >>"$WORK/restarts.txt"
  if ((i < 2)); then sleep "$SETTLE_SECS"; fi
done

load_status=0
wait "$LOAD_PID" || load_status=$?
if ((load_status != 0)); then
  log "crewline load failed (status $load_status):"
  cat "$WORK/load.log" >&2
  exit 1
fi
cat "$WORK/load.txt" >&2
{
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)," \
    "$("$HAPROXY" -v | head -1 | cut -d' ' -f1-3), $("$REDIS_SERVER" --version | cut -d' ' -f1-3)"
} >&2
haproxy_stats >"$WORK/haproxy-stats.csv"
python3 "$ROOT/deploy/test/rolling-figures.py" --calls "$CALLS" --report "$WORK/report.json" \
  --turn-log "$WORK/turns.jsonl" --restarts "$WORK/restarts.txt" \
  --haproxy-stats "$WORK/haproxy-stats.csv"
