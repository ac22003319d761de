#!/usr/bin/env bash
# A real trace server for the tracing test: Arize Phoenix, which takes OTLP over HTTP at
# /v1/traces and serves the spans back at /v1/projects/{project}/spans (and a web page).
#   phoenix.sh start LOGFILE   installs if needed, starts, waits for health, prints the pid
#   phoenix.sh url LOGFILE     prints the base URL of that server
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}
cmd=${1:?start or url}
log=${2:?log file}
# shellcheck source=localstack/background-server.sh
. "$top/localstack/background-server.sh"

case "$cmd" in
  start)
    bash "$top/localstack/install.sh" phoenix >/dev/null
    port=$(free_port)
    echo "$port" >"$log.port"
    workdir=$(mktemp -d)
    # Its own SQLite file in a scratch folder; the gRPC receiver on a free port too.
    PHOENIX_WORKING_DIR=$workdir PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$port PHOENIX_GRPC_PORT=$(free_port) \
      nohup "$cache/venvs/phoenix/bin/phoenix" serve >"$log" 2>&1 9>&- &
    pid=$!
    await_ready "Phoenix" "$pid" "$log" python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$port/healthz"
    ;;
  url)
    echo "http://127.0.0.1:$(cat "$log.port")"
    ;;
  *) echo "usage: phoenix.sh start|url LOGFILE" >&2; exit 2 ;;
esac
