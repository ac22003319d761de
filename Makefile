# The two commands of the README: `make run` serves the whole API locally, `make test` runs
# every check CI runs. Both install and start what they need.

# Outside the checkout so a fresh clone on the same machine reuses compiled dependencies.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/agent-platform/target

.PHONY: run test stop bench lint-template

run:
	@bash localstack/run-service.sh

test:
	@bash localstack/run-tests.sh

# Stops the backing services `make run` started (the database is kept).
stop:
	@bash localstack/stack.sh down dev

bench:
	@bash localstack/run-bench.sh

lint-template:
	@bash localstack/lint-template.sh
