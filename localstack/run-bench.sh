#!/usr/bin/env bash
# `make bench`: load-tests POST /api/user/login and GET /api/user on the local server with wrk
# and prints requests/s, p50 and p99 for each; then runs the chat-client overhead, the search,
# ingestion, memory recall, agent chat (against LiteLLM) and cold-start benchmarks (`cargo bench`,
# against the same stack and a real embedding model). Everything it starts (a Postgres-only stack
# named "bench", the server) is stopped and removed on exit, so each run starts from an empty
# database and runs can be compared. Results are recorded by hand in docs/benchmarks.md.
#
# `run-bench.sh chat` (`make bench-chat`) runs only the agent chat benchmark: the Postgres-only
# stack, the server build, LiteLLM and chat_stream. BENCH_STACK names the stack (default bench),
# so that a run does not take down another checkout's.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

# Same shared build cache as the Makefile, also when the script is run directly.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/agent-platform/target}
stack=${BENCH_STACK:-bench}
duration=${BENCH_DURATION:-20s}

step() { printf '\n== %s\n' "$*" >&2; }
die() { echo "bench: ERROR: $*" >&2; exit 1; }

only=${1:-all}
[[ $only == all || $only == chat || $only == instructions ]] || die "usage: run-bench.sh [chat|instructions]"

work=$(mktemp -d "${TMPDIR:-/tmp}/agent-platform-bench.XXXXXX")
server_pid=
embedder_pid=
cleanup() {
  local rc=$?
  [[ -n $embedder_pid ]] && kill "$embedder_pid" 2>/dev/null
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  bash localstack/stack.sh down --clean "$stack" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap stops the server and the stack.
trap 'exit 130' INT TERM

step "backing services (stack '$stack', Postgres only)"
# shellcheck source=localstack/fresh-postgres.sh
. localstack/fresh-postgres.sh "$stack"

step "build (profile bench-local)"
cargo build --profile bench-local --bin agent-platform
# Cargo's own answer: a cargo wrapper may choose another target directory than the one above.
target_dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin=$target_dir/bench-local/agent-platform
[[ -x $bin ]] || die "no binary at $bin"

bench_chat() {
  step "agent chat: the service against the raw upstream and a LiteLLM proxy"
  local litellm_venv=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}/venvs/litellm
  # One virtualenv for both Python parts: the LiteLLM proxy and the aiohttp client.
  if [[ ! -x $litellm_venv/bin/litellm ]] || ! "$litellm_venv/bin/python" -c 'import aiohttp' 2>/dev/null; then
    python3 -m venv "$litellm_venv"
    "$litellm_venv/bin/pip" install -q --disable-pip-version-check 'litellm[proxy]==1.106.2' 'aiohttp==3.14.5' >&2
  fi
  SERVER_BIN=$bin LITELLM_BIN=$litellm_venv/bin/litellm AIOHTTP_PYTHON=$litellm_venv/bin/python \
    cargo bench --quiet -p api-tests --profile bench-local --bench chat_stream
}
if [[ $only == chat ]]; then
  bench_chat
  exit 0
fi
if [[ $only == instructions ]]; then
  step "agent chat: instructions per chat under callgrind"
  if ! command -v valgrind >/dev/null; then
    sudo=()
    [[ $EUID -eq 0 ]] || sudo=(sudo -n)
    apt-cache show valgrind >/dev/null 2>&1 || "${sudo[@]}" apt-get update -qq </dev/null
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind </dev/null >/dev/null
  fi
  SERVER_BIN=$bin PSQL="$(cat "${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}/pg-root")/bin/psql" \
    python3 localstack/chat_instructions.py
  exit 0
fi

step "wrk"
if ! command -v wrk >/dev/null; then
  sudo=()
  [[ $EUID -eq 0 ]] || sudo=(sudo -n)
  # Refreshing the package lists is slow; only do it when they do not know wrk yet.
  if ! apt-cache show wrk >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -qq </dev/null
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk </dev/null >/dev/null
fi
wrk --version 2>&1 | head -1 >&2 || true

# Fresh secrets per run: tokens from earlier runs must not be accepted, nothing is kept.
eval "$(python3 - <<'PY'
import base64, secrets
print("export JWT_SECRET=" + secrets.token_hex(32))
print("export ENCRYPTION_KEY=" + base64.b64encode(secrets.token_bytes(32)).decode())
PY
)"
PORT=$(python3 localstack/stack_helper.py freeport "" 18080)
export PORT API_PREFIX=api
export ADMIN_USERNAME=admin ADMIN_PASSWORD=bench-password
export STORAGE_BACKEND=fs STORAGE_DIR=$work/storage QUEUE_BACKEND=memory
# warn: logging every request would measure the log writer as much as the server.
export RUST_LOG=warn LOG_FORMAT=pretty
base=http://127.0.0.1:$PORT
api=$base/$API_PREFIX

