# `make test` is the full check (CI runs it): lint, format check, then the whole test suite,
# the slow tier included (tests/test_packaging.py builds the wheel and installs it into a fresh
# virtual environment from the package registry: about two minutes).
# `make test-fast` is for the edit-test loop: the tests not marked `slow`, without the lint step.
.PHONY: test test-fast lint format
export TF_CPP_MIN_LOG_LEVEL ?= 2

test: lint
	python -m pytest

test-fast:
	python -m pytest -m "not slow"

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
