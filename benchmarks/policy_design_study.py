"""Design study of the budgeted policy's deployed rule, on design queries only (issue 12).

The question: how is the deterministic rule's threshold ``tau`` set on the calibration queries
(`BudgetPolicy` ``calibration``)? ``spend``: the smallest tau meeting the budget, possibly
negative (the rule is pushed towards dearer arms until it spends it); ``nonnegative``: the same
with tau >= 0, like the Lagrange multiplier it stands for; ``utility``: of the taus that meet the
budget, the one with the best calibration utility.

Everything is measured inside the design part of partition seed ``--seed`` (default 14, a
partition no policy has been measured on), over several inner design/held-out splits
(``--inner-seeds``). For each variant, trainer, budget and inner split we record the deployed
rule's realised cost (and whether it is within B plus its 95% margin), its utility, and its
utility minus the LTRR cost-penalised curve at that cost.

The first rule, declared before the first run (variants ``spend`` and ``nonnegative`` only): the
higher mean difference to the curve over all cells, if it holds the budget in every cell. It chose
``nonnegative``, but that variant's GRPO policy at 25% spent almost nothing (cost 0.002 of 0.55,
utility 0.15 against 0.29): a difference to the curve *at the realised cost* rewards a policy
that gives its budget away. The rule used now, declared before ``utility`` ran: among the
variants that hold the budget in every cell, the highest mean utility over all cells (at equal
budgets, utility is what a user buys); within 0.001, the earlier variant in the list.

Usage: ``python benchmarks/policy_design_study.py demo-signal [--seed 14] [--inner-seeds 14,1,2,3,4]``
Writes ``benchmarks/results/policy_demo_signal/design_study_seed<seed>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np


def main() -> None:
    from ltrr.config import load_config
    from ltrr.data.io import write_text_atomic
    from ltrr.pipeline import Run
    from ltrr.policy.run import evaluate_policy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--inner-seeds", default="14,1,2,3,4")
    ap.add_argument("--out", default="benchmarks/results/policy_demo_signal")
    args = ap.parse_args()
    inner = [int(s) for s in args.inner_seeds.split(",")]
    cells = []
    variants = ["spend", "nonnegative", "utility"]
    for spend in variants:
        for s in inner:
            run = Run(load_config(args.config), log=lambda m: None)
            t0 = time.perf_counter()
            doc = evaluate_policy(run, on="design", seed=args.seed, inner_seed=s, params={"calibration": spend})
            for r in doc["budgets"]:
                for t in run.config.policy["trainers"]:
                    p = r[f"policy_{t}"]
                    cells.append({"calibration": spend, "inner_seed": s, "fraction": r["fraction"], "trainer": t,
                                  "budget": r["budget"], "cost": p["cost"], "within_budget": p["within_budget"],
                                  "utility": p["utility"], "curve": p["ltrr_curve_at_cost"],
                                  "diff": p["vs_ltrr_curve"]["mean_diff"], "p": p["vs_ltrr_curve"]["p_value"],
                                  "n_test": doc["n_test"]})
            print(f"calibration={spend} inner seed {s}: {time.perf_counter() - t0:.0f}s", flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for spend in variants:
        cs = [c for c in cells if c["calibration"] == spend]
        summary[spend] = {
            "mean_utility": float(np.mean([c["utility"] for c in cs])),
            "mean_diff": float(np.mean([c["diff"] for c in cs])),
            "all_within_budget": all(c["within_budget"] for c in cs),
            "non_inferior_share": float(np.mean([c["p"] < 0.05 for c in cs])),
            "by_fraction": {f"{f:g}": float(np.mean([c["diff"] for c in cs if c["fraction"] == f]))
                            for f in sorted({c["fraction"] for c in cs})},
        }
    choice = None
    for v in variants:
        if summary[v]["all_within_budget"] and (
                choice is None or summary[v]["mean_utility"] > summary[choice]["mean_utility"] + 0.001):
            choice = v
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"config": args.config, "seed": args.seed, "inner_seeds": inner, "cells": cells, "summary": summary,
           "chosen_calibration": choice}
    write_text_atomic(out / f"design_study_seed{args.seed}.json", json.dumps(doc, indent=1) + "\n")
    lines = [f"Design study (partition seed {args.seed}, design part only; inner splits {inner}).", "",
             "| calibration | fraction | trainer | mean cost | within B (all splits) | mean utility | mean curve | "
             "mean diff | non-inferior splits |", "|---|---|---|---|---|---|---|---|---|"]
    for spend in variants:
        for f in sorted({c["fraction"] for c in cells}):
            for t in sorted({c["trainer"] for c in cells}):
                cs = [c for c in cells if c["calibration"] == spend and c["fraction"] == f and c["trainer"] == t]
                lines.append(f"| {spend} | {f:.0%} | {t} | {np.mean([c['cost'] for c in cs]):.3f} | "
                             f"{all(c['within_budget'] for c in cs)} | {np.mean([c['utility'] for c in cs]):.4f} | "
                             f"{np.mean([c['curve'] for c in cs]):.4f} | {np.mean([c['diff'] for c in cs]):+.4f} | "
                             f"{sum(c['p'] < 0.05 for c in cs)}/{len(cs)} |")
    lines += [""] + [f"- {v}: mean utility {summary[v]['mean_utility']:.4f}, mean diff to the curve "
                     f"{summary[v]['mean_diff']:+.4f}, budget held in every cell: {summary[v]['all_within_budget']}"
                     for v in variants] + ["", f"Chosen: calibration = {choice!r}."]
    write_text_atomic(out / f"design_study_seed{args.seed}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
