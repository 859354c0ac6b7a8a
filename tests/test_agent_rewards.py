"""Rewards of the Router-R1-style loop (ltrr.agent.rewards): format rules, outcome, cost, total."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltrr._errors import ConfigError, DataError
from ltrr.agent.rewards import (
    FORMAT_RULES,
    CostNormaliser,
    format_reward,
    outcome_reward,
    parse_search,
    resolve_arm,
    total_reward,
    trajectory_cost,
)

ARMS = ["bm25", "dense", "bm25+reg", "none"]
VALID = (
    "<think>I need the capital.</think>"
    "<search>bm25: capital of Australia</search>"
    "<information>Doc 1: Canberra is the capital of Australia.</information>"
    "<think>Found it.</think><answer>Canberra</answer>"
)


def _s(search: str) -> str:
    """A valid trajectory whose only search block holds ``search``."""
    return (f"<think>a</think><search>{search}</search><information>x</information>"
            "<think>b</think><answer>A</answer>")


# (rule, a text that respects it, a text that breaks it, every rule the bad text breaks)
RULE_CASES = [
    ("unbalanced_tags", VALID, "<think>a</think></think><answer>A</answer>", ["unbalanced_tags"]),
    ("nested_tags", VALID,
     "<think>a<search>bm25: q</search></think><information>x</information><think>b</think>"
     "<answer>A</answer>", ["nested_tags"]),
    ("empty_think", "<think> . </think><answer>A</answer>", "<think> \n </think><answer>A</answer>",
     ["empty_think"]),
    ("answer_count", "<think>a</think><think>b</think><answer>A</answer>",
     "<think>a</think><answer>A</answer><think>b</think><answer>B</answer>", ["answer_count"]),
    ("no_think", "<think>a</think><answer>A</answer>", "<answer>A</answer>", ["no_think", "bad_start"]),
    ("search_information_mismatch", VALID,
     "<think>a</think><search>bm25: q</search><think>b</think><answer>A</answer>",
     ["search_information_mismatch"]),
    ("bad_start", " \n <think>a</think><answer>A</answer>", "Sure! <think>a</think><answer>A</answer>",
     ["bad_start"]),
    ("bad_end", "<think>a</think><answer>A</answer>\n\n", "<think>a</think><answer>A</answer> Done.",
     ["bad_end"]),
    ("search_no_arm", _s("none: capital"), _s("capital of Australia"), ["search_no_arm"]),
    ("search_several_arms", _s("bm25: film: The Matrix"), _s("bm25: dense: The Matrix"),
     ["search_several_arms"]),
    ("search_unknown_arm", _s("bm25+reg: q"), _s("google: q"), ["search_unknown_arm"]),
    ("search_empty_query", _s("dense: q"), _s("dense:   "), ["search_empty_query"]),
]


def test_every_rule_has_a_case():
    assert sorted(c[0] for c in RULE_CASES) == sorted(FORMAT_RULES)


@pytest.mark.parametrize(("rule", "good", "bad", "broken"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_format_rule(rule, good, bad, broken):
    assert format_reward(good, ARMS) == (0.0, [])
    score, reasons = format_reward(bad, ARMS)
    assert score == -1.0
    assert rule in reasons
    assert reasons == broken


def test_format_reward_reports_every_broken_rule_once_in_order():
    text = "Ok <search>google: x</search><search>q</search><answer></answer><answer>B</answer> end </think>"
    score, reasons = format_reward(text, ARMS)
    assert score == -1.0
    assert reasons == ["unbalanced_tags", "answer_count", "no_think", "search_information_mismatch",
                       "bad_start", "bad_end", "search_no_arm", "search_unknown_arm"]
    assert reasons == sorted(set(reasons), key=FORMAT_RULES.index)


def test_unclosed_tag_is_unbalanced_and_close_of_outer_tag_recovers():
    # <answer> opened inside <think>, then </think> closes both: one slip, reported once each
    score, reasons = format_reward("<think>a<answer>A</think>", ARMS)
    assert reasons == ["unbalanced_tags", "nested_tags", "bad_end"]
    assert format_reward("<think>a</think><answer>A", ARMS)[1] == ["unbalanced_tags", "bad_end"]


def test_parse_search_cases():
    assert parse_search("bm25+reg:  who painted it? ", ARMS) == ("bm25+reg", "who painted it?", None)
    assert parse_search(": who", ARMS) == (None, "who", "no_arm")
    assert parse_search("none:", ARMS) == ("none", "", "empty_query")
    # an arm by its name ignoring case (Router-R1 lower-cases it: route_service.py:173, main_ppo.py:76),
    # returned as the pool spells it
    assert parse_search("BM25: who", ARMS) == ("bm25", "who", None)
    assert parse_search("Bm25+Reg: who", ARMS) == ("bm25+reg", "who", None)
    assert parse_search("bm25: DENSE: who", ARMS) == ("bm25", "DENSE: who", "several_arms")
    assert parse_search("NONE:", ARMS) == ("none", "", "empty_query")
    assert parse_search("Bm25: who", ["bm25", "BM25"]) == ("Bm25", "who", "unknown_arm")  # which one?
    assert parse_search("BM25: who", ["bm25", "BM25"]) == ("BM25", "who", None)  # the exact one


@pytest.mark.parametrize(("name", "arms", "arm"), [
    ("bm25", ["bm25", "dense"], "bm25"),
    ("BM25", ["bm25", "dense"], "bm25"),
    ("Dense", ["bm25", "DENSE"], "DENSE"),
    ("dense", ["dense", "Dense"], "dense"),  # an exact match first
    ("DENSE", ["dense", "Dense"], None),  # two arms equal ignoring case, neither exact
    ("google", ["bm25"], None),
    ("bm2", ["bm25"], None),  # no prefix or fuzzy match
    ("", ["bm25"], None),
])
def test_resolve_arm(name, arms, arm):
    assert resolve_arm(name, arms) == arm


@pytest.mark.parametrize("arm", ["BM25", "Bm25", "bm25", "DENSE"])
def test_the_format_rules_accept_an_arm_as_the_loop_resolves_it(arm):
    text = _s(f"{arm}: capital of Australia")
    assert format_reward(text, ARMS) == (0.0, [])
    # with two arms equal to it ignoring case and neither exact, the loop runs none: unknown
    twins = [a for a in ("bm25", "bM25", "dense", "dENSE") if a != arm and a.lower() == arm.lower()]
    assert format_reward(text, twins)[1] == ([] if len(twins) == 1 else ["search_unknown_arm"])


# ---- outcome --------------------------------------------------------------------------------
def test_outcome_reward_uses_the_metric_registry_and_best_alias():
    assert outcome_reward("It was Leonardo da Vinci.", ["Leonardo da Vinci"]) == 1.0
    assert outcome_reward("Leonardo", ["Leonardo da Vinci", "Leo"]) == pytest.approx(1 / 3)
    assert outcome_reward("Leonardo", ["Leonardo da Vinci", "Leonardo"]) == 1.0
    assert outcome_reward("It was Leonardo", ["Leonardo"], metric="em") == 0.0
    assert outcome_reward("the Leonardo", ["Leonardo"], metric="em") == 1.0
    assert outcome_reward(None, ["Paris"]) == 0.0
    assert outcome_reward("", ["Paris"]) == 0.0


def test_outcome_reward_errors():
    with pytest.raises(ConfigError, match="judge metric 'ac'"):
        outcome_reward("Paris", ["Paris"], metric="ac")
    with pytest.raises(ConfigError, match="unknown metric 'bleu'"):
        outcome_reward("Paris", ["Paris"], metric="bleu")
    with pytest.raises(DataError, match="answers\\[0\\] is empty"):
        outcome_reward("Paris", [])
    with pytest.raises(DataError, match="wrap a single answer in a list"):
        outcome_reward("Paris", "Paris")


# ---- cost -----------------------------------------------------------------------------------
def test_trajectory_cost_sums_arm_costs_and_priced_tokens():
    costs = {"bm25": 1.0, "dense": 2.5, "none": 0.0}
    assert trajectory_cost(["bm25", "dense", "none"], costs, 0) == 3.5
    assert trajectory_cost(["bm25"], costs, 200, token_price=0.005) == pytest.approx(2.0)
    assert trajectory_cost([], costs, 200) == 0.0
    with pytest.raises(ConfigError, match="no cost for arm 'google'"):
        trajectory_cost(["google"], costs, 0)
    with pytest.raises(ConfigError, match="token_price must be"):
        trajectory_cost([], costs, 0, token_price=-1)
    with pytest.raises(DataError, match="injected_tokens must be"):
        trajectory_cost([], costs, -3)
    with pytest.raises(DataError, match="wrap it in a list"):
        trajectory_cost("bm25", costs, 0)


def test_rolling_normaliser_on_a_known_sequence():
    norm = CostNormaliser(window=5).update([10.0, 20.0, 30.0, 40.0, 50.0])
    # linear-interpolated percentiles of 5 values: position 0.05 * 4 = 0.2 and 0.95 * 4 = 3.8
    assert norm.bounds() == pytest.approx((12.0, 48.0))
    assert norm.normalise(30.0) == pytest.approx(0.5)
    assert norm.cost_reward([12.0, 30.0, 48.0, 0.0, 100.0]).tolist() == pytest.approx(
        [1.0, 0.5, 0.0, 1.0, 0.0])
    # the window keeps the last 5: 10 drops out, 60 comes in
    norm.update(60.0)
    assert list(norm.history_) == [20.0, 30.0, 40.0, 50.0, 60.0]
    assert norm.bounds() == pytest.approx((22.0, 58.0))
    assert norm.cost_reward(40.0) == pytest.approx(0.5)


def test_rolling_normaliser_edge_cases():
    with pytest.raises(ConfigError, match="seen no cost yet; call update"):
        CostNormaliser().cost_reward(1.0)
    flat = CostNormaliser(window=3).update([2.0, 2.0, 2.0])
    assert flat.cost_reward([1.0, 2.0, 3.0]).tolist() == [1.0, 1.0, 0.0]
    # extreme bounds neither overflow nor warn
    with np.errstate(all="raise"):
        assert CostNormaliser(window=2).update([0.0, 5e-300]).cost_reward(8.9e8) == 0.0
        assert CostNormaliser.fixed(-1e308, 1e308).cost_reward([0.0, 1e308]).tolist() == [0.5, 0.0]
    with pytest.raises(ConfigError, match="window must be an integer >= 1"):
        CostNormaliser(window=0).update([1.0])
    with pytest.raises(DataError, match="finite numbers"):
        CostNormaliser().update([1.0, float("nan")])
    with pytest.raises(ConfigError, match="percentiles must satisfy"):
        CostNormaliser(lo_percentile=90, hi_percentile=10).update([1.0])


def test_evaluation_mode_is_history_independent():
    design = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    frozen = CostNormaliser.from_costs(design)
    assert frozen.mode == "fixed"
    assert frozen.bounds() == pytest.approx((0.5, 9.5))
    costs = [7.0, 0.0, 3.0, 100.0, 5.0]
    once = [frozen.cost_reward(c) for c in costs]
    again = [frozen.cost_reward(c) for c in reversed(costs)][::-1]
    assert once == again == pytest.approx(frozen.cost_reward(costs).tolist())
    assert frozen.cost_reward(5.0) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="never updated"):
        frozen.update([1000.0])
    assert frozen.bounds() == pytest.approx((0.5, 9.5))
    # the training mode, by contrast, scores the same cost differently after other costs
    rolling = CostNormaliser(window=100).update(design)
    before = rolling.cost_reward(5.0)
    rolling.update([100.0] * 20)
    assert rolling.cost_reward(5.0) != before


def test_fixed_bounds_are_checked():
    assert CostNormaliser.fixed(1.0, 3.0).cost_reward([0.0, 2.0, 5.0]).tolist() == [1.0, 0.5, 0.0]
    with pytest.raises(ConfigError, match="lo <= hi"):
        CostNormaliser.fixed(3.0, 1.0)
    with pytest.raises(ConfigError, match="set both lo and hi"):
        CostNormaliser(lo=1.0).cost_reward(1.0)
    with pytest.raises(DataError, match="at least one cost"):
        CostNormaliser.from_costs([])


def test_normaliser_json_round_trip():
    rolling = CostNormaliser(window=4, lo_percentile=10, hi_percentile=90).update([5.0, 1.0, 3.0, 9.0, 2.0])
    for norm in (rolling, CostNormaliser.fixed(0.5, 2.5), CostNormaliser.from_costs([1.0, 2.0, 8.0])):
        back = CostNormaliser.from_dict(json.loads(json.dumps(norm.to_dict())))
        assert back.to_dict() == norm.to_dict()
        assert back.mode == norm.mode and back.bounds() == norm.bounds()
        assert back.cost_reward([0.0, 2.0, 4.0]).tolist() == norm.cost_reward([0.0, 2.0, 4.0]).tolist()
    assert list(CostNormaliser.from_dict(rolling.to_dict()).history_) == [1.0, 3.0, 9.0, 2.0]
    with pytest.raises(DataError, match="not a CostNormaliser dict"):
        CostNormaliser.from_dict({"lo": 1})
    with pytest.raises(DataError, match="unknown key"):
        CostNormaliser.from_dict({"mode": "fixed", "lo": 0, "hi": 1, "extra": 2})
    with pytest.raises(DataError, match="bad CostNormaliser dict.*lo <= hi"):
        CostNormaliser.from_dict({"mode": "fixed", "lo": 2, "hi": 1})
    with pytest.raises(DataError, match="does not match"):
        CostNormaliser.from_dict({"mode": "rolling", "lo": 0, "hi": 1})


def _router_r1_normalize_reward(costs, window=1000):
    """Router-R1's ``normalize_reward`` (verl/trainer/main_ppo.py:36-72 at 801a240), transcribed
    line for line with its module state (``buffer``, ``transform = 'sqrt'``, ``eps``) made local."""
    from collections import deque

    buffer, out = deque(maxlen=window), []
    for r in costs:
        r = np.sqrt(r)
        buffer.append(r)
        arr = np.array(buffer)
        if len(arr) >= 2:
            r_min, r_max = np.percentile(arr, 100 * 0.05), np.percentile(arr, 100 * 0.95)
        else:
            r_min, r_max = arr.min(), arr.max()
        denom = r_max - r_min
        if denom < 1e-8:
            out.append(0.5)
            continue
        out.append(1.0 - float(np.clip((r - r_min) / denom, 0.0, 1.0)))
    return out


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(st.floats(min_value=0.0, max_value=50.0), min_size=1, max_size=12),
                        min_size=1, max_size=6),
       window=st.integers(1, 30))
def test_the_router_r1_normaliser_agrees_with_theirs(batches, window):
    ours = CostNormaliser.router_r1(window=window)
    got = np.concatenate([ours.score_batch(b) for b in batches])
    assert got.tolist() == pytest.approx(_router_r1_normalize_reward([c for b in batches for c in b], window),
                                         abs=1e-12)


def test_the_router_r1_rule_differs_from_ltrr_on_known_costs():
    costs = [4.0, 4.0, 0.0, 16.0, 1.0]
    theirs = CostNormaliser.router_r1(window=10).score_batch(costs).tolist()
    assert theirs == pytest.approx(_router_r1_normalize_reward(costs, 10))
    # one at a time: the first two see no spread (0.5); the square root makes 1.0 halfway to 4.0 of 0..16
    assert theirs[:2] == [0.5, 0.5] and theirs[2] == 1.0 and theirs[3] == 0.0
    ours = CostNormaliser(window=10).score_batch(costs).tolist()
    # ltrr: the batch enters the window at once; no square root; bounds 0.2 and 13.6 of the raw costs
    assert ours == pytest.approx([1 - 3.8 / 13.4, 1 - 3.8 / 13.4, 1.0, 0.0, 1 - 0.8 / 13.4])
    # no spread: ltrr's step rule, Router-R1's 0.5
    assert CostNormaliser(window=3).score_batch([2.0, 2.0]).tolist() == [1.0, 1.0]
    assert CostNormaliser(window=3, no_spread=0.5).score_batch([2.0, 2.0]).tolist() == [0.5, 0.5]
    assert CostNormaliser.fixed(3.0, 3.0, no_spread=0.25).cost_reward([0.0, 9.0]).tolist() == [0.25, 0.25]
    # a transformed fixed normaliser: bounds in square-root units
    frozen = CostNormaliser.from_costs([0.0, 4.0, 16.0], lo_percentile=0, hi_percentile=100, transform="sqrt")
    assert frozen.bounds() == (0.0, 4.0) and frozen.cost_reward(4.0) == 0.5
    assert CostNormaliser(window=5).score_batch([]).tolist() == []


def test_normaliser_rule_options_are_checked_and_persisted():
    for kwargs, match in [({"transform": "log"}, "transform must be one of \\['identity', 'sqrt'\\], got 'log'"),
                          ({"no_spread": 1.5}, "no_spread must be None or a number in \\[0, 1\\], got 1.5"),
                          ({"window_updates": "all"}, "window_updates must be one of \\['batch', 'each'\\]")]:
        with pytest.raises(ConfigError, match=match):
            CostNormaliser(window=3, **kwargs).update([1.0])
    with pytest.raises(DataError, match="transform 'sqrt' needs costs >= 0, got -1.0"):
        CostNormaliser.router_r1().update([1.0, -1.0])
    with pytest.raises(DataError, match="transform 'sqrt' needs costs >= 0"):
        CostNormaliser.from_costs([-4.0, 1.0], transform="sqrt")
    r1 = CostNormaliser.router_r1(window=7).update([1.0, 9.0])
    d = json.loads(json.dumps(r1.to_dict()))
    assert d == {"mode": "rolling", "window": 7, "lo_percentile": 5.0, "hi_percentile": 95.0, "transform": "sqrt",
                 "no_spread": 0.5, "window_updates": "each", "history": [1.0, 9.0]}  # raw costs kept
    back = CostNormaliser.from_dict(d)
    assert back.rule == r1.rule and back.bounds() == r1.bounds() == pytest.approx((1.1, 2.9))
    assert "transform='sqrt'" in repr(back)
    # ltrr's default dict is what it was before the options existed (evaluation records compare it)
    assert set(CostNormaliser.fixed(0.0, 1.0).to_dict()) == {"mode", "window", "lo_percentile", "hi_percentile",
                                                             "lo", "hi"}
    with pytest.raises(DataError, match="bad CostNormaliser dict.*no_spread"):
        CostNormaliser.from_dict({"mode": "fixed", "lo": 0, "hi": 1, "no_spread": -1})


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(history=st.lists(finite, min_size=1, max_size=40), window=st.integers(1, 50),
       costs=st.lists(st.floats(allow_nan=False, min_value=-1e12, max_value=1e12), min_size=1, max_size=10))
def test_cost_reward_is_always_in_unit_interval(history, window, costs):
    for norm in (CostNormaliser(window=window).update(history), CostNormaliser.from_costs(history)):
        r = norm.cost_reward(costs)
        assert np.all((r >= 0.0) & (r <= 1.0))
        assert 0.0 <= norm.cost_reward(costs[0]) <= 1.0


# ---- total ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fmt", "outcome", "cost_r", "alpha", "threshold", "expected"),
    [
        (-1.0, 1.0, 1.0, 0.3, 1.0, -1.0),   # bad format: nothing else counts
        (-1.0, 0.0, 0.0, 0.0, 1.0, -1.0),
        (0.0, 1.0, 1.0, 0.3, 1.0, 1.0),     # correct and cheapest
        (0.0, 1.0, 0.0, 0.3, 1.0, 0.7),     # correct and dearest
        (0.0, 0.5, 1.0, 0.3, 1.0, 0.35),    # partial recall is not correct: no cost term
        (0.0, 0.5, 1.0, 0.3, 0.5, 0.65),    # ... unless the threshold says so
        (0.0, 0.0, 1.0, 0.3, 1.0, 0.0),     # a cheap wrong answer earns nothing
        (0.0, 1.0, 0.4, 0.0, 1.0, 1.0),     # alpha 0: outcome only
        (0.0, 1.0, 0.4, 1.0, 1.0, 0.4),     # alpha 1: cost only, once correct
    ],
)
def test_total_reward_hierarchy(fmt, outcome, cost_r, alpha, threshold, expected):
    assert total_reward(fmt, outcome, cost_r, alpha, correct_threshold=threshold) == pytest.approx(expected)


def test_total_reward_errors():
    with pytest.raises(ConfigError, match="alpha must be a number in \\[0, 1\\]"):
        total_reward(0.0, 1.0, 1.0, alpha=1.5)
    with pytest.raises(DataError, match="outcome must be a finite number"):
        total_reward(0.0, float("nan"), 1.0, alpha=0.5)


def test_importing_the_package_stays_light():
    heavy = "('torch', 'transformers', 'pandas', 'httpx')"
    for modules in ("ltrr.agent", "ltrr.agent.rewards, ltrr.agent.prompt, ltrr.agent.loop"):
        code = f"import sys, {modules}; print(sorted(m for m in {heavy} if m in sys.modules))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[1])
        assert out.stdout.strip() == "[]", modules
    import ltrr.agent

    assert ltrr.agent.format_reward is format_reward
    for name in ltrr.agent.__all__:
        assert getattr(ltrr.agent, name) is not None
    assert "AgentLoop" in dir(ltrr.agent)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ltrr.agent.nope  # noqa: B018
