# The two commands of the README: `make run` serves the whole API locally, `make test` runs
# every check CI runs. Both install and start what they need.

# Outside the checkout so a fresh clone on the same machine reuses compiled dependencies.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/agent-platform/target

.PHONY: run test stop bench bench-chat bench-instructions eval soak lint-template faults

run:
	@bash localstack/run-service.sh

test:
	@bash localstack/run-tests.sh

# Stops the backing services `make run` started (the database is kept).
stop:
	@bash localstack/stack.sh down dev

bench:
	@bash localstack/run-bench.sh

# Only the agent chat benchmark (its own Postgres-only stack, BENCH_STACK, default bench).
bench-chat:
	@bash localstack/run-bench.sh chat

# Instructions the server executes per streamed chat (callgrind), traces off, on and sampled:
# a CPU measure that the machine's load does not move.
bench-instructions:
	@bash localstack/run-bench.sh instructions

# Retrieval quality (nDCG@10, recall@10/100) of a BEIR folder (EVAL_DATA) ingested through the service.
eval:
	@bash localstack/run-eval.sh

# Ten minutes of mixed load (SOAK_SECS, SOAK_CLIENTS): errors, p99, memory growth, data check.
soak:
	@bash localstack/run-soak.sh

lint-template:
	@bash localstack/lint-template.sh

# The fault test that restarts Postgres, alone, on a stack it removes after (`make test` runs
# it too, after the other tests).
faults:
	@S=$${TEST_STACK:-faults}; STACK_AWS=none bash localstack/stack.sh up $$S >/dev/null && set -a && . .local/$$S/env && set +a && \
	  unset PG_PORT && FAULT_PG_RESTART="bash $(CURDIR)/localstack/stack.sh pg-restart $$S" \
	  cargo test -p api-tests --test api -- --ignored --nocapture faults::; \
	  rc=$$?; bash localstack/stack.sh down --clean $$S >/dev/null; exit $$rc
