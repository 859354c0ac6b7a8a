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
    ("items:\n  - {id: a, kind: rumour, text: t}", "kind must be one of"),
    ("items:\n  - {id: a, kind: fact, text: t, tokens: -3}", "tokens must be an integer >= 0"),
    ("items:\n  - {id: a, kind: fact, text: t}\n  - {id: a, kind: fact, text: u}", "already has an item with id 'a'"),
])
def test_malformed_memory_yaml_is_a_clear_error(text, match):
    with pytest.raises(DataError, match=match):
        Memory.from_yaml(text)


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
    with pytest.raises(ConfigError, match="top_m must be a positive integer"):
        pack_passages(res, ["bm25"], budget=10, top_m=0, count_tokens=words)
