"""Retrieval benchmark: BM25 backends, dense encoding and faiss search, side by side.

Usage::

    python benchmarks/retrieval.py [--out FILE] [--quick]

Measures, in one run:

- each BM25 backend (bm25s, rank_bm25, pyserini) on the packaged Wikipedia summaries (10,033
  passages) and on a synthetic corpus (100,000 documents, seeded Zipfian vocabulary): index
  time, queries/s, peak memory;
- dense encoding (``minilm``) passages/s and queries/s on Wikipedia passages;
- faiss build time, search queries/s and recall@10 against exact search (flat, hnsw, ivf)
  over 100,000 clustered unit vectors of MiniLM's dimension (encoding 100k documents would
  take far longer than the rest of the benchmark; see `clustered_vectors`).

Every measurement runs in a fresh subprocess (index times exclude imports and the JVM start,
which a throw-away 3-document index absorbs), so its memory figure is its own: **peak RSS**
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) of that process, and ``+MB`` the growth of
that peak over the process's RSS after its imports and data loading, i.e. what building the
index and searching added. (tracemalloc would miss Lucene's JVM heap and faiss's C++ memory.)

rank_bm25 scores every document in Python (~0.1 s per query at 100k documents), so it gets
fewer queries (``--rank-bm25-queries``); queries/s stays comparable. pyserini searches with its
batch API on min(4, CPUs) threads; bm25s and rank_bm25 run one query at a time on one thread.

Results are printed and saved as JSON (``--out``) plus a Markdown table next to it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


# ---- data -----------------------------------------------------------------------------------
def wiki_tables(n_queries: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The Wikipedia summary corpus and queries derived from it (tests/_wiki.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _wiki import wiki_corpus, wiki_queries

    corpus = wiki_corpus()
    return corpus[["docid", "title", "text"]], wiki_queries(corpus, n=n_queries, seed=seed)[
        ["qid", "question"]
    ]


def synthetic_tables(
    n_docs: int,
    n_queries: int,
    seed: int,
    vocab: int = 50_000,
    zipf_s: float = 1.07,
    mean_len: int = 70,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A seeded synthetic corpus: pseudo-words drawn from a Zipfian distribution.

    ``vocab`` random lowercase words; word of rank r has probability proportional to
    ``1 / r**zipf_s``; document lengths ~ 5 + Poisson(mean_len). Queries take 2-6 words of a
    random document, so each has matches.
    """
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(3, 11, size=vocab)
    chars = letters[rng.integers(0, 26, size=int(lengths.sum()))]
    cuts = np.cumsum(lengths)[:-1]
    words = np.array(["".join(c) for c in np.split(chars, cuts)], dtype=object)
    p = 1.0 / np.arange(1, vocab + 1) ** zipf_s
    p /= p.sum()
    doc_len = 5 + rng.poisson(mean_len, size=n_docs)
    tokens = words[rng.choice(vocab, size=int(doc_len.sum()), p=p)]
    bounds = np.concatenate([[0], np.cumsum(doc_len)])
    texts = [" ".join(tokens[bounds[i] : bounds[i + 1]]) for i in range(n_docs)]
    corpus = pd.DataFrame({"docid": [f"s{i}" for i in range(n_docs)], "title": "", "text": texts})
    qs = []
    for d in rng.integers(0, n_docs, size=n_queries):
        doc = tokens[bounds[d] : bounds[d + 1]]
        qs.append(" ".join(rng.choice(doc, size=int(rng.integers(2, 7)), replace=False)))
    return corpus, pd.DataFrame({"qid": [f"sq{i}" for i in range(n_queries)], "question": qs})


# ---- measurements (each in a subprocess) ----------------------------------------------------
def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    # ru_maxrss is in kB on Linux and in bytes on macOS (rss_mb above reads /proc: Linux only)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)


def run_bm25(task: dict) -> dict:
    from ltrr.retrieval import BM25Retriever

    corpus = pd.read_parquet(task["corpus_path"])
    queries = pd.read_parquet(task["queries_path"]).iloc[: task["n_queries"]]
    # a throw-away index first: library imports (and Lucene's JVM) are not index memory
    BM25Retriever(task["backend"]).index(corpus.iloc[:3]).search(["warm up"], k=1)
    base = rss_mb()
    t0 = time.perf_counter()
    r = BM25Retriever(task["backend"]).index(corpus)
    t_index = time.perf_counter() - t0
    r.search(queries.iloc[:1], k=10)  # warm-up (JIT, JVM class loading)
    t0 = time.perf_counter()
    res = r.search(queries, k=10)
    t_search = time.perf_counter() - t0
    return {
        "index_s": t_index,
        "queries": len(queries),
        "search_s": t_search,
        "qps": len(queries) / t_search,
        "rows": len(res),
        "base_rss_mb": base,
        "peak_rss_mb": peak_rss_mb(),
    }


