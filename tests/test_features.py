"""Routing features: hand-computed values, any number of arms against a loop reference,
train-only fitting of the pipeline, NaN handling, persistence, feature sets, determinism."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.features import (
    POST_COLUMNS,
    RAW_COLUMNS,
    FeaturePipeline,
    FeatureSpec,
    RawFeatures,
    available_specs,
    copy_feature_tables,
    extract_raw,
    feature_tables_inputs,
    load_spec,
    query_length,
    read_feature_tables,
    write_feature_tables,
)
from ltrr.features.pipeline import PRE_FEATURES

# ---- fixtures --------------------------------------------------------------------------------
VECTORS = {
    "d1": [1.0, 0.0, 0.0],
    "d2": [0.0, 1.0, 0.0],
    "d3": [0.0, 0.0, 1.0],
    "d4": [0.6, 0.8, 0.0],
    "d5": [0.8, 0.0, 0.6],
}


class DictSource:
    """Passage embeddings from a dict (a stand-in for the pool's EmbeddingSource)."""

    def __init__(self, vectors):
        self.vectors = vectors
        self.calls = 0

    def get(self, docids, texts):
        self.calls += 1
        return np.asarray([self.vectors[d] for d in docids], dtype=np.float64)


def hand_inputs():
    queries = pd.DataFrame(
        {
            "qid": ["q1", "q2"],
            "question": ["capital of australia population", "What is the capital of Australia?"],
        }
    )
    rows = [
        ("q1", "a", 1, "d1", 3.0),
        ("q1", "a", 2, "d4", 2.0),
        ("q1", "a", 3, "d5", 1.0),
        ("q1", "b", 1, "d2", 5.0),
        ("q1", "b", 2, "d3", 4.0),
        ("q2", "a", 1, "d2", 1.0),
        ("q2", "b", 1, "d4", 2.0),
        ("q2", "b", 2, "d1", 2.0),
    ]
    results = pd.DataFrame(rows, columns=["qid", "arm", "rank", "docid", "score"]).assign(
        text="passage"
    )
    # shuffled: extraction must not depend on row order
    results = results.sample(frac=1.0, random_state=3).reset_index(drop=True)
    qemb = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    return queries, results, qemb


def hand_raw(**kw):
    queries, results, qemb = hand_inputs()
    return extract_raw(
        queries,
        results,
        arms=["a", "b", "none"],
        no_retrieval="none",
        encoder="test",
        embedding_source=DictSource(VECTORS),
        query_embeddings=qemb,
        **kw,
    )


def synthetic(n_queries=12, n_arms=3, dim=8, k=4, seed=0, empty=()):
    """Random queries/passages; the last arm is the no-retrieval arm; ``empty``: (qid, arm)
    cells of retrieval arms left without passages."""
    rng = np.random.default_rng(seed)
    arms = [f"arm{i}" for i in range(n_arms - 1)] + ["none"]
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    queries = pd.DataFrame(
        {
            "qid": [f"q{i}" for i in range(n_queries)],
            "question": [
                " ".join(rng.choice(words, size=rng.integers(2, 7))) + ("?" if i % 2 else "")
                for i in range(n_queries)
            ],
        }
    )
    vectors = {f"d{j}": rng.normal(size=dim) for j in range(40)}
    rows = []
    for qid in queries["qid"]:
        for arm in arms[:-1]:
            if (qid, arm) in empty:
                continue
            n = int(rng.integers(1, k + 1))
            docs = rng.choice(40, size=n, replace=False)
            scores = np.sort(rng.normal(size=n))[::-1]
            for r, (d, s) in enumerate(zip(docs, scores, strict=True)):
                rows.append((qid, arm, r + 1, f"d{d}", float(s), f"text {d}"))
    results = pd.DataFrame(rows, columns=["qid", "arm", "rank", "docid", "score", "text"])
    qemb = rng.normal(size=(n_queries, dim))
    return queries, results, qemb, arms, vectors


def synthetic_raw(**kw):
    queries, results, qemb, arms, vectors = synthetic(**kw)
    return extract_raw(
        queries,
        results,
        arms=arms,
        no_retrieval="none",
        encoder="test",
        embedding_source=DictSource(vectors),
        query_embeddings=qemb,
    )


def unit(v):
    v = np.asarray(v, dtype=float)
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def reference_features(q, docs, scores, others, m=None):
    """Loop implementation of the module docstring's definitions for one (query, arm)."""
    if not docs:
        return dict.fromkeys(POST_COLUMNS, math.nan)
    q = unit(q)
    D = [unit(d) for d in docs]
    sims = [float(q @ d) for d in D]
    n = len(D)
    avg = sum(sims) / n
    cent = unit(sum(D) / n)
    W = np.zeros((n, n))
    for j in range(n):
        for i in range(n):
            if j != i:
                W[j, i] = max(0.0, float(D[j] @ D[i]))
        if m is not None:
            keep = sorted(range(n), key=lambda i: (-W[j, i], i))[:m]
            W[j] = [W[j, i] if i in keep else 0.0 for i in range(n)]
    u = np.asarray(scores) - np.mean(scores)
    if n < 2 or max(scores) == min(scores) or W.sum() == 0:
        moran = 0.0
    else:
        moran = n / W.sum() * float(u @ W @ u) / float(u @ u)
    cross = [float(cent @ unit(sum(unit(x) for x in o) / len(o))) for o in others if o]
    return {
        "overall_sim": float(q @ cent),
        "avg_sim": avg,
        "max_sim": max(sims),
        "var_sim": sum((s - avg) ** 2 for s in sims) / n,
        "moran": moran,
        "cross_ret_sim": sum(cross) / len(cross) if cross else math.nan,
    }


def state(pipe):
    return {
        "pca_mean": pipe.pca_mean_.copy(),
        "pca_components": pipe.pca_components_.copy(),
        "length": (pipe.length_mean_, pipe.length_scale_),
        "impute": pipe.impute_values_.copy(),
        "names": list(pipe.get_feature_names_out()),
    }


def assert_same_state(a, b):
    assert a["names"] == b["names"]
    assert a["length"] == b["length"]
    for key in ("pca_mean", "pca_components", "impute"):
        np.testing.assert_array_equal(a[key], b[key])


# ---- hand example ----------------------------------------------------------------------------
def test_hand_example_values():
    t = hand_raw().table.set_index(["qid", "arm"])
    # q1, arm a: passages d1, d4, d5 (scores 3, 2, 1); cosines with q1 = e1: 1, 0.6, 0.8
    a = t.loc[("q1", "a")]
    assert a["avg_sim"] == pytest.approx(0.8)
    assert a["max_sim"] == pytest.approx(1.0)
    assert a["var_sim"] == pytest.approx(0.08 / 3)
    # centroid direction (2.4, 0.8, 0.6) / 2.6
    assert a["overall_sim"] == pytest.approx(12 / 13)
    # W: w14 = 0.6, w15 = 0.8, w45 = 0.48 (sum 3.76); u = (1, 0, -1): u'Wu = -1.6, u'u = 2
    assert a["moran"] == pytest.approx(3 / 3.76 * (-1.6 / 2))
    # centroids of a and b: (2.4, 0.8, 0.6)/2.6 and (0, 1, 1)/sqrt(2)
    cross_q1 = 1.4 / (2.6 * math.sqrt(2))
    assert a["cross_ret_sim"] == pytest.approx(cross_q1)
    # q1, arm b: d2, d3 are orthogonal to q1 and to each other: sum(W) = 0 -> Moran 0
    b = t.loc[("q1", "b")]
    assert (
        b["avg_sim"],
        b["max_sim"],
        b["var_sim"],
        b["overall_sim"],
        b["moran"],
    ) == pytest.approx((0, 0, 0, 0, 0))
    assert b["cross_ret_sim"] == pytest.approx(cross_q1)
    # q2, arm a: one passage -> variance 0, Moran 0
    a2 = t.loc[("q2", "a")]
    assert (
        a2["avg_sim"],
        a2["max_sim"],
        a2["var_sim"],
        a2["overall_sim"],
        a2["moran"],
    ) == pytest.approx((1, 1, 0, 1, 0))
    # q2, arm b: d4, d1 with equal scores -> Moran 0; cosines 0.8, 0
    b2 = t.loc[("q2", "b")]
    assert (b2["avg_sim"], b2["max_sim"], b2["var_sim"], b2["moran"]) == pytest.approx(
        (0.4, 0.8, 0.16, 0.0)
    )
    assert b2["overall_sim"] == pytest.approx(1 / math.sqrt(5))
    assert b2["cross_ret_sim"] == pytest.approx(1 / math.sqrt(5)) == a2["cross_ret_sim"]
    # the no-retrieval arm: no passages, NaN post-retrieval features
    for qid in ("q1", "q2"):
        row = t.loc[(qid, "none")]
        assert bool(row["is_no_retrieval"]) and row["n_docs"] == 0
        assert all(math.isnan(row[c]) for c in POST_COLUMNS)
    assert t["n_docs"].tolist() == [3, 2, 0, 1, 2, 0]
    assert t["query_length"].tolist() == [4] * 3 + [6] * 3
    assert t["query_type"].tolist() == [0] * 3 + [1] * 3


def test_hand_example_moran_top_neighbours():
    t = hand_raw(moran_neighbours=1).table.set_index(["qid", "arm"])
    # each row keeps its largest weight: w15, w41, w51 -> sum 2.2; u'Wu = -0.8 - 0.8
    assert t.loc[("q1", "a"), "moran"] == pytest.approx(3 / 2.2 * (-1.6 / 2))


def test_moran_positive_for_clustered_scores():
    # two tight clusters; high scores in one, low in the other -> positive autocorrelation
    vectors = {"x1": [1, 0.05, 0], "x2": [1, -0.05, 0], "y1": [0, 1, 0.05], "y2": [0, 1, -0.05]}
    queries = pd.DataFrame({"qid": ["q"], "question": ["x"]})
    res = pd.DataFrame(
        {
            "qid": "q",
            "arm": "a",
            "rank": [1, 2, 3, 4],
            "docid": ["x1", "x2", "y1", "y2"],
            "score": [4.0, 3.9, 1.0, 0.9],
            "text": "",
        }
    )
    raw = extract_raw(
        queries,
        res,
        arms=["a"],
        no_retrieval=None,
        encoder="t",
        embedding_source=DictSource(vectors),
        query_embeddings=np.array([[1.0, 0, 0]]),
    )
    assert raw.table["moran"].iloc[0] > 0.5


@pytest.mark.parametrize("n_arms", [3, 10])
def test_any_number_of_arms_matches_loop_reference(n_arms):
    queries, results, qemb, arms, vectors = synthetic(
        n_queries=7, n_arms=n_arms, empty={("q2", "arm0")}
    )
    raw = extract_raw(
        queries,
        results,
        arms=arms,
        no_retrieval="none",
        encoder="test",
        embedding_source=DictSource(vectors),
        query_embeddings=qemb,
        batch_size=3,
    )
    t = raw.table
    assert len(t) == 7 * n_arms
    assert t["arm"].tolist()[:n_arms] == arms
    assert list(t.columns) == list(RAW_COLUMNS)
    for i, qid in enumerate(queries["qid"]):
        per_arm = {}
        for arm in arms:
            g = results[(results["qid"] == qid) & (results["arm"] == arm)].sort_values("rank")
            per_arm[arm] = ([vectors[d] for d in g["docid"]], g["score"].tolist())
        for arm in arms:
            docs, scores = per_arm[arm]
            others = [per_arm[o][0] for o in arms if o != arm]
            want = reference_features(qemb[i], docs, scores, others)
            got = t[(t["qid"] == qid) & (t["arm"] == arm)].iloc[0]
            assert got["n_docs"] == len(docs)
            for c in POST_COLUMNS:
                if math.isnan(want[c]):
                    assert math.isnan(got[c]), (qid, arm, c)
                else:
                    assert got[c] == pytest.approx(want[c], abs=1e-9), (qid, arm, c)
    # the retrieval arm that found nothing has NaN post features, but is not a no-retrieval arm
    empty_row = t[(t["qid"] == "q2") & (t["arm"] == "arm0")].iloc[0]
    assert empty_row["n_docs"] == 0 and not empty_row["is_no_retrieval"]
    assert math.isnan(empty_row["max_sim"])


def test_top_k_cut_and_moran_neighbours_match_reference():
    queries, results, qemb, arms, vectors = synthetic(n_queries=4, n_arms=4, k=6, seed=5)
    raw = extract_raw(
        queries,
        results,
        arms=arms,
        no_retrieval="none",
        encoder="t",
        k=3,
        moran_neighbours=2,
        embedding_source=DictSource(vectors),
        query_embeddings=qemb,
    )
    assert raw.table["n_docs"].max() == 3
    for i, qid in enumerate(queries["qid"]):
        cut = {}
        for arm in arms:
            g = (
                results[(results["qid"] == qid) & (results["arm"] == arm)]
                .sort_values("rank")
                .head(3)
            )
            cut[arm] = ([vectors[d] for d in g["docid"]], g["score"].tolist())
        for arm in arms[:-1]:
            want = reference_features(
                qemb[i], *cut[arm], [cut[o][0] for o in arms if o != arm], m=2
            )
            got = raw.table[(raw.table["qid"] == qid) & (raw.table["arm"] == arm)].iloc[0]
            assert got["moran"] == pytest.approx(want["moran"], abs=1e-9)
            assert got["cross_ret_sim"] == pytest.approx(want["cross_ret_sim"], abs=1e-9)


def test_query_length_words():
    assert query_length("What's the capital of Australia?") == 5
    assert query_length("state-of-the-art retrieval") == 2


# ---- input validation ------------------------------------------------------------------------
def test_results_missing_column_is_named():
    queries, results, qemb = hand_inputs()
    with pytest.raises(DataError, match="score"):
        extract_raw(
            queries,
            results.drop(columns="score"),
            arms=["a", "b", "none"],
            no_retrieval="none",
            embedding_source=DictSource(VECTORS),
            query_embeddings=qemb,
            encoder="t",
        )


def test_unknown_arm_and_rows_for_no_retrieval_rejected():
    queries, results, qemb = hand_inputs()
    kw = dict(embedding_source=DictSource(VECTORS), query_embeddings=qemb, encoder="t")
    with pytest.raises(DataError, match=r"arm\(s\) \['b'\] that are not in arms"):
        extract_raw(queries, results, arms=["a", "none"], no_retrieval="none", **kw)
    with pytest.raises(DataError, match="no-retrieval arm"):
        extract_raw(queries, results, arms=["a", "b", "none"], no_retrieval="b", **kw)
    with pytest.raises(ConfigError, match="not among the arms"):
        extract_raw(queries, results, arms=["a", "b"], no_retrieval="none", **kw)
    with pytest.raises(DataError, match="not in queries"):
        extract_raw(
            queries.iloc[:1],
            results,
            arms=["a", "b", "none"],
            no_retrieval="none",
            embedding_source=DictSource(VECTORS),
            query_embeddings=qemb[:1],
            encoder="t",
        )
    bad = results.copy()
    bad.loc[0, "score"] = np.nan
    with pytest.raises(DataError, match="non-finite score"):
        extract_raw(queries, bad, arms=["a", "b", "none"], no_retrieval="none", **kw)


def test_dimension_and_encoder_mismatch_rejected():
    queries, results, _ = hand_inputs()
    with pytest.raises(DataError, match="same encoder"):
        extract_raw(
            queries,
            results,
            arms=["a", "b", "none"],
            no_retrieval="none",
            encoder="t",
            embedding_source=DictSource(VECTORS),
            query_embeddings=np.ones((2, 5)),
        )

    class Named(DictSource):
        encoder_name = "e5"

    with pytest.raises(ConfigError, match="encoder 'e5'"):
        extract_raw(
            queries,
            results,
            arms=["a", "b", "none"],
            no_retrieval="none",
            encoder="minilm",
            embedding_source=Named(VECTORS),
            query_embeddings=np.eye(3)[:2],
        )


def test_default_encoder_is_the_embedding_sources():
    """With no encoder given, queries are taken to be in the passage source's space: a pool
    whose dense arm uses e5 must not be compared with MiniLM query vectors (nor refused)."""
    queries, results, qemb = hand_inputs()

    class Named(DictSource):
        encoder_name = "e5"

    raw = extract_raw(queries, results, arms=["a", "b", "none"], no_retrieval="none",
                      embedding_source=Named(VECTORS), query_embeddings=qemb)
    assert raw.meta["encoder"] == "e5"
    raw = extract_raw(queries, results, arms=["a", "b", "none"], no_retrieval="none",
                      embedding_source=DictSource(VECTORS), query_embeddings=qemb)
    assert raw.meta["encoder"] == "minilm"  # a source that names no encoder


def test_embeddings_fetched_once_per_batch():
    src = DictSource(VECTORS)
    queries, results, qemb = hand_inputs()
    extract_raw(
        queries,
        results,
        arms=["a", "b", "none"],
        no_retrieval="none",
        encoder="t",
        embedding_source=src,
        query_embeddings=qemb,
    )
    assert src.calls == 1


# ---- the pipeline ----------------------------------------------------------------------------
def test_pipeline_fit_on_train_only_acceptance():
    """Acceptance: the fitted state (PCA, standardiser, imputer) depends on training rows only."""
    raw = synthetic_raw(n_queries=16, n_arms=4, seed=1, empty={("q3", "arm1")})
    train = [f"q{i}" for i in range(10)]
    test = [f"q{i}" for i in range(10, 16)]

    pipe = FeaturePipeline(pca_dim=4).fit(raw.subset(train))
    before = state(pipe)
    X_train = pipe.transform(raw.subset(train))

    # 1) transforming (any) test rows leaves the fitted state unchanged
    pipe.transform(raw.subset(test))
    assert_same_state(before, state(pipe))

    # 2) changing every test row (embeddings, lengths, post features) changes nothing fitted
    changed = raw.subset(raw.qids)
    rng = np.random.default_rng(9)
    is_test = changed.table["qid"].isin(test)
    for c in ("query_length", *POST_COLUMNS):
        changed.table.loc[is_test, c] = rng.normal(size=int(is_test.sum())) * 100
    rows = [changed.qids.index(q) for q in test]
    changed.query_embeddings[rows] = (
        rng.normal(size=(len(test), changed.query_embeddings.shape[1])) * 50
    )
    pipe2 = FeaturePipeline(pca_dim=4).fit(changed.subset(train))
    assert_same_state(before, state(pipe2))
    np.testing.assert_array_equal(X_train, pipe2.transform(changed.subset(train)))

    # 3) and the statistics are the training rows' own
    t = raw.subset(train).table
    np.testing.assert_allclose(
        pipe.impute_values_, np.nanmedian(t[list(POST_COLUMNS)].to_numpy(float), axis=0)
    )
    lengths = t.drop_duplicates("qid")["query_length"].to_numpy(float)
    assert pipe.length_mean_ == pytest.approx(lengths.mean())
    np.testing.assert_allclose(pipe.pca_mean_, raw.embeddings_for(train).mean(axis=0), atol=1e-7)


def test_pipeline_imputes_no_retrieval_and_flags_it():
    raw = synthetic_raw(n_queries=10, n_arms=3, seed=2)
    pipe = FeaturePipeline(pca_dim=3).fit(raw)
    X = pipe.transform(raw)
    names = list(pipe.get_feature_names_out())
    assert not np.isnan(X).any()
    nr = raw.table["arm"].eq("none").to_numpy()
    np.testing.assert_array_equal(X[:, names.index("no_passages")], nr.astype(float))
    post = [names.index(c) for c in POST_COLUMNS]
    np.testing.assert_allclose(X[nr][:, post], np.tile(pipe.impute_values_, (nr.sum(), 1)))
    assert names[:3] == ["q_pca_0", "q_pca_1", "q_pca_2"]
    # query length is standardised on the training queries
    lengths = X[:, names.index("query_length")][::3]
    assert lengths.mean() == pytest.approx(0.0, abs=1e-12) and lengths.std() == pytest.approx(1.0)


def test_a_pipeline_refuses_raw_features_extracted_with_other_options(tmp_path):
    """k, Moran's I neighbours and the query-type classifier change what a column means: raw
    features extracted otherwise than the training ones are one DataError (they were accepted),
    also after a save and load; a pipeline saved before the options were kept checks none."""
    import dataclasses
    import json

    raw = synthetic_raw(n_queries=10, n_arms=3, seed=2)
    raw = dataclasses.replace(raw, meta={**raw.meta, "k": None, "moran_neighbours": None, "query_type": "rules"})
    pipe = FeaturePipeline(pca_dim=3).fit(raw)
    other = dataclasses.replace(raw, meta={**raw.meta, "moran_neighbours": 2})
    with pytest.raises(DataError, match=r"moran_neighbours 2 \(fit on None\)"):
        pipe.transform(other)
    loaded = FeaturePipeline.load(pipe.save(tmp_path / "p"))
    with pytest.raises(DataError, match="other options than the pipeline was fit on"):
        loaded.transform(other)
    np.testing.assert_array_equal(loaded.transform(raw), pipe.transform(raw))
    meta = json.loads((tmp_path / "p" / "pipeline.json").read_text())
    del meta["fitted"]["extraction"]  # as saved by an older ltrr
    (tmp_path / "p" / "pipeline.json").write_text(json.dumps(meta))
    assert FeaturePipeline.load(tmp_path / "p").transform(other).shape == pipe.transform(raw).shape


def test_pipeline_without_imputation_keeps_nan():
    raw = synthetic_raw(n_queries=10, n_arms=3, seed=2)
    pipe = FeaturePipeline(pca_dim=3, impute=False).fit(raw)
    X = pipe.transform(raw)
    names = list(pipe.get_feature_names_out())
    nr = raw.table["arm"].eq("none").to_numpy()
    post = [names.index(c) for c in POST_COLUMNS]
    assert np.isnan(X[nr][:, post]).all()
    assert not np.isnan(X[~nr]).any()
    assert not np.isnan(np.delete(X, post, axis=1)).any()
    assert pipe.impute_values_.size == 0


def test_pipeline_raw_missing_column_is_named():
    raw = synthetic_raw(n_queries=6, seed=3)
    broken = RawFeatures(
        raw.table.drop(columns="moran"),
        raw.query_embeddings,
        raw.qids,
        raw.arms,
        raw.no_retrieval,
        raw.meta,
    )
    with pytest.raises(DataError, match="missing column.*moran"):
        FeaturePipeline(pca_dim=2).fit(broken)
    pipe = FeaturePipeline(pca_dim=2).fit(raw)
    with pytest.raises(DataError, match="missing column.*moran"):
        pipe.transform(broken)
    # a feature set without Moran's I does not need the column
    assert FeaturePipeline("no_moran", pca_dim=2).fit(broken).transform(broken).shape[0] == len(raw)


def test_pipeline_refuses_other_raw_version_and_encoder():
    raw = synthetic_raw(n_queries=6, seed=3)
    pipe = FeaturePipeline(pca_dim=2).fit(raw)
    old = RawFeatures(
        raw.table,
        raw.query_embeddings,
        raw.qids,
        raw.arms,
        raw.no_retrieval,
        {**raw.meta, "version": 0},
    )
    with pytest.raises(DataError, match="feature version 0"):
        pipe.transform(old)
    other = RawFeatures(
        raw.table,
        raw.query_embeddings,
        raw.qids,
        raw.arms,
        raw.no_retrieval,
        {**raw.meta, "encoder": "e5"},
    )
    with pytest.raises(DataError, match="encoder 'e5'"):
        pipe.transform(other)
    with pytest.raises(DataError, match="RawFeatures"):
        pipe.transform(raw.table)


def test_pipeline_pca_dim_capped_and_feature_sets():
    raw = synthetic_raw(n_queries=5, n_arms=4, dim=8, seed=4)
    names = list(FeaturePipeline().fit(raw).get_feature_names_out())
    assert sum(n.startswith("q_pca_") for n in names) == 5  # min(32, 5 queries, 8 dims)
    post = FeaturePipeline("post_only").fit(raw)
    assert list(post.get_feature_names_out()) == [*POST_COLUMNS, "no_passages"]
    pre = FeaturePipeline("pre_only", pca_dim=2).fit(raw)
    assert list(pre.get_feature_names_out()) == [
        "q_pca_0",
        "q_pca_1",
        "query_length",
        "query_type",
        "no_passages",
        "arm=arm0",
        "arm=arm1",
        "arm=arm2",
        "arm=none",
    ]
    X = pre.transform(raw)
    np.testing.assert_array_equal(X[:, -4:], np.tile(np.eye(4), (5, 1)))
    with pytest.raises(Exception, match="not fitted"):
        FeaturePipeline().transform(raw)


def test_pipeline_save_load_round_trip(tmp_path):
    raw = synthetic_raw(n_queries=12, n_arms=4, seed=6)
    train, test = raw.subset(raw.qids[:8]), raw.subset(raw.qids[8:])
    pipe = FeaturePipeline("paper_onehot", pca_dim=5).fit(train)
    pipe.save(tmp_path / "pipe")
    loaded = FeaturePipeline.load(tmp_path / "pipe", spec="paper_onehot")
    np.testing.assert_array_equal(pipe.transform(test), loaded.transform(test))
    np.testing.assert_array_equal(pipe.get_feature_names_out(), loaded.get_feature_names_out())
    assert loaded.spec_ == pipe.spec_
    meta = json.loads((tmp_path / "pipe" / "pipeline.json").read_text())
    assert meta["spec"]["name"] == "paper_onehot" and meta["spec"]["version"] == 1
    assert sorted(p.name for p in (tmp_path / "pipe").iterdir()) == [
        "impute_values.npy",
        "pca_components.npy",
        "pca_mean.npy",
        "pipeline.json",
    ]


def test_pipeline_load_refuses_mismatch_and_damage(tmp_path):
    raw = synthetic_raw(n_queries=8, seed=7)
    FeaturePipeline(pca_dim=3).fit(raw).save(tmp_path / "p")
    with pytest.raises(
        DataError, match="feature set mismatch.*'paper' version 1.*'no_moran' version 1"
    ):
        FeaturePipeline.load(tmp_path / "p", spec="no_moran")
    newer = FeatureSpec(**{**load_spec("paper").__dict__, "version": 2})
    with pytest.raises(DataError, match="feature set mismatch"):
        FeaturePipeline.load(tmp_path / "p", spec=newer)
    meta_file = tmp_path / "p" / "pipeline.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "raw_version": 99}))
    with pytest.raises(DataError, match="raw feature version 99"):
        FeaturePipeline.load(tmp_path / "p")
    meta_file.write_text(json.dumps(meta))
    np.save(tmp_path / "p" / "pca_mean.npy", np.zeros(8))
    with pytest.raises(DataError, match="checksum mismatch"):
        FeaturePipeline.load(tmp_path / "p")
    with pytest.raises(NotBuiltError, match="no pipeline.json"):
        FeaturePipeline.load(tmp_path / "nothing")


def test_determinism():
    a, b = synthetic_raw(seed=8), synthetic_raw(seed=8)
    pd.testing.assert_frame_equal(a.table, b.table)
    np.testing.assert_array_equal(a.query_embeddings, b.query_embeddings)
    Xa = FeaturePipeline(random_state=0).fit(a).transform(a)
    Xb = FeaturePipeline(random_state=0).fit(b).transform(b)
    np.testing.assert_array_equal(Xa, Xb)
    # batch size changes the layout of the computation, not the values
    queries, results, qemb, arms, vectors = synthetic(seed=8)
    c = extract_raw(
        queries,
        results,
        arms=arms,
        no_retrieval="none",
        encoder="test",
        batch_size=1,
        embedding_source=DictSource(vectors),
        query_embeddings=qemb,
    )
    pd.testing.assert_frame_equal(a.table, c.table, check_exact=False, rtol=1e-12)


def test_pipeline_gives_the_same_bits_for_any_blas_thread_count():
    """The PCA and its product run on one BLAS thread (`ltrr._cpu.one_blas_thread`): a main
    process (2 threads here) and a joblib worker (1) got different last bits at this size, and
    the torch rankers' eval tables differed between ``[eval] n_jobs`` 1 and 2 (session 23)."""
    from threadpoolctl import threadpool_limits

    raw = synthetic_raw(n_queries=1000, dim=384, k=1, seed=5)
    out = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            pipe = FeaturePipeline(pca_dim=32).fit(raw)
            out.append((pipe.pca_components_, pipe.transform(raw)))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])