step "server on $base"
"$bin" >"$work/server.log" 2>&1 </dev/null &
server_pid=$!
# Start-up runs the migrations and hashes the admin password, so allow some time.
for _ in $(seq 1 120); do
  kill -0 "$server_pid" 2>/dev/null || { tail -20 "$work/server.log" >&2; die "the server exited"; }
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$base/health" || true) == 200 ]] && break
  sleep 0.5
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/health" || true) == 200 ]] ||
  { tail -20 "$work/server.log" >&2; die "GET /health did not return 200 within 60 s"; }

login_body=$(printf '{"username":"%s","password":"%s"}' "$ADMIN_USERNAME" "$ADMIN_PASSWORD")
login_token() {
  curl -s -X POST "$api/user/login" -H 'Content-Type: application/json' -d "$login_body" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["token"])'
}
TOKEN=$(login_token) || die "logging in as $ADMIN_USERNAME failed"

# wrk only reports statuses outside 2xx/3xx; the hook counts everything but 200 on top.
lua=$work/login.lua
cat >"$lua" <<EOF
wrk.method = "POST"
wrk.body = '$login_body'
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) not_ok = 0 end
function response(status, headers, body)
  if status ~= 200 then not_ok = not_ok + 1 end
end
function done(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do n = n + t:get("not_ok") end
  io.write(string.format("Non-200 responses (Lua hook): %d\n", n))
end
EOF

# run NAME WRK_ARGS...: runs wrk, keeps its output for the summary, fails on errors.
run() {
  local name=$1; shift
  step "wrk $name"
  wrk "$@" | tee "$work/$name.txt"
  grep -q '^Requests/sec:' "$work/$name.txt" || die "$name: wrk printed no results"
  # A timed-out request is missing from the latency figures, so it fails the run too.
  if grep -qE 'Non-2xx or 3xx responses|Socket errors' "$work/$name.txt"; then
    die "$name: wrk saw failed requests (see above)"
  fi
  if grep -qE 'Non-200 responses \(Lua hook\): [1-9]' "$work/$name.txt"; then
    die "$name: some responses were not 200"
  fi
}
run user -t2 -c32 -d"$duration" --latency -H "Svc-Auth: $TOKEN" "$api/user"
run login -t2 -c8 -d"$duration" --latency -s "$lua" "$api/user/login"

# Both endpoints must still answer normally after the load (no throttling, no lasting errors).
TOKEN=$(login_token) || die "logging in after the benchmark failed"
[[ $(curl -s -o /dev/null -w '%{http_code}' -H "Svc-Auth: $TOKEN" "$api/user") == 200 ]] ||
  die "GET /user after the benchmark did not return 200"

field() {  # field FILE PATTERN: the value after PATTERN in wrk's output
  awk -v p="$2" '$1 == p { print $2; exit }' "$1"
}
non2xx() {
  awk '/Non-2xx or 3xx responses/ { n = $NF } END { print n + 0 }' "$1"
}
step "summary ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), profile bench-local, $duration per endpoint)"
printf '%-22s %12s %10s %10s %8s\n' endpoint requests/s p50 p99 non-2xx
printf '%-22s %12s %10s %10s %8s\n' "GET /api/user" "$(field "$work/user.txt" Requests/sec:)" \
  "$(field "$work/user.txt" 50%)" "$(field "$work/user.txt" 99%)" "$(non2xx "$work/user.txt")"
printf '%-22s %12s %10s %10s %8s\n' "POST /api/user/login" "$(field "$work/login.txt" Requests/sec:)" \
  "$(field "$work/login.txt" 50%)" "$(field "$work/login.txt" 99%)" "$(non2xx "$work/login.txt")"

# The server is done with; the cargo benchmarks use the same database server.
kill -TERM "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=

step "chat client overhead"
cargo bench --quiet -p api-tests --profile bench-local --bench chat_client

step "search on 100,000 chunks"
cargo bench --quiet -p api-tests --profile bench-local --bench search

step "memory recall with 10,000 memories of one user"
cargo bench --quiet -p api-tests --profile bench-local --bench memory_recall

step "ingestion (real embedding model; the 10,000-row sheet takes several minutes)"
embedder_pid=$(bash localstack/embedder.sh start "$work/embedder.log")
EMBEDDING_SERVER_URL=$(bash localstack/embedder.sh url "$work/embedder.log")
export EMBEDDING_SERVER_URL
cargo bench --quiet -p api-tests --profile bench-local --bench ingest

bench_chat

step "function binaries: size, zipped size, init time under the Lambda runtime emulator"
cargo build --quiet --profile bench-local --workspace --bins
cargo bench --quiet -p api-tests --profile bench-local --bench cold_start
