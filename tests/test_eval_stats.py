"""ltrr.eval.stats agrees with scipy and scikit-learn, and handles the degenerate cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps
from sklearn.metrics import ndcg_score

from ltrr._errors import ConfigError, DataError
from ltrr.eval.stats import (
    bootstrap_ci,
    correct_pvalues,
    kendall_tau,
    kendall_tau_rows,
    ndcg_at_k,
    ndcg_rows,
    paired_bootstrap_ci,
    paired_wilcoxon,
    precision_at_1,
)


@pytest.fixture
def utilities():
    rng = np.random.default_rng(7)
    return rng.integers(0, 5, size=80) / 4.0  # coarse, tie-heavy values like F1/EM utilities


# ---- bootstrap ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 123])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_bootstrap_ci_equals_scipy(utilities, seed, confidence):
    ours = bootstrap_ci(utilities, random_state=seed, n_resamples=500, confidence=confidence)
    ref = sps.bootstrap(
        (utilities,),
        np.mean,
        n_resamples=500,
        confidence_level=confidence,
        method="percentile",
        rng=seed,
    )
    assert ours.estimate == pytest.approx(utilities.mean())
    assert ours.low == ref.confidence_interval.low
    assert ours.high == ref.confidence_interval.high
    assert ours.low < ours.estimate < ours.high


def test_bootstrap_ci_is_seeded(utilities):
    a = bootstrap_ci(utilities, random_state=3, n_resamples=200)
    assert a == bootstrap_ci(utilities, random_state=3, n_resamples=200)
    assert a != bootstrap_ci(utilities, random_state=4, n_resamples=200)


def test_bootstrap_ci_degenerate_samples():
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
    assert bootstrap_ci([0.25]) == (0.25, 0.25, 0.25)
    assert all(np.isnan(bootstrap_ci([])))


def test_bootstrap_ci_rejects_bad_input():
    with pytest.raises(DataError, match="NaN"):
        bootstrap_ci([0.1, np.nan])
    with pytest.raises(ConfigError, match="confidence must be in"):
        bootstrap_ci([0.1, 0.2], confidence=95)
    with pytest.raises(ConfigError, match="n_resamples must be an integer >= 1"):
        bootstrap_ci([0.1, 0.2], n_resamples=0)
    with pytest.raises(ConfigError, match="random_state must be"):
        bootstrap_ci([0.1, 0.2], random_state="seed")


def test_paired_bootstrap_equals_scipy_for_a_finite_statistic(utilities):
    other = np.roll(utilities, 3)

    def diff(a, b, axis=-1):
        return np.mean(a, axis=axis) - np.mean(b, axis=axis)

    ours = paired_bootstrap_ci((utilities, other), diff, random_state=5, n_resamples=400)
    ref = sps.bootstrap(
        (utilities, other),
        diff,
        paired=True,
        vectorized=True,
        n_resamples=400,
        method="percentile",
        rng=5,
    )
    assert ours.estimate == pytest.approx(utilities.mean() - other.mean())
    assert ours.low == pytest.approx(ref.confidence_interval.low)
    assert ours.high == pytest.approx(ref.confidence_interval.high)


def test_paired_bootstrap_drops_nan_resamples_of_a_ratio():
    # The denominator is zero in resamples that draw only the first query.
    num = np.array([0.0, 1.0, 1.0, 0.0])
    den = np.array([0.0, 1.0, 2.0, 1.0])

    def ratio(a, b, axis=-1):
        d = np.mean(b, axis=axis)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(d > 0, np.mean(a, axis=axis) / np.where(d > 0, d, 1), np.nan)

    ci = paired_bootstrap_ci((num, den), ratio, random_state=0, n_resamples=300)
    assert ci.estimate == pytest.approx(0.5)
    assert 0.0 <= ci.low <= ci.estimate <= ci.high <= 1.0


# ---- Wilcoxon and corrections ---------------------------------------------------------------


@pytest.mark.parametrize("n", [8, 30, 120])
def test_paired_wilcoxon_equals_scipy(n):
    rng = np.random.default_rng(n)
    a = rng.integers(0, 4, n) / 3.0
    b = np.clip(a + rng.choice([-1 / 3, 0, 0, 1 / 3], n), 0, 1)
    ours = paired_wilcoxon(a, b)
    ref = sps.wilcoxon(a, b)
    assert ours.pvalue == ref.pvalue
    assert ours.statistic == ref.statistic
    assert ours.n_nonzero == int(np.count_nonzero(a - b))


def test_paired_wilcoxon_all_zero_differences_is_p_one():
    res = paired_wilcoxon([0.1, 0.5, 1.0], [0.1, 0.5, 1.0])
    assert (res.statistic, res.pvalue, res.n_nonzero) == (0.0, 1.0, 0)


def test_paired_wilcoxon_counts_float_noise_as_a_tie():
    """0.1 + 0.2 against 0.3: equal in meaning, 5.6e-17 apart in floats; the improved / degraded
    counts call them equal (1e-9), so the test does too (it ranked 20 such pairs to p = 7.7e-6)."""
    assert sps.wilcoxon(np.full(20, 0.3), np.full(20, 0.1 + 0.2)).pvalue < 1e-5  # what scipy alone says
    res = paired_wilcoxon(np.full(20, 0.3), np.full(20, 0.1 + 0.2))
    assert (res.statistic, res.pvalue, res.n_nonzero, res.direction) == (0.0, 1.0, 0, 0)
    a = np.array([0.3, 0.5, 0.9, 0.2, 0.7, 0.1, 0.6])
    b = np.array([0.1 + 0.2, 0.4, 0.3, 0.1, 0.2, 0.3, 0.0])
    snapped = a - b
    snapped[0] = 0.0
    assert paired_wilcoxon(a, b).pvalue == sps.wilcoxon(snapped).pvalue and paired_wilcoxon(a, b).n_nonzero == 6


@pytest.mark.parametrize("zero_method", ["wilcox", "pratt", "zsplit"])
def test_paired_wilcoxon_says_which_side_its_ranks_favour(zero_method):
    """30 gains of 0.01 and 3 losses of 1.0: the ranks favour ``a`` (R+ 465 > R- 96) while the
    mean favours ``b``; ``direction`` is the ranks' side, so a report can tell them apart."""
    a, b = np.array([0.01] * 30 + [-1.0] * 3 + [0.0] * 2), np.zeros(35)
    res = paired_wilcoxon(a, b, zero_method=zero_method)
    assert res.direction == 1 and res.pvalue < 0.01 and a.mean() < b.mean()
    assert paired_wilcoxon(b, a, zero_method=zero_method).direction == -1
    assert paired_wilcoxon([1.0, 0.0], [0.0, 1.0]).direction == 0  # balanced ranks


