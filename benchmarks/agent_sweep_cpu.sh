#!/usr/bin/env bash
# The cost weight's sweep {0, 0.5, 0.9} on CPU (issue 28, point 5; the preregistration is
# benchmarks/results/agent_grpo_demo_agent/sweep_cpu/preregistration.md): one GRPO run of the
# `demo-agent` config per alpha, SWEEP_STEPS steps each from the committed LoRA SFT policy, run in
# legs across sessions and machines from the checkpoints committed under data/policies/demo-agent/;
# each finished policy evaluated once on the test part; then `ltrr agent sweep` reads the three.
#
#   bash benchmarks/agent_sweep_cpu.sh SECONDS [RESULTS_DIR]
#
# SECONDS is this call's wall-clock budget. Two jobs run at once, one per core (a GRPO run of
# SmolLM2-135M peaks at about 11 GB, so three do not fit in 24 GB). A job trains its alpha's run
# with `--time-budget` (it pauses at a checkpoint when the next step would not fit before the
# deadline) and exports it to data/policies at once, finished or paused, so committing
# data/policies/demo-agent/sweep-cpu-a* carries the sweep to a new machine, where the same command
# resumes it; a finished run is then evaluated, within the deadline (or by the next call).
#
# Settings (environment): SWEEP_STEPS (default 20, as preregistered), ALPHAS (default
# "0.5 0.9 0": the longest remaining runs first), JOBS (default 2).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bash benchmarks/agent_sweep_cpu.sh SECONDS [RESULTS_DIR]" >&2; exit 2; }
[[ $1 =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ] || { echo "SECONDS must be a positive integer, got '$1'" >&2; exit 2; }
DEADLINE=$(( $(date +%s) + $1 ))
RES=${2:-benchmarks/results/agent_grpo_demo_agent/sweep_cpu}
CFG=demo-agent
A=runs/demo-agent/agent
P=$A/policies
D=data/policies/demo-agent
STEPS=${SWEEP_STEPS:-20}
ALPHAS=${ALPHAS:-"0.5 0.9 0"}
export CFG A P D STEPS DEADLINE RES OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$RES" runs/sweep-cpu
say() { echo "[agent_sweep_cpu $(date +%T)] $*"; }
export -f say

leg() {  # train one alpha's run until it finishes or the deadline nears, export it, then evaluate it once
  local alpha=$1 name=sweep-cpu-a$1 left
  left=$(( DEADLINE - $(date +%s) ))
  if [ ! -f "$P/$name/grpo.json" ]; then
    [ "$left" -gt 600 ] || { say "alpha $alpha: no time left for a step"; return 0; }
    local resume=()
    [ -d "$D/$name/checkpoints" ] && resume=(--resume "$D/$name")
    # a finished run resumed from its export is not trained again: its last checkpoint is the policy
    ltrr agent train "$CFG" --from data/policies/demo-agent/sft --steps "$STEPS" --alpha "$alpha" \
      --out "$P/$name" "${resume[@]}" --time-budget "$((left - 120))" > "runs/sweep-cpu/a$alpha.log" 2>&1 \
      || say "alpha $alpha: training failed (runs/sweep-cpu/a$alpha.log)"
    grep -h "^policy:\|^paused:" "runs/sweep-cpu/a$alpha.log" || true
    # carried to the next machine at once, finished or paused (commit data/policies/demo-agent/$name)
    [ -d "$P/$name/checkpoints" ] && ltrr agent export "$P/$name" "$D/$name"
  fi
  [ -f "$P/$name/grpo.json" ] || return 0
  cp "$P/$name/grpo.json" "$RES/${name}_grpo.json"
  [ -f "$P/$name/training.png" ] && cp "$P/$name/training.png" "$RES/${name}_training.png"
  if [ ! -f "$A/eval-$name/eval.json" ]; then
    # cached call by call: cut short by the deadline, it resumes on this machine (a new one starts over)
    left=$(( DEADLINE - $(date +%s) ))
    [ "$left" -gt 300 ] || { say "alpha $alpha: finished, no time left to evaluate"; return 0; }
    timeout "$((left - 60))" ltrr agent eval "$CFG" --policy "$P/$name" > "runs/sweep-cpu/eval-a$alpha.log" 2>&1 \
      || { say "alpha $alpha: evaluation not finished (runs/sweep-cpu/eval-a$alpha.log)"; return 0; }
  fi
  for f in eval.md eval.json; do cp "$A/eval-$name/$f" "$RES/eval-${name}_$f"; done
  say "alpha $alpha: finished and evaluated"
}
export -f leg

ltrr index $CFG
ltrr label $CFG
ltrr features $CFG
printf '%s\n' $ALPHAS | xargs -P "${JOBS:-2}" -I{} bash -c 'leg {}'
done=0
for alpha in $ALPHAS; do
  if [ -f "$A/eval-sweep-cpu-a$alpha/eval.json" ]; then done=$((done + 1)); fi
done
if [ "$done" -eq 3 ]; then
  ltrr agent sweep $(for alpha in 0 0.5 0.9; do echo "$A/eval-sweep-cpu-a$alpha"; done) \
    --json "$RES/sweep.json" > "$RES/sweep.md"
  say "the sweep is read: $RES/sweep.md"
else
  say "$done of 3 runs evaluated; the same command resumes the rest"
fi
