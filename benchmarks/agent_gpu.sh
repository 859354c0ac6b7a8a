#!/usr/bin/env bash
# The multi-round router on one CUDA GPU (config demo-agent-gpu): SFT, GRPO at alpha 0.2, the
# equal-compute rejection-sampling baseline, test evaluations with paired comparisons, then the
# alpha sweep {0, 0.5, 0.9} in shorter runs, read by `ltrr agent sweep` (trend tests). Needs
# ltrr[agent,rl], torch with CUDA, the demo built and `ltrr label demo-agent` done. Every stage
# resumes from its outputs or checkpoints, so the stages can go in several device calls.
#
#   bash benchmarks/agent_gpu.sh [RESULTS_DIR]      # STEPS=30 SWEEP_STEPS=10 by default
#
# On a lent machine that reaches no package index, benchmarks/agent_gpu_payload.sh carries what
# it lacks and runs this script there.
#
# Settings (environment):
#   START=DIR       a committed start policy (e.g. data/policies/demo-agent/sft, the CPU run's):
#                   no SFT here, and RFT and the sweep start from it; evaluated as eval-<name>
#   STEPS=N         the alpha-0.2 GRPO run's steps (0: leave that run out)
#   RFT_ROLLOUTS=N  the RFT baseline's samples (default STEPS x 64: the GRPO run's rollouts;
#                   640 = the CPU run's 40 steps x 16, for START=data/policies/demo-agent/sft)
#   STAGES="..."    which of: start grpo rft sweep-<alpha> sweep-read (default: all, in order)
set -euo pipefail
RES=${1:-benchmarks/results/agent_gpu}
CFG=demo-agent-gpu
A=runs/demo-agent/agent
P=$A/policies
STEPS=${STEPS:-30}
SWEEP_STEPS=${SWEEP_STEPS:-10}
ROLLOUTS=${RFT_ROLLOUTS:-$((STEPS * 64))}   # GRPO: 16 questions x 4 samples per step
ALPHAS="0 0.5 0.9"
STAGES=${STAGES:-"start grpo rft $(for a in $ALPHAS; do printf 'sweep-%s ' "$a"; done)sweep-read"}
mkdir -p "$RES"
say() { echo "[agent_gpu $(date +%T)] $*"; }
want() { [[ " $STAGES " == *" $1 "* ]]; }
keep() {  # copy a stage's small outputs into the results folder
  local src=$1 name=$2
  for f in eval.md eval.json grpo.json training.png sft.json rft.json; do
    [ -f "$src/$f" ] && cp "$src/$f" "$RES/${name}_$f"
  done
  return 0
}
policy() { [ -f "$1/$2" ] && { [ -f "$1/config.json" ] || [ -f "$1/adapter_config.json" ]; }; }
evaluate() {  # evaluate a policy folder once: eval-<its name>
  local name; name=$(basename "$1")
  [ -f "$A/eval-$name/eval.json" ] || ltrr agent eval $CFG --policy "$1"
  keep "$A/eval-$name" "eval-$name"
}

ltrr index $CFG
if [ -n "${START:-}" ]; then
  SFT=$START
else
  SFT=$P/sft-gpu
  policy "$SFT" sft.json || ltrr agent sft $CFG --out "$SFT"
  keep "$SFT" sft-gpu
fi
S=$(basename "$SFT")
if want start; then evaluate "$SFT"; say "start policy $S evaluated"; fi
if want grpo && [ "$STEPS" -gt 0 ]; then
  G=$P/grpo-gpu-a0.2
  policy "$G" grpo.json || ltrr agent train $CFG --from "$SFT" --out "$G" --steps "$STEPS" --alpha 0.2
  keep "$G" grpo-gpu-a0.2
  evaluate "$G"
  ltrr agent compare "$A/eval-grpo-gpu-a0.2" "$A/eval-$S" > "$RES/compare_grpo_vs_$S.md"
  say "grpo done"
fi
if want rft; then
  R=$P/rft-gpu-$ROLLOUTS
  policy "$R" rft.json || ltrr agent rft $CFG --from "$SFT" --rollouts "$ROLLOUTS" --out "$R"
  keep "$R" "rft-gpu-$ROLLOUTS"
  evaluate "$R"
  ltrr agent compare "$A/eval-rft-gpu-$ROLLOUTS" "$A/eval-$S" > "$RES/compare_rft_vs_$S.md"
  [ -f "$A/eval-grpo-gpu-a0.2/eval.json" ] \
    && ltrr agent compare "$A/eval-grpo-gpu-a0.2" "$A/eval-rft-gpu-$ROLLOUTS" > "$RES/compare_grpo_vs_rft.md"
  say "rft done"
fi
for alpha in $ALPHAS; do
  want "sweep-$alpha" || continue
  name=grpo-gpu-a$alpha-s$SWEEP_STEPS
  policy "$P/$name" grpo.json || ltrr agent train $CFG --from "$SFT" --out "$P/$name" --steps "$SWEEP_STEPS" --alpha "$alpha"
  keep "$P/$name" "$name"
  evaluate "$P/$name"
  say "alpha $alpha done"
done
if want sweep-read; then
  ltrr agent sweep $(for alpha in $ALPHAS; do echo "$A/eval-grpo-gpu-a$alpha-s$SWEEP_STEPS"; done) \
    --json "$RES/sweep.json" > "$RES/sweep.md"
fi
say "all done"
