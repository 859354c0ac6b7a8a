"""`ltrr agent sweep`: the cost weight's sweep, read from the evaluations of its policies.

GRPO's reward weighs the cost term by ``alpha`` (`ltrr.agent.rewards.total_reward`). A sweep
trains one policy per alpha from the same start and evaluates each on the same test questions
(`ltrr agent eval`); this reads those evaluations together, on the questions all of them
answered (`ltrr.agent.evaluate.load_evals`: the same metric and cost normaliser, or an error):

- per alpha: the mean reward, outcome (the run's metric), ``contains``/``f1``/``em`` (from each
  evaluation), valid searches and cost per question, the last four with 95% percentile-bootstrap
  confidence intervals over questions (`ltrr.eval.stats.bootstrap_ci`);
- the trend of searches and cost against alpha, two ways:

  - Page's L test (`scipy.stats.page_trend_test`) of the ordered alternative that the measure
    falls as alpha rises. Each question is a block answered under every alpha, so the test ranks
    the alphas within each question (ties averaged) and needs no distributional assumption; it
    is one-sided, and needs at least three alphas;
  - the least-squares slope of the mean per unit of alpha, with a 95% percentile-bootstrap
    interval over questions (`scipy.stats.bootstrap`, questions resampled with all their alphas
    together, so the interval respects the pairing).

**The primary test is the slope's interval**: a measure *falls* when the upper end of its 95%
slope interval is below 0, and the sweep's claim holds when both searches and cost fall (both
must, so no multiplicity correction). The claim is about means ("mean cost and searches fall as
alpha rises", issue 28), and the slope of the means with a paired interval tests exactly that;
Page's L tests a within-question ordering, loses power to ties (most questions search equally
often under every alpha) and has no interval, so it is reported as secondary. This was named in
session 28, *after* the 3-step H200 sweep of session 27 had shown the two disagreeing (slope
intervals below 0, Page p = 0.15 and 0.13); that sweep is therefore not judged by it, and the
first sweep read after this line is.

A policy's alpha is read from its ``grpo.json`` (the folder its evaluation names) unless given.

Examples
--------
>>> import numpy as np
>>> round(slope([0.0, 0.5, 1.0], np.array([[3.0, 2.0, 1.0], [2.0, 2.0, 0.0]])), 3)
-2.0
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ltrr._errors import DataError

__all__ = ["alpha_of", "slope", "sweep_evals", "sweep_markdown", "TRENDS"]

TRENDS = ("searches", "cost")  # the measures the sweep expects to fall as alpha rises


def alpha_of(doc: dict, folder: str | Path) -> float:
    """The cost weight of the policy that evaluation ``doc`` (read from ``folder``) rolled out:
    ``alpha`` in the ``grpo.json`` of the policy folder it names. Raise `DataError` if absent."""
    policy = Path(str(doc.get("policy", "")))
    path = policy / "grpo.json"
    if not path.exists():
        raise DataError(f"{folder}: its policy {policy} has no grpo.json to read alpha from; "
                        "give the alphas with --alphas")
    try:
        return float(json.loads(path.read_text())["alpha"])
    except (KeyError, TypeError, ValueError, json.JSONDecodeError):
        raise DataError(f"{path}: no numeric alpha") from None


def slope(alphas: Sequence[float] | np.ndarray, values: np.ndarray) -> float:
    """Least-squares slope of the column means of ``values`` (questions x alphas) on ``alphas``."""
    a = np.asarray(alphas, dtype=float)
    means = np.asarray(values, dtype=float).mean(axis=0)
    da = a - a.mean()
    return float(da @ (means - means.mean()) / (da @ da))


def _slope_ci(alphas: np.ndarray, values: np.ndarray, seed: int, n_resamples: int) -> tuple[float, float]:
    from scipy.stats import bootstrap

    if np.all(values == values[0]):
        s = slope(alphas, values)
        return s, s
    res = bootstrap((np.arange(len(values)),), lambda idx: slope(alphas, values[idx.astype(int)]),
                    vectorized=False, n_resamples=n_resamples, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def sweep_evals(folders: Sequence[str | Path], alphas: Sequence[float] | None = None, *, seed: int | None = None,
                n_resamples: int = 2000) -> dict:
    """Read a sweep's evaluations (module docstring); returns the rows per alpha, ascending, and
    the trend tests. ``alphas`` (one per folder, in their order) overrides the policies' own.
    ``seed`` seeds the bootstrap intervals; None takes the run seed the evaluations recorded
    (`DataError` when they recorded different ones), or 0 for evaluations that recorded none."""
    from scipy.stats import page_trend_test

    from ltrr.agent.evaluate import load_evals, per_question
    from ltrr.eval.stats import bootstrap_ci

    if alphas is not None and len(alphas) != len(folders):
        raise DataError(f"{len(alphas)} alphas for {len(folders)} evaluations; give one per evaluation")
    docs, trajs, qids = load_evals(folders)
    if seed is None:
        seeds = sorted({int(d["seed"]) for d in docs if "seed" in d})
        if len(seeds) > 1:
            raise DataError(f"the evaluations were made under different run seeds {seeds}; give the bootstrap's "
                            "seed (--seed)")
        seed = seeds[0] if seeds else 0
    alphas = [float(a) for a in alphas] if alphas is not None else [alpha_of(d, f) for d, f in zip(docs, folders, strict=True)]
    if len(set(alphas)) != len(alphas):
        raise DataError(f"each evaluation needs its own alpha, got {alphas}")
    if len(alphas) < 3:
        raise DataError(f"a trend needs at least three alphas, got {len(alphas)}")
    order = np.argsort(alphas)
    a = np.array(alphas)[order]
    metric = docs[0]["metric"]
    measures = per_question(metric)
    values = {m: np.array([[get(trajs[j][q]) for j in order] for q in qids], dtype=float)
              for m, get in measures.items()}  # questions x alphas, ascending alpha
    rows = []
    for col, j in enumerate(order):
        row = {"alpha": float(a[col]), "folder": str(folders[j]), "policy": docs[j]["policy"],
               "format_valid": docs[j]["format_valid_rate"]}
        for m in measures:
            ci = bootstrap_ci(values[m][:, col], random_state=seed, n_resamples=n_resamples)
            row[m] = {"mean": ci.estimate, "low": ci.low, "high": ci.high}
        for m in ("contains", "f1", "em"):
            if m != metric and m in docs[j]["agent"]:
                row[m] = {"mean": float(docs[j]["agent"][m])}
        rows.append(row)
    trends = {}
    for m in TRENDS:
        v = values[m]
        if np.all(v == v[0, 0]):
            page = {"L": float("nan"), "p": float("nan")}
        else:
            res = page_trend_test(v[:, ::-1])  # columns by falling alpha: predicted to rise
            page = {"L": float(res.statistic), "p": float(res.pvalue), "method": res.method}
        low, high = _slope_ci(a, v, seed, n_resamples)
        trends[m] = {"page": page, "slope": slope(a, v), "slope_low": low, "slope_high": high,
                     "falls": bool(high < 0)}  # the primary test (module docstring)
    return {"metric": metric, "n": len(qids), "alphas": a.tolist(), "rows": rows, "trends": trends,
            "primary": "slope interval below 0, for every measure of TRENDS",
            "falls": all(t["falls"] for t in trends.values()),
            "n_resamples": n_resamples, "seed": seed}


def sweep_markdown(doc: dict) -> str:
    """The sweep's tables: one row per alpha, then the trend tests."""
    metric = doc["metric"]
    extra = [m for m in ("contains", "f1", "em") if m != metric]

    def ci(c: dict) -> str:
        return f"{c['mean']:.3f} [{c['low']:.3f}, {c['high']:.3f}]"

    lines = [f"Cost-weight sweep: {len(doc['alphas'])} policies on {doc['n']} common test questions; "
             f"95% percentile-bootstrap intervals over questions ({doc['n_resamples']} resamples, seed "
             f"{doc['seed']}).", "",
             "| alpha | format-valid | reward | " + " | ".join([metric, *extra]) + " | searches / q | cost / q |",
             "|---" * (6 + len(extra)) + "|"]
    for r in doc["rows"]:
        cells = [f"{r['alpha']:g}", f"{r['format_valid']:.1%}", f"{r['reward']['mean']:.3f}", ci(r[metric]),
                 *(f"{r[m]['mean']:.3f}" if m in r else "-" for m in extra), ci(r["searches"]), ci(r["cost"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| falls as alpha rises | slope per unit alpha | 95% interval (primary) | falls | Page's L "
              "(secondary) | one-sided p |", "|---|---|---|---|---|---|"]
    for m, t in doc["trends"].items():
        lines.append(f"| {m} | {t['slope']:+.3f} | [{t['slope_low']:+.3f}, {t['slope_high']:+.3f}] | "
                     f"{'yes' if t['falls'] else 'no'} | {t['page']['L']:.1f} | {t['page']['p']:.3g} |")
    lines += ["", f"Primary test ({doc['primary']}): **{'falls' if doc['falls'] else 'does not fall'}**."]
    return "\n".join(lines) + "\n"
