# Every target depends on `setup`, so a fresh clone bootstraps itself.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SCENARIO ?= 100mbps
PYTEST_ARGS ?=

.PHONY: setup test lint bench bench-kernels bench-compressors regress paper finetune \
	pretrain probe net-cleanup gpu-check clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# Style, then import directions (the contracts in pyproject.toml, [tool.importlinter]).
lint: setup
	$(VENV)/bin/ruff check aqsgd bench specfile tests examples
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The main job: one scenario, every compression mode, a table and figures.
bench: setup
	$(PY) -m bench run --scenario $(SCENARIO)

# CI regression check against results/baseline/.
regress: setup
	$(PY) -m bench regress

# The paper's bandwidth sweep (resumable) and its figures with the published claims.
paper: setup
	$(PY) -m bench paper

# A 2-stage fine-tune on loopback (no shaping) that writes metrics under runs/.
finetune: setup
	$(PY) -m aqsgd.train.worker --config examples/tiny-2stage.yaml --local 2

# Pre-train the tiny preset's starting checkpoint once (cached under .cache/).
pretrain: setup
	$(PY) -m aqsgd.model.pretrain --preset tiny

# Bring SCENARIO up in network namespaces, print the achieved link table, tear down.
probe: setup
	$(PY) -m bench.launch probe $(SCENARIO)

# Remove what a killed run left behind, by the names it recorded.
net-cleanup: setup
	$(PY) -m bench.launch cleanup --all-recorded

bench-compressors: setup
	$(PY) -m bench.micro.compressors

bench-kernels: setup
	$(PY) -m bench.micro.kernels

gpu-check: setup
	$(PY) -m bench.micro.gpu_check --out results/gpu

clean-venv:
	rm -rf $(VENV)
