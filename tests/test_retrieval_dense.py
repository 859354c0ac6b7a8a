"""Dense retrieval: faiss against numpy brute force, approximate indexes against flat,
persistence and stored embeddings."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from _wiki import wiki_corpus, wiki_queries

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.embed import get_encoder
from ltrr.retrieval import DenseRetriever, Retriever, passage_text

ENC = "test-hash"  # registered by _wiki: fast deterministic bag-of-words vectors


@pytest.fixture(scope="session")
def wiki():
    corpus = wiki_corpus(limit=3000)
    return corpus, wiki_queries(corpus, n=200, seed=1)


@pytest.fixture(scope="session")
def flat(wiki, tmp_path_factory):
    corpus, _ = wiki
    path = DenseRetriever(ENC).index(corpus).save(tmp_path_factory.mktemp("dense") / "flat")
    return Retriever.load(path)


def tops(res: pd.DataFrame) -> dict[str, list[str]]:
    return {q: g.sort_values("rank")["docid"].tolist() for q, g in res.groupby("qid")}


def test_flat_matches_numpy_brute_force(wiki, flat):
    corpus, queries = wiki
    enc = get_encoder(ENC)
    texts = [passage_text(t, x) for t, x in zip(corpus.title, corpus.text, strict=True)]
    docs = enc.encode_passages(texts)
    qv = enc.encode_queries(queries["question"].tolist())
    sims = qv @ docs.T
    res = flat.search(queries[["qid", "question"]], k=10)
    got = tops(res)
    for i, qid in enumerate(queries["qid"]):
        order = np.argsort(-sims[i], kind="stable")[:10]
        want_scores = sims[i, order]
        got_scores = res.loc[res.qid == qid, "score"].to_numpy()
        np.testing.assert_allclose(got_scores, want_scores, atol=1e-5)
        # ids agree except where two scores tie to float precision
        for pos, (g, w) in enumerate(zip(got[qid], corpus.docid.to_numpy()[order], strict=True)):
            if g != w:
                assert abs(got_scores[pos] - want_scores[pos]) < 1e-5
    assert set(res.columns) == {"qid", "docid", "score", "rank", "text"}


@pytest.mark.parametrize(
    "params,min_recall",
    [
        ({"index_type": "hnsw"}, 0.9),
        ({"index_type": "ivf"}, 0.5),  # default nprobe=16 of ~219 cells
        ({"index_type": "ivf", "ivf_nlist": 32, "nprobe": 32}, 0.999),  # all cells: exact
    ],
)
def test_approximate_indexes_recall_vs_flat(wiki, flat, params, min_recall):
    corpus, queries = wiki
    approx = DenseRetriever(ENC, **params).index(corpus)
    want = tops(flat.search(queries[["qid", "question"]], k=10))
    got = tops(approx.search(queries[["qid", "question"]], k=10))
    recall = np.mean([len(set(want[q]) & set(got.get(q, []))) / len(want[q]) for q in want])
    assert recall >= min_recall


def test_saved_files_and_round_trip(wiki, flat, tmp_path):
    corpus, queries = wiki
    path = flat.save(tmp_path / "dense")
    names = {p.name for p in path.iterdir()}
    assert {
        "params.json",
        "embeddings.npy",
        "docids.json",
        "index.faiss",
        "passages.parquet",
    } <= names
    meta = json.loads((path / "params.json").read_text())
    assert meta["params"]["encoder"] == ENC
    assert meta["encoder_identity"] == get_encoder(ENC).identity
    assert json.loads((path / "docids.json").read_text()) == corpus.docid.tolist()
    emb = np.load(path / "embeddings.npy")
    assert emb.shape == (len(corpus), get_encoder(ENC).dim)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    loaded = Retriever.load(path)
    q = queries[["qid", "question"]].iloc[:20]
    pd.testing.assert_frame_equal(loaded.search(q, k=5), flat.search(q, k=5))


def test_doc_embeddings_reads_stored_rows(flat):
    ids = [flat.docids_[7], flat.docids_[2], flat.docids_[7]]
    got = flat.doc_embeddings(ids)
    np.testing.assert_array_equal(got, np.asarray(flat.embeddings_)[[7, 2, 7]])
    assert flat.doc_embeddings([]).shape[0] == 0
    with pytest.raises(DataError, match="'no-such-doc' is not in this dense index"):
        flat.doc_embeddings(["no-such-doc"])


def test_encoder_change_is_detected(flat, tmp_path):
    path = flat.save(tmp_path / "dense")
    meta = json.loads((path / "params.json").read_text())
    meta["state"]["encoder_identity"] = "st:minilm:0000"
    (path / "params.json").write_text(json.dumps(meta))
    with pytest.raises(NotBuiltError, match="rebuild it with `ltrr index CONFIG`"):
        Retriever.load(path).search(["anything"])


def test_k_larger_than_corpus_and_bad_params(wiki):
    corpus, _ = wiki
    small = DenseRetriever(ENC).index(corpus.iloc[:3])
    assert len(small.search(["music"], k=10)) == 3
    with pytest.raises(ConfigError, match="index_type must be one of"):
        DenseRetriever(ENC, index_type="annoy").index(corpus.iloc[:3])
    with pytest.raises(ConfigError, match="nprobe must be an integer >= 1"):
        DenseRetriever(ENC, nprobe=0).index(corpus.iloc[:3])
    with pytest.raises(ConfigError, match="ivf_nlist=50 exceeds the number of documents"):
        DenseRetriever(ENC, index_type="ivf", ivf_nlist=50).index(corpus.iloc[:10])
    with pytest.raises(ConfigError, match="unknown encoder 'nope'"):
        DenseRetriever("nope").index(corpus.iloc[:3])
    with pytest.raises(NotBuiltError, match="ltrr index CONFIG"):
        DenseRetriever(ENC).search(["music"])
    with pytest.raises(NotBuiltError, match="ltrr index CONFIG"):
        DenseRetriever(ENC).doc_embeddings(["a"])


@pytest.mark.slow
def test_minilm_flat_finds_sources_and_matches_numpy(tmp_path):
    corpus = wiki_corpus(limit=300)
    queries = wiki_queries(corpus, n=40, seed=2)
    dense = Retriever.load(DenseRetriever("minilm").index(corpus).save(tmp_path / "minilm"))
    res = dense.search(queries[["qid", "question"]], k=10)
    got = tops(res)
    found = [s in got[q] for q, s in zip(queries.qid, queries.source, strict=True)]
    assert np.mean(found) >= 0.7
    enc = get_encoder("minilm")
    sims = enc.encode_queries(queries.question.tolist()) @ np.asarray(dense.embeddings_).T
    best = corpus.docid.to_numpy()[sims.argmax(axis=1)]
    assert [got[q][0] for q in queries.qid] == best.tolist()
