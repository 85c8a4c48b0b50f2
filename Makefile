# Every target depends on `setup`, so a fresh clone bootstraps itself.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SCENARIO ?= 100mbps
SIZE ?= default
PYTEST_ARGS ?=
LAUNCHER ?= auto
# `make bench`: every cell this many times, interleaved (the tables show the median)
REPEATS ?= 1
# `make bench PLUGIN=examples/plugins/randproj.py`: a compressor plug-in (a .py file or a
# module; several separated by spaces) whose modes join the grid (docs/plugins.md); `make
# profile PLUGIN=...` times its modes too
PLUGIN ?=
# The Docker images: the offline base (debootstrap) and the worker built on it, or on
# a registry's CUDA PyTorch base (DOCKER_BASE=pytorch/pytorch:...-cuda...-runtime).
DOCKER_BASE_IMAGE ?= aqsgd-bench-base:bookworm
DOCKER_BASE ?= $(DOCKER_BASE_IMAGE)
DOCKER_IMAGE ?= aqsgd-bench-worker:latest
# inside the build context (docker/), git-ignored
WHEELHOUSE := docker/wheelhouse
DEBIAN_SUITE ?= bookworm

.PHONY: help setup test test-fast lint bench bench-kernels bench-compressors bench-coding regress \
	paper paper-replay convergence convergence-depth convergence-size convergence-scratch \
	finetune pretrain checkpoints-check replay-check probe net-cleanup chaos gpu-check profile clean-venv docker-base docker-image \
	docker-wheelhouse docker-daemon-start docker-daemon-stop

# One line per target: `make help`.
help:
	@awk '/^# /{if (!c) c=substr($$0, 3); next} \
		/^[a-z][a-z-]*:/{n=substr($$0, 1, index($$0, ":") - 1); printf "  %-20s %s\n", n, c} \
		{c=""}' $(MAKEFILE_LIST)

# The virtual environment in .venv with the pinned packages (every target runs it first).
setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

# Every test (as root: netns, Docker and real workers too; a skip fails under CI=true).
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# pytest-xdist processes of `make test-fast` (1: one process)
TEST_FAST_JOBS ?= auto

# The inner loop: no root, no Docker, no worker processes (the marks in pyproject.toml),
# spread over every core (pytest-xdist).
test-fast: setup
	$(PY) -m pytest -n $(TEST_FAST_JOBS) \
		-m "not slow and not netns and not docker_daemon and not workers" $(PYTEST_ARGS)

# Style, import directions, import circles, the Dockerfile.
# Import directions: the contracts in pyproject.toml, [tool.importlinter]; import circles
# among the modules: tools/import_cycles.py.
lint: setup
	$(VENV)/bin/ruff check aqsgd bench specfile tests examples tools
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) tools/import_cycles.py aqsgd bench specfile
	if [ -f docker/Dockerfile ]; then $(VENV)/bin/hadolint docker/Dockerfile; fi

# The main job: one scenario, every compression mode, a table and figures.
bench: setup
	$(PY) -m bench run --scenario $(SCENARIO) --launcher $(LAUNCHER) --repeats $(REPEATS) \
		$(foreach p,$(PLUGIN),--plugin $(p))

# CI regression check against results/baseline/.
regress: setup
	$(PY) -m bench regress

# The paper's figures: its bandwidth sweep, the convergence sweep, the claims beside them.
# Both sweeps are resumable (results/paper, results/convergence); then the paper figures
# with the published claims and the convergence report.
paper: setup
	$(PY) -m bench paper --launcher $(LAUNCHER)

# The paper's throughput figure from replayed GPT2-XL cells, the model's curve and the claims.
# Replayed: 8 stages wait the H200 bf16 profile's times, messages and shaped links are real
# (scenarios/sweeps/paper-replay.yaml, resumable, results/paper-replay).
paper-replay: setup
	$(PY) -m bench paper-replay --launcher $(LAUNCHER)

# This machine's profile for the performance model, in about 2 min (profiles/cpu-2core.yaml).
# Stages and compressors timed here, the runtime's communication constants fitted on the
# paper sweep's fp32 cells, run first as their own sweep (resumable, results/profile-fit);
# docs/performance-model.md.
profile: setup
	$(PY) -m bench sweep scenarios/sweeps/profile-fit.yaml --launcher $(LAUNCHER)
	$(PY) -m bench profile --out profiles/cpu-2core.yaml --name cpu-2core --cells results/profile-fit \
		$(foreach p,$(PLUGIN),--plugin $(p))

# Model quality: every mode, many epochs, three seeds (SIZE=smoke: seconds).
# Every mode for many epochs, three seeds, dropout as a knob (unshaped, on
# local processes), then results/convergence/report/convergence.md. Runs the throughput
# cells its time-to-quality needs first when they are missing (on LAUNCHER); resumable.
# Both times are stated before the first cell. SIZE=smoke runs in seconds.
convergence: setup
	$(PY) -m bench convergence --size $(SIZE) --launcher $(LAUNCHER)

# Model quality against pipeline depth: 2, 4, 8 stages of one 8-block model (SIZE=smoke).
# fp32, DirectQ, TAH-Quant, AQ-SGD at 2/4 and 4/8 (tahquant-pub at 2/4), three seeds; its time
# is stated before the first cell; resumable (results/convergence-depth). docs/convergence.md
convergence-depth: setup
	$(PY) -m bench convergence --size depth$(if $(filter smoke,$(SIZE)),-smoke)

