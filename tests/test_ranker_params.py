"""The rankers' parameter constraints (ltrr.rankers.params): what each form accepts, the
message a bad value gets, declarations checked when a class is defined, and sklearn's
skip_parameter_validation setting honoured."""

from __future__ import annotations

from numbers import Integral, Real
from typing import ClassVar

import numpy as np
import pytest
import sklearn
from hypothesis import given
from hypothesis import strategies as st

from ltrr._errors import ConfigError, DataError
from ltrr.rankers import LambdaMARTRanker, RankSVMRanker, rankers
from ltrr.rankers._validation import num_rows
from ltrr.rankers.base import BaseRanker
from ltrr.rankers.checks import make_ranking_data
from ltrr.rankers.params import (
    Interval,
    RankerParameterError,
    StrOptions,
    check_params,
    checked_fit,
    satisfies,
)


@pytest.mark.parametrize(
    "interval, inside, outside",
    [
        (Interval(Integral, 1, None, closed="left"), [1, 2, np.int64(7), 10**12], [0, -1, 1.0, 2.5]),
        (Interval(Real, 0, None, closed="neither"), [1e-300, 1, 0.5, np.float32(3)], [0, 0.0, -1e-9]),
        (Interval(Real, 0, 1, closed="right"), [1, 1.0, 0.25], [0, 0.0, 1.0000001]),
        (Interval(Real, 0, 1, closed="left"), [0, 0.0, 0.999], [1, 1.0, -0.1]),
        (Interval(Integral, 2, 31, closed="both"), [2, 31, 16], [1, 32, 2.0]),
        (Interval(Integral, -1, None, closed="left"), [-1, 0, 5], [-2]),
    ],
    ids=str,
)
def test_an_interval_takes_its_kind_between_its_bounds(interval, inside, outside):
    assert [v for v in inside if not interval.accepts(v)] == []
    assert [v for v in outside if interval.accepts(v)] == []


@pytest.mark.parametrize("value", [True, False, np.bool_(True), float("nan"), "3", None, [1], 1j])
def test_an_interval_refuses_bools_nan_and_non_numbers(value):
    # A bool is not a number here (sklearn's Interval takes True as the int 1).
    for iv in (Interval(Integral, 0, None, closed="left"), Interval(Real, None, None, closed="neither")):
        assert not iv.accepts(value)


@given(
    lo=st.integers(-50, 50),
    width=st.integers(1, 50),
    closed=st.sampled_from(["left", "right", "both", "neither"]),
    val=st.floats(-120, 120, allow_nan=False),
)
def test_an_interval_agrees_with_its_bounds(lo, width, closed, val):
    hi = lo + width
    left_ok = val > lo or (val == lo and closed in ("left", "both"))
    right_ok = val < hi or (val == hi and closed in ("right", "both"))
    assert Interval(Real, lo, hi, closed=closed).accepts(val) == (left_ok and right_ok)


def test_messages_are_worded_as_sklearn_words_them_and_list_options_sorted():
    assert str(Interval(Integral, 1, None, closed="left")) == "an int in the range [1, inf)"
    assert str(Interval(Real, 0, 1, closed="right")) == "a float in the range (0.0, 1.0]"
    assert str(Interval(Real, None, 0, closed="neither")) == "a float in the range (-inf, 0.0)"
    # sklearn lists a StrOptions in set order, which changes with string hashing; sorted here
    assert str(StrOptions({"mean", "learned", "error"})) == "a str among {'error', 'learned', 'mean'}"
    many = {f"option-{i:02d}" for i in range(30)}  # set order is sorted by chance 1 in 30! here
    assert str(StrOptions(many)) == f"a str among {{{', '.join(repr(o) for o in sorted(many))}}}"


@pytest.mark.parametrize(
    "constraint, good, bad",
    [
        ("random_state", [None, 0, 2**32 - 1, np.random.RandomState(0)], [-1, 2**32, 1.5, True, "0"]),
        ("verbose", [0, 3, True, False, np.bool_(False)], [-1, 0.5, None]),
        ("boolean", [True, np.bool_(False)], [0, 1, None, "yes"]),
        ("array-like", [[1, 2], (3,), np.arange(2), []], ["abc", 3, None, np.float64(1)]),
        (None, [None], [0, ""]),
        (str, ["", "cpu"], [b"cpu", 0]),
    ],
    ids=["random_state", "verbose", "boolean", "array-like", "None", "str"],
)
def test_each_named_form_takes_what_it_says(constraint, good, bad):
    assert [v for v in good if not satisfies(v, constraint)] == []
    assert [v for v in bad if satisfies(v, constraint)] == []


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Interval(float, 0, 1, closed="both"), "kind must be numbers.Integral"),
        (lambda: Interval(Real, 0, 1, closed="open"), "closed must be one of"),
        (lambda: Interval(Integral, None, 3, closed="left"), "unbounded left side cannot be closed"),
        (lambda: Interval(Integral, 0.5, 3, closed="right"), "left bound 0.5 is not of its kind"),
        (lambda: Interval(Real, 2, 1, closed="both"), "right bound 1 must exceed"),
        (lambda: StrOptions(set()), "non-empty set of strings"),
        (lambda: StrOptions({"a", 1}), "non-empty set of strings"),
    ],
)
def test_a_malformed_constraint_is_refused_when_built(make, message):
    with pytest.raises((TypeError, ValueError), match=message):
        make()