def run_encode(task: dict) -> dict:
    from ltrr.embed import get_encoder

    corpus = pd.read_parquet(task["corpus_path"]).iloc[: task["n_docs"]]
    queries = pd.read_parquet(task["queries_path"]).iloc[: task["n_queries"]]
    from ltrr.retrieval import passage_text

    texts = [passage_text(t, x) for t, x in zip(corpus.title, corpus.text, strict=True)]
    enc = get_encoder(task["encoder"])
    t0 = time.perf_counter()
    enc.encode_passages(texts[:8])  # loads the model
    t_load = time.perf_counter() - t0
    base = rss_mb()
    t0 = time.perf_counter()
    enc.encode_passages(texts, batch_size=64)
    t_docs = time.perf_counter() - t0
    t0 = time.perf_counter()
    enc.encode_queries(queries.question.tolist(), batch_size=64)
    t_q = time.perf_counter() - t0
    return {
        "load_s": t_load,
        "docs": len(texts),
        "docs_per_s": len(texts) / t_docs,
        "queries": len(queries),
        "qps": len(queries) / t_q,
        "base_rss_mb": base,
        "peak_rss_mb": peak_rss_mb(),
    }


def clustered_vectors(n: int, n_queries: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around ``n // 50`` random centres (cosine to the centre ~0.7), as sentence
    embeddings cluster by topic; queries are perturbed documents. Uniform random vectors would
    be the worst case for approximate indexes and unlike real embeddings."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, n // 50), dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    docs = np.empty((n, dim), dtype=np.float32)
    # filled in blocks, so no full-size temporary sets the process's peak RSS
    for s in range(0, n, 10_000):
        block = docs[s : s + 10_000]
        rng.standard_normal(out=block, dtype=np.float32)
        block *= 1.0 / np.sqrt(dim)
        block += centres[rng.integers(0, len(centres), size=len(block))]
        block /= np.sqrt((block * block).sum(axis=1, keepdims=True))
    noise = rng.standard_normal((n_queries, dim), dtype=np.float32) * (0.7 / np.sqrt(dim))
    q = docs[rng.integers(0, n, size=n_queries)] + noise
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return docs, q


def run_faiss(task: dict) -> dict:
    import faiss

    from ltrr.retrieval.dense import DenseRetriever

    docs, q = clustered_vectors(task["n_docs"], task["n_queries"], task["dim"], task["seed"])
    base = rss_mb()
    r = DenseRetriever(index_type=task["index_type"])
    t0 = time.perf_counter()
    index = r._make_index(docs)  # the retriever's own index construction, minus encoding
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, ids = index.search(q, 10)
    t_search = time.perf_counter() - t0
    peak = peak_rss_mb()  # before the ground-truth index below adds its own copy
    exact = faiss.IndexFlatIP(task["dim"])
    exact.add(docs)
    _, truth = exact.search(q, 10)
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth, strict=True)]))
    return {
        "index_s": t_index,
        "queries": task["n_queries"],
        "qps": task["n_queries"] / t_search,
        "recall@10": recall,
        "base_rss_mb": base,
        "peak_rss_mb": peak,
        "threads": faiss.omp_get_max_threads(),
    }


RUNNERS = {"bm25": run_bm25, "encode": run_encode, "faiss": run_faiss}


