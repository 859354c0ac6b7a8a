"""The arm pool: configuration checks, build/load with index reuse, search with any number of
arms, the no-retrieval arm, and Parquet output."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from _wiki import wiki_corpus, wiki_queries

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.retrieval import Arm, Pool, Retriever, default_pool_config
from ltrr.retrieval.pool import POOL_COLUMNS

RETRIEVERS = {
    "bm25": {"type": "bm25", "backend": "bm25s", "k1": 0.9, "b": 0.4},
    "dense": {"type": "dense", "encoder": "test-hash", "index": "flat"},
}
RERANKERS = {
    "reg": {"type": "reg", "m": 5, "t": 1},
    "stoch": {"type": "stoch", "n_samples": 50, "intensity": 2.0},
}
THREE_ARMS = [
    {"name": "bm25", "retriever": "bm25"},
    {"name": "dense+reg", "retriever": "dense", "reranker": "reg", "k": 3, "depth": 20},
    {"name": "none", "retriever": "none"},
]


@pytest.fixture(scope="session")
def wiki():
    corpus = wiki_corpus(limit=1500)
    return corpus, wiki_queries(corpus, n=40, seed=3)[["qid", "question"]]


@pytest.fixture(scope="session")
def index_dir(wiki, tmp_path_factory):
    """Both retrievers built once for the module."""
    corpus, _ = wiki
    root = tmp_path_factory.mktemp("pool")
    Pool.from_config(
        RETRIEVERS, [{"name": "b", "retriever": "bm25"}, {"name": "d", "retriever": "dense"}]
    ).build(corpus, root, show_progress=False)
    return root


def test_three_arms(wiki, index_dir):
    _, queries = wiki
    pool = Pool.from_config(RETRIEVERS, THREE_ARMS, RERANKERS, seed=0).load(index_dir)
    assert pool.arm_names == ["bm25", "dense+reg", "none"]
    assert pool.costs == {"bm25": 1.0, "dense+reg": 1.0, "none": 0.0}
    out = pool.search(queries)
    assert list(out.columns) == POOL_COLUMNS
    assert set(out["arm"]) == {"bm25", "dense+reg"}  # the no-retrieval arm has no rows
    per = out.groupby(["qid", "arm"]).size().unstack()
    assert (per["bm25"] <= 5).all() and (per["dense+reg"] == 3).all()
    # rows: query input order, then arm order, then rank
    qpos = {q: i for i, q in enumerate(queries.qid)}
    apos = {"bm25": 0, "dense+reg": 1}
    keys = list(zip(out.qid.map(qpos), out.arm.map(apos), out["rank"], strict=True))
    assert keys == sorted(keys)
    # bm25 arm = the retriever's own top 5
    bm25 = Retriever.load(index_dir / "bm25").search(queries, k=5)
    assert out[out.arm == "bm25"]["docid"].tolist() == bm25["docid"].tolist()
    # the reg arm reranks the dense top 20 with the stored embeddings: nothing is encoded
    dense20 = Retriever.load(index_dir / "dense").search(queries, k=20)
    for qid, g in out[out.arm == "dense+reg"].groupby("qid"):
        assert set(g.docid) <= set(dense20[dense20.qid == qid].docid)
    assert pool.reranker_for("dense+reg").embeddings.n_encoded == 0


def test_ten_arms_share_first_stage_runs(wiki, index_dir, monkeypatch):
    _, queries = wiki
    rerankers = {
        **RERANKERS,
        "reg-strong": {"type": "reg", "m": 10, "t": 3, "alpha": 0.5},
        "stoch-hot": {"type": "stoch", "intensity": 8.0, "select": "max-prob", "seed": 11},
    }
    arms = [
        {"name": "bm25", "retriever": "bm25"},
        {"name": "bm25+reg", "retriever": "bm25", "reranker": "reg"},
        {"name": "bm25+stoch", "retriever": "bm25", "reranker": "stoch"},
        {"name": "bm25+reg-strong", "retriever": "bm25", "reranker": "reg-strong", "depth": 30},
        {"name": "bm25-k2", "retriever": "bm25", "k": 2, "cost": 0.5},
        {"name": "dense", "retriever": "dense"},
        {"name": "dense+reg", "retriever": "dense", "reranker": "reg"},
        {"name": "dense+stoch", "retriever": "dense", "reranker": "stoch"},
        {
            "name": "dense+stoch-hot",
            "retriever": "dense",
            "reranker": "stoch-hot",
            "k": 4,
            "depth": 10,
        },
        {"name": "none", "retriever": None},
    ]
    pool = Pool.from_config(RETRIEVERS, arms, rerankers, seed=5).load(index_dir)
    calls = []
    for name, r in pool.retrievers_.items():
        real = r.search

        def spy(q, k=10, *, show_progress=False, _real=real, _name=name):
            calls.append((_name, k))
            return _real(q, k, show_progress=show_progress)

        monkeypatch.setattr(r, "search", spy)
    out = pool.search(queries)
    assert sorted(calls) == [("bm25", 50), ("dense", 50)]  # once per retriever, at the max depth
    assert len(pool.arm_names) == 10
    assert set(out.arm) == set(pool.arm_names) - {"none"}
    sizes = out.groupby("arm").size()
    n = len(queries)
    assert sizes["dense"] == sizes["dense+reg"] == sizes["dense+stoch"] == 5 * n
    assert sizes["dense+stoch-hot"] == 4 * n and sizes["bm25-k2"] <= 2 * n
    assert pool.costs["bm25-k2"] == 0.5 and pool.costs["none"] == 0.0
    # the BM25 reg arms reuse the dense index's stored embeddings
    assert pool.reranker_for("bm25+reg").embeddings is pool.reranker_for("dense+reg").embeddings
    assert pool.reranker_for("bm25+reg").embeddings.n_encoded == 0
    # stochastic arms: pool seed unless the reranker sets its own
    assert (
        pool.reranker_for("bm25+stoch").seed == 5
        and pool.reranker_for("dense+stoch-hot").seed == 11
    )
    # a subset of arms gives the same rows for those arms
    sub = pool.search(queries, arms=["dense+stoch", "bm25"])
    pd.testing.assert_frame_equal(
        sub[sub.arm == "dense+stoch"].reset_index(drop=True),
        out[out.arm == "dense+stoch"].reset_index(drop=True),
    )
    # same seed, same rows; another seed, other stochastic rows
    again = Pool.from_config(RETRIEVERS, arms, rerankers, seed=5).load(index_dir).search(queries)
    pd.testing.assert_frame_equal(again, out)
    other = Pool.from_config(RETRIEVERS, arms, rerankers, seed=6).load(index_dir).search(queries)
    assert (
        other[other.arm == "bm25+stoch"].docid.tolist()
        != out[out.arm == "bm25+stoch"].docid.tolist()
    )
    assert other[other.arm == "bm25"].docid.tolist() == out[out.arm == "bm25"].docid.tolist()


def test_build_reuses_matching_indexes_and_rebuilds_changed_ones(wiki, tmp_path, monkeypatch):
    corpus, queries = wiki
    small = corpus.iloc[:200]
    arms = [{"name": "bm25", "retriever": "bm25"}]
    Pool.from_config(RETRIEVERS, arms).build(small, tmp_path, show_progress=False)
    stamp = (tmp_path / "bm25" / "params.json").stat().st_mtime_ns
    built = []
    real_index = Retriever.index

    def counting_index(self, corpus, *, show_progress=False):
        built.append(self.name)
        return real_index(self, corpus, show_progress=show_progress)

    monkeypatch.setattr(Retriever, "index", counting_index)
    Pool.from_config(RETRIEVERS, arms).build(small, tmp_path, show_progress=False)
    assert built == [] and (tmp_path / "bm25" / "params.json").stat().st_mtime_ns == stamp
    changed = {**RETRIEVERS, "bm25": {**RETRIEVERS["bm25"], "k1": 1.2}}
    Pool.from_config(changed, arms).build(small, tmp_path, show_progress=False)
    assert built == ["bm25"]
    Pool.from_config(changed, arms).build(
        corpus.iloc[:150], tmp_path, show_progress=False
    )  # new corpus
    assert built == ["bm25", "bm25"]
    assert json.loads((tmp_path / "bm25" / "params.json").read_text())["n_docs"] == 150
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left
    # a stale index is refused at load
    with pytest.raises(NotBuiltError, match=r"other settings \(params differ"):
        Pool.from_config(RETRIEVERS, arms).load(tmp_path)


def test_missing_index_dir_and_unbuilt_pool(tmp_path, wiki):
    _, queries = wiki
    pool = Pool.from_config(RETRIEVERS, THREE_ARMS, RERANKERS)
    with pytest.raises(NotBuiltError, match="ltrr index CONFIG"):
        pool.search(queries)
    with pytest.raises(NotBuiltError, match="ltrr index CONFIG"):
        pool.load(tmp_path / "missing")


def test_search_to_parquet(wiki, index_dir, tmp_path):
    _, queries = wiki
    pool = Pool.from_config(RETRIEVERS, THREE_ARMS, RERANKERS).load(index_dir)
    path = pool.search_to_parquet(queries, tmp_path / "out" / "runs.parquet")
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, pool.search(queries))
    assert [p.name for p in path.parent.iterdir()] == ["runs.parquet"]


def test_only_no_retrieval_arm(wiki, tmp_path):
    corpus, queries = wiki
    pool = Pool.from_config(RETRIEVERS, [{"name": "none", "retriever": "none"}]).build(
        corpus.iloc[:5], tmp_path
    )
    out = pool.search(queries)
    assert len(out) == 0 and list(out.columns) == POOL_COLUMNS
    assert list(tmp_path.iterdir()) == []  # nothing to index


def test_bad_queries_are_rejected(wiki, index_dir):
    pool = Pool.from_config(RETRIEVERS, THREE_ARMS, RERANKERS).load(index_dir)
    with pytest.raises(DataError, match="query 'q1' is empty"):
        pool.search(["music", " "])
    with pytest.raises(DataError, match=r"duplicate qid\(s\) 'a'"):
        pool.search(pd.DataFrame({"qid": ["a", "a"], "question": ["x", "y"]}))
    with pytest.raises(ConfigError, match=r"unknown arm 'bm25\+rm3'"):
        pool.search(["music"], arms=["bm25+rm3"])


@pytest.mark.parametrize(
    "retrievers,arms,rerankers,match",
    [
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "splade"}],
            None,
            r"arms\[0\] \('x'\)\.retriever: unknown retriever 'splade'",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "reranker": "rm3"}],
            None,
            r"arms\[0\] \('x'\)\.reranker: unknown reranker 'rm3'",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "top_k": 3}],
            None,
            r"arms\[0\]\.top_k: unknown arm key",
        ),
        (RETRIEVERS, [{"retriever": "bm25"}], None, r"arms\[0\]\.name must be a non-empty string"),
        (RETRIEVERS, [{"name": "x"}], None, r"arms\[0\] \('x'\)\.retriever is missing"),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25"}] * 2,
            None,
            r"arms\[1\]\.name: duplicate arm name 'x'",
        ),
        (  # one run file on a case-insensitive file system (macOS, Windows)
            RETRIEVERS,
            [{"name": "BM25", "retriever": "bm25"}, {"name": "bm25", "retriever": "bm25"}],
            None,
            r"arms\[1\]\.name: arm name 'bm25' differs from 'BM25' only in case; their TREC run files",
        ),
        (  # a retriever name is its index folder's name: never a path
            {**RETRIEVERS, "../up": {"type": "bm25"}},
            [{"name": "x", "retriever": "bm25"}],
            None,
            r"retrievers\.\.\./up: retriever name '\.\./up' is not a plain file name: it holds '/'",
        ),
        (  # one index folder there
            {**RETRIEVERS, "BM25": {"type": "bm25"}},
            [{"name": "x", "retriever": "bm25"}],
            None,
            r"retrievers\.BM25: retriever name 'BM25' differs from 'bm25' only in case; their index folders",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "k": 0}],
            None,
            r"arms\[0\] \('x'\)\.k must be an integer >= 1",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "reranker": "reg", "k": 10, "depth": 5}],
            None,
            r"depth \(5\) must be >= k \(10\)",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "none", "reranker": "reg"}],
            None,
            "the no-retrieval arm cannot rerank",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "cost": -1}],
            None,
            "cost must be a number >= 0",
        ),
        (RETRIEVERS, [], None, "arms is empty"),
        (
            {"bm25": {"type": "bm25", "backend": "elastic"}},
            [{"name": "x", "retriever": "bm25"}],
            None,
            "retrievers.bm25: unknown BM25 backend 'elastic'",
        ),
        (
            {"bm25": {"type": "bm25", "k": 3}},
            [{"name": "x", "retriever": "bm25"}],
            None,
            r"retrievers\.bm25\.k: unknown key",
        ),
        (
            {"d": {"type": "dense", "index": "annoy"}},
            [{"name": "x", "retriever": "d"}],
            None,
            "retrievers.d: .*index_type must be one of",
        ),
        (
            {"s": {"type": "splade"}},
            [{"name": "x", "retriever": "s"}],
            None,
            r"retrievers\.s\.type: unknown retriever 'splade'",
        ),
        (
            {"s": {"backend": "bm25s"}},
            [{"name": "x", "retriever": "s"}],
            None,
            r"retrievers\.s\.type is missing",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "reranker": "r"}],
            {"r": {"type": "reg", "q": 1}},
            r"rerankers\.r\.q: unknown key",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "reranker": "r"}],
            {"r": {"type": "reg", "t": -2}},
            r"rerankers\.r: reg reranker: t must be",
        ),
        (
            RETRIEVERS,
            [{"name": "x", "retriever": "bm25", "reranker": "r"}],
            {"r": {"type": "bm42"}},
            r"rerankers\.r\.type: unknown reranker 'bm42'",
        ),
    ],
)
def test_config_errors_name_the_key(retrievers, arms, rerankers, match):
    with pytest.raises(ConfigError, match=match):
        Pool.from_config(retrievers, arms, rerankers)


@pytest.mark.parametrize(("name", "why"), [
    ("../escaped", "it holds '/'"),
    ("runs/bm25", "it holds '/'"),
    ("..\\escaped", r"it holds '\\\\'"),
    (".", "it names a folder"),
    ("..", "it names a folder"),
    (".bm25", "it starts with '.'"),
    ("bm\0", "it holds a NUL character"),
])
def test_an_arm_name_that_is_not_a_plain_file_name_is_refused(name, why):
    """An arm named ``../escaped`` had its TREC run written outside the runs folder."""
    arms = [{"name": "bm25", "retriever": "bm25"}, {"name": name, "retriever": "bm25"}]
    with pytest.raises(ConfigError, match=rf"arms\[1\]\.name: arm name .* is not a plain file name: {why}"):
        Pool.from_config(RETRIEVERS, arms)


def test_every_shipped_config_names_its_arms_plainly():
    from ltrr.config import load_config, packaged_configs

    names = ["bm25+reg", "dense+stoch", "bm25-top1", "arm_3", "none", "x.v2"]
    assert [a.name for a in Pool.from_config(RETRIEVERS, [{"name": n, "retriever": "bm25"} for n in names]).arms] \
        == names
    assert packaged_configs()
    for name in packaged_configs():
        assert Pool.from_run_config(load_config(name)).arms, name


def test_default_pool_config_has_the_papers_seven_arms():
    cfg = default_pool_config()
    pool = Pool.from_config(**cfg, seed=0)
    assert pool.arm_names == [
        "bm25",
        "bm25+reg",
        "bm25+stoch",
        "dense",
        "dense+reg",
        "dense+stoch",
        "none",
    ]
    assert all(a.k == 5 and a.depth == 50 for a in pool.arms)
    assert pool.costs["none"] == 0.0
    again = Pool.from_config(**{k: v for k, v in pool.to_config().items() if k != "seed"})
    assert again.arm_names == pool.arm_names
    assert Arm("n", "none").is_no_retrieval and Arm("n", None).cost == 0.0


def test_importing_retrieval_loads_no_heavy_library():
    code = (
        "import sys, ltrr.retrieval\n"
        "heavy = ['torch', 'faiss', 'bm25s', 'rank_bm25', 'pyserini', 'sentence_transformers', 'transformers', 'jnius']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_default_pool_end_to_end_with_minilm(tmp_path):
    corpus = wiki_corpus(limit=400)
    queries = wiki_queries(corpus, n=10, seed=4)[["qid", "question"]]
    pool = Pool.from_config(**default_pool_config(), seed=0).build(
        corpus, tmp_path, show_progress=False
    )
    out = pool.search(queries)
    assert set(out.arm) == set(pool.arm_names) - {"none"}
    assert (out.groupby(["qid", "arm"]).size() <= 5).all()
    assert pool.reranker_for("bm25+reg").embeddings.n_encoded == 0