@pytest.mark.parametrize(
    "constraints, message",
    [
        ({"C": ["a float"]}, r"param_constraints\['C'\]: unknown constraint 'a float'"),
        ({"C": [1.0]}, r"unknown constraint 1.0"),
        ({"C": []}, r"param_constraints\['C'\] must be a non-empty list"),
        ({"C": Interval(Real, 0, 1, closed="both")}, "must be a non-empty list"),
    ],
)
def test_a_ranker_class_with_an_unknown_constraint_fails_when_defined(constraints, message):
    with pytest.raises(TypeError, match=message):
        type("Broken", (RankSVMRanker,), {"param_constraints": constraints})


def test_a_bad_value_is_one_parameter_error_naming_parameter_class_allowed_and_received():
    X, y, qid = make_ranking_data(n_queries=4, n_items=3, n_features=2, random_state=0)
    with pytest.raises(RankerParameterError) as info:
        RankSVMRanker(C=-1).fit(X, y, qid=qid)
    assert str(info.value) == (
        "The 'C' parameter of RankSVMRanker must be a float in the range (0.0, inf). Got -1 instead."
    )
    # one error a caller can catch as ltrr's ConfigError or as sklearn callers do
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, TypeError)
    with pytest.raises(RankerParameterError, match=r"'n_jobs' parameter of LambdaMARTRanker must be "
                       r"an instance of 'Integral' or None\. Got 'two' instead\."):
        LambdaMARTRanker(n_jobs="two").fit(X, y, qid=qid)


def test_every_registered_ranker_checks_every_parameter():
    for name in rankers.names():
        cls = rankers.get(name)
        assert set(cls().get_params(deep=False)) <= set(cls.param_constraints), name


def test_sklearns_skip_parameter_validation_is_honoured_and_fit_bodies_run_with_it():
    seen = []

    class Probe(BaseRanker):
        param_constraints: ClassVar[dict] = {"alpha": [Interval(Real, 0, None, closed="left")]}

        def __init__(self, alpha=1.0):
            self.alpha = alpha

        @checked_fit
        def fit(self, X, y, qid=None):
            seen.append(sklearn.get_config()["skip_parameter_validation"])
            return self

    with pytest.raises(RankerParameterError):
        Probe(alpha=-1).fit(None, None)
    assert seen == []
    Probe(alpha=2).fit(None, None)
    with sklearn.config_context(skip_parameter_validation=True):
        Probe(alpha=-1).fit(None, None)
    assert seen == [True, True]  # nested estimators do not check their parameters again
    assert sklearn.get_config()["skip_parameter_validation"] is False
    with pytest.raises(RankerParameterError):
        check_params(Probe(alpha=float("nan")))


def test_loading_a_saved_ranker_with_a_bad_parameter_is_a_data_error(tmp_path):
    X, y, qid = make_ranking_data(n_queries=4, n_items=3, n_features=2, random_state=0)
    folder = RankSVMRanker(random_state=0).fit(X, y, qid=qid).save(tmp_path / "r")
    meta = (folder / "ranker.json").read_text().replace('"C": 1.0', '"C": -3.0')
    assert '"C": -3.0' in meta
    (folder / "ranker.json").write_text(meta)
    with pytest.raises(DataError, match=r"parameters do not fit RankSVMRanker: The 'C' parameter"):
        BaseRanker.load(folder)


@pytest.mark.parametrize(
    "X, n",
    [
        ([[1, 2], [3, 4], [5, 6]], 3),
        (np.zeros((4, 2)), 4),
        (np.zeros(0), 0),
        (np.float64(1.0), None),
        (np.array(5), None),
        ("text", None),
        (object(), None),
    ],
    ids=["list", "array", "empty", "numpy-scalar", "0-d", "str", "object"],
)
def test_num_rows(X, n):
    assert num_rows(X) == n


def test_num_rows_reads_dataframes_and_sparse_matrices():
    pd = pytest.importorskip("pandas")
    scipy_sparse = pytest.importorskip("scipy.sparse")
    assert num_rows(pd.DataFrame({"a": [1, 2]})) == 2
    assert num_rows(scipy_sparse.csr_matrix(np.eye(3))) == 3
