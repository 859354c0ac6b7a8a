"""Conformance checks for rankers: the grouped-ranking contract sklearn's checks do not cover.

`check_ranker` runs every check on an (unfitted) ranker; `iter_ranker_checks` yields them one
by one (``functools.partial`` objects named by their ``func.__name__``) for test
parametrisation. Each check clones the ranker, so fast hyper-parameters set on the instance are
kept. A failed check raises ``AssertionError`` naming what broke.

`sklearn_check_adapter` returns an instance that sklearn's ``parametrize_with_checks`` can
drive: pointwise rankers as they are (they are sklearn regressors, ``qid`` optional);
query-grouped rankers through a subclass whose ``fit`` treats a missing ``qid`` as one query
and rescales labels outside [0, 1] to [0, 1] (sklearn's checks draw targets from arbitrary real
ranges, while listwise rankers only accept gains in [0, 1]). Everything else (validation,
fitted state, pickling, predict) is the ranker's own code.

`make_ranking_data` builds a seeded synthetic grouped data set; `as_ranker_input` turns its
numeric rows into the input a ranker takes (a DataFrame with text columns for rankers whose
sklearn tag ``input_tags.string`` is set), so the same checks run on numeric and text rankers.
Rankers that read text are not run through sklearn's checks, which feed numeric arrays.

Examples
--------
>>> from ltrr.rankers import rankers
>>> from ltrr.rankers.checks import check_ranker
>>> check_ranker(rankers.get("svmrank-pairwise")(random_state=0))
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ltrr._errors import DataError
from ltrr.rankers.sklearn_checks import sklearn_check_adapter  # re-exported

__all__ = [
    "make_ranking_data",
    "check_ranker",
    "iter_ranker_checks",
    "RANKER_CHECKS",
    "sklearn_check_adapter",
    "as_ranker_input",
    "check_fit_returns_self",
    "check_not_fitted",
    "check_group_order_invariance",
    "check_one_item_groups",
    "check_ties",
    "check_unseen_qids",
    "check_nan_features",
    "check_feature_count_mismatch",
    "check_feature_names",
    "check_bad_inputs",
    "check_qid_requirement",
    "check_save_load_roundtrip",
    "check_clone",
    "check_determinism",
    "check_parameter_validation",
    "check_learns_signal",
]


def make_ranking_data(
    n_queries: int = 50,
    n_items: int = 7,
    n_features: int = 5,
    *,
    n_informative: int = 3,
    noise: float = 0.1,
    random_state: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A synthetic grouped ranking data set.

    Each query has ``n_items`` rows (arms) with standard-normal features; the gain is a linear
    function of the first ``n_informative`` features plus Gaussian noise, min-max scaled over
    the data set to [0, 1]. Rows are shuffled, so a query's rows are not contiguous, and query
    ids are non-consecutive ints.

    Returns
    -------
    X : ndarray of shape (n_queries * n_items, n_features)
    y : ndarray of shape (n_queries * n_items,), gains in [0, 1]
    qid : ndarray of shape (n_queries * n_items,), int64

    Examples
    --------
    >>> X, y, qid = make_ranking_data(n_queries=4, n_items=3, random_state=0)
    >>> X.shape, float(y.min()), float(y.max()), len(set(qid.tolist()))
    ((12, 5), 0.0, 1.0, 4)
    """
    rng = np.random.default_rng(random_state)
    n = n_queries * n_items
    X = rng.standard_normal((n, n_features))
    w = rng.uniform(0.5, 1.5, size=min(n_informative, n_features))
    latent = X[:, : len(w)] @ w + noise * rng.standard_normal(n)
    y = (latent - latent.min()) / max(np.ptp(latent), np.finfo(float).tiny)
    qid = np.repeat(1000 + 7 * np.arange(n_queries, dtype=np.int64), n_items)
    perm = rng.permutation(n)
    return X[perm], y[perm], qid[perm]


# ---- helpers -----------------------------------------------------------------------------
def _fail(check: str, ranker: Any, msg: str) -> None:
    raise AssertionError(f"{check} failed for {getattr(ranker, 'name', ranker)!s}: {msg}")


def _expect_raises(check, ranker, exc, match, fn, what):
    import re

    try:
        fn()
    except exc as e:
        if match is not None and not re.search(match, str(e)):
            _fail(check, ranker, f"{what}: raised {type(e).__name__} without {match!r}: {e}")
        return e
    except Exception as e:  # any other exception is the failure we report
        _fail(check, ranker, f"{what}: expected {exc}, got {type(e).__name__}: {e}")
    _fail(check, ranker, f"{what}: expected {exc}, nothing was raised")


