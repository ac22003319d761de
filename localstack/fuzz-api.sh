#!/usr/bin/env bash
# Fuzzes every operation of the service's own OpenAPI document with schemathesis, once as an
# administrator and once as a regular user (both also sending an app's external credentials),
# against the built `agent-platform` binary on DATABASE_URL. Each caller first gets resources of
# its own (fuzz_seed.py) and a config that points the generated ids at them, so requests get
# past the 404 of an unknown id. Fails on any 5xx, on any response that breaks the document
# (status code, content type, headers, body schema), and when fewer than
# FUZZ_MIN_SUCCESS_PERCENT (90) of the operations answered a 2xx at least once
# (fuzz_coverage.py lists the rest).
#
#   fuzz-api.sh [BINARY]   env: DATABASE_URL (required), FUZZ_EXAMPLES (default 15),
#                               EMBEDDING_SERVER_URL (a real embedding model, optional),
#                               FUZZ_WORK_DIR (keep reports, configs and the server log there)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

: "${DATABASE_URL:?DATABASE_URL must point at a Postgres the service may migrate}"
bin=${1:-${CARGO_TARGET_DIR:-target}/debug/agent-platform}
[[ -x $bin ]] || { echo "fuzz: $bin is not built (cargo build --bin agent-platform)" >&2; exit 1; }

bash localstack/install.sh fuzz
venv=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}/venvs/fuzz
st=$venv/bin/schemathesis
# The coverage phase needs Python 3.12+ (CPython 3.11 fails inside its schema walker).
phases=examples,coverage,fuzzing
"$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 12))' || phases=examples,fuzzing
# For the caller's summary of what ran.
[[ -n ${FUZZ_PHASES_FILE:-} ]] && echo "$phases" >"$FUZZ_PHASES_FILE"

# FUZZ_WORK_DIR keeps the reports, configs and server log for a look afterwards.
work=${FUZZ_WORK_DIR:-$(mktemp -d)}
mkdir -p "$work"
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null
  [[ -n ${FUZZ_WORK_DIR:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
admin_password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
# Users may call loopback here (OUTBOUND_USER_DENY_CIDRS=none): the seeded models of the
# regular user point at the local embedding server. The deny lists have tests of their own.
env PORT="$port" API_PREFIX=api ADMIN_USERNAME=admin ADMIN_PASSWORD="$admin_password" \
  STORAGE_BACKEND=fs STORAGE_DIR="$work/storage" QUEUE_BACKEND=memory LOG_FORMAT=json RUST_LOG=warn \
  RATE_LIMIT_USER_REQUESTS=0 RATE_LIMIT_APP_REQUESTS=0 OUTBOUND_USER_DENY_CIDRS=none \
  JWT_SECRET="$(python3 -c 'import secrets; print(secrets.token_hex(32))')" \
  ENCRYPTION_KEY="$(python3 -c 'import base64, secrets; print(base64.b64encode(secrets.token_bytes(32)).decode())')" \
  "$bin" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  curl -fs "$base/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.2
done

# call METHOD PATH JSON [TOKEN] -> the response's `data`, failing on anything but success.
call() {
  curl -fsS -X "$1" "$base/api$2" -H 'Content-Type: application/json' ${4:+-H "Svc-Auth: $4"} -d "$3" \
    | python3 -c 'import json, sys; r = json.load(sys.stdin); assert r.get("code", r.get("status")) in (1, 200), r; print(json.dumps(r["data"]))'
}
field() { python3 -c "import json, sys; print(json.load(sys.stdin)[\"$1\"])"; }

admin=$(call POST /user/login "{\"username\":\"admin\",\"password\":\"$admin_password\"}" | field token)
call POST /user "{\"username\":\"fuzzuser\",\"password\":\"$admin_password\",\"role\":2,\"email\":\"fuzzuser@example.com\"}" "$admin" >/dev/null
call POST /user "{\"username\":\"fuzzvictim\",\"password\":\"$admin_password\",\"role\":2,\"email\":\"fuzzvictim@example.com\"}" "$admin" >/dev/null
user=$(call POST /user/login "{\"username\":\"fuzzuser\",\"password\":\"$admin_password\"}" | field token)
app=$(call POST /app '{"appId":"fuzz-app","appName":"Fuzz"}' "$admin")
app_token=$(field token <<<"$app")

# Each caller's own resources, and a config that points the fuzzer's ids at them.
psql_bin=$(cat "${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}/pg-root")/bin/psql
for who in admin user; do
  token=$admin
  [[ $who == user ]] && token=$user
  FUZZ_BASE=$base FUZZ_TOKEN=$token FUZZ_ADMIN_TOKEN=$admin FUZZ_APP_ID=fuzz-app FUZZ_APP_TOKEN=$app_token \
    FUZZ_VICTIM=fuzzvictim FUZZ_VICTIM_PASSWORD=$admin_password PSQL=$psql_bin \
    python3 localstack/fuzz_seed.py "$who" "$work/$who.toml"
done

status=0
for who in admin user; do
  token=$admin
  [[ $who == user ]] && token=$user
  echo "fuzz: every operation as $who ($phases)"
  # From the scratch directory: schemathesis keeps a cache in its working directory.
  # Bounded: a hung request would otherwise hold CI to its limit with no clue.
  (cd "$work" && timeout 1200 "$st" --config-file "$work/$who.toml" run "$base/api-docs/openapi.json" --url "$base" \
    -H "Svc-Auth: $token" -H "Svc-App-Id: fuzz-app" -H "Svc-Token: $app_token" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --phases "$phases" --max-examples "${FUZZ_EXAMPLES:-15}" --workers 2 --seed 1 \
    --report har --report-har-path "$work/$who.har" \
    >"$work/$who.txt" 2>&1) || status=1
  sed -n '/= SUMMARY =/,$p' "$work/$who.txt"
  if [[ $status -ne 0 ]]; then
    cat "$work/$who.txt" >&2
    echo "fuzz: server log (last 50 lines)" >&2
    tail -50 "$work/server.log" >&2
    exit 1
  fi
done

# Seeded, most operations must get past validation and lookups to a success at least once.
curl -fsS "$base/api-docs/openapi.json" >"$work/openapi.json"
python3 localstack/fuzz_coverage.py "$work/openapi.json" "${FUZZ_MIN_SUCCESS_PERCENT:-90}" "$work/admin.har" "$work/user.har" \
  | tee "$work/coverage.txt"
if [[ -n ${FUZZ_COVERAGE_FILE:-} ]]; then head -1 "$work/coverage.txt" >"$FUZZ_COVERAGE_FILE"; fi
