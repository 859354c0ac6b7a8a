"""How far the demo's router moves with the features' last bits, on the design part alone.

Issue 25 point 4 asks for a headline that reproduces on any machine. The kernels are now pinned
(``ltrr._cpu``), but session 41 measured what the pins cannot remove: the same labels with features
that differ only in their last bits (another kernel setting) moved the five partitions' test gains
by an sd of 0.0041, about a quarter of the test part's MDE, because LambdaMART's trees turn 1e-7 in a
feature into another split where two arms nearly tie. This study asks, without reading a test
label, whether either of the two remedies named then shrinks that part:

A. the protocol's pre-registered router, as it is (one LambdaMART fit);
B. a seed ensemble: the mean score of ``--members`` LambdaMART fits with seeds ``seed + i``, each
   with row and column subsampling (0.8, 0.8) so that the seeds make different trees;
C. the same single fit on features rounded before fitting and scoring (embeddings to 4 decimals,
   the post-retrieval similarities to 5).

Each variant is cross-validated on seed 13's design part, on the protocol's folds, once on the
features as built and once on each of ``--draws`` perturbed copies: every query embedding moved by
independent noise uniform in +-1e-7 and renormalised (the largest move the portable kernels made
in the corpus's embeddings was 1.6e-7), and every post-retrieval similarity multiplied by
``1 + u``, u uniform in +-1e-7. That imitates another CPU's last bits in the features only; the
real change also moves the dense arms' passages where scores tie, which this leaves out.

Reported per variant: the pooled CV gain over the best single arm on the features as built, the sd
of the gain over the copies (the features as built and the perturbed ones), and the mean share of design queries whose chosen arm
differs from the unperturbed fit's.

The decision rule, fixed before the study ran (``benchmarks/results/protocol_demo/README.md``,
session 42): a remedy qualifies if its sd of the gain and its share of changed choices are each at
most half of A's, and its gain on the features as built is no more than 0.002 below A's. If one
qualifies (the smaller share of changed choices if both do), the next step is to build it into
``ltrr`` and declare, before it is made, the look at the test part that the main job will then
print. Nothing is read on a test part here.

    python benchmarks/numerical_stability.py demo [--seed 13] [--draws 4] [--members 5]

Writes ``benchmarks/results/protocol_demo_qwen/numerical_stability.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

EPS = 1e-7
FLOAT_POST = ("overall_sim", "avg_sim", "max_sim", "var_sim", "moran", "cross_ret_sim")


def perturbed(raw, rng):
    """A copy of ``raw`` with its embeddings and similarities moved in the last bits (see above)."""
    emb = np.asarray(raw.query_embeddings, dtype=np.float64)
    emb = emb + rng.uniform(-EPS, EPS, size=emb.shape)
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    table = raw.table.copy()
    for c in FLOAT_POST:
        v = table[c].to_numpy(np.float64)
        table[c] = v * (1.0 + rng.uniform(-EPS, EPS, size=v.shape))
    return replace(raw, table=table, query_embeddings=emb.astype(np.asarray(raw.query_embeddings).dtype))


def rounded(raw):
    """A copy of ``raw`` with embeddings rounded to 4 decimals and similarities to 5."""
    table = raw.table.copy()
    for c in FLOAT_POST:
        table[c] = table[c].round(5)
    emb = np.round(np.asarray(raw.query_embeddings), 4)
    return replace(raw, table=table, query_embeddings=emb)


def cv_scores(run, cand, raw, lab_idx, folds, *, members: int, seed: int) -> dict:
    """Per fold, the variant's qid x arm scores: one fit, or the mean over ``members`` seeded fits."""
    from ltrr.eval.headline import fit_predict_candidate

    if members == 1:
        return {f.name: {"r": fit_predict_candidate(run, cand, raw, lab_idx, f.train, f.test)} for f in folds}
    out = {}
    for f in folds:
        acc: Any = None  # the running sum of the members' score frames
        for i in range(members):
            router = run.make_router("ltrr", cand["ranker"]).set_params(label=cand["label"], features=cand["features"])
            params = {**(router.ranker_params or {}), "random_state": seed + i, "subsample": 0.8,
                      "colsample_bytree": 0.8}
            router.set_params(ranker_params=params, random_state=seed + i)
            lab = lab_idx.loc[lab_idx.index.isin(set(f.train))].reset_index()
            lab = lab[lab[cand["label"]].notna()]
            router.fit(raw.subset(f.train), lab)
            s = router.route_scores(raw.subset(f.test)).pivot(index="qid", columns="arm", values="score")
            acc = s if acc is None else acc + s
        out[f.name] = {"r": acc / members}
    return out