def _fresh(ranker):
    from sklearn.base import clone

    return clone(ranker)


def _data(seed: int = 0, n_queries: int = 30):
    return make_ranking_data(n_queries=n_queries, n_items=6, n_features=4, random_state=seed)


def _text_input(ranker) -> bool:
    from sklearn.utils import get_tags

    return bool(get_tags(ranker).input_tags.string)


def as_ranker_input(ranker, X: np.ndarray):
    """The input ``ranker`` takes for the numeric rows ``X``.

    Numeric rankers take ``X`` itself. Rankers that read text (sklearn tag
    ``input_tags.string``) get a DataFrame with the text columns of
    `ltrr.rankers.transformer` (``query_text`` the same for every row, ``arm_text`` a phrase
    that follows the first feature) plus the numeric features as columns ``f0, f1, ...``; equal
    rows give equal texts.
    """
    X = np.asarray(X, dtype=np.float64)
    if not _text_input(ranker):
        return X
    import pandas as pd

    from ltrr.rankers.transformer import ARM_COLUMN, QUERY_COLUMN

    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    words = np.where(np.nan_to_num(X[:, 0]) > 0, "a helpful passage", "an unrelated passage")
    df.insert(0, QUERY_COLUMN, "which passages help answer the question?")
    df.insert(1, ARM_COLUMN, [f"{w} {v:.1f}" for w, v in zip(words, X[:, 0], strict=True)])
    return df


def _fit(ranker, X, y, qid=None, *, no_qid=False):
    if no_qid:
        return _fresh(ranker).fit(as_ranker_input(ranker, X), y)
    return _fresh(ranker).fit(as_ranker_input(ranker, X), y, qid=qid)


def _predict(est, X):
    return np.asarray(est.predict(as_ranker_input(est, X)), dtype=np.float64)


def _rank(est, X, qid):
    return est.rank(as_ranker_input(est, X), qid)


def _allow_nan(ranker) -> bool:
    from sklearn.utils import get_tags

    return bool(get_tags(ranker).input_tags.allow_nan)


def _same_rankings(check, ranker, scores_a, rank_a, scores_b, rank_b):
    """Rankings agree up to ties: the scores read along each ranking are the same."""
    if set(rank_a) != set(rank_b):
        _fail(check, ranker, "rank() returned different query ids")
    for q in rank_a:
        sa, sb = scores_a[rank_a[q]], scores_b[rank_b[q]]
        if not np.allclose(sa, sb, rtol=1e-5, atol=1e-6):
            _fail(check, ranker, f"query {q!r}: rankings differ ({sa} vs {sb})")


# ---- checks ------------------------------------------------------------------------------
def check_fit_returns_self(ranker) -> None:
    """``fit`` returns the estimator itself."""
    X, y, qid = _data()
    est = _fresh(ranker)
    if est.fit(as_ranker_input(ranker, X), y, qid=qid) is not est:
        _fail("check_fit_returns_self", ranker, "fit did not return self")


def check_not_fitted(ranker) -> None:
    """``predict``, ``rank`` and ``save`` raise ``NotFittedError`` before ``fit``."""
    from sklearn.exceptions import NotFittedError

    X, _, qid = _data()
    est = _fresh(ranker)
    with tempfile.TemporaryDirectory(prefix="ltrr-check-") as tmp:
        for what, fn in (
            ("predict", lambda: _predict(est, X)),
            ("rank", lambda: _rank(est, X, qid)),
            ("save", lambda: est.save(tmp)),
        ):
            _expect_raises("check_not_fitted", ranker, NotFittedError, None, fn, what)


def check_group_order_invariance(ranker) -> None:
    """Permuting query groups and rows within groups gives the same per-query rankings."""
    X, y, qid = _data()
    base = _fit(ranker, X, y, qid)
    s0 = _predict(base, X)
    r0 = _rank(base, X, qid)
    rng = np.random.default_rng(1)
    # Reverse the order of the query groups, then shuffle rows inside each group.
    groups = list(dict.fromkeys(qid.tolist()))[::-1]
    perm = np.concatenate([rng.permutation(np.flatnonzero(qid == q)) for q in groups])
    for name, p in (("groups and rows permuted", perm), ("rows reversed", np.arange(len(y))[::-1])):
        est = _fit(ranker, X[p], y[p], qid[p])
        s1 = _predict(est, X)
        if not np.allclose(s0, s1, rtol=1e-5, atol=1e-6):
            _fail(
                "check_group_order_invariance",
                ranker,
                f"{name}: scores changed by up to {np.max(np.abs(s0 - s1)):.3g}",
            )
        _same_rankings("check_group_order_invariance", ranker, s0, r0, s1, _rank(est, X, qid))


