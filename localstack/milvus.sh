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
# shellcheck source=localstack/background-server.sh
. "$top/localstack/background-server.sh"

case "$cmd" in
  start)
    bash "$top/localstack/install.sh" milvus >/dev/null
    port=$(free_port)
    echo "$port" >"$log.port"
    data=$(mktemp -d)
    nohup "$cache/venvs/milvus/bin/milvus-lite" server --data-dir "$data" --host 127.0.0.1 --port "$port" \
      --max-workers 4 >"$log" 2>&1 9>&- &
    pid=$!
    await_ready "milvus-lite" "$pid" "$log" python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1)" "$port"
    ;;
  url)
    echo "http://127.0.0.1:$(cat "$log.port")"
    ;;
  *) echo "usage: milvus.sh start|url LOGFILE" >&2; exit 2 ;;
esac
