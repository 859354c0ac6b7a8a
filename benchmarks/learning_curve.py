"""What limits the demo's router: a learning curve and a type-only ceiling, on the design part alone.

Issue 25 point 3 asks, when the headline misses its goal, what limits it. The read of record
(seed 13) captured 17.7% of the noise-corrected headroom against a goal of 30%, and the test part
could detect the goal's gain (pre-registered MDE 0.0158 against 0.0224). This study asks two questions that
decide what to do next, without reading a test label:

1. **Would more labelled queries help?** The protocol's chosen router (the preregistration's
   ranker, label and feature set) is cross-validated on the design part, as the protocol does
   (grouped 5-fold CV, the same folds), with its training folds subsampled by group to a share
   ``f`` of their queries. Nested subsets per repeat (the 25% set is inside the 50% set), several
   repeats. The pooled CV gain over the best single arm and the share of the raw headroom are
   reported per ``f``; their slope against log2 of the training size says what doubling the demo
   would buy.
2. **How much of the headroom is reachable from the query type alone?** Two routers with no
   features at all, on the same folds: the arm with the best training mean for the query's type
   (per-type best arm), and the same rule with the arm's mean on the *held-out* fold (the
   per-type oracle: an upper bound for any router that reads the type and nothing else, not a
   router anyone could fit).

Only design queries of the partition ``--seed`` are read (`ltrr.pipeline.Run.protocol_part`); the
run must be labelled and its features built (`ltrr run CONFIG`). No test label is read.

    python benchmarks/learning_curve.py demo [--seed 13] [--repeats 3]

Writes ``benchmarks/results/protocol_demo_qwen/learning_curve.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

FRACTIONS = (0.125, 0.25, 0.5, 0.75, 1.0)


@dataclass
class DesignPart:
    """The design part of the protocol's partition ``seed``, as the design-part studies read it.

    ``labels`` holds the design queries' rows only (the test part's are dropped unread), ``U`` their
    qid x arm utilities, ``queries`` their rows of the dataset, ``folds`` the protocol's grouped folds,
    ``raw`` the raw features of the whole run (subset it to ``U.index`` where needed), ``source``
    where the partition comes from, and ``prereg`` the protocol's preregistration of ``seed``.
    """

    run: Any
    prereg: dict
    labels: pd.DataFrame
    raw: Any
    U: pd.DataFrame
    queries: pd.DataFrame
    folds: list
    source: str


def design_part(config: str, seed: int) -> DesignPart:
    """Load ``config``'s run and the design part of partition ``seed``; no test label is kept."""
    from ltrr.config import load_config
    from ltrr.eval import make_splits
    from ltrr.eval.routing import utility_matrix
    from ltrr.pipeline import Run

    run = Run(load_config(config), log=lambda m: None)
    labels, raw = run.training_inputs("protocol")
    prereg = read_preregistration(run, config, seed)
    design, source = run.protocol_part("design", seed=seed, labels=labels)
    labels = labels[labels["qid"].isin(design)]  # the test part's rows, unread
    U = utility_matrix(labels)
    queries = run.dataset.queries
    queries = queries[queries["qid"].astype(str).isin(set(U.index))].reset_index(drop=True)
    folds = make_splits(queries, ["kfold"], n_folds=int(prereg["n_folds"]), random_state=seed)
    return DesignPart(run, prereg, labels, raw, U, queries, folds, source)


def write_results(out: Path, res: dict, md: str) -> None:
    """Write a study's ``res`` as ``OUT.json`` and its table ``md`` as ``OUT.md`` (atomically), and
    print the table."""
    from ltrr.data.io import write_text_atomic

    write_text_atomic(out.with_suffix(".json"), json.dumps(res, indent=2) + "\n")
    write_text_atomic(out.with_suffix(".md"), md)
    print(md)


