"""The paper's post-retrieval features at a depth where they are defined: a design-part variant.

The demo's arms pass one passage each to the generator (``k = 1``), and the features stage
computes the post-retrieval features on those rows: on one passage AvgSim, MaxSim and OverallSim
are one number, VarSim is 0 and Moran's I has no pair. This study computes the same raw features
on each arm's top ``--depth`` passages (`ltrr.retrieval.Pool.search` with ``k``) and
cross-validates the pre-registered router on them, on the protocol's design folds:

- A: the pre-registered router rebuilt from public parts (`within_type_probe.py`'s A), on the
  run's features (one passage per arm);
- A1: the same, on features this script recomputes at depth 1 (a check: it must equal A's
  table, so that F differs from A by the depth alone);
- F: the same, on features computed at depth ``--depth`` (10, fixed before the run).

Each arm's first passage at the depth is checked against the labelled one (the prompt's passage
does not change). The variant and its decision rule were declared before it was computed
(`results/protocol_demo/README.md`, session 64). Only design queries are read.

    python benchmarks/feature_depth.py demo [--seed 13] [--depth 10]

Writes ``benchmarks/results/protocol_demo_qwen/feature_depth.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import pandas as pd

from ltrr.features import POST_COLUMNS as POST


def first_passages(results: pd.DataFrame) -> pd.Series:
    """The docid of each (qid, arm)'s best-ranked passage."""
    top = results.sort_values(["qid", "arm", "rank"]).drop_duplicates(["qid", "arm"])
    return top.set_index(["qid", "arm"])["docid"].astype(str)


