#!/usr/bin/env bash
# A chaos run of the bank crew (issue 31, "Prove it"): three `bank_support --scripted` replicas
# behind HAProxy (deploy/test/haproxy.cfg.in), redis-server with AOF, and the testkit's fake
# bank (`crewline fake-bank`, outside the crews' processes) booking every transfer the replicas
# make (CREWLINE_BANK_URL). `crewline load --scenario bank --reconnect` drives the calls: a
# balance question, "send $X to Alice" with an amount unique in the run, "yes", and again; a
# dropped call is reconnected through HAProxy with the same call id and the conversation so
# far, the turn in flight sent again, as a platform does; a transfer the caller did not hear
# confirmed is asked for once more, as a person would. Meanwhile, every KILL_EVERY_SECS a
# random replica gets SIGKILL and is started again; once, one replica is frozen (SIGSTOP) for
# FREEZE_SECS, then SIGCONT; once, at FAILOVER_AT_SECS, the Redis primary is killed (SIGKILL)
# and three sentinels promote its replica (SENTINEL=1, the default; SENTINEL=0: one Redis).
# The last line is
#   chaos: N calls, M turns started, C completed, L lost (in flight at a kill: K), transfers
#   requested R, executed E, duplicated D, unknown U (P pending in the ledger)
# (one line): N calls, M turns sent, C answered, L never answered after the retries, K turns in
# flight when their connection dropped or froze; R transfers asked for, E executions at the
# bank, D transfers (unique amounts) the bank executed more than once, U transfers the caller
# never heard confirmed, P intents without an outcome in `crewline ledger pending` (`n/a` while
# crewline has no such command). The exit status is non-zero when D > 0 or L > K.
#
# CREW=router runs the same chaos on three `collections_router --scripted` replicas (the
# deterministic router: intake -> verify -> resolve, its place checkpointed in Redis) with
# `crewline load --scenario router`: each call gives its account number, its date of birth,
# then a monthly payment each later turn, and the load generator follows the sub-agent each
# call is in from the router's `agent.transition` logs. No fake bank. The last line is then
#   chaos: N calls, M turns started, C completed, L lost (in flight at a kill: K), resumed R, in
#   the wrong sub-agent W
# (one line): R calls answered after a reconnect, W of them answered by a sub-agent they were
# not in (the load report above it names them). The exit status is non-zero when W > 0 or
# L > K.
#
#   deploy/test/chaos.sh                                  # 1,000 calls of 6 turns
#   CALLS=60 DURATION_SECS=20 KILL_EVERY_SECS=5 FREEZE_SECS=5 deploy/test/chaos.sh   # a look
#   CREW=router CALLS=200 deploy/test/chaos.sh           # resumed calls keep their sub-agent
#
# Knobs (environment): CREW (bank or router), CALLS (1000), TURNS per call (6), THINK_MS between turns (1000),
# DURATION_SECS over which calls arrive (60), KILL_EVERY_SECS (15), RESTART_AFTER_SECS before a
# killed replica is started again (1), FREEZE_AT_SECS (20), FREEZE_SECS (20; 0: no freeze),
# TURN_TIMEOUT_SECS before a silent turn counts as a drop (10), RETRIES reconnect attempts per
# turn (6), BACKOFF_SECS (0.5), BANK_DELAY_MS the bank takes to book a transfer (300),
# SENTINEL (1), FAILOVER_AT_SECS (30), FAILOVER_GAP_SECS (5: no replica killed that soon after
# the failover; 0 shows what a kill during it loses), REDIS_FAILOVER_CMD (default with SENTINEL=1: SIGKILL
# of the primary), HAPROXY_TEMPLATE, PROFILE (release or
# debug), SKIP_BUILD=1, KEEP=1 (keep the work directory), CREWLINE, BANK_SUPPORT and
# COLLECTIONS_ROUTER (the binaries). Linux, loopback only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PROFILE=${PROFILE:-release}
CREW=${CREW:-bank}
case "$CREW" in
  bank) CREW_EXAMPLE=bank_support ;;
  router) CREW_EXAMPLE=collections_router ;;
  *) echo "chaos: CREW must be bank or router, not '$CREW'" >&2; exit 2 ;;