def read_preregistration(run, config: str, seed: int) -> dict:
    """The protocol's preregistration of ``seed``: the full protocol's (``seed-N/``), else the
    design-only one (``seed-N-design-only/``, `ltrr protocol CONFIG --design-only`), which reads no
    test label; one error line when neither is there."""
    for name in (f"seed-{seed}", f"seed-{seed}-design-only"):
        path = run.workdir / "protocol" / name / "preregistration.json"
        if path.is_file():
            return json.loads(path.read_text())
    raise SystemExit(f"error: no preregistration for seed {seed} in {run.workdir / 'protocol'}; run "
                     f"`ltrr protocol {config} --seed {seed} --design-only` first (it reads no test label)")


def nested_subsets(train: tuple[str, ...], groups: pd.Series, fractions, rng) -> dict[float, tuple[str, ...]]:
    """For each fraction, the training qids of the first ``ceil(f * n_groups)`` groups of one seeded
    permutation of the fold's groups (so a smaller subset lies inside every larger one)."""
    g = groups.loc[list(train)]
    order = rng.permutation(np.sort(g.unique()))
    out = {}
    for f in fractions:
        keep = set(order[: max(1, math.ceil(f * len(order)))].tolist())
        out[f] = tuple(q for q in train if g[q] in keep)
    return out


def type_router_scores(U: pd.DataFrame, qtype: pd.Series, fit_on, score) -> pd.DataFrame:
    """Scores (qid x arm) of the rule 'the arm with the best mean on ``fit_on`` for the query's type'
    for the ``score`` queries (ties keep the table's arm order, as an argmax does)."""
    means = U.loc[list(fit_on)].groupby(qtype.loc[list(fit_on)].to_numpy()).mean()
    overall = U.loc[list(fit_on)].mean()
    rows = [means.loc[qtype[q]] if qtype[q] in means.index else overall for q in score]
    return pd.DataFrame(np.vstack([r.to_numpy(float) for r in rows]), index=list(score), columns=U.columns)


def pooled(U, folds, preds, *, costs, nr, seed) -> dict[str, dict]:
    """The pooled k-fold row of each router: mean utility, best single, gain and raw headroom share."""
    from ltrr.eval import evaluate_splits

    ev = evaluate_splits(U, folds, preds, costs=costs, no_retrieval=nr, n_resamples=200, random_state=seed)
    t = ev.table[ev.table["pooled"]].set_index("router")
    out = {}
    for name, row in t.iterrows():
        pq = ev.per_query[(ev.per_query["split"] == "kfold") & (ev.per_query["router"] == name)]
        d = (pq["utility"] - pq["best_single_utility"]).to_numpy(float)
        out[name] = {"mean_utility": float(row["mean_utility"]), "best_single": float(row["best_single_utility"]),
                     "gain": float(d.mean()), "sd_difference": float(d.std(ddof=1)),
                     "headroom_captured": float(row["headroom_captured"]),
                     "share_equal": float(np.mean(np.abs(d) <= 1e-9)),
                     "chosen": pq.set_index("qid")["chosen"].astype(str)}
    return out


def agreement(a: pd.Series, b: pd.Series) -> float:
    """The share of queries on which two routers choose the same arm."""
    return float((a == b.reindex(a.index)).mean())


def departures(U: pd.DataFrame, router: pd.Series, rule: pd.Series) -> dict:
    """Where the router leaves the per-type rule: how often, the mean utility it gains there against
    the rule's arm, and the two-sided Wilcoxon p of those paired differences (zero differences
    dropped, as ``paired_wilcoxon`` drops ties)."""
    from ltrr.eval.stats import paired_wilcoxon

    rule = rule.reindex(router.index)
    off = router.index[router != rule]
    if not len(off):
        return {"queries": 0, "gain": float("nan"), "p_value": float("nan")}
    a = np.array([U.at[q, router[q]] for q in off], dtype=float)
    b = np.array([U.at[q, rule[q]] for q in off], dtype=float)
    return {"queries": int(len(off)), "share": float(len(off) / len(router)), "gain": float((a - b).mean()),
            "improved": int((a - b > 1e-9).sum()), "degraded": int((b - a > 1e-9).sum()),
            "p_value": float(paired_wilcoxon(a, b).pvalue)}