# ---- feature sets ----------------------------------------------------------------------------
def test_packaged_specs_load_by_name():
    names = available_specs()
    assert {"paper", "pre_only", "post_only", "no_moran"} <= set(names)
    for name in names:
        spec = load_spec(name)
        assert spec.name == name and spec.version >= 1
    paper = load_spec("paper")
    assert paper.pre == PRE_FEATURES and paper.post == POST_COLUMNS and paper.pca_dim == 32
    assert paper.missing_indicator and not paper.one_hot_arms


def test_spec_errors_list_choices(tmp_path):
    with pytest.raises(
        ConfigError, match="unknown feature 'bogus'; choose from: overall_sim, avg_sim"
    ):
        FeatureSpec.from_dict({"name": "x", "version": 1, "pre": [], "post": ["bogus"]})
    with pytest.raises(ConfigError, match="unknown feature 'length'; choose from: query_embedding"):
        FeatureSpec.from_dict({"name": "x", "version": 1, "pre": ["length"], "post": []})
    with pytest.raises(ConfigError, match="unknown key 'pca'"):
        FeatureSpec.from_dict({"name": "x", "version": 1, "pre": [], "post": ["moran"], "pca": 3})
    with pytest.raises(ConfigError, match="arm_indicator.onehot"):
        FeatureSpec.from_dict(
            {
                "name": "x",
                "version": 1,
                "pre": [],
                "post": ["moran"],
                "arm_indicator": {"onehot": True},
            }
        )
    with pytest.raises(ConfigError, match="unknown feature set 'nope'; choose one of: .*paper"):
        load_spec("nope")
    with pytest.raises(ConfigError, match="does not exist"):
        load_spec(str(tmp_path / "missing.toml"))
    f = tmp_path / "mine.toml"
    f.write_text('name = "mine"\nversion = 3\npre = ["query_type"]\npost = ["max_sim"]\n')
    spec = load_spec(str(f))
    assert (spec.name, spec.version, spec.pre, spec.post) == (
        "mine",
        3,
        ("query_type",),
        ("max_sim",),
    )
    raw = synthetic_raw(n_queries=4, seed=9)
    assert list(FeaturePipeline(str(f)).fit(raw).get_feature_names_out()) == [
        "query_type",
        "max_sim",
        "no_passages",
    ]


