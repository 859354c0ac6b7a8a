"""Routing overhead per query with retrieval results in hand: features + model, one query at a time.

For each query of a run, starting from that query's results as the pool returns them (a
DataFrame; query embedding as computed by the dense arm, passage embeddings from the dense
index): extract its raw features, transform them with the fitted feature pipeline and rank its
arms with an XGBoost router. Two paths are timed side by side on the same queries, interleaved,
each going first on every other query:

* ``per_query``: `extract_query` + `LTRRouter.route_query` (numpy only; what `route` uses);
* ``table``: `extract_raw` + `LTRRouter.choose` on a one-query table (the batch path).

Both must pick the same arm for every query (checked). Reports p50/p90 latency per query of
each, their ratio, and batch feature extraction over all queries in (query, arm) rows/s.

Usage::

    python benchmarks/routing.py [--config demo] [--ranker xgboost-pairwise] [--n 200]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

from ltrr.config import load_config
from ltrr.data.io import write_text_atomic
from ltrr.features import extract_query, extract_raw
from ltrr.pipeline import Run
from ltrr.routers import LTRRouter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="demo")
    ap.add_argument("--ranker", default="xgboost-pairwise")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--out", default="benchmarks/results/routing.json")
    args = ap.parse_args()
    run = Run(load_config(args.config), log=lambda m: None)
    labels, raw = run.training_inputs("benchmark")
    router = LTRRouter(ranker=args.ranker, random_state=0, ranker_params={"n_jobs": 1}).fit(raw, labels)
    pool = run.pool.load(run.index_dir)
    source = pool.embedding_source()
    results = pd.read_parquet(run.results_path)
    queries = run.dataset.queries
    qids = list(queries["qid"])[: args.n]
    nr = [a.name for a in pool.arms if a.is_no_retrieval]
    by_q = {q: g for q, g in results.groupby("qid", sort=False)}
    qrow = {q: i for i, q in enumerate(queries["qid"])}
    qtext = dict(zip(queries["qid"], queries["question"], strict=True))
    # in hand before the clock starts: each query's results and its embedding (from the dense arm)
    qemb = {q: raw.embeddings_for([q]) for q in qids}
    qframe = {q: queries.iloc[[qrow[q]]] for q in qids}

    def per_query(q):
        qraw = extract_query(qtext[q], by_q[q], arms=pool.arm_names, no_retrieval=nr, embedding_source=source,
                             query_embedding=qemb[q][0])
        return router.route_query(qraw)[0][0]

    def table(q):
        one = extract_raw(qframe[q], by_q[q], arms=pool.arm_names, no_retrieval=nr,
                          embedding_source=source, query_embeddings=qemb[q])
        return router.choose(one).iloc[0]

    for f in (per_query, table):  # warm-up: lazy imports, caches, the booster
        f(qids[0])
    lat: dict[str, list[float]] = {"per_query": [], "table": []}
    for i, q in enumerate(qids):  # interleaved, so both paths see the same machine state
        picks = {}
        order = [("per_query", per_query), ("table", table)]
        if i % 2:  # each path goes first on every other query: neither always runs on a warmed cache
            order.reverse()
        for name, f in order:
            t0 = time.perf_counter()
            picks[name] = f(q)
            lat[name].append(time.perf_counter() - t0)
        if picks["per_query"] != picks["table"]:
            raise SystemExit(f"the two paths disagree on query {q}: {picks}")
    rates = []
    for _ in range(3):  # the median of three passes over every query of the run
        t0 = time.perf_counter()
        batch = extract_raw(queries, results, arms=pool.arm_names, no_retrieval=nr, embedding_source=source,
                            query_embeddings=raw.embeddings_for(list(queries["qid"])))
        rates.append(len(batch) / (time.perf_counter() - t0))
    rows_s = float(np.median(rates))
    out = {"ranker": args.ranker, "queries": len(qids), "arms": len(pool.arm_names)}
    for name, v in lat.items():
        ms = np.array(v) * 1000
        out[name] = {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
                     "mean_ms": float(ms.mean())}
    out["table_over_per_query_p50"] = out["table"]["p50_ms"] / out["per_query"]["p50_ms"]
    out["batch_feature_rows_per_s"] = rows_s
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