# Model quality against model size: three presets pre-trained once each (SIZE=smoke).
# fp32, DirectQ 2/4, both TAH-Quants 2/4, AQ-SGD 2/4 and 4/8, three seeds, 2 stages; the
# pre-training and the cells' times are stated first; resumable (results/convergence-size).
convergence-size: setup
	$(PY) -m bench convergence --size size$(if $(filter smoke,$(SIZE)),-smoke)

# Training from scratch to a target: tiny from random init, every mode three seeds, the
# held-out loss every 25 steps, steps to loss 3.0 in results/convergence-scratch/report/
# target.md (SIZE=smoke: seconds). docs/convergence-scratch.md
convergence-scratch: setup
	$(PY) -m bench convergence --size scratch$(if $(filter smoke,$(SIZE)),-smoke)

# A 2-stage fine-tune on loopback (no shaping) that writes metrics under runs/.
finetune: setup
	$(PY) -m aqsgd.train.worker --config examples/tiny-2stage.yaml --local 2

# Pre-train the tiny preset's starting checkpoint once (cached under .cache/).
pretrain: setup
	$(PY) -m aqsgd.model.pretrain --preset tiny

# Rebuild each checkpoint shipped under checkpoints/ from its recipe; compare bit for bit.
checkpoints-check: setup
	$(PY) -m aqsgd.model.shipped check

# Replay against real compute: tiny in 2 stages at 10 and 100 Mbit/s, fp32 and aqsgd:2/4,
# real and replayed cells back to back; prints each step time, exit 1 past 5% (root).
replay-check: setup
	$(PY) -m bench.harness.replay_check

# Bring SCENARIO up in network namespaces, print the achieved link table, tear down.
probe: setup
	$(PY) -m bench.launch probe $(SCENARIO)

# Remove what killed runs left behind, by the names they recorded (live runs are kept).
# Namespaces, qdiscs, containers, networks, volumes, processes, by
# the names it recorded: every state dir a launcher has used (the registry under
# /run/aqsgd-bench/state-dirs); live runs are left alone.
net-cleanup: setup
	$(PY) -m bench.launch cleanup --all-recorded

# A netns sweep of real workers under injected faults, then every cell checked (root).
# SIZE=smoke: 12 cells (3.6 min on 2 quiet cores, 12 min at a load of 15-20); faults and guarantees: docs/robustness.md.
chaos: setup
	$(PY) -m bench chaos --size $(SIZE) --out results/chaos --strict

# Compressor cost per micro-batch (encode + decode), one thread.
bench-compressors: setup
	$(PY) -m bench.micro.compressors

# Quantizer kernels in GB/s against the plain-torch reference.
bench-kernels: setup
	$(PY) -m bench.micro.kernels

# CPU coding per element, the torch path against the fused kernels, beside the copy limit.
bench-coding: setup
	$(PY) -m bench.micro.coding

# On a CUDA machine: Triton kernels against the reference, a pipeline on CUDA, GPT2-XL stages.
# Needs an NVIDIA GPU, its driver (nvidia-smi) and a CUDA build of torch; writes results/gpu/.
gpu-check: setup
	@command -v nvidia-smi >/dev/null || { echo "gpu-check: no NVIDIA driver here (nvidia-smi \
	not found): it needs a CUDA GPU, its driver and a CUDA build of torch. Without a GPU, \
	$(PY) -m bench.micro.gpu_check --ptx-audit --out DIR compiles and audits the kernels" >&2; \
	exit 2; }
	$(PY) -m bench.micro.gpu_check --out results/gpu

# Remove the virtual environment.
clean-venv:
	rm -rf $(VENV)

# The offline base image: a minimal Debian with Python 3.11 and iproute2, no registry.
docker-base:
	@command -v debootstrap >/dev/null || { echo "docker-base: debootstrap not found: \
	apt-get install debootstrap" >&2; exit 2; }
	@command -v docker >/dev/null || { echo "docker-base: docker not found: apt-get install \
	docker.io, then make docker-daemon-start" >&2; exit 2; }
	rootfs=$$(mktemp -d) && trap 'rm -rf "$$rootfs"' EXIT && \
	debootstrap --variant=minbase --include=iproute2,python3,python3-venv $(DEBIAN_SUITE) \
		"$$rootfs" >/dev/null && \
	tar -C "$$rootfs" -c . | docker import - $(DOCKER_BASE_IMAGE)

# The pinned packages as wheels for the worker image (CPython 3.11, x86_64).
# Taken
# from whatever index or local wheel directory this host's pip is configured with.
docker-wheelhouse: setup
	mkdir -p $(WHEELHOUSE)
	$(PY) docker/requirements.py > $(WHEELHOUSE)/requirements.txt
	$(VENV)/bin/pip download -q -d $(WHEELHOUSE) --only-binary=:all: --python-version 3.11 \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 --platform linux_x86_64 --platform any \
		-r $(WHEELHOUSE)/requirements.txt

# The worker image (docker/Dockerfile) on DOCKER_BASE, packages from the wheelhouse.
docker-image: docker-wheelhouse
	docker build -f docker/Dockerfile --build-arg BASE=$(DOCKER_BASE) -t $(DOCKER_IMAGE) docker

# A Docker daemon of the suite's own (iptables off); stop stops exactly that one.
docker-daemon-start:
	docker/dockerd.sh start

# Stop the suite's own Docker daemon (by its pid file) and remove its bridge.
docker-daemon-stop:
	docker/dockerd.sh stop
