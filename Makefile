# The README's two commands. Both set everything up first (scripts/setup.sh is idempotent).
.PHONY: run test setup lint

setup:
	./scripts/setup.sh

run: setup
	./scripts/run.sh

test: setup
	./scripts/test.sh

lint:
	.venv/bin/ruff check .
