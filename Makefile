# Every target depends on `setup`, so a fresh clone bootstraps itself.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SCENARIO ?= 100mbps
PYTEST_ARGS ?=

.PHONY: setup test lint bench-kernels gpu-check clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check aqsgd bench tests

bench-kernels: setup
	$(PY) -m bench.kernels

gpu-check: setup
	$(PY) -m bench.gpu_check --out results/gpu

clean-venv:
	rm -rf $(VENV)