# ---- persistence of raw features ---------------------------------------------------------------
def test_write_and_read_feature_tables(tmp_path):
    raw = hand_raw()
    out = write_feature_tables(raw, tmp_path / "features" / "demo")
    assert sorted(p.name for p in out.iterdir()) == [
        "query_embeddings.npy",
        "raw.parquet",
        "raw_meta.json",
    ]
    back = read_feature_tables(out)
    pd.testing.assert_frame_equal(raw.table, back.table)
    np.testing.assert_array_equal(raw.query_embeddings, back.query_embeddings)
    assert (back.qids, back.arms, back.no_retrieval, back.meta) == (
        raw.qids,
        raw.arms,
        raw.no_retrieval,
        raw.meta,
    )
    (out / "raw_meta.json").unlink()
    with pytest.raises(NotBuiltError, match="raw_meta.json"):
        read_feature_tables(out)


def test_feature_tables_record_their_inputs_and_copy_whole(tmp_path):
    """``inputs`` round-trips; a folder without it, incomplete or with damaged JSON has None; a
    copy is whole (JSON last) and copying an incomplete folder is an error that writes nothing."""
    raw = hand_raw()
    a = write_feature_tables(raw, tmp_path / "a", inputs="fp-1")
    assert feature_tables_inputs(a) == "fp-1"
    assert feature_tables_inputs(write_feature_tables(raw, tmp_path / "old")) is None  # as an older ltrr wrote it
    assert feature_tables_inputs(tmp_path / "nowhere") is None
    b = copy_feature_tables(a, tmp_path / "b")
    assert feature_tables_inputs(b) == "fp-1"
    for name in ("raw.parquet", "query_embeddings.npy", "raw_meta.json"):
        assert (b / name).read_bytes() == (a / name).read_bytes()
    assert sorted(p.name for p in b.iterdir()) == ["query_embeddings.npy", "raw.parquet", "raw_meta.json"]
    (a / "raw_meta.json").write_text("{not json")
    assert feature_tables_inputs(a) is None
    # another process rewriting the tables removes raw_meta.json between the check and the read:
    # "no tables" (None), not a FileNotFoundError traceback
    import ltrr.features.raw as rawmod

    real = rawmod._complete
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rawmod, "_complete", lambda folder: real(folder) and not (folder / "raw_meta.json").unlink())
        assert feature_tables_inputs(b) is None
    (a / "query_embeddings.npy").unlink()
    with pytest.raises(NotBuiltError, match="no complete feature tables to copy"):
        copy_feature_tables(a, tmp_path / "c")
    assert not (tmp_path / "c").exists()