def test_paired_wilcoxon_rejects_unpaired():
    with pytest.raises(DataError, match="equal lengths"):
        paired_wilcoxon([1.0, 2.0], [1.0])


def test_bonferroni():
    out = correct_pvalues([0.01, 0.2, 0.5], "bonferroni")
    np.testing.assert_allclose(out, [0.03, 0.6, 1.0])


def test_holm_against_a_hand_computed_example():
    # m = 4; sorted p: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone 0.06.
    out = correct_pvalues([0.01, 0.04, 0.03, 0.005], "holm")
    np.testing.assert_allclose(out, [0.03, 0.06, 0.06, 0.02])
    # Capped at 1 and never below the raw value.
    out = correct_pvalues([0.4, 0.6, 0.01], "holm")
    np.testing.assert_allclose(out, [0.8, 0.8, 0.03])


def test_corrections_skip_nan_and_validate():
    out = correct_pvalues([0.01, np.nan, 0.02], "bonferroni")
    np.testing.assert_allclose(out, [0.02, np.nan, 0.04])
    np.testing.assert_allclose(correct_pvalues([0.01, 0.02], "none"), [0.01, 0.02])
    with pytest.raises(ConfigError, match="unknown p-value correction 'bh'"):
        correct_pvalues([0.1], "bh")
    with pytest.raises(DataError, match=r"must lie in \[0, 1\]"):
        correct_pvalues([1.5], "holm")


# ---- ranking metrics ------------------------------------------------------------------------


@pytest.fixture
def gold_and_pred():
    rng = np.random.default_rng(11)
    gold = rng.integers(0, 3, size=(200, 5)) / 2.0  # ties within rows, some constant rows
    pred = rng.integers(0, 4, size=(200, 5)).astype(float)
    return gold, pred


def test_kendall_tau_equals_scipy(gold_and_pred):
    gold, pred = gold_and_pred
    for g, s in zip(gold[:40], pred[:40], strict=True):
        ref = sps.kendalltau(g, s).statistic
        ours = kendall_tau(g, s)
        assert (np.isnan(ours) and np.isnan(ref)) or ours == pytest.approx(ref, abs=1e-12)
    assert np.isnan(kendall_tau([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))


def test_kendall_tau_rows_equals_scipy_row_by_row(gold_and_pred):
    gold, pred = gold_and_pred
    ours = kendall_tau_rows(gold, pred)
    ref = np.array([sps.kendalltau(g, s).statistic for g, s in zip(gold, pred, strict=True)])
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_allclose(ours[~np.isnan(ref)], ref[~np.isnan(ref)], atol=1e-12)
    assert np.isnan(ref).any()  # the fixture covers constant rows


@pytest.mark.parametrize("k", [None, 1, 3])
def test_ndcg_equals_sklearn(gold_and_pred, k):
    gold, pred = gold_and_pred
    assert ndcg_at_k(gold, pred, k) == pytest.approx(ndcg_score(gold, pred, k=k), abs=1e-12)
    rows = ndcg_rows(gold, pred, k)
    ref = np.array([ndcg_score(g[None], s[None], k=k) for g, s in zip(gold, pred, strict=True)])
    np.testing.assert_allclose(rows, ref, atol=1e-12)
    assert rows.mean() == pytest.approx(ndcg_score(gold, pred, k=k), abs=1e-12)


def test_ndcg_validates():
    with pytest.raises(DataError, match="non-negative"):
        ndcg_at_k([[-0.5, 1.0]], [[1.0, 2.0]])
    with pytest.raises(DataError, match="differ in shape"):
        ndcg_at_k([[0.5, 1.0]], [[1.0, 2.0, 3.0]])
    with pytest.raises(ConfigError, match="k must be an integer >= 1"):
        ndcg_at_k([[0.5, 1.0]], [[1.0, 2.0]], k=0)


def test_precision_at_1_counts_gold_ties_as_correct():
    gold = [[0.2, 0.9, 0.9], [1.0, 0.0, 0.0], [0.0, 0.5, 1.0]]
    pred = [[0.0, 0.0, 5.0], [0.0, 1.0, 0.0], [0.0, 0.1, 0.2]]
    assert precision_at_1(gold, pred) == pytest.approx(2 / 3)
    assert precision_at_1([0.0, 1.0], [0.0, 1.0]) == 1.0
    # Tied predicted top scores go to the first arm (numpy argmax).
    assert precision_at_1([1.0, 0.0], [0.5, 0.5]) == 1.0
    assert precision_at_1([0.0, 1.0], [0.5, 0.5]) == 0.0
