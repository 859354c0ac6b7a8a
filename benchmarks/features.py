"""Feature benchmarks on the embedded demo.

Two measurements:

``extract``
    Throughput of `ltrr.features.extract_raw` in (query, arm) rows per second with the
    embeddings in hand: the demo's queries are run through the paper's seven-arm pool once
    (indexes built or reused under ``$LTRR_DATA_DIR/indexes/demo``), the query embeddings are
    encoded once, and passage embeddings come from the dense index's stored vectors through
    the pool's `EmbeddingSource`. The timed part is the feature computation itself
    (``--repeats`` runs; best and median reported).

``querytype``
    Held-out accuracy of the query-type classifiers (``rules``, ``spacy``, ``logreg``) on the
    demo's ``phrasing`` facet over grouped splits (by ``group``), plus their accuracy on a
    hand-written set of 40 search-box-style queries (`HAND`). These are the figures quoted in
    `ltrr.features.querytype`.

Usage::

    python benchmarks/features.py extract [--n-queries 0] [--repeats 3]
    python benchmarks/features.py querytype [--splits 5]
    python benchmarks/features.py all --out bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np

from ltrr.data.io import data_root, load_dataset, write_text_atomic

# Written to look like real search-box input, not like the demo's generated queries; half of
# the questions have no question mark. 1 = natural-language question or request, 0 = keywords.
HAND = [
    ("capital of australia population", 0),
    ("will smith movies", 0),
    ("python list sort descending", 0),
    ("best pizza nyc", 0),
    ("list of presidents of the united states", 0),
    ("can opener", 0),
    ("cheap flights london paris", 0),
    ("mount everest height", 0),
    ("photosynthesis equation", 0),
    ("world war 2 timeline", 0),
    ("tesla stock price", 0),
    ("symptoms flu vs covid", 0),
    ("barack obama birthplace", 0),
    ("name generator fantasy", 0),
    ("eiffel tower opening hours", 0),
    ("boiling point of water fahrenheit", 0),
    ("marie curie nobel prizes", 0),
    ("iphone 15 review", 0),
    ("river nile length km", 0),
    ("shakespeare sonnet 18 analysis", 0),
    ("What is the capital of Australia?", 1),
    ("who wrote pride and prejudice", 1),
    ("how to tie a tie", 1),
    ("is the earth flat", 1),
    ("tell me about the french revolution", 1),
    ("explain quantum entanglement simply", 1),
    ("why is the sky blue", 1),
    ("when did the berlin wall fall", 1),
    ("I need the population of Canada.", 1),
    ("Can you list the planets in order from the sun", 1),
    ("where do penguins live?", 1),
    ("does aspirin thin your blood?", 1),
    ("which country has the most islands", 1),
    ("Please give me a summary of the plot of Hamlet.", 1),
    ("what's the tallest building in the world", 1),
    ("How many bones are in the human body?", 1),
    ("My cat keeps sneezing, should I worry?", 1),
    ("name the first man on the moon", 1),
    ("Describe the water cycle.", 1),
    ("who painted the mona lisa?", 1),
]


def _demo():
    from ltrr.data.build import build_dataset

    path = data_root() / "built" / "demo"
    if not (path / "queries.parquet").exists():
        build_dataset("demo", log=print)
    return load_dataset(path)


def bench_extract(n_queries: int, repeats: int) -> dict:
    from ltrr.embed import get_encoder
    from ltrr.features import extract_raw
    from ltrr.retrieval import EmbeddingSource, Pool, default_pool_config

    ds = _demo()
    queries = ds.queries if not n_queries else ds.queries.iloc[:n_queries]
    pool = Pool.from_config(**default_pool_config())
    t0 = time.perf_counter()
    pool.build(ds.corpus, data_root() / "indexes" / "demo", show_progress=False)
    print(f"indexes ready in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    results = pool.search(queries)
    print(f"pool search: {len(results)} rows in {time.perf_counter() - t0:.1f}s")
    qemb = get_encoder("minilm").encode_queries(queries["question"].tolist())
    source = EmbeddingSource(pool.retrievers_["dense"], encoder="minilm")
    nr = [a.name for a in pool.arms if a.is_no_retrieval]
    kw: dict[str, Any] = dict(
        arms=pool.arm_names,
        no_retrieval=nr,
        encoder="minilm",
        embedding_source=source,
        query_embeddings=qemb,
    )
    extract_raw(queries, results, **kw)  # warm-up: the docid -> row map of the dense index
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        raw = extract_raw(queries, results, **kw)
        times.append(time.perf_counter() - t0)
    rows = len(raw.table)
    out = {
        "queries": len(queries),
        "arms": len(pool.arm_names),
        "rows": rows,
        "passages": len(results),
        "passages_encoded": int(source.n_encoded),
        "best_s": min(times),
        "median_s": statistics.median(times),
        "rows_per_s_best": rows / min(times),
        "rows_per_s_median": rows / statistics.median(times),
    }
    print(
        f"extract_raw: {rows} (query, arm) rows, {len(results)} passages: best {min(times):.3f}s "
        f"({out['rows_per_s_best']:.0f} rows/s), median {out['median_s']:.3f}s "
        f"({out['rows_per_s_median']:.0f} rows/s); passages encoded: {source.n_encoded}"
    )
    return out


def bench_querytype(n_splits: int) -> dict:
    from ltrr.embed import get_encoder
    from ltrr.features.querytype import (
        EmbeddingQueryTypeClassifier,
        evaluate_query_type,
        phrasing_labels,
        query_type_classifiers,
    )

    q = _demo().queries
    enc = get_encoder("minilm")
    E = enc.encode_queries(q["question"].tolist())
    demo = evaluate_query_type(q, n_splits=n_splits, test_size=0.3, random_state=0, embeddings=E)
    texts = [t for t, _ in HAND]
    y = np.array([label for _, label in HAND])
    hand = {}
    for name in ("rules", "spacy"):
        pred = query_type_classifiers.get(name)().predict(texts)
        hand[name] = float(np.mean(pred == y))
    lr = EmbeddingQueryTypeClassifier(random_state=0).fit(
        q["question"].tolist(), phrasing_labels(q), embeddings=E
    )
    hand["logreg"] = float(np.mean(lr.predict(texts, embeddings=enc.encode_queries(texts)) == y))
    print(f"{'classifier':<10} {'demo held-out accuracy':>24} {'hand-set accuracy':>18}")
    for name, r in demo.items():
        print(f"{name:<10} {r['mean']:>16.3f} +- {r['std']:.3f} {hand[name]:>18.3f}")
    print(
        f"({n_splits} grouped 70/30 splits, {demo['rules']['n_test']:.0f} test queries each; hand set: {len(HAND)})"
    )
    return {"demo": demo, "hand": hand}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["extract", "querytype", "all"])
    ap.add_argument("--n-queries", type=int, default=0, help="demo queries to use (0: all)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--out", help="write the figures to this JSON file")
    args = ap.parse_args()
    out = {}
    if args.what in ("extract", "all"):
        out["extract"] = bench_extract(args.n_queries, args.repeats)
    if args.what in ("querytype", "all"):
        out["querytype"] = bench_querytype(args.splits)
    if args.out:
        write_text_atomic(args.out, json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
