#!/usr/bin/env bash
# `make run`: starts the backing services of the "dev" stack (idempotent) and serves the whole
# API on 127.0.0.1:$PORT. BACKENDS=embedded (default: files on disk, in-process queue, only
# Postgres started) or BACKENDS=localstack (S3 + SQS on LocalStack).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

backends=${BACKENDS:-embedded}
case "$backends" in
  embedded) export STACK_AWS=none ;;
  localstack) export STACK_AWS=${STACK_AWS:-auto} ;;
  *) echo "BACKENDS must be embedded or localstack, got '$backends'" >&2; exit 2 ;;
esac

bash localstack/preflight.sh
bash localstack/stack.sh up dev >/dev/null
set -a
# shellcheck disable=SC1091
. .local/dev/env
set +a
unset PG_PORT
# The service reaches the stack's Postgres on its Unix socket (a stack started before the socket
# was recorded has none: then over TCP).
export DATABASE_URL=${DATABASE_SOCKET_URL:-$DATABASE_URL}

# Secrets for local runs are generated once per checkout and kept, so tokens survive restarts.
secrets=.local/dev/secrets.env
if [ ! -f "$secrets" ]; then
  python3 - >"$secrets" <<'PY'
import base64, secrets
print("JWT_SECRET=" + secrets.token_hex(32))
print("ENCRYPTION_KEY=" + base64.b64encode(secrets.token_bytes(32)).decode())
PY
  chmod 600 "$secrets"
fi
set -a
# shellcheck disable=SC1090
. "$secrets"
set +a

export PORT=${PORT:-8080}
export API_PREFIX=${API_PREFIX:-api}
export ADMIN_USERNAME=${ADMIN_USERNAME:-admin}
export ADMIN_PASSWORD=${ADMIN_PASSWORD:-admin-password}
export LOG_FORMAT=${LOG_FORMAT:-pretty}
if [ "$backends" = localstack ]; then
  export STORAGE_BACKEND=s3 QUEUE_BACKEND=sqs
else
  export STORAGE_BACKEND=fs QUEUE_BACKEND=memory STORAGE_DIR=${STORAGE_DIR:-$top/.local/dev/storage}
fi

echo "Backends: $backends; database $DATABASE_URL" >&2
echo "Admin login: $ADMIN_USERNAME / $ADMIN_PASSWORD" >&2
echo "Try: curl -s -X POST http://127.0.0.1:$PORT/$API_PREFIX/user/login -H 'Content-Type: application/json' -d '{\"username\":\"$ADMIN_USERNAME\",\"password\":\"$ADMIN_PASSWORD\"}'" >&2
# Build first with cargo's progress shown (a fresh machine compiles for a few minutes), then
# run quietly: the server prints its URL when it listens.
echo "Building the service (the first build takes a few minutes)..." >&2
cargo build --bin agent-platform
exec cargo run --quiet --bin agent-platform
