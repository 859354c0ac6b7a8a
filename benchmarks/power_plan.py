"""The prospective power analysis of a relabelled demo, on its design sample, before the rest is labelled.

Reads the labels of the seeded design sample (`ltrr.eval.protocol.design_sample`, the first
step of `benchmarks/relabel.py`) from the generation cache alone: the label stage runs in a
scratch workdir with a backend that refuses every cache miss, so nothing is generated and the
run's own workdir is not touched. From those labels: the best single arm, the oracle, the raw
headroom, and the spread of per-query differences that the test part's paired test will see.

The minimum detectable effect of a two-sided paired test with n test queries is
``(z_{0.975} + z_{0.8}) * sd / sqrt(n)``. The goal is 30% of the noise-corrected headroom; the
noise-corrected headroom needs the replicate, which only the test part has, so the plan takes
the raw headroom of the sample times demo-signal's measured ratio of corrected to raw
headroom. The router's differences are unknown before a router is chosen: ``sd`` is bracketed
by demo-signal's design CV (0.24) and by sd(oracle - best single) on the sample.

    python benchmarks/power_plan.py demo-qwen [--out benchmarks/results/protocol_demo_qwen/power_plan.json]

``--grown``: for a dataset grown in rounds, the re-check on the grown type mix. The sample is the
first round's design sample plus the same seeded sample of each later round's design queries
(the ``grown`` step of `benchmarks/relabel.py`), and every figure weighs a query so that each
query type counts as its share of the test part does (the test part's mix is known before any of
its labels is read).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd


def cache_only_run(config: str):
    """A scratch run of ``config`` (workdir ``<workdir>-power``) labelled from the generation cache
    alone (`ltrr label --cache-only`): nothing is generated, an item not in the cache is a failed
    item, and the run's own workdir is not touched. Returns the run; its
    ``labels/labels.parquet`` holds every query, failed items included."""
    from ltrr.config import load_config, validate
    from ltrr.pipeline import Run

    cfg = load_config(config)
    d = cfg.to_dict()
    d["run"]["workdir"] = str(Path(d["run"]["workdir"]).with_name(Path(d["run"]["workdir"]).name + "-power"))
    run = Run(validate(d, cfg.source), log=lambda m: None)
    run.stage_retrieve()
    run.stage_label(force=True, cache_only=True)
    return run


def sample_labels(config: str, *, grown: bool = False) -> tuple[pd.DataFrame, list[str], int, pd.Series | None]:
    from ltrr.eval.protocol import design_sample, design_test_partition

    run = cache_only_run(config)
    cfg = run.config
    q = run.dataset.queries
    part = design_test_partition(q, design_size=cfg.protocol["design_size"], random_state=cfg.seed)
    sample = design_sample(q, part, n=150, random_state=cfg.seed)
    weights = None
    if grown:
        for r in sorted(q["build_round"].unique())[1:]:
            sample += design_sample(q[q["build_round"] == r], part, n=150, random_state=cfg.seed)
        qtype = q.set_index(q["qid"].astype(str))["qtype"].astype(str)
        test_share = qtype.loc[list(part.test)].value_counts(normalize=True)
        in_sample = qtype.loc[sample].value_counts()
        # each type weighs as its share of the test part, spread over its sampled queries
        weights = pd.Series({x: test_share.get(qtype[x], 0.0) / in_sample[qtype[x]] for x in sample})
    labels = pd.read_parquet(run.labels_dir / "labels.parquet")
    labels = labels[labels["qid"].isin(set(sample))]
    return labels, sample, len(part.test), weights


def _wmean(x: pd.Series | np.ndarray, w: np.ndarray) -> float:
    return float(np.average(np.asarray(x, dtype=float), weights=w))


def _wsd(x: np.ndarray, w: np.ndarray) -> float:
    """Weighted standard deviation with the unbiased correction for reliability weights."""
    w = w / w.sum()
    m = float(np.sum(w * x))
    return float(math.sqrt(np.sum(w * (x - m) ** 2) / (1.0 - np.sum(w**2))))


def plan(labels: pd.DataFrame, n_test: int, *, sd_cv_signal: float = 0.2419, nc_over_raw: float | None = None,
         weights: pd.Series | None = None) -> dict:
    from scipy.stats import norm

    failed = labels.groupby("qid")["failed"].any()
    ok = labels[labels["qid"].isin(failed[~failed].index)]
    U = ok.pivot(index="qid", columns="arm", values="utility")
    w = np.ones(len(U)) if weights is None else weights.reindex(U.index.astype(str)).fillna(0.0).to_numpy()
    means = pd.Series({a: _wmean(U[a], w) for a in U.columns})
    best = means.idxmax()
    oracle = U.max(axis=1)
    z = float(norm.ppf(0.975) + norm.ppf(0.8))
    d_ob = (oracle - U[best]).to_numpy()
    raw = _wmean(d_ob, w)
    corrected = raw * nc_over_raw if nc_over_raw is not None else float("nan")
    goal = 0.3 * corrected
    out = {"queries": int(U.shape[0]), "failed_queries": int(failed.sum()),
           "weighted_to_test_mix": weights is not None,
           "arm_means": {a: round(float(means[a]), 4) for a in U.columns},
           "best_single_arm": best, "best_single": float(means[best]), "oracle": _wmean(oracle, w),
           "headroom_raw": raw, "tie_rate": _wmean((U.max(axis=1) == U.min(axis=1)).astype(float), w),
           "nc_over_raw_assumed": nc_over_raw, "headroom_corrected_planned": corrected, "goal_gain": goal,
           "n_test": n_test}
    for name, sd in (("sd_cv_demo_signal", sd_cv_signal), ("sd_oracle_minus_best", _wsd(d_ob, w))):
        mde = z * sd / math.sqrt(n_test)
        out[name] = {"sd": sd, "mde": mde, "detects_goal": bool(mde <= goal),
                     "n_test_needed": int(math.ceil((z * sd / goal) ** 2)) if goal > 0 else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/protocol_demo_qwen/power_plan.json"))
    ap.add_argument("--grown", action="store_true", help="add each later build round's design sample; weigh to the test mix")
    a = ap.parse_args()
    labels, sample, n_test, weights = sample_labels(a.config, grown=a.grown)
    signal = json.loads(Path("benchmarks/results/protocol_demo_signal/seed-13.json").read_text())
    nc = signal["headline"]["noise_corrected"]
    ratio = nc["headroom_corrected"] / signal["headline"]["headroom_raw"]
    result = plan(labels, n_test, nc_over_raw=ratio, weights=weights)
    from ltrr.data.io import write_text_atomic

    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(a.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
