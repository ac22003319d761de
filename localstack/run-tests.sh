#!/usr/bin/env bash
# `make test`: formatting, lints, every Rust test against a real Postgres + LocalStack stack
# started (and removed) here, the function binaries, the SAM template checks, API fuzzing, the
# Postgres-restart fault test on a stack of its own, and a summary of what ran.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

stack=${TEST_STACK:-test}
fault_stack=$stack-faults
embedder_pid=
milvus_pid=
phoenix_pid=
cleanup() {
  [ -n "$embedder_pid" ] && kill "$embedder_pid" 2>/dev/null
  [ -n "$milvus_pid" ] && kill "$milvus_pid" 2>/dev/null
  [ -n "$phoenix_pid" ] && kill "$phoenix_pid" 2>/dev/null
  bash localstack/stack.sh down --clean "$stack" >/dev/null 2>&1 || true
  bash localstack/stack.sh down --clean "$fault_stack" >/dev/null 2>&1 || true
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
# What ran, with which backends, printed at the end: a fallback must not pass unnoticed.
ran=()

step "machine (what the scripts need from it)"
bash localstack/preflight.sh test
# A CI checkout is built once, at a path of its own: incremental state would only fill the
# disk (25 GB of it after a few dozen runs ran this machine out of space mid-run).
if [[ ${CI:-} == true ]]; then
  export CARGO_INCREMENTAL=0
fi

step "format"
cargo fmt --all -- --check

step "backing services (stack '$stack')"
env -u PG_PORT -u AWS_PORT STACK_AWS="${STACK_AWS:-auto}" bash localstack/stack.sh up "$stack" >/dev/null
set -a
# shellcheck disable=SC1090
. ".local/$stack/env"
set +a
ran+=("backing services: PostgreSQL with pgvector; S3 and SQS on ${AWS_EMULATOR:-none}")

step "headless browser"
bash localstack/install.sh chromium

step "embedding model server"
embedder_log=$(mktemp)
embedder_pid=$(bash localstack/embedder.sh start "$embedder_log")
EMBEDDING_SERVER_URL=$(bash localstack/embedder.sh url "$embedder_log")
export EMBEDDING_SERVER_URL
echo "$EMBEDDING_SERVER_URL"

step "MCP test servers"
bash localstack/install.sh mcp
export MCP_TOOLS_DIR=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}/mcp

step "trace server (Arize Phoenix)"
phoenix_log=$(mktemp)
phoenix_pid=$(bash localstack/phoenix.sh start "$phoenix_log")
PHOENIX_URL=$(bash localstack/phoenix.sh url "$phoenix_log")
export PHOENIX_URL
echo "$PHOENIX_URL"

step "Milvus (milvus-lite)"
milvus_log=$(mktemp)
milvus_pid=$(bash localstack/milvus.sh start "$milvus_log")
MILVUS_URL=$(bash localstack/milvus.sh url "$milvus_log")
export MILVUS_URL
echo "$MILVUS_URL"

step "clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
ran+=("format and clippy -D warnings over every target")

step "function binaries"
cargo build --workspace --bins --quiet
# Alone, the workers resolve the common crate without its `http` feature (docs/layers.md).
cargo check --quiet -p ingest-worker -p memory-worker -p housekeeping
for worker in ingest-worker memory-worker housekeeping; do
  if cargo tree --quiet -p "$worker" -e normal --prefix none 2>/dev/null | grep -q '^axum '; then
    echo "$worker depends on axum; only the HTTP functions may (docs/layers.md)" >&2
    exit 1
  fi
done
ran+=("every function binary; the SQS workers and the scheduled job also without the http feature, and without axum in their dependency trees")

step "API fuzzing (schemathesis, every operation, admin and regular user)"
phases_file=$(mktemp)
coverage_file=$(mktemp)
FUZZ_PHASES_FILE=$phases_file FUZZ_COVERAGE_FILE=$coverage_file bash localstack/fuzz-api.sh
ran+=("API fuzzing: schemathesis phases $(cat "$phases_file"), as administrator and as a regular user, on seeded data; $(sed 's/^fuzz: //' "$coverage_file")")
rm -f "$phases_file" "$coverage_file"

step "SAM template"
bash localstack/lint-template.sh
ran+=("SAM template: cfn-lint and sam validate --lint")

step "tests"
# Bounded well below CI's limit; cargo test names every test still running after 60 s, so a
# hang shows what hung.
timeout --foreground 40m cargo test --workspace --no-fail-fast
ran+=("tests: every crate's unit tests and the API tests, with the real e5 model ($EMBEDDING_SERVER_URL), MCP servers from npm and PyPI, milvus-lite, headless Chromium, and Arize Phoenix reading back the traces of a chat")

step "faults: PostgreSQL restarted under load (a stack of its own, removed after)"
# It restarts its database, so it runs alone, after the tests that share theirs.
env -u PG_PORT -u AWS_PORT STACK_AWS=none bash localstack/stack.sh up "$fault_stack" >/dev/null
(
  set -a
  # shellcheck disable=SC1090
  . ".local/$fault_stack/env"
  set +a
  unset PG_PORT
  FAULT_PG_RESTART="bash $top/localstack/stack.sh pg-restart $fault_stack" \
    timeout --foreground 10m cargo test -p api-tests --test api -- --ignored faults::
)
bash localstack/stack.sh down --clean "$fault_stack" >/dev/null
ran+=("faults: the service recovered from a PostgreSQL restart under load")

step "summary: what ran"
printf -- '- %s\n' "${ran[@]}"