def in_subprocess(task: dict, timeout: float) -> dict:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(task)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=str(ROOT),
        )
    except subprocess.TimeoutExpired:
        return {**task, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        err = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {**task, "error": err}
    return {**task, **json.loads(lines[-1]), "wall_s": time.perf_counter() - t0}


# ---- report ---------------------------------------------------------------------------------
def fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def markdown(results: list[dict], meta: dict) -> str:
    lines = [
        f"Retrieval benchmark ({meta['cpus']} CPUs, {meta['platform']}, python {meta['python']}; "
        f"memory = peak RSS of a fresh process, +MB = growth over its RSS after imports and data)",
        "",
        "| part | corpus | docs | index s | queries | queries/s | docs/s | recall@10 | peak RSS MB | +MB | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        part = {
            "bm25": f"BM25 {r.get('backend')}",
            "encode": f"encode {r.get('encoder')}",
            "faiss": f"faiss {r.get('index_type')}",
        }[r["kind"]]
        if "error" in r:
            lines.append(
                f"| {part} | {r.get('corpus_name', '')} | {r.get('n_docs', '')} | | | | | | | | {r['error'][:80]} |"
            )
            continue
        grow = r["peak_rss_mb"] - r["base_rss_mb"]
        lines.append(
            f"| {part} | {r['corpus_name']} | {r['n_docs']:,} | {fmt(r.get('index_s'))} | {r['queries']} "
            f"| {fmt(r.get('qps'))} | {fmt(r.get('docs_per_s'))} | {fmt(r.get('recall@10'), 3)} "
            f"| {fmt(r['peak_rss_mb'], 0)} | {fmt(grow, 0)} | {r.get('note', '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "results" / "retrieval.json"),
        help="JSON output file; the Markdown table goes next to it (.md)",
    )
    ap.add_argument("--n-docs", type=int, default=100_000, help="synthetic corpus size")
    ap.add_argument("--queries", type=int, default=200, help="queries per BM25 run")
    ap.add_argument(
        "--rank-bm25-queries",
        type=int,
        default=20,
        help="queries for rank_bm25 on the synthetic corpus",
    )
    ap.add_argument("--encode-docs", type=int, default=512)
    ap.add_argument("--faiss-queries", type=int, default=1000)
    ap.add_argument("--backends", default="bm25s,rank_bm25,pyserini")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per measurement")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        task = json.loads(args.child)
        print(json.dumps(RUNNERS[task["kind"]](task)))
        return 0

    if args.quick:
        args.n_docs, args.queries, args.rank_bm25_queries = 5_000, 50, 10
        args.encode_docs, args.faiss_queries = 64, 200
    backends = [b for b in args.backends.split(",") if b]
    t_start = time.perf_counter()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ltrr-bench-") as tmp_name:
        tmp = Path(tmp_name)
        print("preparing corpora ...", flush=True)
        wc, wq = wiki_tables(args.queries, args.seed)
        sc, sq = synthetic_tables(args.n_docs, args.queries, args.seed)
        paths = {}
        for name, (c, q) in {"wikipedia": (wc, wq), "synthetic": (sc, sq)}.items():
            c.to_parquet(tmp / f"{name}-corpus.parquet", index=False)
            q.to_parquet(tmp / f"{name}-queries.parquet", index=False)
            paths[name] = (
                str(tmp / f"{name}-corpus.parquet"),
                str(tmp / f"{name}-queries.parquet"),
                len(c),
            )
        tasks = []
        for name in ("wikipedia", "synthetic"):
            corpus, queries, n = paths[name]
            for b in backends:
                nq = (
                    args.rank_bm25_queries
                    if (b == "rank_bm25" and name == "synthetic")
                    else args.queries
                )
                note = "fewer queries (slow backend)" if nq != args.queries else ""
                if b == "pyserini":
                    note = f"batch search, {max(1, min(4, os.cpu_count() or 1))} threads"
                tasks.append(
                    {
                        "kind": "bm25",
                        "backend": b,
                        "corpus_name": name,
                        "corpus_path": corpus,
                        "queries_path": queries,
                        "n_docs": n,
                        "n_queries": nq,
                        "note": note,
                    }
                )
        corpus, queries, _ = paths["wikipedia"]
        tasks.append(
            {
                "kind": "encode",
                "encoder": "minilm",
                "corpus_name": "wikipedia",
                "corpus_path": corpus,
                "queries_path": queries,
                "n_docs": args.encode_docs,
                "n_queries": args.queries,
                "note": "batch 64, CPU",
            }
        )
        for it in ("flat", "hnsw", "ivf"):
            tasks.append(
                {
                    "kind": "faiss",
                    "index_type": it,
                    "corpus_name": "clustered unit vectors",
                    "n_docs": args.n_docs,
                    "dim": 384,
                    "n_queries": args.faiss_queries,
                    "seed": args.seed,
                    "note": "",
                }
            )
        for task in tasks:
            label = task.get("backend") or task.get("encoder") or task.get("index_type")
            print(f"  {task['kind']:6s} {label:10s} {task['corpus_name']} ...", end="", flush=True)
            r = in_subprocess(task, args.timeout)
            if r["kind"] == "faiss" and "threads" in r:
                r["note"] = f"{r['threads']} threads, k=10"
            status = r.get("error") or "{:,.1f} q/s".format(r.get("qps", 0.0))
            print(" " + status, flush=True)
            r.pop("corpus_path", None)
            r.pop("queries_path", None)
            results.append(r)
    meta = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "total_s": time.perf_counter() - t_start,
        "args": {k: v for k, v in vars(args).items() if k != "child"},
        "memory": "peak RSS (ru_maxrss) of a fresh subprocess per measurement; +MB over its RSS after imports and data",
    }
    md = markdown(results, meta)
    print()
    print(md)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in (
        (out, json.dumps({"meta": meta, "results": results}, indent=2)),
        (out.with_suffix(".md"), md),
    ):
        tmp_path = path.with_name(f".{path.name}.tmp")
        tmp_path.write_text(text, encoding="utf-8")
        os.replace(tmp_path, path)
    print(f"saved {out} and {out.with_suffix('.md')} (total {meta['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
