"""Context packing in the pool: the packed arm, deeper searches, and its config errors."""

from __future__ import annotations

import pytest
from _wiki import wiki_corpus, wiki_queries

from ltrr._errors import ConfigError
from ltrr.config import validate
from ltrr.packing import PackSpec, packing_from_config
from ltrr.retrieval import Pool

RETRIEVERS = {"bm25": {"type": "bm25", "backend": "bm25s"}, "dense": {"type": "dense", "encoder": "test-hash"}}
RERANKERS = {"reg": {"type": "reg", "m": 5, "t": 1}}
ARMS = [
    {"name": "bm25", "retriever": "bm25", "k": 1},
    {"name": "dense+reg", "retriever": "dense", "reranker": "reg", "k": 1, "depth": 20},
    {"name": "packed", "retriever": "packed", "cost": 3.0,
     "pack": {"arms": ["dense+reg", "bm25"], "budget": 120, "depth": 3}},
    {"name": "none", "retriever": "none"},
]


def _words(text: str) -> int:
    return len(text.split())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    corpus = wiki_corpus(limit=800)
    queries = wiki_queries(corpus, n=12, seed=5)[["qid", "question"]]
    root = tmp_path_factory.mktemp("packpool")
    pool = Pool.from_config(RETRIEVERS, ARMS, RERANKERS, seed=0).build(corpus, root, show_progress=False)
    pool.count_tokens = _words
    return pool, queries


def test_packed_arm_packs_its_arms_within_the_budget(built):
    pool, queries = built
    out = pool.search(queries)
    deep = pool.search(queries, ["bm25", "dense+reg"], k=3)
    assert (deep.groupby(["qid", "arm"]).size() == 3).all()  # k overrides each arm's own k = 1
    assert (out[out["arm"] == "bm25"].groupby("qid").size() == 1).all()
    packed = out[out["arm"] == "packed"]
    assert packed["qid"].nunique() == len(queries) and pool.costs["packed"] == 3.0
    for qid, g in packed.groupby("qid"):
        assert g["text"].map(_words).sum() <= 120
        assert g["docid"].is_unique and g["rank"].tolist() == list(range(1, len(g) + 1))
        assert set(g["docid"]) <= set(deep[deep["qid"] == qid]["docid"])
    again = pool.search(queries, ["packed"])
    assert again.reset_index(drop=True).equals(packed.reset_index(drop=True))  # deterministic


def test_zero_budget_packs_nothing(built):
    pool, queries = built
    spec = PackSpec(budget=0, depth=3)
    from ltrr.packing import pack_query

    res = pack_query(pool, queries["question"].iloc[0], ["bm25", "dense+reg"], spec, _words)
    assert res.tokens == 0 and res.passages.empty and "longer than the budget" in res.empty_reason


@pytest.mark.parametrize("arm, match", [
    ({"name": "p", "retriever": "bm25", "pack": {"arms": ["bm25"], "budget": 9}}, "only a packed arm"),
    ({"name": "p", "retriever": "packed"}, "pack is missing"),
    ({"name": "p", "retriever": "packed", "pack": {"budget": 9}}, "arms is missing"),
    ({"name": "p", "retriever": "packed", "pack": {"arms": ["none"], "budget": 9}}, "not a retrieving arm"),
    ({"name": "p", "retriever": "packed", "pack": {"arms": ["nosuch"], "budget": 9}}, "not a retrieving arm"),
    ({"name": "p", "retriever": "packed", "pack": {"arms": ["bm25"]}}, "budget is missing"),
    ({"name": "p", "retriever": "packed", "pack": {"arms": ["bm25"], "budget": -1}}, "integer >= 0"),
    ({"name": "p", "retriever": "packed", "pack": {"arms": ["bm25"], "budget": 9, "selector": "best"}}, "unknown selector"),
    ({"name": "p", "retriever": "packed", "pack": {"arms": ["bm25"], "budget": 9, "colour": 1}}, "unknown key"),
    ({"name": "p", "retriever": "packed", "pack": {"arms": ["bm25"], "budget": 9, "weights": {"kw": 1}}}, "weights"),
])
def test_packed_arm_config_errors(arm, match):
    arms = [{"name": "bm25", "retriever": "bm25"}, {"name": "none", "retriever": "none"}, arm]
    with pytest.raises(ConfigError, match=match):
        Pool.from_config(RETRIEVERS, arms, RERANKERS)


