# Shared by the scripts beside it (rolling-restart.sh, chaos.sh): logging, waiting for a
# server to answer, and HAProxy's view of its servers. Needs WORK (where HAProxy's stats socket
# is), HAPROXY, HAPROXY_TEMPLATE, FRONT_PORT and P1..P3 set by the caller; sourced, not run.

log() { echo "[$(date -u +%H:%M:%S.%3N)] $*" >&2; }

wait_ready() { # url seconds
  local deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$1" 2>/dev/null; do
    if ((SECONDS > deadline)); then log "timeout waiting for $1"; return 1; fi
    sleep 0.1
  done
}

# HAProxy's statistics (CSV, `show stat` on its stats socket).
haproxy_stats() {
  python3 - "$WORK/haproxy.sock" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
sys.stdout.write(data.decode())
EOF
}

# A server's status as HAProxy sees it (UP, DOWN, ...).
haproxy_status() { # server name
  haproxy_stats | awk -F, -v name="$1" '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == "status") col = i }
    $1 == "crew" && $2 == name { split($col, words, " "); print words[1] }'
}

wait_up() { # server name, seconds
  local deadline=$((SECONDS + $2))
  until [[ "$(haproxy_status "$1" 2>/dev/null)" == UP ]]; do
    if ((SECONDS > deadline)); then log "timeout waiting for HAProxy to see $1 UP"; return 1; fi
    sleep 0.05
  done
}


# HAProxy from the template in front of the three replicas (P1..P3), balancing with $1; sets
# HAPROXY_PID (also added to PIDS, for the caller's cleanup) and returns once HAProxy sees every
# replica UP (exits the script if it never does).
start_haproxy() { # balance
  sed -e "s|@STATS_SOCKET@|$WORK/haproxy.sock|" -e "s|@FRONT_PORT@|$FRONT_PORT|" \
    -e "s|@BALANCE@|$1|" -e "s|@PORT1@|$P1|" -e "s|@PORT2@|$P2|" -e "s|@PORT3@|$P3|" \
    "$HAPROXY_TEMPLATE" >"$WORK/haproxy.cfg"
  "$HAPROXY" -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
  HAPROXY_PID=$!
  PIDS+=("$HAPROXY_PID")
  local name
  for name in r1 r2 r3; do
    if ! wait_up "$name" 30; then
      kill -0 "$HAPROXY_PID" 2>/dev/null || { log "HAProxy exited:"; cat "$WORK/haproxy.log" >&2; }
      exit 1
    fi
  done
}
