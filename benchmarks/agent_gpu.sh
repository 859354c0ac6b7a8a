#!/usr/bin/env bash
# The multi-round router on one CUDA GPU (config demo-agent-gpu): SFT, GRPO at alpha 0.2, the
# equal-compute rejection-sampling baseline, test evaluations with paired comparisons, then the
# alpha sweep {0, 0.5, 0.9} in shorter runs, read by `ltrr agent sweep` (trend tests). Needs ltrr[agent,rl], torch with CUDA, the demo
# built and `ltrr label demo-agent` done. Every stage resumes from its outputs or checkpoints.
#
#   bash benchmarks/agent_gpu.sh [RESULTS_DIR]      # STEPS=30 SWEEP_STEPS=10 by default
set -euo pipefail
RES=${1:-benchmarks/results/agent_gpu}
CFG=demo-agent-gpu
A=runs/demo-agent/agent
P=$A/policies
STEPS=${STEPS:-30}
SWEEP_STEPS=${SWEEP_STEPS:-10}
ROLLOUTS=$((STEPS * 64))            # the GRPO run's rollouts: 16 questions x 4 samples per step
mkdir -p "$RES"
say() { echo "[agent_gpu $(date +%T)] $*"; }
keep() {  # copy a stage's small outputs into the results folder
  local src=$1 name=$2
  for f in eval.md eval.json grpo.json training.png sft.json rft.json; do
    [ -f "$src/$f" ] && cp "$src/$f" "$RES/${name}_$f"
  done
  return 0
}
policy() { [ -f "$1/config.json" ] && [ -f "$1/$2" ]; }
evaluate() {  # evaluate a policy once
  [ -f "$A/eval-$1/eval.json" ] || ltrr agent eval $CFG --policy "$P/$1"
  keep "$A/eval-$1" "eval-$1"
}

ltrr index $CFG
policy "$P/sft-gpu" sft.json || ltrr agent sft $CFG --out "$P/sft-gpu"
keep "$P/sft-gpu" sft-gpu
say "sft done"
policy "$P/grpo-gpu-a0.2" grpo.json || ltrr agent train $CFG --from "$P/sft-gpu" --out "$P/grpo-gpu-a0.2" --steps "$STEPS" --alpha 0.2
keep "$P/grpo-gpu-a0.2" grpo-gpu-a0.2
say "grpo done"
evaluate sft-gpu
evaluate grpo-gpu-a0.2
ltrr agent compare "$A/eval-grpo-gpu-a0.2" "$A/eval-sft-gpu" > "$RES/compare_grpo_vs_sft.md"
say "first comparison done"
policy "$P/rft-gpu" rft.json || ltrr agent rft $CFG --from "$P/sft-gpu" --rollouts "$ROLLOUTS" --out "$P/rft-gpu"
keep "$P/rft-gpu" rft-gpu
evaluate rft-gpu
ltrr agent compare "$A/eval-grpo-gpu-a0.2" "$A/eval-rft-gpu" > "$RES/compare_grpo_vs_rft.md"
ltrr agent compare "$A/eval-rft-gpu" "$A/eval-sft-gpu" > "$RES/compare_rft_vs_sft.md"
say "rft done"
for alpha in 0 0.5 0.9; do
  name=grpo-gpu-a$alpha-s$SWEEP_STEPS
  policy "$P/$name" grpo.json || ltrr agent train $CFG --from "$P/sft-gpu" --out "$P/$name" --steps "$SWEEP_STEPS" --alpha "$alpha"
  keep "$P/$name" "$name"
  evaluate "$name"
  say "alpha $alpha done"
done
ltrr agent sweep $(for alpha in 0 0.5 0.9; do echo "$A/eval-grpo-gpu-a$alpha-s$SWEEP_STEPS"; done) \
  --json "$RES/sweep.json" > "$RES/sweep.md"
say "all done"