esac
CALLS=${CALLS:-1000}
TURNS=${TURNS:-6}
THINK_MS=${THINK_MS:-1000}
DURATION_SECS=${DURATION_SECS:-60}
KILL_EVERY_SECS=${KILL_EVERY_SECS:-15}
RESTART_AFTER_SECS=${RESTART_AFTER_SECS:-1}
FREEZE_AT_SECS=${FREEZE_AT_SECS:-20}
FREEZE_SECS=${FREEZE_SECS:-20}
TURN_TIMEOUT_SECS=${TURN_TIMEOUT_SECS:-10}
RETRIES=${RETRIES:-6}
BACKOFF_SECS=${BACKOFF_SECS:-0.5}
BANK_DELAY_MS=${BANK_DELAY_MS:-300}
SENTINEL=${SENTINEL:-1}
FAILOVER_GAP_SECS=${FAILOVER_GAP_SECS:-5}
failed_over_at=0
FAILOVER_AT_SECS=${FAILOVER_AT_SECS:-30}
REDIS_FAILOVER_CMD=${REDIS_FAILOVER_CMD:-}
HAPROXY_TEMPLATE=${HAPROXY_TEMPLATE:-$ROOT/deploy/test/haproxy.cfg.in}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}

for tool in "$HAPROXY" "$REDIS_SERVER" python3 curl; do
  command -v "$tool" >/dev/null || { echo "chaos: $tool is missing" >&2; exit 2; }
done
profile_flag=()
[[ "$PROFILE" == release ]] && profile_flag=(--release)
if [[ -z "${SKIP_BUILD:-}" && -z "${CREWLINE:-}" ]]; then
  (cd "$ROOT" && cargo build "${profile_flag[@]}" -p crewline-cli --bin crewline &&
    cargo build "${profile_flag[@]}" --example "$CREW_EXAMPLE")
fi
CREWLINE=${CREWLINE:-$TARGET/$PROFILE/crewline}
BANK_SUPPORT=${BANK_SUPPORT:-$TARGET/$PROFILE/examples/bank_support}
COLLECTIONS_ROUTER=${COLLECTIONS_ROUTER:-$TARGET/$PROFILE/examples/collections_router}
if [[ "$CREW" == router ]]; then CREW_BIN=$COLLECTIONS_ROUTER; else CREW_BIN=$BANK_SUPPORT; fi
ulimit -n "$(ulimit -Hn)" || true

