#!/usr/bin/env bash
# Side-by-side load benchmark: crewline's `voice_agent` example and the Python reference
# (`reference/bench_crew.py`, smallestai 5.14.0) serving the same weather agent, against the
# same mock LLM (`crewline mock-llm`), driven by the same load generator (`crewline load`).
#
# Not run by CI. Linux only (reads /proc). Every process binds 127.0.0.1; each (scenario,
# delay, sessions) point gets fresh servers and a short warm-up, and crewline and the reference
# are measured one right after the other so that their ratio survives a noisy machine.
#
#   benches/load/run.sh                       # the full matrix (long: tens of minutes)
#   SESSIONS="1 50" SCENARIOS=text DELAYS=0 benches/load/run.sh      # a quick look
#
# Knobs (environment): SESSIONS, SCENARIOS (text tool interrupt), DELAYS (ms per chunk),
# TURNS (per session), CHUNKS (text pieces per answer), REF_MAX_SESSIONS (skip the reference
# above this), THINK_MS (pause between a session's turns; 0 = closed loop), IMPLS ("crewline reference";
# "asyncopenai" is crewline's voice_agent on the async-openai client, `--llm-client async-openai`),
# REF_PYTHON, SKIP_BUILD=1, OUT (results directory), RAMP (connections/s).
# TLS=off|h1|h2 (default off): the model over HTTPS, as a provider is (issue 32). A throwaway CA
# and a certificate for localhost are made with openssl in $OUT/tls; the mock serves them
# (`--tls-cert --tls-key`, ALPN h2 and http/1.1), crewline and the floor trust the CA
# (SSL_CERT_FILE, `--ca-file`) and reach https://localhost:PORT/v1 over HTTP/1.1 (h1: the
# floor's `--http1`) or HTTP/2 (h2: voice_agent's `--llm-http2`). With TLS each implementation
# gets a fresh mock, and the mock's connection counts after each run (`/_mock/stats`) are kept
# as $OUT/<run>.mock.json; summarize.py prints them.
# crewline against the floor (benches/floor, issue 19): IMPLS="crewline floor" (the floor runs
# no tools, so in the tool scenario it answers from a text model).
# Two crewline clients side by side: IMPLS="crewline asyncopenai", then
#   python3 benches/load/summarize.py --pair crewline asyncopenai $OUT
# Results: one JSON report per run under $OUT, plus summary.md made by summarize.py.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
REF_PYTHON=${REF_PYTHON:-$ROOT/reference/.venv/bin/python}
SESSIONS=${SESSIONS:-"1 50 200 1000 10000"}
SCENARIOS=${SCENARIOS:-"text tool"}
DELAYS=${DELAYS:-"0 20"}
TURNS=${TURNS:-3}
CHUNKS=${CHUNKS:-8}
INTERRUPT_CHUNKS=${INTERRUPT_CHUNKS:-40}
REF_MAX_SESSIONS=${REF_MAX_SESSIONS:-10000}
IMPLS=${IMPLS:-"crewline reference"}
RAMP=${RAMP:-1000}
THINK_MS=${THINK_MS:-0}
TURN_TIMEOUT=${TURN_TIMEOUT:-120}
OUT=${OUT:-$ROOT/benches/load/results/$(date -u +%Y%m%dT%H%M%SZ)}
MOCK_PORT=${MOCK_PORT:-18801}
CREW_PORT=${CREW_PORT:-18802}
REF_PORT=${REF_PORT:-18803}
FLOOR_PORT=${FLOOR_PORT:-18804}
TLS=${TLS:-off}
case "$TLS" in off | h1 | h2) ;; *) echo "TLS must be off, h1 or h2" >&2; exit 2 ;; esac

mkdir -p "$OUT/logs"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  (cd "$ROOT" && cargo build --release -p crewline-cli --bin crewline -p crewline-suite --example voice_agent)
  if [[ " $IMPLS " == *" floor "* ]]; then
    (cd "$ROOT" && cargo build --release -p crewline-floor --bin crewline-floor)
  fi
fi
CREWLINE=$TARGET/release/crewline
VOICE_AGENT=$TARGET/release/examples/voice_agent
FLOOR=$TARGET/release/crewline-floor
ulimit -n "$(ulimit -Hn)" || true

