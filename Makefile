# make train | translate | test, from a clean clone: the first call builds .venv, later ones reuse it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/multi30k.yaml
NAME := $(basename $(notdir $(CONFIG)))
RUN ?= runs/$(NAME)
SET ?=

.PHONY: install train evaluate translate test test-fast clean

install: $(VENV)/.installed

# torch is pinned (a CPU wheel of 2.13.0 is what this project is tested with); re-runs install nothing
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

train: install
	$(BIN)/mt train $(CONFIG) --run-dir $(RUN) $(foreach s,$(SET),--set $(s))
	$(BIN)/mt evaluate --run $(RUN) --split test

evaluate: install
	$(BIN)/mt evaluate --run $(RUN) --split test

translate: install
	@$(BIN)/mt translate --run $(RUN)

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