def study(config: str, *, seed: int, repeats: int, fractions=FRACTIONS) -> dict:
    from ltrr.eval.headline import fit_predict_candidate
    from ltrr.eval.splits import Split

    d = design_part(config, seed)
    run, labels, raw, prereg, source, U, queries, folds = (d.run, d.labels, d.raw, d.prereg, d.source, d.U,
                                                           d.queries, d.folds)
    qtype = queries.set_index(queries["qid"].astype(str))["qtype"].astype(str)
    groups = queries.set_index(queries["qid"].astype(str))["group"].astype(str)
    cand = {k: prereg[k] for k in ("router", "ranker", "label", "features")}
    lab_idx = labels.set_index("qid")
    nr, costs = run.no_retrieval_arms()[0], run.pool.costs
    name = prereg["router"]

    # the type-only routers, on the whole training folds
    preds = {f.name: {"per-type best arm": type_router_scores(U, qtype, f.train, f.test),
                      "per-type oracle (held-out means)": type_router_scores(U, qtype, f.test, f.test)}
             for f in folds}
    type_only = pooled(U, folds, preds, costs=costs, nr=nr, seed=seed)

    curve = []
    from ltrr.progress import bar

    jobs = [(r, f) for r in range(repeats) for f in fractions]
    t0 = time.perf_counter()
    subsets = {}
    for r in range(repeats):
        rng = np.random.default_rng([seed, r])
        subsets[r] = {fold.name: nested_subsets(fold.train, groups, fractions, rng) for fold in folds}
    full: dict | None = None  # the whole training folds: the same fit in every repeat
    for r, frac in bar(jobs, desc="learning curve", unit="fit"):
        if frac == 1.0 and full is not None:
            curve.append({**full, "repeat": r})
            continue
        sub = [Split(f.name, f.family, subsets[r][f.name][frac], f.test) for f in folds]
        p = {f.name: {name: fit_predict_candidate(run, cand, raw, lab_idx, f.train, f.test)} for f in sub}
        p_type = {f.name: {"per-type best arm": type_router_scores(U, qtype, f.train, f.test)} for f in sub}
        res = pooled(U, sub, {k: {**p[k], **p_type[k]} for k in p}, costs=costs, nr=nr, seed=seed)
        res[name]["agrees_with_per_type_best_arm"] = agreement(res[name]["chosen"], res["per-type best arm"]["chosen"])
        if frac == 1.0:
            departed = departures(U, res[name]["chosen"], res["per-type best arm"]["chosen"])
        res = {k: {m: x for m, x in v.items() if m != "chosen"} for k, v in res.items()}
        row = {"repeat": r, "fraction": frac, "n_train_mean": float(np.mean([len(f.train) for f in sub])),
               "router": res[name], "per_type_best_arm": res["per-type best arm"]}
        curve.append(row)
        if frac == 1.0:
            full = row
    type_only = {k: {m: x for m, x in v.items() if m != "chosen"} for k, v in type_only.items()}
    return {"config": config, "seed": seed, "design_part": source, "n_design": int(len(U)),
            "n_folds": int(prereg["n_folds"]),
            "candidate": cand, "protocol_cv_mean_utility": next(c["cv_mean_utility"] for c in prereg["candidates"]
                                                               if c["router"] == name),
            "fractions": list(fractions), "repeats": repeats, "type_only": type_only, "curve": curve,
            "departures_from_per_type_rule": departed,
            "seconds": round(time.perf_counter() - t0, 1)}


