#!/usr/bin/env bash
# A named local stack for dev and tests: Postgres 18 + pgvector, and LocalStack (S3, SQS)
# or moto where no Python 3.13 exists.
#
#   stack.sh up|down|status|env|pg-restart [NAME] [--clean]   NAME defaults to dev (tests use test)
#
#   PG_PORT, AWS_PORT   use these ports (refused if taken); default: first free from 54330 / 45660
#   STACK_AWS           auto (default) | localstack | moto | none (Postgres only)
#
# State: <checkout>/.local/NAME/ (env file, pids, logs, pgdata). `up` prints the env file.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel 2>/dev/null || dirname "$HERE")
CACHE=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}
PG_USER=${PG_USER:-pgrunner}
STACK_AWS=${STACK_AWS:-auto}
HELPER=$HERE/stack_helper.py

log() { echo "stack: $*" >&2; }
die() { echo "stack: ERROR: $*" >&2; exit 1; }

CMD=${1:-}; shift || true
NAME=dev CLEAN=0
for a in "$@"; do
  case $a in --clean) CLEAN=1 ;; -*) die "unknown option $a" ;; *) NAME=$a ;; esac
done
[[ $NAME =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad stack name '$NAME'"

STATE=$ROOT/.local/$NAME
ENVF=$STATE/env
HASH=$(printf %s "$ROOT" | sha256sum | cut -c1-10)
PGROOT=$(cat "$CACHE/pg-root" 2>/dev/null || true)

as_pg() {
  if [[ $EUID -eq 0 ]]; then (cd / && runuser -u "$PG_USER" -- "$@"); else "$@"; fi
}

# Postgres runs as $PG_USER, which may not be able to traverse the checkout (e.g. a clone
# under /root): then its data lives in that user's home, keyed by checkout and stack name.
PG_ALT=
if [[ $EUID -eq 0 ]] && PG_HOME=$(getent passwd "$PG_USER" | cut -d: -f6); then
  PG_ALT=$PG_HOME/stacks/$HASH-$NAME
fi
pg_base() {
  if [[ -n $PG_ALT ]] && ! as_pg test -x "$STATE"; then echo "$PG_ALT"; else echo "$STATE"; fi
}

read_file() { cat "$STATE/$1" 2>/dev/null || true; }

# A socket directory as the host of a postgres:// URL (percent-encoded, `/` included).
url_path() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }

pg_running() {
  local data; data=$(pg_base)/pgdata
  [[ -n $PGROOT && -f $data/PG_VERSION ]] &&
    as_pg "$PGROOT/bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

aws_pid_ours() {  # guards against a recycled pid
  local pid=$1
  [[ -n $pid && -r /proc/$pid/cmdline ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qE 'localstack\.runtime\.main|moto_server'
}

aws_running() {
  local kind=$1 port; port=$(read_file aws.port)
  [[ -n $port ]] && aws_pid_ours "$(read_file aws.pid)" &&
    python3 "$HELPER" health "$kind" "http://127.0.0.1:$port" 0
}

# The emulator this `up` wants: auto means LocalStack when install.sh managed to set it up.
wanted_aws() {
  case $STACK_AWS in
    none | localstack | moto) echo "$STACK_AWS" ;;
    auto) if [[ -f $CACHE/stamps/localstack ]]; then echo localstack; else echo moto; fi ;;
    *) die "STACK_AWS must be auto, localstack, moto or none" ;;
  esac
}

is_up() {  # is_up KIND
  [[ -f $ENVF ]] && pg_running && [[ $(read_file aws.kind) == "$1" ]] &&
    { [[ $1 == none ]] || aws_running "$1"; }
}

pick_port() {  # pick_port VAR START
  local want=${!1:-}
  python3 "$HELPER" freeport "$want" "$2" ||
    die "$1=$want is already in use on 127.0.0.1 (unset $1 to pick a free port; a sourced env file of another stack sets PG_PORT)"
}

# A port asked for explicitly must match a part that is already running.
check_port() {  # check_port VAR RUNNING_PORT
  [[ -z ${!1:-} || ${!1} == "$2" ]] ||
    die "stack $NAME already runs with $1=$2; run '$0 down $NAME' first to change it"
}

start_pg() {
  local base port data sock
  base=$(pg_base) data=$(pg_base)/pgdata
  port=$(pick_port PG_PORT 54330)
  # Unix socket paths are limited to 107 bytes, and pg_ctl -o is split on spaces.
  sock=$base/pgsock
  [[ ${#sock} -lt 80 && $sock != *' '* ]] || sock=/tmp/agent-platform-pg-$HASH-$NAME
  mkdir -p "$data" "$sock"
  touch "$base/pg.log"
  [[ $EUID -ne 0 ]] || chown "$PG_USER:" "$data" "$sock" "$base/pg.log"
  chmod 700 "$data"
  if [[ ! -f $data/PG_VERSION ]]; then
    log "initdb $data"
    as_pg "$PGROOT/bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C \
      >>"$base/pg.log" 2>&1 || { tail -20 "$base/pg.log" >&2; die "initdb failed"; }
  fi
  log "starting Postgres on 127.0.0.1:$port (log $base/pg.log)"
  # 9>&- : the server must not inherit the lock fd, or the lock outlives this script.
  as_pg "$PGROOT/bin/pg_ctl" -D "$data" -l "$base/pg.log" -w -t 60 \
    -o "-p $port -k $sock -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null 9>&- || { tail -20 "$base/pg.log" >&2; die "Postgres did not start"; }
  echo "$port" >"$STATE/pg.port"
  echo "$sock" >"$STATE/pg.sock"
  head -1 "$data/postmaster.pid" >"$STATE/pg.pid"
}

setup_pg() {
  local port=$1
  psql_() { PGOPTIONS='-c client_min_messages=warning' "$PGROOT/bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"; }
  # In template1 too, so databases created later (one per test) have the extension.
  psql_ -d template1 -c 'CREATE EXTENSION IF NOT EXISTS vector'
  [[ $(psql_ -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'agent_platform'") == 1 ]] ||
    psql_ -d postgres -c 'CREATE DATABASE agent_platform'
  psql_ -d agent_platform -c 'CREATE EXTENSION IF NOT EXISTS vector'
}

start_aws() {
  local kind=$1 port venv cmd
  port=$(pick_port AWS_PORT 45660)
  venv=$CACHE/venvs/$kind
  if [[ $kind == localstack ]]; then
    # hypercorn is what binds 127.0.0.1 only; path-style SQS URLs avoid DNS names.
    # OVERRIDE_IN_DOCKER=0: this machine has /.dockerenv, and in "container" mode LocalStack
    # ignores FILESYSTEM_ROOT and wipes the shared /tmp/localstack at start (other stacks' too).
    cmd=(env OVERRIDE_IN_DOCKER=0 "GATEWAY_LISTEN=127.0.0.1:$port" "LOCALSTACK_HOST=127.0.0.1:$port"
      "SERVICES=s3,sqs" EAGER_SERVICE_LOADING=1 GATEWAY_SERVER=hypercorn DNS_ADDRESS=0
      SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 SQS_ENDPOINT_STRATEGY=path
      "FILESYSTEM_ROOT=$STATE/localstack-fs" "$venv/bin/python" -m localstack.runtime.main)
  else
    cmd=("$venv/bin/moto_server" -H 127.0.0.1 -p "$port")
  fi
  log "starting $kind on 127.0.0.1:$port (log $STATE/$kind.log)"
  # setsid: own process group, so `down` can stop it with everything it spawned.
  (cd "$STATE" && exec setsid nohup "${cmd[@]}" >"$STATE/$kind.log" 2>&1 </dev/null 9>&-) &
  echo $! >"$STATE/aws.pid"
  echo "$port" >"$STATE/aws.port"
  python3 "$HELPER" health "$kind" "http://127.0.0.1:$port" 60 $! ||
    { tail -20 "$STATE/$kind.log" >&2; stop_aws; die "$kind did not become healthy in 60 s"; }
}

stop_pg() {
  pg_running || return 0
  log "stopping Postgres"
  as_pg "$PGROOT/bin/pg_ctl" -D "$(pg_base)/pgdata" -m fast -w stop >/dev/null
}

stop_aws() {
  local pid; pid=$(read_file aws.pid)
  if aws_pid_ours "$pid"; then
    log "stopping $(read_file aws.kind) (pid $pid)"
    # Its graceful shutdown takes ~5 s and its state is in memory only: don't wait for it.
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in {1..10}; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$STATE/aws.pid" "$STATE/aws.port"
}

cmd_up() {
  local kind pg_port aws_port sock
  case $STACK_AWS in
    none) bash "$HERE/install.sh" pg ;;
    auto) bash "$HERE/install.sh" pg aws ;;
    *) bash "$HERE/install.sh" pg "$STACK_AWS" ;;
  esac
  PGROOT=$(<"$CACHE/pg-root")
  kind=$(wanted_aws)
  mkdir -p "$STATE"
  # One `up`/`down` at a time per machine: port picking and start-up must not interleave.
  exec 9>"$CACHE/stack.lock"
  flock -w 120 9 || die "timed out waiting for another stack.sh"

  if is_up "$kind"; then
    check_port PG_PORT "$(read_file pg.port)"
    [[ $kind == none ]] || check_port AWS_PORT "$(read_file aws.port)"
    cat "$ENVF"
    return 0
  fi

  if pg_running; then check_port PG_PORT "$(read_file pg.port)"; else start_pg; fi
  pg_port=$(read_file pg.port)
  setup_pg "$pg_port"

  if [[ $(read_file aws.kind) != "$kind" ]] || ! aws_running "$kind"; then
    stop_aws
    echo "$kind" >"$STATE/aws.kind"
    [[ $kind == none ]] || start_aws "$kind"
  else
    check_port AWS_PORT "$(read_file aws.port)"
  fi

  {
    echo "DATABASE_URL=postgres://postgres@127.0.0.1:$pg_port/agent_platform"
    # The same server on its Unix socket, for the service run on this machine (`make run`, the
    # benchmarks): no TCP stack between the two, about 3% less CPU per chat (docs/benchmarks.md).
    sock=$(read_file pg.sock)
    [[ -z $sock ]] || echo "DATABASE_SOCKET_URL=postgres://postgres@$(url_path "$sock"):$pg_port/agent_platform"
    echo "PG_PORT=$pg_port"
    if [[ $kind != none ]]; then
      aws_port=$(read_file aws.port)
      echo "AWS_EMULATOR=$kind"
      echo "AWS_ENDPOINT_URL=http://127.0.0.1:$aws_port"
      echo "AWS_REGION=us-east-1"
      echo "AWS_DEFAULT_REGION=us-east-1"
      echo "AWS_ACCESS_KEY_ID=test"
      echo "AWS_SECRET_ACCESS_KEY=test"
      "$CACHE/venvs/$kind/bin/python" "$HELPER" bootstrap "http://127.0.0.1:$aws_port"
    fi
  } >"$ENVF.tmp" || die "creating the bucket and queues failed"
  mv "$ENVF.tmp" "$ENVF"
  cat "$ENVF"
}

cmd_down() {
  [[ -d $STATE || ( -n $PG_ALT && -d $PG_ALT ) ]] || return 0
  mkdir -p "$CACHE"
  exec 9>"$CACHE/stack.lock"
  flock -w 120 9 || die "timed out waiting for another stack.sh"
  stop_aws
  stop_pg
  rm -f "$ENVF" "$STATE/pg.pid" "$STATE/pg.port" "$STATE/pg.sock"
  if (( CLEAN )); then
    log "removing $STATE $([[ -n $PG_ALT && -d $PG_ALT ]] && echo "and $PG_ALT")"
    rm -rf "$STATE" ${PG_ALT:+"$PG_ALT"} "/tmp/agent-platform-pg-$HASH-$NAME"
  fi
}

cmd_status() {
  local kind ok=0; kind=$(read_file aws.kind)
  if pg_running; then
    echo "postgres: up on 127.0.0.1:$(read_file pg.port) (data $(pg_base)/pgdata)"
  else
    echo "postgres: down"; ok=1
  fi
  case $kind in
    none) echo "aws: disabled (STACK_AWS=none)" ;;
    localstack | moto)
      if aws_running "$kind"; then echo "aws: $kind up on 127.0.0.1:$(read_file aws.port)"
      else echo "aws: $kind down"; ok=1; fi ;;
    *) echo "aws: down"; ok=1 ;;
  esac
  return $ok
}

cmd_env() {
  is_up "$(read_file aws.kind)" || die "stack $NAME is not up (run: $0 up $NAME)"
  cat "$ENVF"
}

# Stops Postgres for PG_DOWN_SECS (default 2) and starts it again on its port: fault tests.
cmd_pg_restart() {
  pg_running || die "Postgres of stack $NAME is not running"
  stop_pg
  sleep "${PG_DOWN_SECS:-2}"
  PG_PORT=$(read_file pg.port) start_pg
}

case $CMD in
  up | down | status | env) "cmd_$CMD" ;;
  pg-restart) cmd_pg_restart ;;
  *) die "usage: $0 up|down|status|env|pg-restart [NAME] [--clean]" ;;
esac