# ---- with the real encoder -------------------------------------------------------------------
@pytest.mark.slow
def test_real_minilm_end_to_end():
    from ltrr.retrieval import EmbeddingSource

    queries = pd.DataFrame({"qid": ["q1"], "question": ["What is the capital of Australia?"]})
    passages = {
        "good": ["Canberra is the capital city of Australia.", "Australia's capital is Canberra."],
        "bad": ["Bananas are rich in potassium.", "The violin has four strings."],
    }
    rows = [
        ("q1", arm, r + 1, f"{arm}{r}", 2.0 - r, text)
        for arm, texts in passages.items()
        for r, text in enumerate(texts)
    ]
    results = pd.DataFrame(rows, columns=["qid", "arm", "rank", "docid", "score", "text"])
    src = EmbeddingSource(encoder="minilm")
    raw = extract_raw(
        queries,
        results,
        arms=["good", "bad", "none"],
        no_retrieval="none",
        encoder="minilm",
        embedding_source=src,
    )
    t = raw.table.set_index("arm")
    assert t.loc["good", "max_sim"] > t.loc["bad", "max_sim"] + 0.3
    assert t.loc["good", "overall_sim"] > t.loc["bad", "overall_sim"]
    assert raw.query_embeddings.shape == (1, 384)
    assert src.n_encoded == 4


