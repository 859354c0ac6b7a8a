"""Test helper: a small built IR dataset over the packaged Wikipedia corpus, and its run config.

`write_dataset(folder)` writes ``corpus.jsonl`` (400 summaries), ``queries.jsonl`` (60 queries
of two types derived from the corpus, with the first word of their document's title as answer,
plus 6 ``noanswer`` queries without qrels) and TREC ``qrels.trec`` (each query's source
document). `config_text` is a run config over it with two BM25 arms (one with a sampled
reranking whose scores do not order its ranking), a dense arm on the fast hash encoder of
`_wiki` and a no-retrieval arm; no model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import _wiki  # noqa: F401  registers the "test-hash" encoder
from _wiki import wiki_corpus, wiki_queries


def write_dataset(folder: Path) -> Path:
    """Write the dataset into ``folder`` (kept when it exists) and return it."""
    if (folder / "qrels.trec").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    corpus = wiki_corpus(limit=400)
    queries = wiki_queries(corpus, n=60, seed=5)
    title = dict(zip(corpus["docid"], corpus["title"], strict=True))
    with (folder / "corpus.jsonl").open("w") as fh:
        for r in corpus.itertuples():
            fh.write(json.dumps({"docid": r.docid, "title": r.title, "text": r.text}) + "\n")
    with (folder / "queries.jsonl").open("w") as fh:
        for r in queries.itertuples():
            fh.write(json.dumps({"qid": r.qid, "question": r.question, "answers": [title[r.source].split()[0]],
                                 "qtype": r.kind}) + "\n")
        for i in range(6):
            fh.write(json.dumps({"qid": f"n{i}", "question": f"unanswerable question number {i}",
                                 "answers": ["nothing"], "qtype": "noanswer"}) + "\n")
    with (folder / "qrels.trec").open("w") as fh:
        for r in queries.itertuples():
            fh.write(f"{r.qid} 0 {r.source} 1\n")
    return folder


def config_text(dataset: Path, workdir: Path, *, extra: str = "") -> str:
    return f"""
[run]
name = "irtiny"
seed = 3
workdir = "{workdir}"
[data]
dataset = "{dataset}"
{extra}
[retrievers.bm25]
type = "bm25"
[retrievers.dense]
type = "dense"
encoder = "test-hash"
[rerankers.stoch]
type = "stoch"
n_samples = 10
intensity = 2.0
[[arms]]
name = "bm25"
retriever = "bm25"
k = 5
[[arms]]
name = "bm25+stoch"
retriever = "bm25"
reranker = "stoch"
k = 5
depth = 20
[[arms]]
name = "dense"
retriever = "dense"
k = 5
[[arms]]
name = "none"
retriever = "none"
"""
