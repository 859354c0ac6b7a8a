"""The shared prefix's KV cache of an evaluation's continuations (`ltrr.agent.prefix_cache`), on
the tiny random Llama: the same tokens as a full prefill, greedy and sampled, and how it learns
the prefix the calls share."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from ltrr.agent.backends import TransformersLM, hf_continue
from ltrr.agent.prefix_cache import PrefixCache, common_prefix
from ltrr.generation.base import DecodingParams


@pytest.fixture(scope="module")
def lm(tiny):
    return TransformersLM(str(tiny))


def _ids(rng, n):
    return [int(i) for i in rng.integers(4, 22, n)]


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3 and common_prefix([], [1]) == 0
    assert common_prefix([5, 2], [1, 2]) == 0
    import ltrr.agent.prefix_cache as mod

    assert doctest.testmod(mod).failed == 0


@pytest.mark.parametrize("params", [DecodingParams(max_new_tokens=12),
                                    DecodingParams(max_new_tokens=12, temperature=1.0, seed=5)],
                         ids=["greedy", "sampled"])
def test_continuations_from_the_cached_prefix_equal_full_prefills(lm, params):
    rng = np.random.default_rng(0)
    system = _ids(rng, 150)
    calls = [system + _ids(rng, 20) for _ in range(4)]
    calls.append(calls[0] + _ids(rng, 30))  # a second turn of the first rollout
    cache = PrefixCache()
    model, tok = lm.hf_model, lm.tokenizer
    for ids in calls:
        plain = hf_continue(model, tok, ids, params)
        cached = hf_continue(model, tok, ids, params, prefix_cache=cache)
        assert cached.error is None and cached.ids == plain.ids and cached.text == plain.text
    assert cache.ids == system[:len(cache.ids)] and len(cache.ids) >= 150
    assert cache.hits == 4 and cache.builds <= 2  # the first call only teaches it


def test_the_cache_learns_the_shared_prefix_and_ignores_short_ones(lm):
    rng = np.random.default_rng(1)
    base = _ids(rng, 120)
    a, b = base + [22] * 10, base[:100] + [23] * 10  # suffixes outside base's ids
    cache = PrefixCache(min_tokens=64)
    model = lm.hf_model
    assert cache.kwargs(model, a, None) == {} and cache.builds == 0  # nothing shared yet
    assert cache.kwargs(model, b, None) and (len(cache.ids), cache.builds) == (100, 1)
    assert cache.kwargs(model, base[:80] + [24] * 5, None) and len(cache.ids) == 80  # shorter: rebuilt
    assert cache.kwargs(model, base[:10] + [25] * 100, None) == {}  # too little shared: not used
    assert len(cache.ids) == 80 and cache.builds == 2  # and the cached prefix is kept
    assert cache.kwargs(model, base[:80], None) and len(cache.ids) == 79  # one token left to feed
    assert cache.kwargs(model, [1] * 20, None) == {}  # shorter than min_tokens


def test_an_lm_continues_from_its_cache_only_when_given_one(lm):
    rng = np.random.default_rng(2)
    ids = _ids(rng, 100)
    params = DecodingParams(max_new_tokens=6)
    assert TransformersLM.prefix_cache is None  # off by default (GRPO's live model changes every step)
    plain = lm.continue_(ids, "", params)
    lm.prefix_cache = PrefixCache()
    try:
        lm.continue_(ids, "", params)
        again = lm.continue_(ids[:90] + _ids(rng, 10), "", params)
        assert lm.prefix_cache.hits == 1 and again.error is None
        assert lm.continue_(ids, "", params).ids == plain.ids
    finally:
        lm.prefix_cache = None


def test_prompts_that_change_per_question_are_cached_per_question(lm):
    """RFT's sampling: each question's prompt shows the arms its own way, and its 4 samples and
    their turns share it; each question's prompt is cached once, from its first sample's second
    call, and the samples come out as from full prefills."""
    rng = np.random.default_rng(3)
    model, tok = lm.hf_model, lm.tokenizer
    cache = PrefixCache()
    for q in range(3):
        prompt = [22 + q] + _ids(rng, 120)  # first tokens differ: no two prompts share 64
        for s in range(4):
            ids = list(prompt)
            for turn in range(2):
                params = DecodingParams(max_new_tokens=8, temperature=1.0, seed=10 * q + s + 100 * turn)
                plain = hf_continue(model, tok, ids, params)
                cached = hf_continue(model, tok, ids, params, prefix_cache=cache)
                assert cached.ids == plain.ids
                ids = ids + plain.ids + _ids(rng, 5)  # the injected block of the next turn
        assert cache.ids == prompt[:-1]  # the prompt less its last token, which a first turn must feed
    assert cache.builds <= 6 and cache.hits >= 3 * 6  # every call but each question's first