def check_one_item_groups(ranker) -> None:
    """Queries with a single row are accepted at fit and rank; all-singleton data fits or
    raises `DataError` (nothing to compare), never another error."""
    X, y, qid = _data()
    # Keep one row of the first five queries, all rows of the others.
    singles = list(dict.fromkeys(qid.tolist()))[:5]
    keep = np.ones(len(y), dtype=bool)
    for q in singles:
        keep[np.flatnonzero(qid == q)[1:]] = False
    est = _fit(ranker, X[keep], y[keep], qid[keep])
    ranking = _rank(est, X[keep], qid[keep])
    for q in singles:
        if len(ranking[q]) != 1:
            _fail("check_one_item_groups", ranker, f"query {q!r} has one row, got {ranking[q]}")
    if not np.isfinite(_predict(est, X)).all():
        _fail("check_one_item_groups", ranker, "non-finite scores")
    first = np.unique(qid, return_index=True)[1]
    try:
        only = _fit(ranker, X[first], y[first], qid[first])
    except DataError:
        return
    except Exception as e:  # any exception is the failure we report
        _fail("check_one_item_groups", ranker, f"all one-row queries: {type(e).__name__}: {e}")
    if not np.isfinite(_predict(only, X)).all():
        _fail("check_one_item_groups", ranker, "all one-row queries: non-finite scores")


def check_ties(ranker) -> None:
    """Tied labels fit; identical rows score identically; ``rank`` is deterministic with ties
    broken by row order."""
    X, y, qid = _data()
    y_tied = np.round(y * 2) / 2  # three label levels: many ties within queries
    est = _fit(ranker, X, y_tied, qid)
    Xt = np.vstack([X[:4], X[[0, 0, 0]]])
    qt = np.array(["a", "a", "b", "b", "a", "b", "a"])
    s = _predict(est, Xt)
    if not (s[0] == s[4] == s[5] == s[6]):
        _fail("check_ties", ranker, f"identical rows got different scores {s[[0, 4, 5, 6]]}")
    r1, r2 = _rank(est, Xt, qt), _rank(est, Xt, qt)
    if any(not np.array_equal(r1[q], r2[q]) for q in r1):
        _fail("check_ties", ranker, "rank() is not deterministic")
    for q, ix in r1.items():
        pos = [i for i in ix.tolist() if i in (0, 4, 5, 6)]
        if pos != sorted(pos):
            _fail("check_ties", ranker, f"tied rows of query {q!r} not in row order: {pos}")


def check_unseen_qids(ranker) -> None:
    """``rank`` works on query ids never seen at fit (ints or strings)."""
    X, y, qid = _data()
    est = _fit(ranker, X, y, qid)
    Xn, _, qn = _data(seed=5, n_queries=4)
    for new in (qn + 10**6, np.char.add("new-", qn.astype(str))):
        ranking = _rank(est, Xn, new)
        if set(ranking) != set(new.tolist()):
            _fail("check_unseen_qids", ranker, "rank() keys are not the given query ids")
        for q, ix in ranking.items():
            if sorted(ix.tolist()) != np.flatnonzero(new == q).tolist():
                _fail("check_unseen_qids", ranker, f"query {q!r}: not a permutation of its rows")


def check_nan_features(ranker) -> None:
    """NaN features: accepted at fit and predict when the ranker's ``allow_nan`` tag is True,
    else `DataError` naming NaN at fit and at predict."""
    X, y, qid = _data()
    Xn = X.copy()
    Xn[np.random.default_rng(2).random(X.shape) < 0.1] = np.nan
    if _allow_nan(ranker):
        est = _fit(ranker, Xn, y, qid)
        if not np.isfinite(_predict(est, Xn)).all():
            _fail("check_nan_features", ranker, "non-finite scores on NaN input")
        return
    _expect_raises(
        "check_nan_features", ranker, DataError, "NaN", lambda: _fit(ranker, Xn, y, qid), "fit"
    )
    est = _fit(ranker, X, y, qid)
    _expect_raises(
        "check_nan_features", ranker, DataError, "NaN", lambda: _predict(est, Xn), "predict"
    )


