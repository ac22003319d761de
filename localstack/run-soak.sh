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

# shellcheck source=localstack/fresh-postgres.sh
. localstack/fresh-postgres.sh "$stack"

cargo build --quiet --profile bench-local --bin agent-platform
SERVER_BIN=$CARGO_TARGET_DIR/bench-local/agent-platform \
  cargo bench --quiet -p api-tests --profile bench-local --bench soak