def pooled_gain(U, folds, preds, *, costs, nr, seed) -> tuple[float, pd.Series]:
    """The pooled k-fold gain over the best single arm and the arm chosen for each query."""
    from ltrr.eval import evaluate_splits

    ev = evaluate_splits(U, folds, preds, costs=costs, no_retrieval=nr, n_resamples=50, random_state=seed)
    pq = ev.per_query[(ev.per_query["split"] == "kfold") & (ev.per_query["router"] == "r")]
    d = (pq["utility"] - pq["best_single_utility"]).to_numpy(float)
    return float(d.mean()), pq.set_index("qid")["chosen"].astype(str)


def study(config: str, *, seed: int, draws: int, members: int) -> dict:
    from learning_curve import design_part  # this folder's learning_curve.py

    from ltrr.progress import bar

    d = design_part(config, seed)
    run, labels, prereg, source, U, folds = d.run, d.labels, d.prereg, d.source, d.U, d.folds
    raw = d.raw.subset(list(U.index))
    cand = {k: prereg[k] for k in ("router", "ranker", "label", "features")}
    lab_idx = labels.set_index("qid")
    nr, costs = run.no_retrieval_arms()[0], run.pool.costs

    rng = np.random.default_rng([seed, 42])
    copies = [raw] + [perturbed(raw, rng) for _ in range(draws)]
    variants = {"A: one fit (pre-registered)": (1, False),
                f"B: seed ensemble of {members} (subsample 0.8, colsample 0.8)": (members, False),
                "C: one fit on rounded features": (1, True)}
    t0 = time.perf_counter()
    jobs = [(v, i) for v in variants for i in range(len(copies))]
    res: dict[str, dict] = {v: {"gains": [], "chosen": []} for v in variants}
    for v, i in bar(jobs, desc="stability", unit="cv"):
        m, rnd = variants[v]
        x = rounded(copies[i]) if rnd else copies[i]
        g, chosen = pooled_gain(U, folds, cv_scores(run, cand, x, lab_idx, folds, members=m, seed=seed),
                                costs=costs, nr=nr, seed=seed)
        res[v]["gains"].append(g)
        res[v]["chosen"].append(chosen)
    out = {}
    for v, r in res.items():
        base = r["chosen"][0]
        changed = [float((c.reindex(base.index) != base).mean()) for c in r["chosen"][1:]]
        out[v] = {"gain_as_built": r["gains"][0], "gains_perturbed": r["gains"][1:],
                  "sd_gain_perturbed": float(np.std(r["gains"][1:], ddof=1)) if draws > 1 else float("nan"),
                  "sd_gain_all": float(np.std(r["gains"], ddof=1)),
                  "share_changed_choices": float(np.mean(changed)), "changed_per_draw": changed}
    a = next(iter(out.values()))
    for o in list(out.values())[1:]:
        o["qualifies"] = bool(o["sd_gain_all"] <= 0.5 * a["sd_gain_all"]
                              and o["share_changed_choices"] <= 0.5 * a["share_changed_choices"]
                              and o["gain_as_built"] >= a["gain_as_built"] - 0.002)
    return {"config": config, "seed": seed, "design_part": source, "n_design": int(len(U)),
            "n_folds": int(prereg["n_folds"]), "candidate": cand, "draws": draws, "members": members,
            "eps": EPS, "variants": out, "seconds": round(time.perf_counter() - t0, 1)}


def markdown(res: dict) -> str:
    lines = [f"# The router against the features' last bits (design part only, seed {res['seed']})", "",
             f"`python benchmarks/numerical_stability.py {res['config']} --seed {res['seed']} --draws {res['draws']} "
             f"--members {res['members']}` ({res['seconds']:.0f} s). {res['n_design']:,} design queries of "
             f"{res['design_part']}; the protocol's {res['candidate']['router']} ({res['candidate']['label']}, "
             f"{res['candidate']['features']}), grouped {res['n_folds']}-fold CV on the protocol's folds; "
             f"{res['draws']} perturbed copies of the features (+-{res['eps']:g}). No test label is read.", "",
             "| variant | CV gain over best single, as built | gains on the perturbed copies | sd of the gain "
             "(as built and perturbed) | design queries whose chosen arm changed | qualifies |",
             "|---|---|---|---|---|---|"]
    for v, o in res["variants"].items():
        q = "-" if "qualifies" not in o else ("yes" if o["qualifies"] else "no")
        lines.append(f"| {v} | {o['gain_as_built']:+.4f} | {', '.join(f'{g:+.4f}' for g in o['gains_perturbed'])} | "
                     f"{o['sd_gain_all']:.4f} | {100 * o['share_changed_choices']:.2f}% | {q} |")
    lines += ["", "The rule (fixed before the run): a remedy qualifies if its sd and its share of changed choices "
              "are each at most half of A's and its gain as built is no more than 0.002 below A's."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from learning_curve import write_results  # this folder's learning_curve.py

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/protocol_demo_qwen/numerical_stability"))
    a = ap.parse_args(argv)
    res = study(a.config, seed=a.seed, draws=a.draws, members=a.members)
    write_results(a.out, res, markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