def summarise(res: dict) -> dict:
    """Mean over repeats per fraction, and the least-squares slope of the gain per doubling."""
    df = pd.DataFrame([{"fraction": c["fraction"], "n_train": c["n_train_mean"], "gain": c["router"]["gain"],
                        "captured": c["router"]["headroom_captured"], "utility": c["router"]["mean_utility"],
                        "type_gain": c["per_type_best_arm"]["gain"],
                        "type_captured": c["per_type_best_arm"]["headroom_captured"],
                        "agree": c["router"]["agrees_with_per_type_best_arm"]} for c in res["curve"]])
    by = df.groupby("fraction").agg(["mean", "std"])
    x = np.log2(df["n_train"].to_numpy())
    slope = float(np.polyfit(x, df["gain"].to_numpy(), 1)[0])
    slope_cap = float(np.polyfit(x, df["captured"].to_numpy(), 1)[0])
    return {"by_fraction": {str(f): {c: [float(by.loc[f, (c, "mean")]), float(by.loc[f, (c, "std")])]
                                     for c in ("n_train", "gain", "captured", "utility", "type_gain", "type_captured", "agree")}
                            for f in by.index},
            "gain_per_doubling": slope, "captured_per_doubling": slope_cap}


def markdown(res: dict, summ: dict) -> str:
    t = res["type_only"]
    lines = [f"# What limits the demo's router (design part only, seed {res['seed']})", "",
             f"`python benchmarks/learning_curve.py {res['config']} --seed {res['seed']} --repeats {res['repeats']}` "
             f"({res['seconds']:.0f} s). {res['n_design']:,} design queries of {res['design_part']}; "
             f"the protocol's {res['candidate']['router']} ({res['candidate']['label']}, "
             f"{res['candidate']['features']}), grouped {res['n_folds']}-fold CV on the protocol's folds, as "
             f"this run's preregistration made it (its CV mean utility {res['protocol_cv_mean_utility']:.5f}; the "
             "full training folds reproduce it). "
             "No test label is read. Raw headroom only: the replicate that corrects it for label noise exists "
             "on the test part alone.", "",
             "## The learning curve", "",
             "| training share of each fold | training queries | router gain over best single (sd over repeats) "
             "| raw headroom captured | per-type best arm: gain | per-type best arm: captured "
             "| router's arm = per-type best arm's |",
             "|---|---|---|---|---|---|---|"]
    for f, v in summ["by_fraction"].items():
        sd = "" if not np.isfinite(v["gain"][1]) else f" ({v['gain'][1]:.4f})"
        lines.append(f"| {float(f):.3g} | {v['n_train'][0]:,.0f} | {v['gain'][0]:+.4f}{sd} | "
                     f"{100 * v['captured'][0]:.1f}% | {v['type_gain'][0]:+.4f} | {100 * v['type_captured'][0]:.1f}% | "
                     f"{100 * v['agree'][0]:.1f}% |")
    lines += ["", f"Least-squares slope over every fit: gain {summ['gain_per_doubling']:+.4f} and "
              f"{100 * summ['captured_per_doubling']:+.1f} points of the raw headroom per doubling of the "
              "training queries.", "",
              "## The query type alone (whole training folds)", "",
              "| router | mean utility | best single | gain | raw headroom captured | queries equal to the best single |",
              "|---|---|---|---|---|---|"]
    for k, v in t.items():
        lines.append(f"| {k} | {v['mean_utility']:.4f} | {v['best_single']:.4f} | {v['gain']:+.4f} | "
                     f"{100 * v['headroom_captured']:.1f}% | {100 * v['share_equal']:.1f}% |")
    d = res["departures_from_per_type_rule"]
    lines += ["", "## Where the router leaves the per-type rule (whole training folds)", "",
              f"On {d['queries']:,} of {res['n_design']:,} design queries ({100 * d.get('share', 0):.1f}%) the router "
              f"chooses another arm than the per-type best arm of its fold: mean utility {d['gain']:+.4f} against the "
              f"rule's arm there (improved {d.get('improved', 0)}, degraded {d.get('degraded', 0)}, Wilcoxon "
              f"p = {d['p_value']:.3g})."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/protocol_demo_qwen/learning_curve"))
    a = ap.parse_args(argv)
    res = study(a.config, seed=a.seed, repeats=a.repeats)
    summ = summarise(res)
    write_results(a.out, {**res, "summary": summ}, markdown(res, summ))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
