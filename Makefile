# `make test` is the full check (CI runs it): lint, format check, then the whole test suite,
# the slow tier included (tests/test_packaging.py builds the wheel and installs it into a fresh
# virtual environment from the package registry: about a minute).
# Tests run in parallel processes (pytest-xdist), one per core, at most 4: every test's
# subprocesses and TensorFlow threads stay within what a small machine holds. `--dist loadgroup`
# keeps the tests marked `xdist_group` on one worker, so a module fixture they share and that
# is all or much of their cost (every module imported, every --helpshort run, a tiny
# run_pretraining or SST-2 run) is built once, not once per worker. Long tests that share
# nothing are not grouped: one worker running them all would end last.
# `make test-fast` is for the edit-test loop: the tests not marked `slow`, without the lint step.
.PHONY: test test-fast lint format
export TF_CPP_MIN_LOG_LEVEL ?= 2

test: lint
	python -m pytest -n auto --maxprocesses=4 --dist loadgroup

test-fast:
	python -m pytest -m "not slow" -n auto --maxprocesses=4 --dist loadgroup

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
