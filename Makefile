# `make test` is the one test command: lint, format check, then the test suite.
.PHONY: test lint format
export TF_CPP_MIN_LOG_LEVEL ?= 2

test: lint
	python -m pytest

lint:
	ruff check .
	ruff format --check .

format:
	ruff format .
	ruff check --fix .

# Pretrain a tiny ALBERT on this machine's CPU, from nothing (see albert/quickstart.py).
.PHONY: quickstart
quickstart:
	python -m albert.quickstart --output_dir=$(or $(QUICKSTART_DIR),/tmp/albert_quickstart)