def test_a_reused_embedding_source_encodes_a_docid_again_when_its_text_changed(monkeypatch):
    """The same docids from another corpus (BEIR sets share "0", "1", ...) are other documents:
    a source kept across corpora (a standalone reranker) gave the first corpus's vectors."""
    import ltrr.embed
    from ltrr.retrieval import EmbeddingSource

    class OneHot:
        def encode_passages(self, texts, batch_size=64):
            return np.array([[1.0, 0.0] if "alpha" in t else [0.0, 1.0] for t in texts], dtype=np.float32)

    monkeypatch.setattr(ltrr.embed, "get_encoder", lambda name: OneHot())
    src = EmbeddingSource(encoder="stand-in")
    first = src.get(["0", "1"], ["alpha doc", "beta doc"])
    again = src.get(["0", "1"], ["alpha doc", "beta doc"])
    assert src.n_encoded == 2 and np.array_equal(first, again)  # the same texts: from the cache
    other = src.get(["0", "1"], ["beta text", "alpha text"])
    assert src.n_encoded == 4 and np.array_equal(other, first[::-1])


def test_a_local_encoder_folder_is_known_by_its_contents(tmp_path):
    """Two checkpoints of one architecture (same file names and sizes) are two encoders: their
    embeddings and indexes are cached apart. The packaged minilm keeps its names-and-sizes key."""
    from ltrr.embed import SentenceTransformerEncoder, get_encoder

    for run, byte in (("runA", b"\x00"), ("runB", b"\x01")):
        folder = tmp_path / run / "final"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(byte * 64)
        (folder / "config.json").write_text("{}")
    a = SentenceTransformerEncoder(tmp_path / "runA" / "final").identity
    b = SentenceTransformerEncoder(tmp_path / "runB" / "final").identity
    assert a != b and a.startswith("st:final:")
    assert SentenceTransformerEncoder(tmp_path / "runA" / "final", pinned=True).identity == \
        SentenceTransformerEncoder(tmp_path / "runB" / "final", pinned=True).identity  # sizes alone
    weights = tmp_path / "runA" / "final" / "model.safetensors"
    weights.write_bytes(b"\x02" * 64)  # retrained in place (minutes later: a newer modification time)
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert SentenceTransformerEncoder(tmp_path / "runA" / "final").identity not in (a, b)
    assert get_encoder("minilm").pinned
