#!/usr/bin/env bash
# Instructions (callgrind) the `voice_agent` server spends on 1,000 turns (100 sessions x 10),
# against `crewline mock-llm`: repeatable whatever else the machine does, so two builds (or two
# LLM clients) compare exactly where wall-clock load runs are too noisy.
#
#   benches/load/callgrind.sh TARGET_DIR text|tool OUT_PREFIX [voice_agent args...]
#   benches/load/callgrind.sh target text /tmp/aoai-text --llm-client async-openai
#
# Needs valgrind and release builds of `crewline` and the `voice_agent` example in TARGET_DIR.
# SERVER=floor counts the floor (benches/floor, issue 19) instead, on the same turns; it answers
# every turn as text, so its `tool` figure is taken against a text model.
set -u
T=$1; SC=$2; OUTF=$3
MP=18951; CP=18952
SERVER=${SERVER:-crewline}
tool=(); [[ $SC == tool && $SERVER != floor ]] && tool=(--tool)
$T/release/crewline mock-llm --port $MP --chunks 8 "${tool[@]}" --record-limit 100 >/dev/null 2>&1 & M=$!
sleep 0.5
if [[ $SERVER == floor ]]; then
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$OUTF.cg $T/release/crewline-floor --port $CP \
    --llm-url http://127.0.0.1:$MP/v1/chat/completions "${@:4}" >/dev/null 2>&1 & V=$!
  for i in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/$CP) 2>/dev/null && break; sleep 0.5; done
else
  OPENAI_API_KEY=sk-mock OPENAI_BASE_URL=http://127.0.0.1:$MP/v1 RUST_LOG=warn \
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$OUTF.cg $T/release/examples/voice_agent --port $CP --service-delay-ms 0 --worker-runtimes 1 "${@:4}" >/dev/null 2>&1 & V=$!
  for i in $(seq 1 120); do curl -fsS -o /dev/null http://127.0.0.1:$CP/ready 2>/dev/null && break; sleep 0.5; done
fi
# Start-up (root certificates, pools, allocator arenas) is not a turn's cost: a warm-up
# first, and only then is counting switched on.
$T/release/crewline load --url ws://127.0.0.1:$CP/ws --sessions 10 --turns 2 --scenario $SC >/dev/null 2>&1
callgrind_control -i on $V >/dev/null
$T/release/crewline load --url ws://127.0.0.1:$CP/ws --sessions 100 --turns 10 --scenario $SC --ramp-per-sec 1000 --turn-timeout-secs 120 > $OUTF.load 2>&1
kill -INT $V; wait $V 2>/dev/null; kill $M; wait $M 2>/dev/null
total=$(grep -m1 '^summary:' $OUTF.cg | awk '{print $2}')
[[ -z "$total" ]] && total=$(grep -m1 '^totals:' $OUTF.cg | awk '{print $2}')
echo "$SC $total $(grep -o "completed [0-9]*" $OUTF.load | head -1)" | tee $OUTF.total