WORK=$(mktemp -d "${TMPDIR:-/tmp}/crewline-chaos.XXXXXX")
PIDS=()
REPLICA_PIDS=()
cleanup() {
  for pid in "${REPLICA_PIDS[@]:-}"; do
    # A frozen replica would not act on SIGTERM.
    [[ -n "$pid" ]] && { kill -CONT "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; } || true
  done
  for pid in "${PIDS[@]:-}"; do
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [[ -z "${KEEP:-}" ]]; then rm -rf "$WORK"; else echo "work directory kept: $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=deploy/test/lib.sh
source "$ROOT/deploy/test/lib.sh"

# Free loopback ports at once (held together, so they differ).
read -r REDIS_PORT FRONT_PORT BANK_PORT P1 P2 P3 REPLICA_PORT S1 S2 S3 _ < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(11)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks: s.close()')
PORTS=("$P1" "$P2" "$P3")

# Redis with AOF (fsync every second), so a Redis restart keeps claims, ledger and checkpoints.
redis_node() { # name port [args...]
  local name=$1 port=$2
  shift 2
  mkdir -p "$WORK/$name"
  "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save '' --appendonly yes \
    --appendfsync everysec --maxmemory-policy noeviction --dir "$WORK/$name" "$@" \
    >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
}
redis_node redis "$REDIS_PORT"
PRIMARY_PID=${PIDS[-1]}
if ((SENTINEL)); then
  # High availability: a replica of the primary and three sentinels that fail it over when it
  # has not answered for a second; the crew replicas find the primary through the sentinels.
  redis_node redis-replica "$REPLICA_PORT" --replicaof 127.0.0.1 "$REDIS_PORT"
  for port in "$S1" "$S2" "$S3"; do
    mkdir -p "$WORK/sentinel-$port"
    printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor crewline 127.0.0.1 %s 2\nsentinel down-after-milliseconds crewline 1000\nsentinel failover-timeout crewline 3000\n' \
      "$port" "$WORK/sentinel-$port" "$REDIS_PORT" >"$WORK/sentinel-$port/sentinel.conf"
    "$REDIS_SERVER" "$WORK/sentinel-$port/sentinel.conf" --sentinel >"$WORK/sentinel-$port.log" 2>&1 &
    PIDS+=($!)
  done
  # The crews ask the sentinels for the primary at start: they must be listening first.
  for port in "$S1" "$S2" "$S3"; do
    deadline=$((SECONDS + 30))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
      ((SECONDS > deadline)) && { log "sentinel :$port did not start"; exit 1; }
      sleep 0.1
    done
  done
  export CREWLINE_REDIS_URL=${CHAOS_REDIS_URL:-redis+sentinel://127.0.0.1:$S1,127.0.0.1:$S2,127.0.0.1:$S3/crewline}
  # The failover: the primary is killed (SIGKILL), the sentinels promote the replica.
  if [[ -z "$REDIS_FAILOVER_CMD" ]]; then
    REDIS_FAILOVER_CMD="kill -KILL $PRIMARY_PID"
  fi
else
  export CREWLINE_REDIS_URL=${CHAOS_REDIS_URL:-redis://127.0.0.1:$REDIS_PORT}
fi

if [[ "$CREW" == bank ]]; then
  "$CREWLINE" fake-bank --port "$BANK_PORT" --delay-ms "$BANK_DELAY_MS" \
    >"$WORK/bank.log" 2>&1 &
  PIDS+=($!)
  export CREWLINE_BANK_URL="http://127.0.0.1:$BANK_PORT"
fi

start_replica() { # index
  local i=$1
  RUST_LOG=${RUST_LOG:-info} "$CREW_BIN" --scripted --port "${PORTS[$i]}" \
    >>"$WORK/replica-$((i + 1)).log" 2>&1 &
  REPLICA_PIDS[i]=$!
}

if [[ "$CREW" == bank ]]; then wait_ready "$CREWLINE_BANK_URL/stats" 30; fi
for i in 0 1 2; do start_replica "$i"; done
for i in 0 1 2; do wait_ready "http://127.0.0.1:${PORTS[$i]}/ready" 60; done

start_haproxy leastconn
log "redis :$REDIS_PORT (AOF$( ((SENTINEL)) && echo ", replica :$REPLICA_PORT, sentinels :$S1 :$S2 :$S3"))$([[ "$CREW" == bank ]] && echo ", bank :$BANK_PORT"), replicas :$P1 :$P2 :$P3, HAProxy :$FRONT_PORT"

RATE=$(((CALLS + DURATION_SECS - 1) / DURATION_SECS))
log "load: $CALLS calls x $TURNS turns, $THINK_MS ms apart, $RATE calls/s, reconnecting"
"$CREWLINE" load --url "ws://127.0.0.1:$FRONT_PORT/ws" --scenario "$CREW" --open-loop \
  --sessions "$CALLS" --turns "$TURNS" --think-ms "$THINK_MS" --ramp-per-sec "$RATE" \
  --turn-timeout-secs "$TURN_TIMEOUT_SECS" --connect-timeout-secs 10 --reconnect \
  --reconnect-retries "$RETRIES" --reconnect-backoff-secs "$BACKOFF_SECS" \
  --turn-log "$WORK/turns.jsonl" --json "$WORK/report.json" \
  >"$WORK/load.txt" 2>"$WORK/load.log" &
LOAD_PID=$!
PIDS+=("$LOAD_PID")

# The chaos, while the load runs: times in seconds since the load started.
began=$SECONDS
next_kill=$KILL_EVERY_SECS
frozen=-1
thawed=0
failed_over=0
kills=0
: >"$WORK/events.txt"
while kill -0 "$LOAD_PID" 2>/dev/null; do
  sleep 0.25
  now=$((SECONDS - began))
  # No kill within FAILOVER_GAP_SECS of the Redis failover: a replica killed while Redis is
  # unreachable takes with it the checkpoint writes it could not make (the moves of the turns
  # it answered meanwhile; docs/deploying.md), which is the failover's loss, not a resume's.
  if ((now >= next_kill && failed_over == 1 && now < failed_over_at + FAILOVER_GAP_SECS)); then
    log "no kill at ${now}s: Redis failed over at ${failed_over_at}s"
    next_kill=$((next_kill + KILL_EVERY_SECS))
  fi
  if ((now >= next_kill)); then
    next_kill=$((next_kill + KILL_EVERY_SECS))
    i=$((RANDOM % 3))
    # Not the frozen one: its freeze is its own fault.
    ((i == frozen)) && i=$(((i + 1) % 3))
    pid=${REPLICA_PIDS[$i]}
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    kills=$((kills + 1))
    log "r$((i + 1)): SIGKILL (pid $pid) at ${now}s"
    echo "$now kill r$((i + 1))" >>"$WORK/events.txt"
    sleep "$RESTART_AFTER_SECS"
    start_replica "$i"
  fi
  if ((FREEZE_SECS > 0 && frozen < 0 && thawed == 0 && now >= FREEZE_AT_SECS)); then
    frozen=$((RANDOM % 3))
    kill -STOP "${REPLICA_PIDS[$frozen]}"
    freeze_until=$((now + FREEZE_SECS))
    log "r$((frozen + 1)): SIGSTOP at ${now}s for ${FREEZE_SECS}s"
    echo "$now stop r$((frozen + 1))" >>"$WORK/events.txt"
  fi
  if ((frozen >= 0 && now >= freeze_until)); then
    kill -CONT "${REPLICA_PIDS[$frozen]}"
    log "r$((frozen + 1)): SIGCONT at ${now}s"
    echo "$now cont r$((frozen + 1))" >>"$WORK/events.txt"
    frozen=-1
    thawed=1
  fi
  # Once, the Redis primary fails over (with SENTINEL=1, SIGKILL of the primary; or any
  # REDIS_FAILOVER_CMD).
  if [[ -n "$REDIS_FAILOVER_CMD" ]] && ((failed_over == 0 && now >= FAILOVER_AT_SECS)); then
    failed_over=1
    failed_over_at=$now
    log "redis: failover at ${now}s: $REDIS_FAILOVER_CMD"
    echo "$now failover redis" >>"$WORK/events.txt"
    bash -c "$REDIS_FAILOVER_CMD" >&2 || log "redis: the failover command failed"
  fi
done
if ((frozen >= 0)); then kill -CONT "${REPLICA_PIDS[$frozen]}" 2>/dev/null || true; fi

load_status=0
wait "$LOAD_PID" || load_status=$?
if ((load_status != 0)); then
  log "crewline load failed (status $load_status):"
  cat "$WORK/load.log" >&2
  exit 1
fi
cat "$WORK/load.txt" >&2
if [[ "$CREW" == router ]]; then
  log "$kills kills; events: $(tr '\n' ';' <"$WORK/events.txt")"
  python3 - "$WORK/report.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
lost = report["turns_lost"] + report["turns_timed_out"]
in_flight = report["turns_in_flight_at_drop"]
wrong = report["resumed_in_wrong_sub_agent"]
print(f"chaos: {report['sessions']} calls, {report['turns_started']} turns started, "
      f"{report['turns_completed']} completed, {lost} lost (in flight at a kill: {in_flight}), "
      f"resumed {report['resumed_calls']}, in the wrong sub-agent {wrong}")
sys.exit(1 if wrong > 0 or lost > in_flight else 0)
EOF
  exit
fi
curl -fsS "$CREWLINE_BANK_URL/stats" >"$WORK/bank.json"
log "bank: $(cat "$WORK/bank.json")"
log "$kills kills; events: $(tr '\n' ';' <"$WORK/events.txt")"

# Intents without an outcome in the replicas' Redis ledger (`crewline ledger pending` prints one
# line per intent); LEDGER_PENDING_CMD overrides the command.
pending=n/a
ledger_cmd=${LEDGER_PENDING_CMD:-}
if [[ -z "$ledger_cmd" ]] && "$CREWLINE" ledger pending --help >/dev/null 2>&1; then
  ledger_cmd="\"$CREWLINE\" ledger pending --redis \"$CREWLINE_REDIS_URL\""
fi
if [[ -n "$ledger_cmd" ]]; then
  if bash -c "$ledger_cmd" >"$WORK/pending.txt" 2>"$WORK/pending.log"; then
    pending=$(grep -cv '^\s*$\|^#' "$WORK/pending.txt" || true)
  else
    log "ledger pending failed: $(cat "$WORK/pending.log")"
  fi
else
  log "crewline has no 'ledger pending' yet: pending is n/a"
fi

python3 - "$WORK/report.json" "$WORK/bank.json" "$pending" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
bank = json.load(open(sys.argv[2]))
pending = sys.argv[3]
calls = report["sessions"]
started = report["turns_started"]
completed = report["turns_completed"]
lost = report["turns_lost"] + report["turns_timed_out"]
in_flight = report["turns_in_flight_at_drop"]
requested = report["transfers_requested"]
executed = bank["executed"]
duplicated = bank["duplicated"]
unknown = requested - report["transfers_confirmed"]
for sample in bank.get("duplicated_samples", []):
    print(f"duplicated: {sample['amount']} cents to {sample['recipient']}, "
          f"{sample['times']} times", file=sys.stderr)
print(f"chaos: {calls} calls, {started} turns started, {completed} completed, {lost} lost "
      f"(in flight at a kill: {in_flight}), transfers requested {requested}, executed "
      f"{executed}, duplicated {duplicated}, unknown {unknown} ({pending} pending in the ledger)")
sys.exit(1 if duplicated > 0 or lost > in_flight else 0)
EOF
