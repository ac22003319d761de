#!/usr/bin/env bash
# What the scripts need from the machine itself, checked before anything starts: what
# Debian's package registry has is installed (as root), anything else stops here with the one
# command that fixes it, instead of failing minutes later in the middle of a step.
#
#   preflight.sh [test]   `test` also checks what only `make test` needs (Node for the MCP
#                         servers, rustfmt and clippy).
set -euo pipefail

die() { echo "preflight: ERROR: $*" >&2; exit 1; }
missing=()

command -v curl >/dev/null || missing+=(curl)
# Debian's python3 cannot make a venv without python3-venv (ensurepip is split out).
tmp=$(mktemp -d)
python3 -m venv "$tmp/v" >/dev/null 2>&1 || missing+=(python3-venv)
rm -rf "$tmp"

if [[ ${#missing[@]} -gt 0 ]]; then
  [[ $EUID -eq 0 ]] || die "missing ${missing[*]}: run \`sudo apt-get install -y ${missing[*]}\`"
  echo "preflight: installing ${missing[*]} from Debian's packages" >&2
  timeout 900 apt-get install -y -q "${missing[@]}" >&2 \
    || { timeout 900 apt-get update -q >&2 && timeout 900 apt-get install -y -q "${missing[@]}" >&2; } \
    || die "apt-get install ${missing[*]} failed"
fi

if [[ ${1:-} == test ]]; then
  cargo fmt --version >/dev/null 2>&1 || die "rustfmt is missing: run \`rustup component add rustfmt\`"
  cargo clippy --version >/dev/null 2>&1 || die "clippy is missing: run \`rustup component add clippy\`"
  command -v npm >/dev/null || die "npm is missing: install Node 20.19 or newer with npm"
  # oauth2-mock-server 8 needs Node 20.19 or newer.
  node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' \
    || die "Node $(node -v) is too old (20.19 or newer is needed): run \`npm install -g node@20\`"
fi