# The model's address, and with TLS the CA that signed its certificate.
MODEL_URL="http://127.0.0.1:$MOCK_PORT"
MOCK_TLS=()
CREW_TLS=()
FLOOR_TLS=()
CURL_TLS=()
if [[ "$TLS" != off ]]; then
  CERTS="$OUT/tls"
  mkdir -p "$CERTS"
  # A CA and a certificate for localhost, made for this run only (P-256, two days).
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=crewline load-run CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$CERTS/ca.key" -out "$CERTS/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout "$CERTS/key.pem" -out "$CERTS/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' \
    >"$CERTS/server.ext"
  openssl x509 -req -in "$CERTS/server.csr" -CA "$CERTS/ca.pem" -CAkey "$CERTS/ca.key" \
    -CAcreateserial -days 2 -extfile "$CERTS/server.ext" -out "$CERTS/cert.pem" 2>/dev/null
  rm -f "$CERTS/ca.key" "$CERTS/server.csr" "$CERTS/ca.srl"
  MODEL_URL="https://localhost:$MOCK_PORT"
  MOCK_TLS=(--tls-cert "$CERTS/cert.pem" --tls-key "$CERTS/key.pem")
  CURL_TLS=(--cacert "$CERTS/ca.pem")
  FLOOR_TLS=(--ca-file "$CERTS/ca.pem")
  if [[ "$TLS" == h1 ]]; then
    FLOOR_TLS+=(--http1)
  else
    CREW_TLS=(--llm-http2)
  fi
fi

PIDS=()
cleanup() {
  for pid in "${PIDS[@]:-}"; do
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  done
  PIDS=()
}
# The throwaway certificate's key is not left in the results.
trap 'cleanup; [[ -n "${CERTS:-}" ]] && rm -f "$CERTS/key.pem"' EXIT
trap cleanup INT TERM

wait_http() { # url, seconds
  local deadline=$((SECONDS + $2))
  until curl -fsS "${CURL_TLS[@]}" -o /dev/null "$1" 2>/dev/null; do
    if ((SECONDS > deadline)); then echo "timeout waiting for $1" >&2; return 1; fi
    sleep 0.2
  done
}

start_mock() { # delay chunks tool?
  local extra=()
  [[ "$3" == tool ]] && extra=(--tool)
  "$CREWLINE" mock-llm --port "$MOCK_PORT" --chunk-delay-ms "$1" --chunks "$2" "${extra[@]}" \
    --record-limit 1000 "${MOCK_TLS[@]}" >"$OUT/logs/mock.log" 2>&1 &
  MOCK_PID=$!
  PIDS+=("$MOCK_PID")
  wait_http "$MODEL_URL/health" 20
}

stop_mock() {
  kill "$MOCK_PID" 2>/dev/null || true
  wait "$MOCK_PID" 2>/dev/null || true
}

start_crewline() { # extra voice_agent arguments
  local ca=()
  [[ "$TLS" != off ]] && ca=(SSL_CERT_FILE="$CERTS/ca.pem")
  env "${ca[@]}" OPENAI_API_KEY=sk-mock OPENAI_BASE_URL="$MODEL_URL/v1" RUST_LOG=warn \
    "$VOICE_AGENT" --port "$CREW_PORT" --service-delay-ms 0 "${CREW_TLS[@]}" "$@" \
    >"$OUT/logs/crewline.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  wait_http "http://127.0.0.1:$CREW_PORT/ready" 30
}

start_floor() { # the bare forwarder of benches/floor (issue 19): no /ready, so wait for the port
  "$FLOOR" --port "$FLOOR_PORT" --llm-url "$MODEL_URL/v1/chat/completions" "${FLOOR_TLS[@]}" \
    >"$OUT/logs/floor.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  local deadline=$((SECONDS + 20))
  until (exec 3<>"/dev/tcp/127.0.0.1/$FLOOR_PORT") 2>/dev/null; do
    if ((SECONDS > deadline)); then echo "timeout waiting for the floor" >&2; return 1; fi
    sleep 0.2
  done
}

start_reference() {
  local ca=()
  [[ "$TLS" != off ]] && ca=(SSL_CERT_FILE="$CERTS/ca.pem")
  env "${ca[@]}" SMALLESTAI_LOG_LEVEL=WARNING SMALLESTAI_LOG_DIR="$OUT/logs/loguru" \
    "$REF_PYTHON" "$ROOT/reference/bench_crew.py" --port "$REF_PORT" \
    --llm-base-url "$MODEL_URL/v1" >"$OUT/logs/reference.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  wait_http "http://127.0.0.1:$REF_PORT/ready" 60
}

stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  # A server with thousands of dead calls may take long to shut down gracefully.
  for _ in $(seq 1 40); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.5
  done
  kill -9 "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

measure() { # impl port scenario delay sessions
  local impl=$1 port=$2 scenario=$3 delay=$4 n=$5
  local name="$impl-$scenario-d$delay-n$n"
  # Warm-up: imports, connection pools, allocator arenas.
  "$CREWLINE" load --url "ws://127.0.0.1:$port/ws" --sessions 10 --turns 2 \
    --scenario "$scenario" --json /dev/null >/dev/null 2>&1 || true
  echo "== $name"
  if ! timeout $((TURN_TIMEOUT * (TURNS + 2) + n / RAMP + 60)) \
    "$CREWLINE" load --url "ws://127.0.0.1:$port/ws" --sessions "$n" --turns "$TURNS" \
    --scenario "$scenario" --ramp-per-sec "$RAMP" --turn-timeout-secs "$TURN_TIMEOUT" \
    --think-ms "$THINK_MS" \
    --pid "$SERVER_PID" --json "$OUT/$name.json" | tee "$OUT/$name.txt"; then
    echo "{\"failed\": true, \"name\": \"$name\"}" >"$OUT/$name.json"
    echo "   $name: the load run failed or timed out"
  fi
  # The connections the server opened to the model (the mock counts them; with TLS each
  # implementation has a mock of its own, so these are its alone, warm-up included).
  if [[ "$TLS" != off ]]; then
    curl -fsS "${CURL_TLS[@]}" "$MODEL_URL/_mock/stats" >"$OUT/$name.mock.json" 2>/dev/null ||
      echo '{}' >"$OUT/$name.mock.json"
  fi
}

# With TLS, a fresh mock for the next implementation, so its connection counts are its own.
next_mock() { # delay chunks mode
  if [[ "$TLS" != off ]]; then
    stop_mock
    start_mock "$@"
  fi
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)"
  echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
  echo "kernel: $(uname -r)"
  echo "rustc: $(rustc --version 2>/dev/null || echo unknown)"
  echo "python: $("$REF_PYTHON" --version 2>&1)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "turns per session: $TURNS, chunks per answer: $CHUNKS, ramp: $RAMP/s, think: $THINK_MS ms"
  echo "model transport: TLS=$TLS ($MODEL_URL)"
} | tee "$OUT/machine.txt"

for scenario in $SCENARIOS; do
  for delay in $DELAYS; do
    chunks=$CHUNKS
    [[ "$scenario" == interrupt ]] && chunks=$INTERRUPT_CHUNKS
    mock_mode=text
    [[ "$scenario" == tool ]] && mock_mode=tool
    for n in $SESSIONS; do
      start_mock "$delay" "$chunks" "$mock_mode"
      if [[ " $IMPLS " == *" crewline "* ]]; then
        start_crewline
        measure crewline "$CREW_PORT" "$scenario" "$delay" "$n"
        stop_server
      fi
      if [[ " $IMPLS " == *" asyncopenai "* ]]; then
        next_mock "$delay" "$chunks" "$mock_mode"
        start_crewline --llm-client async-openai
        measure asyncopenai "$CREW_PORT" "$scenario" "$delay" "$n"
        stop_server
      fi
      if [[ " $IMPLS " == *" floor "* ]]; then
        if [[ "$mock_mode" == tool ]]; then
          # The floor runs no tools: it answers a tool turn as text, from a text model.
          cleanup; sleep 1
          start_mock "$delay" "$chunks" text
        else
          next_mock "$delay" "$chunks" "$mock_mode"
        fi
        start_floor
        measure floor "$FLOOR_PORT" "$scenario" "$delay" "$n"
        stop_server
      fi
      if [[ " $IMPLS " == *" reference "* ]] && ((n <= REF_MAX_SESSIONS)); then
        next_mock "$delay" "$chunks" "$mock_mode"
        start_reference
        measure reference "$REF_PORT" "$scenario" "$delay" "$n"
        stop_server
      fi
      cleanup
      sleep 1
    done
  done
done

PAIR=()
[[ " $IMPLS " == *" asyncopenai "* && " $IMPLS " != *" reference "* ]] && PAIR=(--pair crewline asyncopenai)
[[ " $IMPLS " == *" floor "* && " $IMPLS " != *" reference "* ]] && PAIR=(--pair crewline floor)
python3 "$ROOT/benches/load/summarize.py" "${PAIR[@]}" "$OUT" | tee "$OUT/summary.md"
