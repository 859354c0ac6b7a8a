"""Context routing core: selectors (properties against brute force), importance, budgets, memory YAML."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltrr._errors import ConfigError, DataError
from ltrr.context import Memory
from ltrr.packing import (
    DEFAULT_ROLES,
    MemoryItem,
    allocate_budget,
    greedy,
    greedy_skip,
    importance,
    knapsack,
    role_by_name,
)
from ltrr.packing.select import select

costs = st.lists(st.integers(0, 60), min_size=0, max_size=9)


@settings(max_examples=150, deadline=None)
@given(tokens=costs, data=st.data(), budget=st.integers(0, 200))
def test_no_selection_exceeds_its_budget_and_knapsack_is_optimal(tokens, data, budget):
    scores = data.draw(st.lists(st.floats(0, 1, allow_nan=False), min_size=len(tokens), max_size=len(tokens)))
    for fn in (greedy, greedy_skip, knapsack):
        chosen = fn(tokens, scores, budget)
        assert sum(tokens[i] for i in chosen) <= budget and len(set(chosen)) == len(chosen)
    best = max((sum(scores[i] for i in s) for r in range(len(tokens) + 1)
                for s in itertools.combinations(range(len(tokens)), r) if sum(tokens[i] for i in s) <= budget),
               default=0.0)
    assert sum(scores[i] for i in knapsack(tokens, scores, budget)) == pytest.approx(best, abs=1e-9)
    # greedy-skip never does worse than greedy (it takes greedy's prefix, then more)
    assert set(greedy(tokens, scores, budget)) <= set(greedy_skip(tokens, scores, budget))


def test_greedy_stops_where_greedy_skip_goes_on():
    tokens, scores = [50, 80, 10], [0.9, 0.8, 0.1]
    assert greedy(tokens, scores, 100) == [0]
    assert greedy_skip(tokens, scores, 100) == [0, 2]
    assert knapsack(tokens, scores, 100) == [0, 2]


def _item(i, kind="passage", text="x", tokens=10, rnd=0, emb=None, key=None):
    return MemoryItem(id=f"m{i}", kind=kind, text=text, tokens=tokens, round=rnd, embedding=emb, key=key)


def test_importance_signals_and_budgets():
    searcher = role_by_name("Searcher")
    items = [_item(0, "passage", "who wrote it", rnd=2, emb=[1, 0]), _item(1, "plan", "a plan", rnd=0, emb=[0, 1])]
    a = importance(items, searcher, "search", round=2, goal_embedding=[1, 0])
    assert a[0] > a[1]  # a fresh passage close to the goal beats an old plan for the searcher
    assert allocate_budget(512, DEFAULT_ROLES["answerer"]) == 640
    assert allocate_budget(100, DEFAULT_ROLES["planner"]) == 0  # never negative
    # a budget smaller than every item: an empty selection
    assert select(items, a, 5) == []
    with pytest.raises(ConfigError, match="unknown role 'critic'"):
        role_by_name("critic")
    with pytest.raises(ConfigError, match="stage must be one of plan, search, answer"):
        importance(items, searcher, "reflect", round=0)
    with pytest.raises(ConfigError, match="the token budget must be an integer >= 0"):
        select(items, a, -1)
    with pytest.raises(ConfigError, match="unknown selector 'random'"):
        select(items, a, 10, selector="random")


def test_memory_update_dedups_and_replaces_facts_and_round_trips_yaml():
    mem = Memory()
    mem.update([_item(0, "fact", "capital: Canberra", key="capital of australia"),
                _item(1, "passage", "Canberra is the capital.", emb=[1.0, 0.0])])
    added = mem.update([_item(2, "fact", "capital: Sydney", rnd=1, key="capital of australia"),
                        _item(3, "passage", "Canberra is the capital!", rnd=1, emb=[0.999, 0.01])])
    assert [it.id for it in added] == ["m2"] and [it.id for it in mem.items] == ["m1", "m2"]
    assert any("replaced 'capital: Canberra'" in line for line in mem.log)
    assert any("dropped m3 as a near-duplicate of m1" in line for line in mem.log)
    back = Memory.from_yaml(mem.to_yaml())
    assert back.items == mem.items and back.log == mem.log


@pytest.mark.parametrize("text, match", [
    ("items: [a: 1, b: 2", "memory YAML is malformed"),
    ("- just a list", "must be a mapping with a list under 'items'"),
    ("items:\n  - {id: a, kind: passage}", "item 0: needs id, kind and text"),
    ("items:\n  - {id: a, kind: rumour, text: t, tokens: 1}", "kind must be one of"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: -3}", "tokens must be an integer >= 0"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: 1}\n  - {id: a, kind: fact, text: u, tokens: 1}",
     "already has an item with id 'a'"),
    # wrongly typed fields are a DataError naming the item and the field, not a later traceback
    ("items:\n  - {id: a, kind: fact, text: 42, tokens: 1}", r"item 0: memory item 'a': text must be a string"),
    ("items:\n  - {id: 7, kind: fact, text: t, tokens: 1}", "item 0: memory item id must be a non-empty string"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: 1, source: [x]}", "'a': source must be a string"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: 1, key: 3}", "'a': key must be a string or absent"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: 1, embedding: [x, y]}",
     "'a': embedding must be a non-empty list of finite numbers"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: 1, embedding: 3}", "'a': embedding must be a non-empty list"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: 1, embedding: [1, .nan]}", "'a': embedding must be"),
    ("items: []\nlog: oops", "'log' must be a list of strings"),
    ("items: []\ntoken_source: guess", "'token_source' must be 'tokenizer' or 'estimate'"),
    # an item without its token count would be free against every budget
    ("items:\n  - {id: a, kind: fact, text: a long fact of many words}", r"item 0 \('a'\): needs tokens"),
])
def test_malformed_memory_yaml_is_a_clear_error(text, match):
    with pytest.raises(DataError, match=match):
        Memory.from_yaml(text)


def test_memory_item_checks_its_field_types():
    with pytest.raises(DataError, match="memory item 'a': text must be a string, got int 42"):
        MemoryItem(id="a", kind="fact", text=42)
    with pytest.raises(DataError, match="memory item 'a': embedding must be a non-empty list of finite numbers"):
        MemoryItem(id="a", kind="fact", text="t", embedding=["x", "y"])
    ok = MemoryItem(id="a", kind="fact", text="t", embedding=[np.float32(0.5), 1])  # numpy scalars are numbers
    assert ok.embedding == [0.5, 1]


def test_a_keyed_item_dropped_as_a_duplicate_does_not_remove_its_older_value():
    """The new keyed item is checked for near-duplicates first (leaving out the item it would
    replace); the older value goes, and "replaced" is logged, only when the new one is added."""
    mem = Memory()
    mem.update([_item(0, "fact", "Q: Who wrote Hamlet?\nA: Shakespeare", key="Who wrote Hamlet?", emb=[1.0, 0.0]),
                _item(1, "message", "Marlowe", key="answer", emb=[0.0, 1.0])])
    added = mem.update([_item(2, "message", "Shakespeare", rnd=2, key="answer", emb=[0.99, 0.05])])
    assert added == [] and [it.id for it in mem.items] == ["m0", "m1"]
    assert mem.log == ["round 2: dropped m2 as a near-duplicate of m0"]
    # without embeddings: the same text as another item is a duplicate; the same holds
    mem = Memory()
    mem.update([_item(0, "passage", "Paris"), _item(1, "message", "Lyon", key="answer")])
    assert mem.update([_item(2, "message", "Paris", rnd=2, key="answer")]) == []
    assert [it.text for it in mem.items] == ["Paris", "Lyon"] and not any("replaced" in x for x in mem.log)
    # a new value close to (only) the older value of its own key replaces it
    assert [it.id for it in mem.update([_item(3, "message", "Lyon ", rnd=3, key="answer")])] == ["m3"]
    assert [it.id for it in mem.items] == ["m0", "m3"] and "replaced 'Lyon' (m1) by 'Lyon ' (m3)" in mem.log[-1]


def test_knapsack_memory_is_bounded_by_the_items_not_the_budget():
    import tracemalloc

    tokens, scores = [100] * 10, [0.1 * (i + 1) for i in range(10)]
    tracemalloc.start()
    try:
        huge = knapsack(tokens, scores, 10_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert huge == knapsack(tokens, scores, sum(tokens)) == list(range(10))
    assert peak < 2**20, peak  # the old table was (10, budget + 1) booleans: about 100 MB here
    rng = np.random.default_rng(3)
    for _ in range(50):  # a budget above the total never changes the choice, ties included
        t = rng.integers(0, 9, size=rng.integers(0, 7)).tolist()
        v = rng.choice([0.0, 0.5, 1.0], size=len(t)).tolist()
        assert knapsack(t, v, sum(t) + int(rng.integers(0, 50))) == knapsack(t, v, sum(t))


def test_recall_per_100_tokens_counts_the_tokens_of_the_queries_recall_is_measured_on():
    import pandas as pd

    from ltrr.context.evaluate import _table

    nan = float("nan")
    per_query = pd.DataFrame([  # q2 has no qrels: its recall is NaN, its tokens must not enter the ratio
        {"qid": "q1", "context": "plain", "tokens": 100, "recall": 1.0},
        {"qid": "q2", "context": "plain", "tokens": 300, "recall": nan},
        {"qid": "q1", "context": "packed@128/knapsack", "tokens": 100, "recall": 1.0, "empty": False},
        {"qid": "q2", "context": "packed@128/knapsack", "tokens": 20, "recall": nan, "empty": False},
        {"qid": "q1", "context": "packed@0/knapsack", "tokens": 0, "recall": 0.0, "empty": True},
        {"qid": "q2", "context": "packed@0/knapsack", "tokens": 0, "recall": nan, "empty": True},
    ])
    t = _table(per_query).set_index("context")
    assert t["recall_per_100_tokens"].iloc[:2].tolist() == [1.0, 1.0]
    assert t.loc["plain", "mean_tokens"] == 200.0  # the table's tokens still cover every query
    assert np.isnan(t.loc["packed@0/knapsack", "recall_per_100_tokens"])


@pytest.mark.parametrize("flags, match", [
    (["--token-budgets", "128,256,128"], "--token-budgets names 128 twice"),
    (["--selectors", "greedy,knapsack,greedy"], "--selectors names greedy twice"),
    (["--selector", "greedy,greedy"], "--selector names greedy twice"),
])
def test_context_pack_refuses_a_budget_or_selector_given_twice(flags, match, capsys, tmp_path):
    """A repeated value would count each query twice in the tables and the paired tests."""
    import re

    from ltrr.cli import main

    assert main(["context", "pack", str(tmp_path / "never-read.toml"), *flags]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and len(err.strip().splitlines()) == 1, err


def test_make_items_counts_tokens_and_embeds():
    items = Memory.make_items(["a b c", "d"], kind="message", source="planner", round=1,
                              count_tokens=lambda t: len(t.split()), embed=lambda ts: np.eye(len(ts)))
    assert [it.tokens for it in items] == [3, 1] and items[1].embedding == [0.0, 1.0]
    assert items[0].id == "planner-r1-message-0"


def test_pack_passages_keeps_the_budget_routed_order_and_dedups():
    import pandas as pd

    from ltrr.packing import evidence_recall, pack_passages

    res = pd.DataFrame({"arm": ["bm25"] * 3 + ["dense"] * 3, "rank": [1, 2, 3] * 2,
                        "docid": ["a", "b", "c", "b", "d", "e"],
                        "text": ["w " * 40, "w " * 10, "w " * 30, "w " * 10, "w " * 20, "w " * 50]})
    words = lambda t: len(t.split())  # noqa: E731
    out = pack_passages(res, ["dense", "bm25", "none"], budget=60, top_m=2, count_tokens=words)
    assert out.tokens <= 60 and out.candidates == 5  # "b" twice is one candidate
    assert out.passages["docid"].tolist()[0] == "b"  # dense first, its rank-1 passage
    assert list(out.passages["arm_rank"]) == sorted(out.passages["arm_rank"])
    tiny = pack_passages(res, ["bm25"], budget=5, count_tokens=words)
    assert tiny.passages.empty and "longer than the budget of 5" in tiny.empty_reason
    assert evidence_recall(["a", "b"], ["b", "z"], 50) == {"recall": 0.5, "recall_per_100_tokens": 1.0, "tokens": 50}
    with pytest.raises(ConfigError, match="top_m must be an integer >= 1"):
        pack_passages(res, ["bm25"], budget=10, top_m=0, count_tokens=words)