def check_feature_count_mismatch(ranker) -> None:
    """``predict`` with a different number of features raises `DataError` saying so."""
    X, y, qid = _data()
    est = _fit(ranker, X, y, qid)
    for Xb in (X[:, :-1], np.hstack([X, X[:, :1]])):
        if _text_input(ranker):
            match = r"(?i)feature|column"
        else:  # sklearn's wording, which its own checks also expect
            match = rf"X has {Xb.shape[1]} features.*expecting {X.shape[1]}"
        _expect_raises(
            "check_feature_count_mismatch",
            ranker,
            DataError,
            match,
            lambda Xb=Xb: _predict(est, Xb),
            "predict",
        )


def check_feature_names(ranker) -> None:
    """DataFrame column names are kept in ``feature_names_in_`` and checked at predict."""
    import pandas as pd

    X, y, qid = _data()
    if _text_input(ranker):
        df = as_ranker_input(ranker, X)
    else:
        df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    cols = [str(c) for c in df.columns]
    est = _fresh(ranker).fit(df, y, qid=pd.Series(qid))
    if [str(c) for c in getattr(est, "feature_names_in_", [])] != cols:
        _fail("check_feature_names", ranker, "feature_names_in_ not set from DataFrame columns")
    if not _text_input(ranker):
        from_array = _predict(_fit(ranker, X, y, qid), X)
        if not np.allclose(est.predict(df), from_array, rtol=1e-5, atol=1e-6):
            _fail("check_feature_names", ranker, "DataFrame and array inputs score differently")
    renamed = df.rename(columns={"f0": "other"})
    _expect_raises(
        "check_feature_names",
        ranker,
        DataError,
        r"(?i)feature names|column",
        lambda: est.predict(renamed),
        "predict with renamed columns",
    )


def check_bad_inputs(ranker) -> None:
    """NaN labels, a qid of the wrong length or with missing ids raise `DataError`."""
    X, y, qid = _data()
    y_nan = y.copy()
    y_nan[3] = np.nan
    qid_nan = qid.astype(float)
    qid_nan[0] = np.nan
    cases = (
        ("NaN label", lambda: _fit(ranker, X, y_nan, qid), "y contains NaN"),
        ("short qid", lambda: _fit(ranker, X, y, qid[:-1]), "qid has"),
        ("NaN qid", lambda: _fit(ranker, X, y, qid_nan), "qid contains NaN"),
        ("short y", lambda: _fit(ranker, X, y[:-1], qid), r"(?i)sample|row"),
    )
    for what, fn, match in cases:
        _expect_raises("check_bad_inputs", ranker, DataError, match, fn, what)
    est = _fit(ranker, X, y, qid)
    _expect_raises(
        "check_bad_inputs", ranker, DataError, "qid has", lambda: _rank(est, X, qid[:-1]), "rank"
    )


def check_qid_requirement(ranker) -> None:
    """Rankers with ``requires_qid`` raise `DataError` naming qid when it is missing; the
    others give the same model with or without qid."""
    X, y, qid = _data()
    if getattr(ranker, "requires_qid", True):
        _expect_raises(
            "check_qid_requirement",
            ranker,
            DataError,
            "qid",
            lambda: _fit(ranker, X, y, no_qid=True),
            "fit without qid",
        )
        return
    with_qid = _predict(_fit(ranker, X, y, qid), X)
    without = _predict(_fit(ranker, X, y, no_qid=True), X)
    if not np.allclose(with_qid, without, rtol=1e-5, atol=1e-6):
        _fail("check_qid_requirement", ranker, "a pointwise ranker's model depends on qid")


def check_save_load_roundtrip(ranker) -> None:
    """``save`` then ``load`` (through the base class and the class) gives the same ranker
    and bit-identical scores."""
    from ltrr.rankers.base import BaseRanker

    X, y, qid = _data()
    est = _fit(ranker, X, y, qid)
    expected = _predict(est, X)
    with tempfile.TemporaryDirectory(prefix="ltrr-check-") as tmp:
        est.save(tmp)
        for loader in (BaseRanker.load, type(est).load):
            back = loader(tmp)
            if type(back) is not type(est):
                _fail("check_save_load_roundtrip", ranker, f"loaded a {type(back).__name__}")
            if back.get_params() != est.get_params():
                _fail("check_save_load_roundtrip", ranker, "parameters changed")
            if back.n_features_in_ != est.n_features_in_:
                _fail("check_save_load_roundtrip", ranker, "n_features_in_ changed")
            got = _predict(back, X)
            if not np.array_equal(got, expected):
                _fail(
                    "check_save_load_roundtrip",
                    ranker,
                    f"scores changed by up to {np.max(np.abs(got - expected)):.3g}",
                )


