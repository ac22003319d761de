#!/usr/bin/env bash
# `make soak`: the soak benchmark (tests/benches/soak.rs) on loopback: mixed agent CRUD,
# streamed chats and knowledge-base searches for SOAK_SECS (default 600) from SOAK_CLIENTS
# (default 8) clients against the `agent-platform` binary (profile bench-local) on a
# Postgres-only stack named "soak", removed on exit. Results go into docs/benchmarks.md by hand.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/agent-platform/target}
stack=soak
trap 'bash localstack/stack.sh down --clean "$stack" >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM

bash localstack/stack.sh down --clean "$stack" >/dev/null 2>&1 || true
env -u PG_PORT -u AWS_PORT STACK_AWS=none bash localstack/stack.sh up "$stack" >/dev/null
set -a
# shellcheck disable=SC1090
. ".local/$stack/env"
set +a
unset PG_PORT

cargo build --quiet --profile bench-local --bin agent-platform
SERVER_BIN=$CARGO_TARGET_DIR/bench-local/agent-platform \
  cargo bench --quiet -p api-tests --profile bench-local --bench soak
