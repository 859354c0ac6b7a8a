"""Statistics for router evaluation: bootstrap CIs, paired tests, corrections, ranking metrics.

Every function here delegates to scipy or scikit-learn and is tested to give the same numbers;
the thin layer adds input checks, the degenerate cases (an empty sample, all-zero differences,
a constant ranking) and one documented choice per function:

- `bootstrap_ci`: percentile bootstrap of the mean (``scipy.stats.bootstrap``, method
  ``"percentile"``). Percentile rather than BCa because BCa's jackknife holds an n x n array
  (gigabytes for tens of thousands of test queries) and is undefined for the many degenerate
  samples of 0/1 utilities; it is also what ``ltrr.labels.summarise`` reports, so label and
  evaluation CIs agree.
- `paired_wilcoxon`: two-sided Wilcoxon signed-rank test (``scipy.stats.wilcoxon``, zero
  differences dropped, the ``"wilcox"`` method, as PyTerrier does). A difference within 1e-9 is
  zero, as the improved / degraded / equal counts count it (two utilities equal in meaning but
  summed in another order differ by float noise, which a rank test would otherwise rank). When
  every difference is zero the test has nothing to rank: the result is p = 1.0, statistic 0.0.
  It also says which way the signed ranks lean (``direction``): a rank test can reject while the
  mean difference points the other way (many small gains against a few large losses), and the
  tables mark such a result apart.
- `correct_pvalues`: Bonferroni and Holm family-wise corrections.
- `kendall_tau`: Kendall's tau-b (``scipy.stats.kendalltau``); NaN when either ranking is
  constant.
- `precision_at_1`: is the top-scored arm among the gold-best arms (ties at the top count as
  correct).
- `ndcg_at_k`: ``sklearn.metrics.ndcg_score`` (ties in the predicted scores are averaged).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError

__all__ = [
    "CI",
    "WilcoxonResult",
    "bootstrap_ci",
    "paired_bootstrap_ci",
    "paired_wilcoxon",
    "correct_pvalues",
    "CORRECTIONS",
    "kendall_tau",
    "precision_at_1",
    "ndcg_at_k",
    "kendall_tau_rows",
    "ndcg_rows",
]

# declared with the [eval] table that names one (`ltrr.eval.section`), so the config checks it on load
from ltrr.eval.section import CORRECTIONS


class CI(NamedTuple):
    """A point estimate with the bounds of its confidence interval."""

    estimate: float
    low: float
    high: float


class WilcoxonResult(NamedTuple):
    """Result of `paired_wilcoxon`: statistic, two-sided p-value, number of non-zero pairs, and
    the side the signed ranks favour (+1: ``a``, the positive rank sum is larger; -1: ``b``; 0:
    balanced or no difference)."""

    statistic: float
    pvalue: float
    n_nonzero: int
    direction: int = 0


def _rng(random_state) -> np.random.Generator:
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, (int, np.integer)):
        return np.random.default_rng(random_state)
    raise ConfigError(
        f"random_state must be an int, None or a numpy Generator, got {type(random_state).__name__}"
    )


def _check_bootstrap_params(n_resamples: int, confidence: float) -> None:
    check_int(n_resamples, "n_resamples", low=1)
    if not 0.0 < float(confidence) < 1.0:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence!r}")


def _vector(values, what: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise DataError(f"{what} must be numbers, got {type(values).__name__}") from None
    if arr.ndim != 1:
        raise DataError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise DataError(f"{what} holds {int(np.isnan(arr).sum())} NaN value(s); drop them first")
    return arr


# Resamples are drawn in batches of at most this many values, so that memory stays bounded
# for large test sets; small samples use one batch, exactly as scipy's default call does.
_MAX_BATCH_VALUES = 4_000_000


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    random_state=0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
) -> CI:
    """Mean of ``values`` with a percentile-bootstrap confidence interval.

    Equal to ``scipy.stats.bootstrap((values,), np.mean, method="percentile",
    rng=random_state, n_resamples=n_resamples, confidence_level=confidence)``. An empty sample
    gives NaNs; a sample of one value, or of equal values, gives a zero-width interval.

    Examples
    --------
    >>> ci = bootstrap_ci([0.0, 1.0, 1.0, 0.0, 1.0], random_state=0)
    >>> round(ci.estimate, 2), ci.low <= ci.estimate <= ci.high
    (0.6, True)
    """
    from scipy.stats import bootstrap

    _check_bootstrap_params(n_resamples, confidence)
    x = _vector(values, "bootstrap values")
    if len(x) == 0:
        return CI(float("nan"), float("nan"), float("nan"))
    m = float(x.mean())
    if len(x) < 2 or np.all(x == x[0]):
        return CI(m, m, m)
    batch = max(1, min(int(n_resamples), _MAX_BATCH_VALUES // len(x)))
    res = bootstrap(
        (x,),
        np.mean,
        n_resamples=int(n_resamples),
        batch=batch,
        confidence_level=confidence,
        method="percentile",
        rng=_rng(random_state),
    )
    return CI(m, float(res.confidence_interval.low), float(res.confidence_interval.high))


def paired_bootstrap_ci(
    samples: Sequence[Sequence[float] | np.ndarray],
    statistic: Callable[..., np.ndarray],
    random_state=0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
) -> CI:
    """Percentile-bootstrap CI of a statistic of several paired samples (queries resampled jointly).

    ``statistic(*samples, axis=-1)`` must be vectorised like scipy's. Resamples where the
    statistic is NaN (e.g. a ratio with a zero denominator) are dropped from the percentiles;
    if more than half are NaN the interval is NaN.
    """
    from scipy.stats import DegenerateDataWarning, bootstrap

    _check_bootstrap_params(n_resamples, confidence)
    xs = [_vector(s, "bootstrap sample") for s in samples]
    if len({len(x) for x in xs}) > 1:
        raise DataError(f"paired samples must have equal lengths, got {[len(x) for x in xs]}")
    est = float(statistic(*xs, axis=-1))
    n = len(xs[0])
    if n < 2:
        return CI(est, est, est) if n == 1 else CI(float("nan"), float("nan"), float("nan"))
    batch = max(1, min(int(n_resamples), _MAX_BATCH_VALUES // (n * len(xs))))
    with warnings.catch_warnings():
        # A constant or partly NaN bootstrap distribution (e.g. the oracle router's headroom is
        # 1 in every resample) is expected here and handled below; scipy's warning is noise.
        warnings.simplefilter("ignore", DegenerateDataWarning)
        res = bootstrap(
            tuple(xs),
            statistic,
            paired=True,
            vectorized=True,
            n_resamples=int(n_resamples),
            batch=batch,
            confidence_level=confidence,
            method="percentile",
            rng=_rng(random_state),
        )
    dist = np.asarray(res.bootstrap_distribution, dtype=float)
    ok = dist[np.isfinite(dist)]
    if len(ok) * 2 < len(dist):
        return CI(est, float("nan"), float("nan"))
    alpha = (1.0 - confidence) / 2.0
    # scipy's percentile interval is NaN as soon as one resample is; we take the percentiles
    # of the finite resamples instead, which is what the interval means for a ratio statistic.
    return CI(
        est, float(np.percentile(ok, 100 * alpha)), float(np.percentile(ok, 100 * (1 - alpha)))
    )


def paired_wilcoxon(a, b, *, zero_method: str = "wilcox", atol: float = 1e-9) -> WilcoxonResult:
    """Two-sided Wilcoxon signed-rank test of the paired samples ``a`` and ``b``.

    Equal to ``scipy.stats.wilcoxon(a - b, zero_method=zero_method)`` once the differences
    within ``atol`` are set to zero (ties, as `ltrr.eval.routing` counts them), except that when
    every difference is zero (nothing to rank; scipy warns and divides by zero) the result is
    statistic 0.0 and p = 1.0: no evidence of a difference. ``direction`` is the sign of the
    positive minus the negative rank sum, ranked as ``zero_method`` ranks.

    Examples
    --------
    >>> paired_wilcoxon([1, 2, 3], [1, 2, 3]).pvalue
    1.0
    >>> paired_wilcoxon([0.3] * 20, [0.1 + 0.2] * 20)  # float noise is no difference
    WilcoxonResult(statistic=0.0, pvalue=1.0, n_nonzero=0, direction=0)
    >>> w = paired_wilcoxon([0.01] * 30 + [-1.0] * 3, [0.0] * 33)  # ranks and mean disagree
    >>> round(w.pvalue, 6), w.direction, 0.01 * 30 - 3 < 0
    (0.000273, 1, True)
    """
    from scipy.stats import rankdata, wilcoxon

    x = _vector(a, "wilcoxon sample a")
    y = _vector(b, "wilcoxon sample b")
    if len(x) != len(y):
        raise DataError(f"paired samples must have equal lengths, got {len(x)} and {len(y)}")
    d = x - y
    d[np.abs(d) <= atol] = 0.0
    nonzero = int(np.count_nonzero(d))
    if nonzero == 0:
        return WilcoxonResult(0.0, 1.0, 0, 0)
    res = wilcoxon(d, zero_method=zero_method, alternative="two-sided")
    ranked = d[d != 0] if zero_method == "wilcox" else d  # pratt and zsplit rank the zeros too
    r = rankdata(np.abs(ranked))
    direction = int(np.sign(r[ranked > 0].sum() - r[ranked < 0].sum()))
    return WilcoxonResult(float(res.statistic), float(res.pvalue), nonzero, direction)


def correct_pvalues(p, method: str = "bonferroni") -> np.ndarray:
    """Adjust p-values for multiple comparisons (family-wise error rate).

    Parameters
    ----------
    p : array-like of float
        Raw p-values of one family of tests (e.g. every router against the best single arm in
        one split). NaN entries (tests not run) stay NaN and do not count in the family size.
    method : {"bonferroni", "holm", "none"}
        Bonferroni multiplies by the family size m; Holm's step-down method multiplies the
        i-th smallest p-value by (m - i + 1) and keeps the adjusted values monotone. Both are
        capped at 1.

    Examples
    --------
    >>> correct_pvalues([0.01, 0.04, 0.03, 0.005], "holm").round(3).tolist()
    [0.03, 0.06, 0.06, 0.02]
    """
    if method not in CORRECTIONS:
        raise ConfigError(
            f"unknown p-value correction {method!r}; choose one of: {', '.join(CORRECTIONS)}"
        )
    arr = np.asarray(p, dtype=float).reshape(-1)
    finite = ~np.isnan(arr)
    if ((arr[finite] < 0) | (arr[finite] > 1)).any():
        raise DataError(f"p-values must lie in [0, 1], got {arr[finite].tolist()}")
    out = arr.copy()
    m = int(finite.sum())
    if m == 0 or method == "none":
        return out
    vals = arr[finite]
    if method == "bonferroni":
        out[finite] = np.minimum(vals * m, 1.0)
        return out
    # Holm written here because statsmodels (which has multipletests) is not a dependency and
    # the method is five lines: sort, multiply by (m - rank), running maximum, cap at 1.
    order = np.argsort(vals, kind="stable")
    adj = np.minimum(np.maximum.accumulate(vals[order] * (m - np.arange(m))), 1.0)
    res = np.empty(m)
    res[order] = adj
    out[finite] = res
    return out


def _pair(gold, pred, what: str) -> tuple[np.ndarray, np.ndarray]:
    g = np.asarray(gold, dtype=float)
    s = np.asarray(pred, dtype=float)
    if g.shape != s.shape:
        raise DataError(
            f"{what}: gold and predicted scores differ in shape: {g.shape} vs {s.shape}"
        )
    if g.ndim not in (1, 2) or g.shape[-1] == 0:
        raise DataError(
            f"{what}: expected a vector or a (queries x arms) matrix, got shape {g.shape}"
        )
    if np.isnan(g).any() or np.isnan(s).any():
        raise DataError(f"{what}: scores hold NaN values")
    return g, s


def kendall_tau(gold_scores, pred_scores) -> float:
    """Kendall's tau-b between a gold and a predicted scoring of the same arms.

    Equal to ``scipy.stats.kendalltau(gold_scores, pred_scores).statistic``; NaN when either
    scoring is constant (no ranking to compare).

    Examples
    --------
    >>> kendall_tau([0.1, 0.5, 0.9], [1.0, 2.0, 3.0])
    1.0
    """
    from scipy.stats import kendalltau

    g, s = _pair(gold_scores, pred_scores, "kendall_tau")
    if g.ndim != 1:
        raise DataError("kendall_tau compares one ranking; loop over queries for a matrix")
    if len(g) < 2 or np.all(g == g[0]) or np.all(s == s[0]):
        return float("nan")
    return float(kendalltau(g, s).statistic)


def precision_at_1(gold_scores, pred_scores, *, atol: float = 1e-9) -> float:
    """Share of queries whose top-scored arm is among the gold-best arms.

    For a matrix (queries x arms) the mean over rows; for a vector, 1.0 or 0.0. The predicted
    top arm is the first arm with the highest predicted score (column order breaks ties, as
    ``numpy.argmax`` does); gold ties at the top all count as correct.

    Examples
    --------
    >>> precision_at_1([[0.2, 0.9, 0.9], [1.0, 0.0, 0.0]], [[0, 1, 0], [0, 1, 0]])
    0.5
    """
    g, s = _pair(gold_scores, pred_scores, "precision_at_1")
    g2, s2 = np.atleast_2d(g), np.atleast_2d(s)
    top = np.argmax(s2, axis=1)
    hit = g2[np.arange(len(g2)), top] >= g2.max(axis=1) - atol
    return float(hit.mean())


def ndcg_at_k(gold_gains, pred_scores, k: int | None = None) -> float:
    """nDCG@k of predicted scores against non-negative gold gains (mean over queries).

    Equal to ``sklearn.metrics.ndcg_score`` (a vector is one query). A query whose gold gains
    are all zero scores 0 in scikit-learn; callers that want to skip such queries drop them
    first.

    Examples
    --------
    >>> round(ndcg_at_k([1.0, 0.0, 0.5], [3.0, 1.0, 2.0], k=3), 3)
    1.0
    """
    from sklearn.metrics import ndcg_score

    g, s = _pair(gold_gains, pred_scores, "ndcg_at_k")
    if (g < 0).any():
        raise DataError("ndcg_at_k: gold gains must be non-negative (use the normalised gains)")
    if k is not None:
        check_int(k, "k", low=1)
    g2, s2 = np.atleast_2d(g), np.atleast_2d(s)
    if g2.shape[1] < 2:
        raise DataError("ndcg_at_k needs at least two arms per query")
    return float(ndcg_score(g2, s2, k=k))


# Per-query (row-wise) versions of kendall_tau and ndcg_at_k. scipy and scikit-learn take one
# ranking per call (about 0.6 and 1.2 ms each), which costs minutes over every router, split
# and test query; with a handful of arms per query the pairwise formulas vectorise over rows.
# tests/test_eval_stats.py checks them equal to scipy.stats.kendalltau and
# sklearn.metrics.ndcg_score row by row, ties included.


def kendall_tau_rows(gold_scores, pred_scores) -> np.ndarray:
    """Kendall's tau-b of each row of two (queries x arms) matrices.

    Row by row equal to ``scipy.stats.kendalltau``; NaN for a row where either side is constant.

    Examples
    --------
    >>> kendall_tau_rows([[1, 2, 3], [1, 1, 1]], [[1, 2, 3], [3, 2, 1]]).tolist()
    [1.0, nan]
    """
    g, s = _pair(gold_scores, pred_scores, "kendall_tau_rows")
    g, s = np.atleast_2d(g), np.atleast_2d(s)
    i, j = np.triu_indices(g.shape[1], k=1)
    dg = np.sign(g[:, i] - g[:, j])
    ds = np.sign(s[:, i] - s[:, j])
    # tau-b = (concordant - discordant) / sqrt(pairs untied in gold * pairs untied in pred)
    denom = np.sqrt(np.count_nonzero(dg, axis=1) * np.count_nonzero(ds, axis=1).astype(float))
    num = (dg * ds).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.nan)


def ndcg_rows(gold_gains, pred_scores, k: int | None = None) -> np.ndarray:
    """nDCG@k of each row of two (queries x arms) matrices.

    Row by row equal to ``sklearn.metrics.ndcg_score`` (ties in the predicted scores averaged,
    a row of all-zero gains scores 0), so ``ndcg_rows(G, S, k).mean() == ndcg_score(G, S, k=k)``.

    Examples
    --------
    >>> ndcg_rows([[1.0, 0.0, 0.5]], [[3.0, 1.0, 2.0]], k=2).round(3).tolist()
    [1.0]
    """
    g, s = _pair(gold_gains, pred_scores, "ndcg_rows")
    g, s = np.atleast_2d(g), np.atleast_2d(s)
    if (g < 0).any():
        raise DataError("ndcg_rows: gold gains must be non-negative (use the normalised gains)")
    n = g.shape[1]
    discount = 1.0 / np.log2(np.arange(n) + 2.0)
    if k is not None:
        discount[int(k) :] = 0.0
    # Tied predicted scores share the mean gain of their tie group (sklearn's tie averaging).
    same = s[:, :, None] == s[:, None, :]
    avg_gain = (same * g[:, None, :]).sum(axis=2) / same.sum(axis=2)
    order = np.argsort(-s, axis=1, kind="stable")
    dcg = (np.take_along_axis(avg_gain, order, axis=1) * discount).sum(axis=1)
    idcg = (-np.sort(-g, axis=1) * discount).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)
