"""Routing overhead per query with retrieval results in hand: features + model, one query at a time.

For each query of a run: extract its raw features from the pool's results (query embedding
taken as computed by the dense arm, passage embeddings from the dense index), transform them
with the fitted feature pipeline and score its arms with an XGBoost router. Reports p50/p90
latency per query and, for comparison, batch feature extraction in rows/s.

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

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ltrr.config import load_config  # noqa: E402
from ltrr.features import extract_raw  # noqa: E402
from ltrr.pipeline import Run  # noqa: E402
from ltrr.routers import LTRRouter  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="demo")
    ap.add_argument("--ranker", default="xgboost-pairwise")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--out", default="benchmarks/results/routing.json")
    args = ap.parse_args()
    run = Run(load_config(args.config), log=lambda m: None)
    labels, raw = run._inputs_for_training("benchmark")
    router = LTRRouter(ranker=args.ranker, random_state=0, ranker_params={"n_jobs": 1}).fit(raw, labels)
    pool = run.pool.load(run.index_dir)
    source = pool.embedding_source()
    results = pd.read_parquet(run.results_path)
    queries = run.dataset.queries
    qids = list(queries["qid"])[: args.n]
    nr = [a.name for a in pool.arms if a.is_no_retrieval]
    by_q = {q: g for q, g in results.groupby("qid", sort=False)}
    qrow = {q: i for i, q in enumerate(queries["qid"])}
    # warm-up: lazy imports, the encoder and the booster
    extract_raw(queries.iloc[[0]], by_q[qids[0]], arms=pool.arm_names, no_retrieval=nr, embedding_source=source,
                query_embeddings=raw.embeddings_for([qids[0]]))
    lat = []
    for q in qids:
        qi = queries.iloc[[qrow[q]]]
        qemb = raw.embeddings_for([q])  # computed by the dense arm at retrieval time
        t0 = time.perf_counter()
        one = extract_raw(qi, by_q[q], arms=pool.arm_names, no_retrieval=nr, embedding_source=source, query_embeddings=qemb)
        router.choose(one)
        lat.append(time.perf_counter() - t0)
    lat_ms = np.array(lat) * 1000
    t0 = time.perf_counter()
    batch = extract_raw(queries, results, arms=pool.arm_names, no_retrieval=nr, embedding_source=source,
                        query_embeddings=raw.embeddings_for(list(queries["qid"])))
    rows_s = len(batch) / (time.perf_counter() - t0)
    out = {"ranker": args.ranker, "queries": len(qids), "arms": len(pool.arm_names),
           "p50_ms": float(np.percentile(lat_ms, 50)), "p90_ms": float(np.percentile(lat_ms, 90)),
           "mean_ms": float(lat_ms.mean()), "batch_feature_rows_per_s": rows_s}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