def test_context_budget_config():
    base = {"run": {"name": "x"}, "data": {"dataset": "demo"}, "retrievers": {"bm25": {"type": "bm25"}},
            "arms": [{"name": "bm25", "retriever": "bm25"}, {"name": "none", "retriever": "none"}]}
    cfg = validate({**base, "generation": {"context_budget": 256}, "context": {"top_m": 3, "selector": "greedy"}})
    spec = packing_from_config(cfg.generation, cfg.context)
    assert (spec.budget, spec.top_m, spec.selector) == (256, 3, "greedy")
    assert packing_from_config(validate(base).generation, validate(base).context) is None  # 0: no packing
    with pytest.raises(ConfigError, match="top_m must be an integer >= 1"):
        validate({**base, "context": {"top_m": 0}})
    with pytest.raises(ConfigError, match="budget must be an integer >= 0"):
        validate({**base, "generation": {"context_budget": -5}})
    with pytest.raises(ConfigError, match=r"unknown config key \[context\].colour"):
        validate({**base, "context": {"colour": 1}})


def test_a_packed_arm_packs_every_arm_it_lists():
    """``top_m`` defaults to the number of listed arms (it was 2: a third arm was never packed);
    a ``top_m`` below it is refused rather than silently dropping arms."""
    from types import SimpleNamespace

    import pandas as pd

    from ltrr.packing import pack_query

    spec = PackSpec.from_mapping({"arms": ["a", "b", "c"], "budget": 1000, "weights": {"similarity": 0}})
    assert spec.top_m == 3
    pool = SimpleNamespace(arm=lambda name: SimpleNamespace(is_no_retrieval=False))
    results = pd.DataFrame({"arm": ["a", "b", "c"], "rank": [1, 1, 1], "docid": ["da", "db", "dc"],
                            "text": ["alpha text", "beta text", "gamma text"]})
    packed = pack_query(pool, "which?", list(spec.arms), spec, _words, results=results)
    assert sorted(packed.passages["docid"]) == ["da", "db", "dc"]
    assert PackSpec.from_mapping({"arms": ["a", "b"], "budget": 9, "top_m": 5}).top_m == 5
    with pytest.raises(ConfigError, match=r"arm 'p'.pack.top_m = 2 is less than the 3 arms listed in "
                                          r"arm 'p'.pack.arms \['a', 'b', 'c'\]"):
        PackSpec.from_mapping({"arms": ["a", "b", "c"], "budget": 9, "top_m": 2}, "arm 'p'.pack")
    assert PackSpec.from_mapping({"budget": 9}).top_m == 2  # the [context] default, without arms


@pytest.mark.parametrize("decay, ok", [(0, True), (0.7, True), (1, True), (1.5, False), (3.0, False)])
def test_recency_decay_must_lie_in_zero_one(decay, ok):
    from ltrr.packing import LoopSpec

    if ok:
        assert LoopSpec.from_mapping({"weights": {"decay": decay}}).weights.decay == decay
        return
    with pytest.raises(ConfigError, match=r"\[context\].weights.decay must be a number in \[0, 1\]"):
        LoopSpec.from_mapping({"weights": {"decay": decay}})
    with pytest.raises(ConfigError, match=r"arm 'p'.pack.weights.decay must be a number in \[0, 1\]"):
        PackSpec.from_mapping({"arms": ["a"], "budget": 9, "weights": {"decay": decay}}, "arm 'p'.pack")
