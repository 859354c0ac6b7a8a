"""The marginal selectors (issue 29, point 2): ``knapsack-marginal`` and ``greedy-density``.

A term every candidate shares makes the plain knapsack buy many short items; the marginal
selectors are invariant to it. Checked against brute force, on a constructed case, and by name.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltrr._errors import ConfigError
from ltrr.packing import (
    MemoryItem,
    PackSpec,
    greedy_density,
    knapsack,
    knapsack_marginal,
    marginal,
    pack_passages,
)
from ltrr.packing.select import select, selectors
from ltrr.packing.strategies import LoopSpec

costs = st.lists(st.integers(0, 60), min_size=0, max_size=9)


def _brute(tokens, values, budget) -> float:
    return max((sum(values[i] for i in s) for r in range(len(tokens) + 1)
                for s in itertools.combinations(range(len(tokens)), r) if sum(tokens[i] for i in s) <= budget),
               default=0.0)


@settings(max_examples=150, deadline=None)
@given(tokens=costs, data=st.data(), budget=st.integers(0, 200), shift=st.integers(-40, 40))
def test_marginal_selectors_keep_the_budget_are_exact_and_ignore_a_shared_term(tokens, data, budget, shift):
    # scores and shift on a binary grid, so a shifted score is exact and ties stay ties
    grid = st.integers(0, 64).map(lambda k: k / 64)
    scores = data.draw(st.lists(grid, min_size=len(tokens), max_size=len(tokens)))
    shift = shift / 8
    v = marginal(scores)
    for fn in (knapsack_marginal, greedy_density):
        chosen = fn(tokens, scores, budget)
        assert sum(tokens[i] for i in chosen) <= budget and chosen == sorted(set(chosen))
        # a term added to every score does not move the choice (the plain knapsack's would)
        assert fn(tokens, [s + shift for s in scores], budget) == chosen
        # nothing that still fits is left out with a value of 0 (the room-filling tie-break)
        room = budget - sum(tokens[i] for i in chosen)
        assert not [i for i in range(len(tokens)) if i not in chosen and v[i] == 0 and tokens[i] <= room]
    best = _brute(tokens, v, budget)
    assert sum(v[i] for i in knapsack_marginal(tokens, scores, budget)) == pytest.approx(best, abs=1e-9)
    assert sum(v[i] for i in greedy_density(tokens, scores, budget)) <= best + 1e-9


def test_one_long_relevant_item_beats_short_ones_that_only_share_a_constant():
    # a shared 0.35 (stage and recency of round-0 passages) plus relevance: 0.5 for the long one
    tokens = [100, 25, 25, 25, 25]
    scores = [0.35 + 0.5, 0.35 + 0.1, 0.35 + 0.1, 0.35 + 0.1, 0.35 + 0.1]
    assert knapsack(tokens, scores, 100) == [1, 2, 3, 4]  # 4 x 0.45 = 1.8 > 0.85
    assert knapsack_marginal(tokens, scores, 100) == [0]
    assert greedy_density(tokens, scores, 100) == [0]
    # room left after the relevant item goes to the least important ones
    assert knapsack_marginal(tokens, scores, 150) == [0, 1, 2]


def test_pack_passages_with_the_marginal_knapsack_keeps_the_relevant_long_passage():
    long_text = "Ada Lovelace wrote the first published program for the Analytical Engine " * 8
    res = pd.DataFrame({"arm": ["bm25"] * 4, "rank": [1, 2, 3, 4], "docid": ["gold", "s1", "s2", "s3"],
                        "text": [long_text, "short filler one", "short filler two", "short filler three"]})
    words = lambda t: len(t.split())  # noqa: E731
    vecs = {"gold": [1.0, 0.0], "s1": [0.0, 1.0], "s2": [0.0, 1.0], "s3": [0.0, 1.0]}
    emb = lambda ids, texts: np.array([vecs[i] for i in ids])  # noqa: E731
    kw = dict(budget=words(long_text), top_m=1, count_tokens=words, question_embedding=[1.0, 0.0], embeddings=emb,
              question="who wrote the first program for the Analytical Engine", prior=0.0)
    old = pack_passages(res, ["bm25"], selector="knapsack", **kw)
    new = pack_passages(res, ["bm25"], selector="knapsack-marginal", **kw)
    assert "gold" not in old.passages["docid"].tolist()  # the old knapsack buys the three short ones
    assert new.passages["docid"].tolist() == ["gold"] and new.tokens <= kw["budget"]
    # the same items, scored once: what the selector chose from
    assert new.considered["docid"].tolist() == ["gold", "s1", "s2", "s3"]
    assert new.importance == pytest.approx(float(new.considered["importance"].iloc[0]))
    again = pack_passages(res, ["bm25"], selector="knapsack-marginal", **kw)
    assert again.passages.equals(new.passages)  # deterministic


def test_ties_and_a_lone_candidate_are_deterministic():
    assert knapsack_marginal([10], [0.7], 10) == [0]  # a lone candidate that fits is kept
    assert knapsack_marginal([10], [0.7], 9) == []
    assert knapsack_marginal([5, 5, 5], [0.5, 0.5, 0.5], 10) == [0, 1]  # all tied: earliest first
    assert greedy_density([5, 5, 5], [0.5, 0.5, 0.5], 10) == [0, 1]
    assert greedy_density([0, 30, 10], [0.2, 0.9, 0.1], 30) == [0, 1]  # 0 tokens, positive value: first
    assert knapsack_marginal([], [], 10) == [] and greedy_density([], [], 10) == []


def test_the_marginal_selectors_are_found_by_name_and_bad_names_are_config_errors():
    assert {"knapsack-marginal", "greedy-density"} <= set(selectors.names())
    items = [MemoryItem(id=f"m{i}", kind="passage", text="x", tokens=t) for i, t in enumerate([100, 25, 25])]
    assert [it.id for it in select(items, [0.85, 0.45, 0.45], 100, "knapsack-marginal")] == ["m0"]
    with pytest.raises(ConfigError, match="unknown selector 'knapsack-density'"):
        select(items, [0.85, 0.45, 0.45], 100, "knapsack-density")
    with pytest.raises(ConfigError, match=r"\[context\]\.selector: unknown selector 'marginal'; one of .*"
                                          r"knapsack-marginal"):
        PackSpec.from_mapping({"budget": 128, "selector": "marginal"})
    assert PackSpec.from_mapping({"budget": 128, "selector": "greedy-density"}).selector == "greedy-density"
    assert LoopSpec.from_mapping({"selector": "knapsack-marginal"}).selector == "knapsack-marginal"
    with pytest.raises(ConfigError, match="unknown selector"):
        LoopSpec.from_mapping({"selector": "Knapsack-Marginal"})


def test_context_pack_rejects_unknown_selector_names(capsys):
    from ltrr.cli import main

    assert main(["context", "pack", "demo", "--selectors", "greedy,nope"]) == 2
    assert "unknown selector 'nope'" in capsys.readouterr().err
    assert main(["context", "pack", "demo", "--selector", "knapsack-density"]) == 2
    assert "unknown selector 'knapsack-density'" in capsys.readouterr().err
    assert main(["context", "pack", "demo", "--selectors", " , "]) == 2
    assert "--selectors must name at least one selector" in capsys.readouterr().err
