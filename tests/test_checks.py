"""ltrr._checks: one check and one wording for "an integer >= 1", "a number in [0, 1]" and the rest.

Unit tier. What each kind of bad value gets: a bool is neither an integer nor a number (``True``
for a count is a mistake), NaN lies in no range, infinity only in a range open on its side, a
string or None is refused with the value repeated; every refusal is one line, ``ConfigError``
unless the caller names another error. The last tests go through public entry points that
accepted a bool or NaN before they used these checks.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ltrr import _checks
from ltrr._checks import (
    check_int,
    check_number,
    in_range,
    is_finite,
    is_int,
    is_number,
    range_words,
)
from ltrr._errors import ConfigError, DataError


def test_the_module_examples_run():
    result = doctest.testmod(_checks)
    assert result.attempted >= 3 and result.failed == 0


@pytest.mark.parametrize("value, ok", [
    (0, True), (-3, True), (np.int64(7), True), (np.uint8(2), True),
    (True, False), (False, False), (np.bool_(True), False),
    (1.0, False), (2.5, False), ("1", False), (None, False), (np.float32(1.0), False),
])
def test_what_counts_as_an_integer(value, ok):
    assert is_int(value) is ok


@pytest.mark.parametrize("value, ok", [
    (0, True), (0.5, True), (np.float32(0.25), True), (np.int64(3), True), (math.inf, True),
    (-math.inf, True), (math.nan, False), (np.float64("nan"), False), (True, False),
    (np.bool_(False), False), ("0.5", False), (None, False), (1 + 0j, False),
])
def test_what_counts_as_a_number(value, ok):
    assert is_number(value) is ok


@pytest.mark.parametrize("value, number, finite", [
    (10**400, True, True),  # past a float's range: math.isnan and math.isfinite would overflow
    (-(10**400), True, True), (1e308, True, True), (np.float32(3.5), True, True),
    (math.inf, True, False), (np.float64("-inf"), True, False), (math.nan, False, False),
    (True, False, False), ("1", False, False),
])
def test_a_finite_number_and_an_integer_of_any_size(value, number, finite):
    assert is_number(value) is number and is_finite(value) is finite


def test_a_huge_or_long_value_is_refused_on_one_short_line():
    with pytest.raises(ConfigError, match=r"^x must be a number, got 1000000000.*\.\.\.$") as info:
        check_number(10**400, "x")  # a float cannot hold it
    assert len(str(info.value)) < 120
    with pytest.raises(ConfigError, match=r"^k must be an integer >= 1, got <int>$"):
        check_int(-(10**5000), "k", low=1)  # more digits than Python prints
    with pytest.raises(ConfigError) as info:
        check_int("a\nlong\n" * 50, "name")
    assert "\n" not in str(info.value) and str(info.value).endswith("...")
    assert check_int(10**400, "count", low=1) == 10**400


@pytest.mark.parametrize("kwargs, words", [
    ({}, ""),
    ({"low": 1}, ">= 1"),
    ({"low": 0, "low_open": True}, "> 0"),
    ({"high": 2}, "<= 2"),
    ({"high": 2, "high_open": True}, "< 2"),
    ({"low": 0, "high": 1}, "in [0, 1]"),
    ({"low": 0, "high": 1, "low_open": True}, "in (0, 1]"),
    ({"low": 0, "high": 1, "high_open": True}, "in [0, 1)"),
    ({"low": 0.5, "high": 1.5, "low_open": True, "high_open": True}, "in (0.5, 1.5)"),
])
def test_ranges_in_words(kwargs, words):
    assert range_words(**kwargs) == words


def test_the_ends_of_a_range_and_nan():
    assert in_range(0, 0, 1) and in_range(1, 0, 1)
    assert not in_range(0, 0, 1, low_open=True) and not in_range(1, 0, 1, high_open=True)
    assert in_range(math.inf, 0) and not in_range(math.inf, 0, 1)
    assert not in_range(math.nan) and not in_range(math.nan, 0) and not in_range(math.nan, None, 1)


def test_a_good_value_comes_back_as_a_plain_int_or_float():
    out = check_int(np.int64(4), "n", low=1)
    assert out == 4 and type(out) is int
    out = check_number(np.float32(0.5), "p", low=0, high=1)
    assert out == 0.5 and type(out) is float
    assert type(check_number(3, "x")) is float
    assert check_int(-5, "any integer") == -5  # no range: every integer
    assert check_number(math.inf, "timeout", low=0, low_open=True) == math.inf


@pytest.mark.parametrize("call, message", [
    (lambda: check_int(0, "DenseRetriever: k", low=1), "DenseRetriever: k must be an integer >= 1, got 0"),
    (lambda: check_int(True, "n_folds", low=2), "n_folds must be an integer >= 2, got True"),
    (lambda: check_int(2.0, "k", low=1), "k must be an integer >= 1, got 2.0"),
    (lambda: check_int("3", "--rounds", low=1, high=3), "--rounds must be an integer in [1, 3], got '3'"),
    (lambda: check_int(None, "seed"), "seed must be an integer, got None"),
    (lambda: check_int(-1, "top_k", low=0, note=" (0: all)"), "top_k must be an integer >= 0 (0: all), got -1"),
    (lambda: check_number(math.nan, "cost", low=0), "cost must be a number >= 0, got nan"),
    (lambda: check_number(math.nan, "weight"), "weight must be a number, got nan"),
    (lambda: check_number(False, "alpha", low=0, high=1), "alpha must be a number in [0, 1], got False"),
    (lambda: check_number(math.inf, "p", low=0, high=1), "p must be a number in [0, 1], got inf"),
    (lambda: check_number(0, "timeout (seconds)", low=0, low_open=True),
     "timeout (seconds) must be a number > 0, got 0"),
    (lambda: check_number(1.0, "calibration_size", low=0, high=1, high_open=True),
     "calibration_size must be a number in [0, 1), got 1.0"),
    (lambda: check_number("0.5", "prior", low=0), "prior must be a number >= 0, got '0.5'"),
])
def test_each_refusal_is_one_config_error_line(call, message):
    with pytest.raises(ConfigError) as info:
        call()
    assert str(info.value) == message and "\n" not in message


def test_the_caller_chooses_the_error():
    with pytest.raises(DataError, match="n_features_in must be an integer >= 1, got '2'"):
        check_int("2", "n_features_in", low=1, error=DataError)

    class Rejected(Exception):
        def __init__(self, message, status=422):
            super().__init__(message)
            self.status = status

    with pytest.raises(Rejected, match="max_tokens must be an integer >= 1") as info:
        check_int(0, "max_tokens", low=1, error=Rejected)
    assert info.value.status == 422


@given(value=st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=3)),
       low=st.one_of(st.none(), st.integers(-5, 5)), high=st.one_of(st.none(), st.integers(-5, 5)),
       low_open=st.booleans(), high_open=st.booleans())
def test_a_check_passes_exactly_the_numbers_in_its_range(value, low, high, low_open, high_open):
    number_ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
                 and (low is None or (value > low if low_open else value >= low))
                 and (high is None or (value < high if high_open else value <= high)))
    try:
        got = check_number(value, "x", low=low, high=high, low_open=low_open, high_open=high_open)
    except ConfigError as e:
        assert not number_ok and str(e).startswith("x must be a number")
    else:
        assert number_ok and got == value
    int_ok = (isinstance(value, int) and not isinstance(value, bool)
              and (low is None or value >= low) and (high is None or value <= high))
    try:
        assert check_int(value, "x", low=low, high=high) == value
    except ConfigError as e:
        assert not int_ok and str(e).startswith("x must be an integer")
    else:
        assert int_ok


def _policy_fit(**params):
    from ltrr.policy import BudgetPolicy

    rng = np.random.default_rng(0)
    X, U = rng.normal(size=(12, 2, 2)), rng.uniform(size=(12, 2))
    BudgetPolicy(budget=0.5, n_steps=2, **params).fit(X, U, np.array([0.0, 1.0]))


def _pool(arm):
    from ltrr.retrieval.pool import Pool

    Pool.from_config({"bm25": {"type": "bm25", "backend": "bm25s"}}, [{"name": "x", "retriever": "bm25", **arm}])


def _pack(**spec):
    from ltrr.packing import PackSpec

    PackSpec.from_mapping({"budget": 100, **spec})


def _openai(**params):
    from ltrr.generation.openai_backend import OpenAIGenerator

    OpenAIGenerator("m", base_url="http://127.0.0.1:9", **params)


def _ndcg(k):
    from ltrr.eval.stats import ndcg_at_k

    ndcg_at_k([[0.5, 1.0]], [[1.0, 2.0]], k=k)


# each of these was accepted before the checks were shared (a bool as a count or a rate, NaN as a
# cost, a prior or a timeout); each is one ConfigError naming the setting now
@pytest.mark.parametrize("call, match", [
    (lambda: _ndcg(True), "k must be an integer >= 1, got True"),
    (lambda: _pool({"cost": math.nan}), r"arms\[0\] \('x'\)\.cost must be a number >= 0, got nan"),
    (lambda: _pool({"k": True}), r"arms\[0\] \('x'\)\.k must be an integer >= 1, got True"),
    (lambda: _pack(prior=math.nan), r"\[context\]\.prior must be a number >= 0, got nan"),
    (lambda: _pack(top_m=True), r"\[context\]\.top_m must be an integer >= 1, got True"),
    (lambda: _policy_fit(learning_rate=True), "BudgetPolicy: learning_rate must be a number > 0, got True"),
    (lambda: _policy_fit(calibration_size=math.nan), r"calibration_size must be a number in \[0, 1\), got nan"),
    (lambda: _openai(timeout=math.nan), "openai generator: timeout must be a number > 0, got nan"),
    (lambda: _openai(max_retries=True), "openai generator: max_retries must be an integer >= 0, got True"),
])
def test_public_entry_points_refuse_a_bool_and_nan(call, match):
    with pytest.raises(ConfigError, match=match):
        call()
