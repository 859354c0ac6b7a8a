"""Is there routing signal within a query type? A design-part probe of retrieval-score features.

`benchmarks/learning_curve.py` found that the demo's router is, in effect, a per-type rule: its
design CV gain is the per-type oracle's, and where it leaves the per-type best arm it gains
nothing detectable. This probe asks whether features that ltrr does not extract today carry the
within-type signal the feature set lacks, before anyone builds them into `ltrr.features`:

- ``ret_score``: the arm's top passage's retrieval score (BM25, cosine or reranker score);
- ``ret_score_z``: the same, standardised per arm on the training fold;
- ``doc_consensus``: how many other retrieval arms return the same top passage;
- ``n_distinct_docs``: how many distinct top passages the retrieval arms return for the query;
- ``sparse_dense_agree``: whether the first sparse and the first dense arm agree on it.

and, from the closed-book answer (the no-retrieval arm's generation, which a router would make
first at routing time, at the cost of one generation per query; its text only, never its score):

- ``cb_support``: the share of the answer's words not in the question found in the arm's top
  passage, and ``cb_support_max``, its best share over the arms;
- ``cb_new_tokens``: how many such words the answer has.

Variant A is the protocol's router rebuilt from public parts (`FeaturePipeline` of the
preregistered feature set, the preregistered ranker seeded by ``[run] seed`` with ``[train]
params``, as `ltrr.pipeline.Run.make_router` builds it, and its training label); B adds the
retrieval columns, C the closed-book columns, D both. All four are cross-validated on the
protocol's design folds, pooled over the folds. Only design queries are read. Three variants
against A: read their p values with that in mind (Bonferroni: times 3). B ran first; C and D were
added after B's figure was seen. E adds the generator's confidence in its closed-book answer (the
mean and minimum token log-probability, `closed_book_confidence.py`), declared with its decision
rule in `results/protocol_demo/README.md` before it was computed; it runs when that table is there.

    python benchmarks/within_type_probe.py demo [--seed 13]

Writes ``benchmarks/results/protocol_demo_qwen/within_type_probe.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

EXTRA = ["ret_score", "ret_score_z", "doc_consensus", "n_distinct_docs", "sparse_dense_agree"]
BOOK = ["cb_support", "cb_support_max", "cb_new_tokens"]
CONFIDENCE = ["cb_mean_logprob", "cb_min_logprob"]
_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(str(text).lower()))


def closed_book_columns(results: pd.DataFrame, questions: pd.Series, book: pd.Series) -> pd.DataFrame:
    """The closed-book columns per (qid, retrieval arm): the share of the closed-book answer's words
    that are not in the question (its claim) found in the arm's top passage, its best share over
    the arms, and how many such words the answer has. ``book`` is the no-retrieval arm's answer of
    each query, the generation a router would make first at routing time."""
    top = results.sort_values("rank").drop_duplicates(["qid", "arm"])
    rows = []
    for q, arm, text in zip(top["qid"], top["arm"], top["text"], strict=True):
        claim = _words(book.get(q, "")) - _words(questions[q])
        share = len(claim & _words(text)) / len(claim) if claim else float("nan")
        rows.append({"qid": q, "arm": arm, "cb_support": share, "cb_new_tokens": float(len(claim))})
    out = pd.DataFrame(rows)
    out["cb_support_max"] = out.groupby("qid")["cb_support"].transform("max")
    return out


def retrieval_columns(results: pd.DataFrame, arms: list[str]) -> pd.DataFrame:
    """The probe's columns per (qid, arm) from the retrieval results' top passage of each arm."""
    top = results[results["rank"] == results.groupby(["qid", "arm"])["rank"].transform("min")]
    top = top.drop_duplicates(["qid", "arm"]).set_index(["qid", "arm"])
    doc = top["docid"].astype(str).unstack("arm")
    consensus = {a: sum((doc[a] == doc[b]).astype(int) for b in doc.columns if b != a) for a in doc.columns}
    distinct = doc.nunique(axis=1)
    sparse = next(a for a in arms if a.startswith("bm25"))
    dense = next(a for a in arms if a.startswith("dense"))
    agree = (doc[sparse] == doc[dense]).astype(float)
    rows = []
    for (q, a), s in top["score"].items():
        rows.append({"qid": q, "arm": a, "ret_score": float(s), "doc_consensus": float(consensus[a][q]),
                     "n_distinct_docs": float(distinct[q]), "sparse_dense_agree": float(agree[q])})
    return pd.DataFrame(rows)


def fold_matrix(raw_train, raw_part, extra: pd.DataFrame | None, spec: str, train_stats=None):
    """The feature matrix of ``raw_part`` (the pipeline fit on ``raw_train``), with ``extra``'s columns
    appended when given; query-level extras are NaN on the no-retrieval arm. Returns (X, keys, stats)."""
    from ltrr.features import FeaturePipeline

    pipe = FeaturePipeline(spec).fit(raw_train)
    X = np.asarray(pipe.transform(raw_part), dtype=float)
    keys = raw_part.table[["qid", "arm"]].astype(str).reset_index(drop=True)
    if extra is None:
        return X, keys, None
    e = keys.merge(extra, on=["qid", "arm"], how="left")
    cols = [c for c in EXTRA + BOOK + CONFIDENCE if c in e.columns or c == "ret_score_z" and "ret_score" in e.columns]
    if "ret_score" not in e.columns:
        return np.hstack([X, e[cols].to_numpy(float)]), keys, None
    if train_stats is None:  # per-arm mean and sd of the score on the training rows
        t = raw_train.table[["qid", "arm"]].astype(str).merge(extra, on=["qid", "arm"], how="inner")
        train_stats = t.groupby("arm")["ret_score"].agg(["mean", "std"])
    st = train_stats.reindex(e["arm"])
    e["ret_score_z"] = (e["ret_score"].to_numpy() - st["mean"].to_numpy()) / st["std"].replace(0, 1).to_numpy()
    return np.hstack([X, e[cols].to_numpy(float)]), keys, train_stats


def cv_choices(raw, labels_idx: pd.DataFrame, folds, *, ranker, spec: str, label: str, extra) -> pd.Series:
    """The arm each design query gets from a clone of ``ranker`` fit on its fold's training queries."""
    from sklearn.base import clone

    chosen = {}
    for f in folds:
        rtr, rte = raw.subset(f.train), raw.subset(f.test)
        Xtr, ktr, stats = fold_matrix(rtr, rtr, extra, spec)
        Xte, kte, _ = fold_matrix(rtr, rte, extra, spec, stats)
        y = labels_idx.reindex(pd.MultiIndex.from_frame(ktr))[label].to_numpy(float)
        ok = ~np.isnan(y)
        _, codes = np.unique(ktr["qid"].to_numpy()[ok], return_inverse=True)
        model = clone(ranker).fit(Xtr[ok], y[ok], qid=codes)
        kte = kte.assign(score=model.predict(Xte))
        order = {a: i for i, a in enumerate(raw.arms)}  # ties: the pool's order, as routers break them
        kte["pos"] = kte["arm"].map(order)
        best = kte.sort_values(["qid", "score", "pos"], ascending=[True, False, True]).groupby("qid").head(1)
        chosen.update(dict(zip(best["qid"], best["arm"], strict=True)))
    return pd.Series(chosen)


