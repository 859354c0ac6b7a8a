"""Cost-utility evaluation of budgeted policies against the baselines, on held-out queries.

For each budget ``B`` (fractions of the most expensive arm's cost) the policies (GRPO and the
exact-expectation trainer) are trained on the training queries and their deployed rule is run on
the test queries. On the same queries:

- ``ltrr top-1``: the LTR ranker's best arm, whatever it costs (one point);
- ``ltrr cost-penalised``: ``argmax(score - mu * cost)`` with ``mu`` set on the training queries'
  cross-fitted scores and labels by the policy's own calibration rule (`ltrr.policy.objective.
  calibrate`; by default the feasible ``mu`` with the best training utility), so the two are
  compared under one rule, with its mean cost's margin and ``within_budget`` as a policy's;
  swept over ``mu`` it gives the LTRR cost-utility curve;
- ``best single affordable``: the arm with the best training utility among those costing <= B;
- ``always none``: the no-retrieval arm;
- ``oracle under budget``: the LP optimum on the true test labels (an upper bound).

Each policy's mean cost is reported with its 95% binomial margin, and its utility is compared
with the LTRR curve interpolated at the policy's realised cost: per query, the utility of the
two curve points that bracket that cost, mixed to match it; a one-sided paired t-test asks
whether the policy is at least that utility minus ``margin`` (non-inferiority). With two trainers
(GRPO against the exact trainer), each budget also gives their paired difference in test utility
and its two-sided Wilcoxon signed-rank p (``trainers_paired``): does one beat the other?
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ltrr._atomic import atomic_path
from ltrr._errors import DataError
from ltrr.eval.stats import paired_wilcoxon
from ltrr.policy.objective import binomial_margin, budget_oracle, calibrate, cost_aware_argmax

__all__ = ["ltrr_curve", "interpolated_utility", "non_inferiority", "evaluate_budgets"]


def ltrr_curve(scores: np.ndarray, U: np.ndarray, C: np.ndarray, n_points: int = 40) -> list[dict]:
    """The cost-penalised LTRR rule swept over ``mu``: points ``{mu, cost, utility, per_query}``,
    sorted by cost (duplicates of cost dropped)."""
    span = float(np.nanmax(scores) - np.nanmin(scores)) + 1.0
    gaps = np.diff(np.unique(C))
    top = span / (float(gaps.min()) if gaps.size else 1.0) * 2.0
    mus = np.concatenate([[0.0], np.geomspace(1e-4 * top, top, n_points)])
    pts, seen = [], set()
    rows = np.arange(len(U))
    for mu in mus:
        a = cost_aware_argmax(scores, C, mu)
        cost = float(C[rows, a].mean())
        if round(cost, 12) in seen:
            continue
        seen.add(round(cost, 12))
        pts.append({"mu": float(mu), "cost": cost, "utility": float(U[rows, a].mean()), "per_query": U[rows, a]})
    return sorted(pts, key=lambda p: p["cost"])


def interpolated_utility(curve: list[dict], cost: float) -> tuple[np.ndarray, float]:
    """Per-query utility of the curve at ``cost`` (linear mix of the bracketing points)."""
    costs = np.array([p["cost"] for p in curve])
    if cost <= costs[0]:
        return curve[0]["per_query"], float(costs[0])
    if cost >= costs[-1]:
        return curve[-1]["per_query"], float(costs[-1])
    j = int(np.searchsorted(costs, cost))
    lo, hi = curve[j - 1], curve[j]
    w = (cost - lo["cost"]) / (hi["cost"] - lo["cost"])
    return (1 - w) * lo["per_query"] + w * hi["per_query"], float(cost)


def non_inferiority(policy_u: np.ndarray, baseline_u: np.ndarray, margin: float = 0.005) -> dict:
    """One-sided paired t-test of ``mean(policy - baseline) > -margin``."""
    from scipy.stats import ttest_1samp

    d = np.asarray(policy_u, float) - np.asarray(baseline_u, float)
    if np.allclose(d, d[0]):
        p = 0.0 if d[0] > -margin else 1.0
    else:
        p = float(ttest_1samp(d + margin, 0.0, alternative="greater").pvalue)
    return {"mean_diff": float(d.mean()), "margin": margin, "p_value": p, "non_inferior": bool(p < 0.05)}


def trainers_paired(u_a: np.ndarray, u_b: np.ndarray, a: str, b: str) -> dict:
    """Trainer ``a`` against trainer ``b`` on the same test queries at one budget: the mean paired
    difference in utility, the queries where they differ, and the two-sided Wilcoxon p.

    Examples
    --------
    >>> trainers_paired(np.array([1.0, 0.5, 0.0]), np.array([1.0, 0.5, 0.0]), "grpo", "exact")["p_value"]
    1.0
    """
    w = paired_wilcoxon(u_a, u_b)
    d = np.asarray(u_a, float) - np.asarray(u_b, float)
    return {"a": a, "b": b, "mean_diff": float(d.mean()), "n_differ": int(w.n_nonzero),
            "a_better": int((d > 0).sum()), "b_better": int((d < 0).sum()), "p_value": float(w.pvalue)}


def evaluate_budgets(make_policy, U_train: np.ndarray, U_test: np.ndarray, costs: np.ndarray,
                     ltr_train: np.ndarray, ltr_test: np.ndarray, arms: Sequence[str], no_retrieval: str,
                     fractions: Sequence[float], trainers: Sequence[str] = ("grpo", "exact"),
                     margin: float = 0.005, calibration: str = "utility") -> dict:
    """Evaluate policies and baselines at each budget fraction.

    ``make_policy(budget, trainer)`` returns the test decisions (n_test,) (arm indices); the
    arrays are (queries, arms) in ``arms`` order; ``ltr_*`` the LTR scores (cross-fitted on
    train). ``calibration`` is the policies' rule for the deployed threshold (`BudgetPolicy`'s
    ``calibration``); the cost-penalised LTRR baseline is calibrated by it too. The result holds
    no wall-clock time, so the same inputs give the same table (the caller times the fits).
    """
    arms = list(arms)
    if no_retrieval not in arms:
        raise DataError(f"no-retrieval arm {no_retrieval!r} is not in the pool {arms}")
    C_train = np.broadcast_to(costs, U_train.shape)
    C_test = np.broadcast_to(costs, U_test.shape)
    rows = np.arange(len(U_test))
    curve = ltrr_curve(ltr_test, U_test, C_test)
    top1 = cost_aware_argmax(ltr_test, C_test, 0.0)
    nr = arms.index(no_retrieval)
    train_means = U_train.mean(axis=0)
    c_max = float(np.max(costs))
    out: dict = {"arms": arms, "costs": [float(c) for c in costs], "n_train": len(U_train), "n_test": len(U_test),
                 "ltrr_top1": {"cost": float(C_test[rows, top1].mean()), "utility": float(U_test[rows, top1].mean())},
                 "always_none": {"cost": float(costs[nr]), "utility": float(U_test[:, nr].mean())},
                 "ltrr_curve": [{k: v for k, v in p.items() if k != "per_query"} for p in curve],
                 "budgets": []}
    for frac in fractions:
        B = float(frac) * c_max
        row: dict = {"fraction": float(frac), "budget": B}
        mu = calibrate(calibration, ltr_train, C_train, U_train, B)
        a = cost_aware_argmax(ltr_test, C_test, mu)
        pen_c = C_test[rows, a]
        row["ltrr_cost_penalised"] = {"mu": mu, "calibration": calibration, "cost": float(pen_c.mean()),
                                      "cost_margin": binomial_margin(pen_c, c_max),
                                      "within_budget": bool(pen_c.mean() <= B + binomial_margin(pen_c, c_max)),
                                      "utility": float(U_test[rows, a].mean())}
        afford = [i for i in range(len(arms)) if costs[i] <= B + 1e-12]
        best = max(afford, key=lambda i: (train_means[i], -i))
        row["best_single_affordable"] = {"arm": arms[best], "cost": float(costs[best]),
                                         "utility": float(U_test[:, best].mean())}
        orc = budget_oracle(U_test, C_test, B)
        row["oracle"] = {"cost": orc["cost"], "utility": orc["utility"]}
        per_query = {}
        for trainer in trainers:
            pick = np.asarray(make_policy(B, trainer))
            chosen_c, chosen_u = C_test[rows, pick], U_test[rows, pick]
            per_query[trainer] = chosen_u
            cost = float(chosen_c.mean())
            ref, ref_cost = interpolated_utility(curve, cost)
            row[f"policy_{trainer}"] = {
                "cost": cost, "cost_margin": binomial_margin(chosen_c, c_max),
                "within_budget": bool(cost <= B + binomial_margin(chosen_c, c_max)),
                "utility": float(chosen_u.mean()),
                "ltrr_curve_at_cost": float(np.mean(ref)), "vs_ltrr_curve": non_inferiority(chosen_u, ref, margin),
                "gap_to_oracle": float(orc["utility"] - chosen_u.mean()),
                "arm_shares": {arms[i]: float(np.mean(pick == i)) for i in range(len(arms))},
            }
        if len(trainers) >= 2:
            row["trainers_paired"] = trainers_paired(per_query[trainers[0]], per_query[trainers[1]],
                                                     trainers[0], trainers[1])
        out["budgets"].append(row)
    return out


def budgets_markdown(doc: dict, trainers: Sequence[str] = ("grpo", "exact")) -> str:
    """The per-budget table: cost and utility of every policy and baseline (no wall-clock time:
    the same config and seed give the same table; the fits' seconds are in ``timings.json``).

    A cost-penalised LTRR baseline over its budget (beyond its 95% margin) is marked ``(over B)``.
    """
    where = ("Held-out design queries (inner split of the design part; the test part is not read)"
             if doc.get("on") == "design" else "Test queries")
    lines = [f"{where}: {doc['n_test']} (policies and baselines trained on {doc['n_train']}). "
             f"LTRR top-1: cost {doc['ltrr_top1']['cost']:.3f}, utility {doc['ltrr_top1']['utility']:.4f}; "
             f"always none: utility {doc['always_none']['utility']:.4f}.", "",
             "| B (share of max) | policy | cost (+-95%) | utility | LTRR curve at that cost | diff, p (non-inferior by 0.005) "
             "| LTRR cost-penalised | best affordable arm | oracle under B | gap to oracle |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["budgets"]:
        for t in trainers:
            p = r.get(f"policy_{t}")
            if p is None:
                continue
            ni = p["vs_ltrr_curve"]
            pen = r["ltrr_cost_penalised"]
            over = "" if pen.get("within_budget", True) else " (over B)"
            lines.append(
                f"| {r['budget']:.3f} ({r['fraction']:.0%}) | {t} | {p['cost']:.3f} +- {p['cost_margin']:.3f} | "
                f"{p['utility']:.4f} | {p['ltrr_curve_at_cost']:.4f} | {ni['mean_diff']:+.4f}, p={ni['p_value']:.3g} | "
                f"{pen['utility']:.4f} @ {pen['cost']:.3f}{over} | "
                f"{r['best_single_affordable']['arm']} {r['best_single_affordable']['utility']:.4f} | "
                f"{r['oracle']['utility']:.4f} | {p['gap_to_oracle']:.4f} |")
    paired = [r for r in doc["budgets"] if "trainers_paired" in r]
    if paired:
        a, b = paired[0]["trainers_paired"]["a"], paired[0]["trainers_paired"]["b"]
        lines += ["", f"| B (share of max) | {a} - {b}, utility | queries where they differ ({a} / {b} better) "
                  "| Wilcoxon p (two-sided) |", "|---|---|---|---|"]
        for r in paired:
            t = r["trainers_paired"]
            lines.append(f"| {r['budget']:.3f} ({r['fraction']:.0%}) | {t['mean_diff']:+.4f} | "
                         f"{t['n_differ']} ({t['a_better']} / {t['b_better']}) | {t['p_value']:.3g} |")
    return "\n".join(lines) + "\n"


def plot_curves(doc: dict, history: Sequence[dict] | None, out_dir, trainers: Sequence[str] = ("grpo", "exact")) -> list:
    """``cost_utility.png`` (every rule over budgets) and ``training.png`` (lambda, cost, utility per step)."""
    import matplotlib

    matplotlib.use("Agg")
    from pathlib import Path

    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cur = doc["ltrr_curve"]
    ax.plot([p["cost"] for p in cur], [p["utility"] for p in cur], "-", color="grey", label="LTRR cost-penalised (swept)")
    b = doc["budgets"]
    ax.plot([r["oracle"]["cost"] for r in b], [r["oracle"]["utility"] for r in b], "k--", label="oracle under budget (LP)")
    ax.plot([r["best_single_affordable"]["cost"] for r in b], [r["best_single_affordable"]["utility"] for r in b],
            "s:", label="best affordable single arm")
    for t, m in zip(trainers, ("o-", "^-"), strict=False):
        pts = [r[f"policy_{t}"] for r in b if f"policy_{t}" in r]
        ax.plot([p["cost"] for p in pts], [p["utility"] for p in pts], m, label=f"policy ({t})")
    ax.plot([doc["ltrr_top1"]["cost"]], [doc["ltrr_top1"]["utility"]], "r*", ms=12, label="LTRR top-1")
    ax.plot([doc["always_none"]["cost"]], [doc["always_none"]["utility"]], "kx", ms=9, label="always none")
    for r in b:
        ax.axvline(r["budget"], color="lightgrey", lw=0.8, zorder=0)
    ax.set_xlabel("mean cost per query")
    ax.set_ylabel("mean utility (test queries)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    paths = [out_dir / "cost_utility.png"]
    with atomic_path(paths[0]) as tmp:  # a plot appears whole or not at all
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    if history:
        fig, axes = plt.subplots(3, 1, figsize=(7, 6), sharex=True)
        steps = [h["step"] for h in history]
        for ax, key in zip(axes, ("lambda", "mean_cost", "mean_utility"), strict=True):
            ax.plot(steps, [h[key] for h in history])
            ax.set_ylabel(key.replace("_", " "))
        axes[1].axhline(doc["budgets"][len(doc["budgets"]) // 2]["budget"], color="r", ls="--", lw=1)
        axes[-1].set_xlabel("step")
        fig.tight_layout()
        paths.append(out_dir / "training.png")
        with atomic_path(paths[1]) as tmp:
            fig.savefig(tmp, format="png", dpi=120)
        plt.close(fig)
    return paths


def frame(doc: dict) -> pd.DataFrame:
    """The budgets table as a long DataFrame (one row per budget and rule)."""
    recs = []
    for r in doc["budgets"]:
        for k, v in r.items():
            if isinstance(v, dict) and "utility" in v:
                recs.append({"fraction": r["fraction"], "budget": r["budget"], "rule": k,
                             "cost": v["cost"], "utility": v["utility"]})
    return pd.DataFrame(recs)