def main(argv=None) -> int:
    from ltrr.features import extract_raw
    from ltrr.rankers import rankers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/protocol_demo_qwen/feature_depth"))
    a = ap.parse_args(argv)
    from learning_curve import design_part, write_results  # this folder's studies
    from within_type_probe import cv_choices, paired, summary

    t0 = time.perf_counter()
    d = design_part(a.config, a.seed)
    run, labels, prereg, U, queries, folds = d.run, d.labels, d.prereg, d.U, d.queries, d.folds
    design = list(U.index)
    raw = d.raw.subset(design)
    pool = run.pool.load(run.index_dir)
    # Every query of the run is encoded and searched, as the features stage does, and the tables are
    # then cut to the design part (no label of the other queries is read). Two shortcuts give other
    # bits: the stored raw.query_embeddings are float32 of the unit vectors, and encoding the design
    # queries alone batches them differently; either moves the features by up to 7e-9, enough to move
    # this router's CV gain by about its numerical sd (numerical_stability.md).
    qrows = run.dataset.queries
    results = pd.read_parquet(run.results_path, columns=["qid", "arm", "rank", "docid", "score", "text"])
    source = pool.embedding_source()
    nr = run.no_retrieval_arms()

    def features(res):
        return extract_raw(qrows, res, arms=pool.arm_names, no_retrieval=nr,
                           embedding_source=source).subset(design)

    raw1 = features(results)
    results = results[results["qid"].isin(set(design))]
    cols = [c for c in raw.table.columns if c not in ("qid", "arm")]
    same = raw.table[cols].reset_index(drop=True).equals(raw1.table[cols].reset_index(drop=True))
    print(f"[feature_depth] depth-1 features recomputed; equal to the run's: {same}", flush=True)
    deep = pool.search(qrows[["qid", "question"]], k=a.depth, show_progress=False)
    f_run = first_passages(results)
    deep_design = deep[deep["qid"].astype(str).isin(set(design))]
    f_deep = first_passages(deep_design)
    match = float((f_deep.reindex(f_run.index) == f_run).mean())
    rows_per = deep_design.groupby(["qid", "arm"]).size()
    print(f"[feature_depth] depth {a.depth}: {len(deep)} rows; first passage equals the labelled one on "
          f"{100 * match:.2f}% of {len(f_run)} (query, arm)", flush=True)
    rawd = features(deep)

    ranker = rankers.get(prereg["ranker"])(random_state=run.config.seed, **run.train_params(prereg["ranker"]))
    lab_idx = labels.assign(qid=labels["qid"].astype(str), arm=labels["arm"].astype(str)).set_index(["qid", "arm"])
    kw = {"ranker": ranker, "spec": prereg["features"], "label": prereg["label"], "extra": None}
    choice_a = cv_choices(raw, lab_idx, folds, **kw)
    choice_a1 = cv_choices(raw1, lab_idx, folds, **kw)
    choice_f = cv_choices(rawd, lab_idx, folds, **kw)
    ev = {"costs": run.pool.costs, "nr": nr[0], "seed": a.seed}
    qtype = queries.set_index(queries["qid"].astype(str))["qtype"].astype(str)
    from learning_curve import type_router_scores

    rule = pd.concat([type_router_scores(U, qtype, f.train, f.test).idxmax(axis=1) for f in folds])

    def spread(r):  # how much each post-retrieval column varies over (query, arm) rows with passages
        t = r.table[~r.table["arm"].isin(nr)]
        return {c: float(t[c].std()) for c in POST if c in t.columns}

    res = {"config": a.config, "seed": a.seed, "design_part": d.source, "n_design": len(design),
           "depth": a.depth, "features": prereg["features"], "label": prereg["label"], "ranker": prereg["ranker"],
           "depth1_features_equal_run": bool(same), "first_passage_match": match,
           "rows_per_query_arm": {"min": int(rows_per.min()), "mean": float(rows_per.mean())},
           "post_feature_sd": {"depth 1": spread(raw), f"depth {a.depth}": spread(rawd)},
           "A (the router rebuilt)": summary(U, choice_a, folds, **ev),
           "A1 (features recomputed at depth 1)": summary(U, choice_a1, folds, **ev),
           f"F (features at depth {a.depth})": summary(U, choice_f, folds, **ev),
           "per-type best arm": summary(U, rule, folds, **ev),
           "F against A": paired(U, choice_f, choice_a), "F against per-type best arm": paired(U, choice_f, rule),
           "A against per-type best arm": paired(U, choice_a, rule), "seconds": round(time.perf_counter() - t0, 1)}
    fa = res["F against A"]
    met = fa["difference"] >= 0.0046 and fa["p_value"] < 0.05
    res["rule met"] = bool(met)
    lines = [f"# The paper's post-retrieval features at depth {a.depth}: a design-part variant (seed {a.seed})", "",
             f"`python benchmarks/feature_depth.py {a.config} --seed {a.seed} --depth {a.depth}` "
             f"({res['seconds']:.0f} s). {len(design):,} design queries of {d.source}, the protocol's "
             f"{prereg['n_folds']} folds, pooled; ranker {prereg['ranker']}, features {prereg['features']}, label "
             f"{prereg['label']}; no test label is read. Declared with its rule before it was computed "
             "(`../protocol_demo/README.md`, session 64).", "",
             f"- Depth-1 features recomputed by this script equal the run's: {same}.",
             f"- Each arm's first passage at depth {a.depth} is the labelled one on {100 * match:.2f}% of the "
             f"{len(f_run):,} (query, arm) pairs with passages; {rows_per.min()} to {rows_per.max()} passages per "
             "pair.",
             "- sd of each post-retrieval column over the (query, arm) rows with passages, depth 1 -> depth "
             f"{a.depth}: " + ", ".join(f"{c} {res['post_feature_sd']['depth 1'].get(c, float('nan')):.3g} -> "
                                         f"{res['post_feature_sd'][f'depth {a.depth}'].get(c, float('nan')):.3g}"
                                         for c in POST) + ".", "",
             "| router | mean utility | best single | gain | raw headroom captured |", "|---|---|---|---|---|"]
    for k in ("A (the router rebuilt)", "A1 (features recomputed at depth 1)", f"F (features at depth {a.depth})",
              "per-type best arm"):
        v = res[k]
        lines.append(f"| {k} | {v['mean_utility']:.4f} | {v['best_single']:.4f} | {v['gain']:+.4f} | "
                     f"{100 * v['headroom_captured']:.1f}% |")
    lines += ["", "| paired on every design query | mean difference | improved | degraded | Wilcoxon p |",
              "|---|---|---|---|---|"]
    for k in ("F against A", "F against per-type best arm", "A against per-type best arm"):
        v = res[k]
        lines.append(f"| {k} | {v['difference']:+.4f} | {v['improved']} | {v['degraded']} | {v['p_value']:.3g} |")
    lines += ["", f"Rule (F against A: difference >= 0.0046 and p < 0.05): {'met' if met else 'not met'}."]
    write_results(a.out, res, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