def check_clone(ranker) -> None:
    """``clone`` copies the parameters and drops the fitted state."""
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    X, y, qid = _data()
    est = _fit(ranker, X, y, qid)
    twin = clone(est)
    if twin.get_params() != est.get_params():
        _fail("check_clone", ranker, "clone changed the parameters")
    _expect_raises(
        "check_clone", ranker, NotFittedError, None, lambda: _predict(twin, X), "predict"
    )
    refit = _predict(twin.fit(as_ranker_input(twin, X), y, qid=qid), X)
    if not np.allclose(refit, _predict(est, X), rtol=1e-5, atol=1e-6):
        _fail("check_clone", ranker, "a refitted clone scores differently")


def check_determinism(ranker) -> None:
    """Two fits with the same ``random_state`` give bit-identical scores."""
    if "random_state" not in ranker.get_params():
        _fail("check_determinism", ranker, "no random_state parameter")
    X, y, qid = _data()
    est = _fresh(ranker).set_params(random_state=0)
    a = _predict(_fit(est, X, y, qid), X)
    b = _predict(_fit(est, X, y, qid), X)
    if not np.array_equal(a, b):
        _fail("check_determinism", ranker, f"scores differ by up to {np.max(np.abs(a - b)):.3g}")


class _Invalid:
    """A value no parameter constraint accepts."""

    def __repr__(self) -> str:
        return "<invalid>"


def check_parameter_validation(ranker) -> None:
    """Every constructor parameter has a declared constraint; an invalid value raises
    `ConfigError` at fit naming the parameter and the class."""
    from ltrr._errors import ConfigError

    X, y, qid = _data(n_queries=4)
    constraints = getattr(type(ranker), "param_constraints", {})
    params = ranker.get_params(deep=False)
    missing = sorted(set(params) - set(constraints))
    if missing:
        _fail("check_parameter_validation", ranker, f"no param_constraints for {missing}")
    cls = type(ranker).__name__
    for p in params:
        est = _fresh(ranker).set_params(**{p: _Invalid()})
        _expect_raises(
            "check_parameter_validation",
            ranker,
            ConfigError,
            rf"'{p}' parameter of {cls} must be",
            lambda est=est: est.fit(as_ranker_input(est, X), y, qid=qid),
            f"fit with {p}=<invalid>",
        )


def check_learns_signal(ranker) -> None:
    """On easy data, held-out per-query nDCG@1 beats a random order by a clear margin."""
    from ltrr.rankers.base import mean_ndcg

    X, y, qid = make_ranking_data(n_queries=100, n_items=6, n_features=4, random_state=3)
    test = np.isin(qid, np.unique(qid)[60:])
    Xt, yt, qt = X[test], y[test], qid[test]
    X, y, qid = X[~test], y[~test], qid[~test]
    est = _fit(ranker, X, y, qid)
    got = mean_ndcg(yt, _predict(est, Xt), qt, k=1)
    random = mean_ndcg(yt, np.zeros(len(yt)), qt, k=1)  # ties average: the random expectation
    if got < random + 0.1:
        _fail("check_learns_signal", ranker, f"nDCG@1 {got:.3f} vs random {random:.3f}")


RANKER_CHECKS: tuple[Callable[[Any], None], ...] = (
    check_fit_returns_self,
    check_not_fitted,
    check_group_order_invariance,
    check_one_item_groups,
    check_ties,
    check_unseen_qids,
    check_nan_features,
    check_feature_count_mismatch,
    check_feature_names,
    check_bad_inputs,
    check_qid_requirement,
    check_save_load_roundtrip,
    check_clone,
    check_determinism,
    check_parameter_validation,
    check_learns_signal,
)


def iter_ranker_checks(ranker) -> Iterator[functools.partial]:
    """Yield each conformance check bound to ``ranker`` (``partial.func.__name__`` names it)."""
    for check in RANKER_CHECKS:
        yield functools.partial(check, ranker)


def check_ranker(ranker) -> None:
    """Run every conformance check on ``ranker``; raise ``AssertionError`` on the first failure."""
    for check in iter_ranker_checks(ranker):
        check()
