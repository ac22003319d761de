# Sourced by the scripts that start a test server in the background (embedder.sh, milvus.sh).

# A free loopback port.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# await_ready NAME PID LOG CHECK...: runs CHECK every 0.5 s for up to 60 s and prints PID once it
# passes; fails, with the end of LOG, when the process dies or the time is up.
await_ready() {
  local name=$1 pid=$2 log=$3
  shift 3
  for _ in $(seq 1 120); do
    if "$@" >/dev/null 2>&1; then
      echo "$pid"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "$name died: $(tail -5 "$log")" >&2; return 1; }
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  echo "$name was not ready within 60 s: $(tail -5 "$log")" >&2
  return 1
}
