#!/usr/bin/env bash
# A real Milvus for tests: milvus-lite's gRPC server (the Milvus protocol, data in a temporary
# directory) on a free loopback port.
#   milvus.sh start LOGFILE   installs if needed, starts, waits for the port, prints the pid
#   milvus.sh url LOGFILE     prints the server's URL (http://127.0.0.1:PORT)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}
cmd=${1:?start or url}
log=${2:?log file}

case "$cmd" in
  start)
    bash "$top/localstack/install.sh" milvus >/dev/null
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "$port" >"$log.port"
    data=$(mktemp -d)
    nohup "$cache/venvs/milvus/bin/milvus-lite" server --data-dir "$data" --host 127.0.0.1 --port "$port" \
      --max-workers 4 >"$log" 2>&1 9>&- &
    pid=$!
    for _ in $(seq 1 120); do
      if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1)" "$port" 2>/dev/null; then
        echo "$pid"
        exit 0
      fi
      kill -0 "$pid" 2>/dev/null || { echo "milvus-lite died: $(tail -5 "$log")" >&2; exit 1; }
      sleep 0.5
    done
    kill "$pid" 2>/dev/null || true
    echo "milvus-lite did not open its port within 60 s: $(tail -5 "$log")" >&2
    exit 1
    ;;
  url)
    echo "http://127.0.0.1:$(cat "$log.port")"
    ;;
  *) echo "usage: milvus.sh start|url LOGFILE" >&2; exit 2 ;;
esac
