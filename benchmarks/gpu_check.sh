#!/usr/bin/env bash
# The multi-round router's GPU path, checked in one short run on a lent GPU machine (the image
# there has CUDA, torch, transformers, peft and accelerate; nothing can be fetched):
#   1. benchmarks/lora_step.py: one optimiser step of a SmolLM2-135M-shaped policy at the GPU
#      config's micro-batch, LoRA against full fine-tuning, activation checkpointing on and off
#      (seconds per step and peak memory, side by side on the one GPU);
#   2. the end-to-end agent tests (LoRA SFT, evaluation, one GRPO step, RFT, export and resume
#      in another folder) with the policy on the GPU: LTRR_TEST_DEVICE=cuda.
# What the image lacks travels as wheels in .whl/ (trl, datasets, dill, multiprocess, lightgbm,
# bm25s, PyStemmer, for Python 3.12), and .device/pkgs/ holds a stand-in MiniLM package (its
# tokenizer, a one-layer random BERT) for the tiny tests' routing features. Both are ignored
# through .git/info/exclude and named in the device call's carry.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]
set -uo pipefail
OUT=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "gpu_check: the wheels did not install" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:$PWD/.device/pkgs PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/device.txt"
python3 -c "import torch, transformers, trl, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__)" | tee -a "$OUT/device.txt"
python3 benchmarks/lora_step.py --device cuda --out "$OUT/lora_step.json" 2>&1 | grep -v -i warn | tee "$OUT/lora_step.md"
LTRR_TEST_DEVICE=cuda python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_agent_sft.py 2>&1 | tee "$OUT/tests_cuda.log"