def summary(U: pd.DataFrame, chosen: pd.Series, folds, **kw) -> dict:
    """The pooled row of the router choosing ``chosen`` (learning_curve.pooled: ltrr's
    evaluate_splits, each fold with the best single arm of its training part); ``kw`` its costs,
    no-retrieval arm and seed."""
    from learning_curve import pooled  # this folder's learning_curve.py

    preds = {f.name: {"r": chosen.loc[[q for q in f.test if q in U.index]]} for f in folds}
    return {k: v for k, v in pooled(U, folds, preds, **kw)["r"].items() if k != "chosen"}


def paired(U: pd.DataFrame, a: pd.Series, b: pd.Series) -> dict:
    from ltrr.eval.stats import paired_wilcoxon

    qs = list(a.index)
    ua = np.array([U.at[q, a[q]] for q in qs])
    ub = np.array([U.at[q, b[q]] for q in qs])
    return {"difference": float((ua - ub).mean()), "improved": int((ua - ub > 1e-9).sum()),
            "degraded": int((ub - ua > 1e-9).sum()), "p_value": float(paired_wilcoxon(ua, ub).pvalue)}


def main(argv=None) -> int:
    from ltrr.rankers import rankers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/protocol_demo_qwen/within_type_probe"))
    ap.add_argument("--confidence", type=Path,
                    default=Path("benchmarks/results/protocol_demo_qwen/closed_book_confidence.csv"),
                    help="closed_book_confidence.py's table: variant E when it is there")
    a = ap.parse_args(argv)
    from learning_curve import design_part, write_results  # this folder's learning_curve.py

    d = design_part(a.config, a.seed)
    run, labels, prereg, source, U, queries, folds = d.run, d.labels, d.prereg, d.source, d.U, d.queries, d.folds
    ranker = rankers.get(prereg["ranker"])(random_state=run.config.seed, **run.train_params(prereg["ranker"]))
    raw = d.raw.subset(list(U.index))
    results = pd.read_parquet(run.results_path, columns=["qid", "arm", "rank", "docid", "score", "text"])
    results = results[results["qid"].isin(set(U.index))]
    extra = retrieval_columns(results, raw.arms)
    nr = run.no_retrieval_arms()[0]
    book = labels[labels["arm"] == nr].set_index("qid")["answer"]
    questions = queries.set_index(queries["qid"].astype(str))["question"]
    book_cols = closed_book_columns(results, questions, book)
    both = extra.merge(book_cols, on=["qid", "arm"], how="outer")
    lab_idx = labels.assign(qid=labels["qid"].astype(str), arm=labels["arm"].astype(str)).set_index(["qid", "arm"])
    # the protocol builds its candidates as the run does: seeded by [run] seed, with [train] params
    kw = {"ranker": ranker, "spec": prereg["features"], "label": prereg["label"]}
    choice_a = cv_choices(raw, lab_idx, folds, extra=None, **kw)
    choice_b = cv_choices(raw, lab_idx, folds, extra=extra, **kw)
    choice_c = cv_choices(raw, lab_idx, folds, extra=book_cols, **kw)
    choice_d = cv_choices(raw, lab_idx, folds, extra=both, **kw)
    choice_e = None
    if a.confidence.is_file():  # variant E, declared before it was computed (module docstring)
        conf = pd.read_csv(a.confidence, dtype={"qid": str})
        missing = sorted(set(U.index) - set(conf["qid"]))
        if missing:
            raise SystemExit(f"error: {a.confidence} lacks {len(missing)} of the {len(U)} design queries "
                             f"(e.g. {missing[0]!r}); finish benchmarks/closed_book_confidence.py first")
        # query-level columns, the same on every arm's row (the ranker reads them with the arm's indicator)
        conf_cols = raw.table[["qid", "arm"]].astype(str).merge(conf[["qid", *CONFIDENCE]], on="qid", how="left")
        choice_e = cv_choices(raw, lab_idx, folds, extra=conf_cols, **kw)
    qtype = queries.set_index(queries["qid"].astype(str))["qtype"].astype(str)
    from learning_curve import type_router_scores

    # the per-type best arm of each fold's training part (a type it lacks: the best single arm)
    rule = pd.concat([type_router_scores(U, qtype, f.train, f.test).idxmax(axis=1) for f in folds])
    ev = {"costs": run.pool.costs, "nr": run.no_retrieval_arms()[0], "seed": a.seed}
    res = {"config": a.config, "seed": a.seed, "design_part": source, "n_design": int(len(U)),
           "features": prereg["features"], "label": prereg["label"], "extra_columns": EXTRA,
           "closed_book_columns": BOOK,
           "A (the router rebuilt)": summary(U, choice_a, folds, **ev),
           "B (A + retrieval-score columns)": summary(U, choice_b, folds, **ev),
           "C (A + closed-book columns)": summary(U, choice_c, folds, **ev),
           "D (A + both)": summary(U, choice_d, folds, **ev),
           "per-type best arm": summary(U, rule, folds, **ev),
           "B against A": paired(U, choice_b, choice_a), "C against A": paired(U, choice_c, choice_a),
           "D against A": paired(U, choice_d, choice_a), "B against per-type best arm": paired(U, choice_b, rule),
           "A against per-type best arm": paired(U, choice_a, rule)}
    if choice_e is not None:
        res["E (A + closed-book confidence)"] = summary(U, choice_e, folds, **ev)
        res["E against A"] = paired(U, choice_e, choice_a)
    lines = [f"# Within-type routing signal: a design-part probe (seed {a.seed})", "",
             f"`python benchmarks/within_type_probe.py {a.config} --seed {a.seed}`. {len(U):,} design queries of "
             f"{source}, the protocol's {prereg['n_folds']} folds, pooled; no test label is read.", "",
             "| router | mean utility | best single | gain | raw headroom captured |", "|---|---|---|---|---|"]
    for k in ("A (the router rebuilt)", "B (A + retrieval-score columns)", "C (A + closed-book columns)",
              "D (A + both)", "E (A + closed-book confidence)", "per-type best arm"):
        if k not in res:
            continue
        v = res[k]
        lines.append(f"| {k} | {v['mean_utility']:.4f} | {v['best_single']:.4f} | {v['gain']:+.4f} | "
                     f"{100 * v['headroom_captured']:.1f}% |")
    lines += ["", "| paired on every design query | mean difference | improved | degraded | Wilcoxon p |",
              "|---|---|---|---|---|"]
    for k in ("B against A", "C against A", "D against A", "E against A", "B against per-type best arm",
              "A against per-type best arm"):
        if k not in res:
            continue
        v = res[k]
        lines.append(f"| {k} | {v['difference']:+.4f} | {v['improved']} | {v['degraded']} | {v['p_value']:.3g} |")
    write_results(a.out, res, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
