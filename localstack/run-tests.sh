#!/usr/bin/env bash
# `make test`: formatting, lints, every Rust test against a real Postgres + LocalStack stack
# started (and removed) here, the function binaries, and the SAM template checks.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

stack=${TEST_STACK:-test}
embedder_pid=
milvus_pid=
cleanup() {
  [ -n "$embedder_pid" ] && kill "$embedder_pid" 2>/dev/null
  [ -n "$milvus_pid" ] && kill "$milvus_pid" 2>/dev/null
  bash localstack/stack.sh down --clean "$stack" >/dev/null 2>&1 || true
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

step "machine (what the scripts need from it)"
bash localstack/preflight.sh test

step "format"
cargo fmt --all -- --check

step "backing services (stack '$stack')"
env -u PG_PORT -u AWS_PORT STACK_AWS="${STACK_AWS:-auto}" bash localstack/stack.sh up "$stack" >/dev/null
set -a
# shellcheck disable=SC1090
. ".local/$stack/env"
set +a

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

step "Milvus (milvus-lite)"
milvus_log=$(mktemp)
milvus_pid=$(bash localstack/milvus.sh start "$milvus_log")
MILVUS_URL=$(bash localstack/milvus.sh url "$milvus_log")
export MILVUS_URL
echo "$MILVUS_URL"

step "clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "function binaries"
cargo build --workspace --bins --quiet

step "API fuzzing (schemathesis, every operation, admin and regular user)"
bash localstack/fuzz-api.sh

step "SAM template"
bash localstack/lint-template.sh

step "tests"
# Bounded well below CI's limit; cargo test names every test still running after 60 s, so a
# hang shows what hung.
timeout --foreground 40m cargo test --workspace --no-fail-fast
