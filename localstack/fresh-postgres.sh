# Sourced by the benchmark scripts: `. localstack/fresh-postgres.sh NAME` starts a Postgres-only
# stack NAME from nothing (a stack left over from an interrupted run would keep its database)
# and exports its DATABASE_URL into the calling shell.
stack_name=$1
bash localstack/stack.sh down --clean "$stack_name" >/dev/null 2>&1 || true
# A PG_PORT from a sourced env file of another stack would be taken as a request for that port.
env -u PG_PORT -u AWS_PORT STACK_AWS=none bash localstack/stack.sh up "$stack_name" >/dev/null
set -a
# shellcheck disable=SC1090
. ".local/$stack_name/env"
set +a
unset PG_PORT stack_name
