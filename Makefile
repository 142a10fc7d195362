# make train | bit | translate | report | compare | test, from a clean clone: the first call builds .venv, later ones reuse it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/multi30k.yaml
NAME := $(basename $(notdir $(CONFIG)))
RUN ?= runs/$(NAME)
SET ?=
# SEEDS=N: make compare and make bit train seeds 1..N, each into a run folder of its own (NAME-seedK)
SEEDS ?=
SEED_LIST := $(if $(SEEDS),$(shell seq 1 $(SEEDS)))
NPROC ?= 1
# NPROC > 1: data-parallel training under torchrun (gloo on CPU, NCCL on GPUs)
TRAIN := $(if $(filter-out 1,$(NPROC)),$(BIN)/torchrun --standalone --nproc_per_node $(NPROC) -m mt,$(BIN)/mt) train
RUNS ?=
CONFIGS ?=
REPORT ?= runs/report.md
# which evaluation `make report` and `make compare` set side by side: empty = each run's own decoding on test, as
# `mt evaluate` scored it (its beam and length penalty as `mt tune` chose them on val, where train.tune did);
# test-beam5 and the like compare one setting of every run, once each run has it (`mt evaluate --beam 5
# --length-penalty 1` files test-beam5)
SETTING ?=

.PHONY: install train bit evaluate translate serve report compare test test-fast lint clean

install: $(VENV)/.installed

# torch is pinned (a CPU wheel of 2.13.0 is what this project is tested with); re-runs install nothing
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,plot,serve,ctranslate2,split,tensorboard,hf]'
	touch $@

train: install
	$(TRAIN) $(CONFIG) --run-dir $(RUN) $(foreach s,$(SET),--set $(s))
	$(BIN)/mt evaluate --run $(RUN) --split test

# the highest Multi30k mean measured (issue 67; a tie with multi30k-best.yaml's), two runs: both directions for 3,000 updates, then de->en for
# 6,300 from there (configs/multi30k-bit-both.yaml, configs/multi30k-bit.yaml); SET goes to both stages.
# SEEDS=3: seeds 1, 2, 3, each a pair of runs of its own (runs/multi30k-bit-seedN-both, runs/multi30k-bit-seedN,
# the second started from the first), then the report of their group
BIT ?= runs/multi30k-bit
BIT_RUNS = $(if $(SEED_LIST),$(foreach n,$(SEED_LIST),$(BIT)-seed$(n)),$(BIT))
bit: install
	@for seed in $(or $(SEED_LIST),-); do \
	  run=$(BIT)$$(test $$seed = - || echo -seed$$seed); \
	  seeded=$$(test $$seed = - || echo --set train.seed=$$seed); \
	  $(TRAIN) configs/multi30k-bit-both.yaml --run-dir $$run-both $(foreach s,$(SET),--set $(s)) $$seeded && \
	  $(TRAIN) configs/multi30k-bit.yaml --run-dir $$run --set train.init_from=$$run-both \
	    $(foreach s,$(SET),--set $(s)) $$seeded && \
	  $(BIN)/mt evaluate --run $$run --split test || exit $$?; \
	done
	$(if $(SEED_LIST),$(BIN)/mt report $(BIT_RUNS) --out $(REPORT) $(if $(SETTING),--setting $(SETTING)))

evaluate: install
	$(BIN)/mt evaluate --run $(RUN) --split test

translate: install
	@$(BIN)/mt translate --run $(RUN)

# the HTTP API and the attention explorer on http://127.0.0.1:8000/ (PORT=...)
PORT ?= 8000
serve: install
	$(BIN)/mt serve --run $(RUN) --port $(PORT)

# make report RUNS="runs/a runs/b": the first run is the baseline
report: install
	$(BIN)/mt report $(RUNS) --out $(REPORT) $(if $(SETTING),--setting $(SETTING))

# make compare CONFIGS="configs/a.yaml configs/b.yaml": train (or resume) each, evaluate, report.
# SEEDS=3: each config trained with train.seed 1, 2, 3 into runs/NAME-seed1..3 (the tokenizer and the
# binarized corpus are the same files where the seed does not change them); the report tests the groups
RUNS_DIR ?= runs
RUNS_OF = $(foreach c,$(CONFIGS),$(if $(SEED_LIST),$(foreach n,$(SEED_LIST),$(RUNS_DIR)/$(basename $(notdir $(c)))-seed$(n)),$(RUNS_DIR)/$(basename $(notdir $(c)))))
compare: install
	@test -n "$(CONFIGS)" || { echo 'usage: make compare CONFIGS="configs/a.yaml configs/b.yaml" [SEEDS=3]' >&2; exit 2; }
	@for c in $(CONFIGS); do \
	  for seed in $(or $(SEED_LIST),-); do \
	    run=$(RUNS_DIR)/$$(basename $$c .yaml)$$(test $$seed = - || echo -seed$$seed); \
	    $(TRAIN) $$c --run-dir $$run $(foreach s,$(SET),--set $(s)) $$(test $$seed = - || echo --set train.seed=$$seed) && \
	    $(BIN)/mt evaluate --run $$run --split test || exit $$?; \
	  done; \
	done
	$(BIN)/mt report $(RUNS_OF) --out $(REPORT) $(if $(SETTING),--setting $(SETTING))

test: install
	$(BIN)/python -m pytest -q -rs

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

# ruff format decides line shape, ruff check finds errors (tests/test_layout.py runs both too)
lint: install
	$(BIN)/ruff format --check mt tests scripts
	$(BIN)/ruff check mt tests scripts

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
