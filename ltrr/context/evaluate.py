"""Measure context packing on the protocol's test part: evidence recall per token, then utility.

`evaluate_packing` takes a labelled run whose protocol was carried out (``ltrr protocol``): the
router the protocol chose is trained on the design part and ranks the arms of every test query.
For each query it compares

- *plain*: the routed arm's own top-``k`` passages (what the labels measured), with
- *packed@B*: the passages of the ``top_m`` best routed retrieving arms, each ``depth`` deep,
  packed into ``B`` tokens by each selector.

A query the router sends to the no-retrieval arm reads no context either way. Without the
generator it reports the gold-evidence recall (qrels) of each context, its tokens, and recall per
100 tokens: the ratio of the means over the same queries, those with gold evidence (recall is
undefined without qrels, so their tokens count in ``mean_tokens`` but not in the ratio). The optimality gaps are each selector's relative loss
against the exact optimum of an objective on the same items: total importance (exact:
``knapsack``) and, when ``knapsack-marginal`` is compared, total importance above the least
important candidate (exact: ``knapsack-marginal``). With ``answer=True`` the packed contexts are
answered by the run's (cached) generator and template and scored with the run's metric, exactly
as labels are; the plain arm's utility is its label. Each packing is compared with plain by the
paired Wilcoxon test.

``ablations=True`` adds the budget ablation (B in 256..2048, knapsack) and one row per importance
signal switched off (its weight 0; ``prior`` for the routed-order prior), at the first budget.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._errors import ConfigError, NotBuiltError
from ltrr._log import progress_enabled
from ltrr.packing.pack import evidence_recall
from ltrr.packing.rag import PackSpec, pack_query, question_embeddings

__all__ = ["evaluate_packing", "routed_test_order", "ABLATION_BUDGETS", "SIGNALS"]

ABLATION_BUDGETS = (256, 512, 1024, 2048)
SIGNALS = ("keyword", "stage", "recency", "similarity", "prior")


def routed_test_order(run, *, seed: int | None = None) -> tuple[list[str], dict[str, list[str]], dict, pd.DataFrame]:
    """The protocol's test queries, for each the arms in the chosen router's order, the
    preregistration, and the labels.

    The router is the one ``preregistration.json`` names, trained on the design part.
    """
    from ltrr.eval.headline import fit_predict_candidate

    seed = run.config.seed if seed is None else int(seed)
    path = run.workdir / "protocol" / f"seed-{seed}" / "preregistration.json"
    if not path.is_file():
        raise NotBuiltError(f"{path} does not exist: run `ltrr protocol CONFIG` first (packing is "
                            "measured with the router the protocol chose)")
    prereg = json.loads(path.read_text())
    labels, raw = run.training_inputs("protocol")
    part, _ = run.protocol_partition(seed=seed, labels=labels)
    cand = next(c for c in prereg["candidates"] if c["router"] == prereg["router"])
    test = list(part.test)
    scores = fit_predict_candidate(run, cand, raw, labels.set_index("qid"), part.train, test)
    order = {qid: _by_score(scores.loc[qid]) for qid in test}
    return test, order, prereg, labels


def _by_score(row: pd.Series) -> list[str]:
    """A query's arms by the router's score, highest first (ties by arm name)."""
    return sorted(row.index, key=lambda a: (-float(row[a]), str(a)))


def _ablation_specs(base: PackSpec, budgets: Sequence[int]) -> list[tuple[str, PackSpec]]:
    out = [(f"budget={b}", replace(base, budget=int(b), selector="knapsack")) for b in ABLATION_BUDGETS]
    b0 = int(budgets[0])
    for sig in SIGNALS:
        spec = replace(base, budget=b0, selector="knapsack")
        spec = replace(spec, prior=0.0) if sig == "prior" else replace(spec, weights=replace(spec.weights, **{sig: 0.0}))
        out.append((f"no-{sig}@{b0}", spec))
    return out


def evaluate_packing(run, budgets: Sequence[int] = (128, 256, 512), *, base: PackSpec | None = None,
                     selectors: Sequence[str] = ("knapsack", "greedy", "greedy-skip"), answer: bool = False,
                     ablations: bool = False, seed: int | None = None, out_dir: str | Path | None = None,
                     shard: tuple[int, int] | None = None) -> dict:
    """Evidence recall (and with ``answer``, utility) of packed contexts against plain top-k.

    Returns ``{"per_query": DataFrame, "table": DataFrame, "gaps": DataFrame, "router": str}`` and
    writes them under ``<workdir>/context/`` (``packing.csv``, ``packing_per_query.parquet``).

    ``shard=(i, n)`` (with ``answer``) answers only every n-th test query from the i-th, into the
    generation cache, and writes no table: n processes (or machines, their caches merged with
    ``ltrr cache merge``) share the answering, and the run without a shard replays their answers.
    It returns ``{"queries", "generator_calls", "hits"}``.
    """
    if shard is not None and not answer:
        raise ConfigError("a shard only splits the answering: give answer=True too")
    from ltrr.data.io import write_table_atomic, write_text_atomic

    base = base or PackSpec(budget=int(budgets[0]))
    test, order, prereg, labels = routed_test_order(run, seed=seed)
    pool = run.pool
    pool.load(run.index_dir)
    ds = run.dataset
    qtext = ds.queries.set_index("qid")["question"].astype(str)
    gold = ds.qrels.groupby("qid")["docid"].apply(lambda s: [str(d) for d in s]).to_dict() if ds.qrels is not None else {}
    results = pd.read_parquet(run.results_path)
    retrieving = [a.name for a in pool.arms if not a.is_no_retrieval and not a.is_packed]
    qdf = pd.DataFrame({"qid": test, "question": [qtext[q] for q in test]})
    deep = pool.search(qdf, retrieving, k=base.depth, show_progress=progress_enabled())
    deep_by_q = {q: g for q, g in deep.groupby("qid", sort=False)}
    plain_by_q = {q: g for q, g in results.groupby("qid", sort=False)}

    gen = run.make_generator()
    tok_cache: dict[str, int] = {}

    def count(text: str) -> int:
        if text not in tok_cache:
            tok_cache[text] = int(gen.count_tokens(text))
        return tok_cache[text]

    qvecs = question_embeddings(pool, qdf["question"].tolist())
    specs = [(f"packed@{b}/{s}", replace(base, budget=int(b), selector=s)) for b in budgets for s in selectors]
    if ablations:
        specs += _ablation_specs(base, budgets)
    answered = {name for name, _ in specs if name.endswith(f"/{base.selector}")}
    mine = list(test)[shard[0]::shard[1]] if shard is not None else list(test)
    keep = set(mine)
    rows, packed_rows = [], []
    from ltrr._log import bar

    for i, qid in enumerate(bar(test, desc="packing", unit="query")):  # quiet in logs
        if qid not in keep:  # another shard's query
            continue
        top = order[qid][0]
        closed = pool.arm(top).is_no_retrieval
        pr = plain_by_q.get(qid, pd.DataFrame(columns=results.columns))
        pr = pr[pr["arm"] == top].sort_values("rank")
        plain_tok = sum(count(t) for t in pr["text"])
        row = {"qid": qid, "routed_arm": top, "context": "plain", "tokens": plain_tok,
               **_recall(pr["docid"], gold.get(qid), plain_tok)}
        rows.append(row)
        arms = [a for a in order[qid] if a in retrieving]
        cand = deep_by_q.get(qid, deep.iloc[:0])
        if closed:  # closed-book routing reads no context, packed or not
            cand = cand.iloc[:0]
        for name, spec in specs:
            res = pack_query(pool, qtext[qid], arms, spec, count, results=cand, question_embedding=qvecs[i])
            low = float(res.considered["importance"].min()) if res.considered is not None and res.candidates else 0.0
            rows.append({"qid": qid, "routed_arm": top, "context": name, "tokens": res.tokens,
                         "importance": res.importance, "empty": bool(len(res.passages) == 0),
                         "marginal_importance": res.importance - low * len(res.passages),
                         **_recall(res.passages["docid"], gold.get(qid), res.tokens)})
            if answer and name in answered and not closed:
                for r, p in enumerate(res.passages.itertuples(), start=1):
                    packed_rows.append({"qid": qid, "arm": name, "rank": r, "docid": p.docid, "score": -float(r),
                                        "text": p.text})
    per_query = pd.DataFrame(rows)
    if shard is not None:  # the answers into the cache only; the run without a shard writes the tables
        calls, hits = gen.generator_calls, gen.hits
        _with_utility(run, per_query, packed_rows, mine, order, gen, labels, answered)
        return {"queries": len(mine), "generator_calls": gen.generator_calls - calls, "hits": gen.hits - hits}
    if answer:
        per_query = _with_utility(run, per_query, packed_rows, test, order, gen, labels, answered)
    table = _table(per_query)
    gaps = _gaps(per_query, budgets, selectors)
    out = Path(out_dir) if out_dir else run.workdir / "context"
    write_table_atomic(per_query, out / "packing_per_query.parquet")
    write_text_atomic(out / "packing.csv", table.to_csv(index=False))
    write_text_atomic(out / "packing_gaps.csv", gaps.to_csv(index=False))
    return {"per_query": per_query, "table": table, "gaps": gaps, "router": prereg["router"]}


def _recall(docids, gold, tokens: int) -> dict:
    if not gold:
        return {"recall": np.nan}
    return {"recall": evidence_recall(list(map(str, docids)), gold, tokens)["recall"]}


def _with_utility(run, per_query: pd.DataFrame, packed_rows: list[dict], test, order, gen,
                  labels: pd.DataFrame, answered: set[str]) -> pd.DataFrame:
    """Answer the packed contexts like labels (cached generator, run template, run metric).

    Only the ``answered`` contexts (the base selector's) get a utility; the others stay NaN on
    every query, closed-book ones included, so no table averages a context's utility over the
    closed-book subset alone (which once made the greedy rows read as equal to plain top-k).
    """
    from ltrr.generation import load_template
    from ltrr.labels import label_queries
    from ltrr.metrics import parse_metric

    util = labels.set_index(["qid", "arm"])["utility"]
    nr = run.no_retrieval_arms()[0]
    gcfg, lcfg = run.config.generation, run.config.labels
    template = load_template(gcfg.template)
    packed = pd.DataFrame(packed_rows, columns=["qid", "arm", "rank", "docid", "score", "text"])
    arms = sorted(set(packed["arm"])) + [nr]
    queries = run.dataset.queries.set_index("qid").loc[test].reset_index()
    metric = parse_metric(lcfg.metric)
    from ltrr._log import bar

    with bar(total=len(queries) * len(arms), desc="answer packed", unit="item") as pbar:
        lab = label_queries(queries, packed, arms=arms, no_retrieval=nr, generator=gen, template=template,
                            scorer=metric.bind(judge=None), metric_name=str(metric), seed=run.config.seed,
                            chunk_size=gcfg.chunk_size, max_prompt_tokens=gcfg.max_prompt_tokens or None,
                            params=template.default_params(max_new_tokens=gcfg.max_new_tokens),
                            progress=pbar.update).labels
    got = lab.set_index(["qid", "arm"])["utility"]
    out = []
    for r in per_query.itertuples():
        top = order[r.qid][0]
        if r.context != "plain" and r.context not in answered:
            out.append(np.nan)
        elif r.context == "plain" or top == nr:
            out.append(float(util.get((r.qid, top), np.nan)))
        else:
            out.append(float(got.get((r.qid, r.context), np.nan)))
    return per_query.assign(utility=out)


def _table(per_query: pd.DataFrame) -> pd.DataFrame:
    from ltrr.eval.stats import paired_wilcoxon

    plain = per_query[per_query["context"] == "plain"].set_index("qid")
    rows = []
    for name, g in per_query.groupby("context", sort=False):
        g = g.set_index("qid")
        row = {"context": name, "queries": len(g), "mean_tokens": float(g["tokens"].mean()),
               "recall": float(g["recall"].mean())}
        # recall is NaN (and skipped by the mean) without qrels: its tokens must come from the same queries
        scored = g["recall"].notna().to_numpy()
        tokens = float(g["tokens"][scored].mean()) if scored.any() else np.nan
        row["recall_per_100_tokens"] = 100 * row["recall"] / tokens if tokens else np.nan
        if "empty" in g:
            row["empty"] = int(g["empty"].sum())
        if "utility" in g and g["utility"].notna().any():
            u = g["utility"].dropna()
            b = plain.loc[u.index, "utility"]
            row["utility"] = float(u.mean())
            row["utility_plain"] = float(b.mean())
            if name != "plain":
                row["p_value"] = paired_wilcoxon(u.to_numpy(float), b.to_numpy(float)).pvalue
        rows.append(row)
    return pd.DataFrame(rows)


# objective (a per-query column) -> the selector that attains its exact optimum
_OBJECTIVES = {"importance": "knapsack", "marginal_importance": "knapsack-marginal"}


def _gaps(per_query: pd.DataFrame, budgets, selectors) -> pd.DataFrame:
    """Mean relative loss of each other selector against the exact optimum of each objective
    whose exact selector was compared (on the same items, query by query)."""
    rows = []
    for b in budgets:
        for col, exact_name in _OBJECTIVES.items():
            if exact_name not in selectors:
                continue
            exact = per_query[per_query["context"] == f"packed@{b}/{exact_name}"].set_index("qid")[col]
            for s in selectors:
                if s == exact_name:
                    continue
                g = per_query[per_query["context"] == f"packed@{b}/{s}"].set_index("qid")[col]
                k = exact.loc[g.index]
                ok = k > 0
                gap = ((k[ok] - g[ok]) / k[ok]).to_numpy(float)
                rows.append({"budget": int(b), "selector": s, "objective": col, "exact": exact_name,
                             "queries": int(ok.sum()),
                             "mean_gap": float(gap.mean()) if len(gap) else np.nan,
                             "max_gap": float(gap.max()) if len(gap) else np.nan,
                             "share_suboptimal": float((gap > 1e-9).mean()) if len(gap) else np.nan})
    return pd.DataFrame(rows)
