"""Per-query outcomes of a router's choices, and their aggregation into one result row.

The layer under `ltrr.eval.routing` (whose docstring defines the metrics): the utility matrix
``U`` (`utility_matrix`), a router's output pivoted (`scores_from_long`), the normalised gains,
the best single arm of the training queries, `per_query_outcomes` (one row per test query) and
`summarise_outcomes` (bootstrap CIs, the headroom captured, the Wilcoxon test against the best
single arm, ranking quality, retrieval necessity and cost). Split from ``routing.py`` to keep
each module short; `ltrr.eval.routing` re-exports every public name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError
from ltrr.eval.stats import (
    bootstrap_ci,
    kendall_tau_rows,
    ndcg_rows,
    paired_bootstrap_ci,
    paired_wilcoxon,
)

__all__ = [
    "ATOL",
    "RESULT_COLUMNS",
    "utility_matrix",
    "scores_from_long",
    "normalised_gains",
    "best_single_arm",
    "per_query_outcomes",
    "summarise_outcomes",
]

ATOL = 1e-9

RESULT_COLUMNS = [
    "split",
    "family",
    "pooled",
    "router",
    "n_train",
    "n_test",
    "n_informative",
    "mean_utility",
    "ci_low",
    "ci_high",
    "best_single_arm",
    "best_single_utility",
    "best_single_ci_low",
    "best_single_ci_high",
    "oracle_utility",
    "oracle_ci_low",
    "oracle_ci_high",
    "headroom",
    "n_headroom",
    "headroom_captured",
    "headroom_ci_low",
    "headroom_ci_high",
    "noise_floor",
    "above_noise_floor",
    "wilcoxon_statistic",
    "p_value",
    "p_adjusted",
    "correction",
    "significant",
    "direction",
    "improved",
    "degraded",
    "equal",
    "has_scores",
    "kendall_tau",
    "p_at_1",
    "ndcg_at_k",
    "k",
    "necessity_accuracy",
    "retrieval_rate",
    "mean_cost",
]


def utility_matrix(
    labels: pd.DataFrame,
    *,
    value: str = "utility",
    arms: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Pivot a long labels table (``qid, arm, <value>[, failed]``) into queries x arms.

    Queries with a failed item or a missing value are dropped (complete cases only, as in
    ``ltrr.labels.summarise``). Columns follow ``arms`` if given, else first appearance.

    Examples
    --------
    >>> labels = pd.DataFrame({"qid": ["q1", "q1", "q2", "q2"], "arm": ["none", "bm25"] * 2,
    ...                        "utility": [0.0, 1.0, 0.5, 0.5]})
    >>> utility_matrix(labels).to_dict("index")
    {'q1': {'none': 0.0, 'bm25': 1.0}, 'q2': {'none': 0.5, 'bm25': 0.5}}
    """
    if not isinstance(labels, pd.DataFrame):
        raise DataError(f"labels must be a pandas DataFrame, got {type(labels).__name__}")
    missing = [c for c in ("qid", "arm", value) if c not in labels.columns]
    if missing:
        raise DataError(
            f"labels table is missing column(s) {', '.join(missing)}; it has "
            f"{', '.join(map(str, labels.columns))}"
        )
    df = labels.copy()
    df["qid"] = df["qid"].astype(str)
    df["arm"] = df["arm"].astype(str)
    if df.duplicated(["qid", "arm"]).any():
        row = df[df.duplicated(["qid", "arm"])].iloc[0]
        raise DataError(f"labels: duplicate (qid, arm) ({row['qid']!r}, {row['arm']!r})")
    bad = pd.to_numeric(df[value], errors="coerce").isna()
    if "failed" in df.columns:
        bad |= df["failed"].astype(bool)
    bad_q = set(df.loc[bad, "qid"])
    order = list(arms) if arms is not None else list(dict.fromkeys(df["arm"]))
    unknown = [a for a in order if a not in set(df["arm"])]
    if unknown:
        raise DataError(f"labels have no rows for arm(s) {', '.join(unknown)}")
    wide = df.pivot(index="qid", columns="arm", values=value).reindex(columns=order)
    wide = wide.apply(pd.to_numeric, errors="coerce").astype(float)
    wide = wide[~wide.index.isin(bad_q)].dropna()
    wide = wide.reindex(list(dict.fromkeys(q for q in df["qid"] if q in wide.index)))
    wide.index.name, wide.columns.name = "qid", None
    return wide


def scores_from_long(df: pd.DataFrame, *, score: str = "score") -> pd.DataFrame:
    """Pivot a long ``qid, arm, <score>`` table into a router score matrix (qid x arm).

    Examples
    --------
    >>> long = pd.DataFrame({"qid": ["q1", "q1"], "arm": ["a", "b"], "score": [0.2, 0.7]})
    >>> scores_from_long(long).loc["q1"].tolist()
    [0.2, 0.7]
    """
    missing = [c for c in ("qid", "arm", score) if c not in df.columns]
    if missing:
        raise DataError(f"router scores table is missing column(s) {', '.join(missing)}")
    d = df.assign(qid=df["qid"].astype(str), arm=df["arm"].astype(str))
    if d.duplicated(["qid", "arm"]).any():
        row = d[d.duplicated(["qid", "arm"])].iloc[0]
        raise DataError(f"router scores: duplicate (qid, arm) ({row['qid']!r}, {row['arm']!r})")
    wide = d.pivot(index="qid", columns="arm", values=score).astype(float)
    wide = wide.reindex(columns=list(dict.fromkeys(d["arm"])))
    wide.index.name, wide.columns.name = "qid", None
    return wide


def normalised_gains(U: pd.DataFrame) -> pd.DataFrame:
    """Per-query min-max normalised gains of a utility matrix (``norm_gain`` of the labels).

    Subtracting the no-retrieval utility does not change a min-max normalisation, so this
    equals ``ltrr.labels.normalise_gains``: 0 for the worst arm, 1 for the best, all zeros for a
    tie.
    """
    u = U.to_numpy(dtype=float)
    lo, hi = u.min(axis=1, keepdims=True), u.max(axis=1, keepdims=True)
    span = hi - lo
    tie = np.isclose(span, 0.0, rtol=0.0, atol=1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.where(tie, 0.0, (u - lo) / np.where(tie, 1.0, span))
    return pd.DataFrame(g, index=U.index, columns=U.columns)


def best_single_arm(train_U: pd.DataFrame) -> str:
    """The arm with the highest mean utility on the training queries (ties: first column)."""
    _check_U(train_U, "train_U")
    means = train_U.mean(axis=0)
    return str(means.index[int(np.argmax(means.to_numpy()))])


def _check_U(U: pd.DataFrame, what: str = "U") -> None:
    if not isinstance(U, pd.DataFrame):
        raise DataError(f"{what} must be a DataFrame (queries x arms), got {type(U).__name__}")
    if U.shape[0] == 0:
        raise DataError(f"{what} has no queries")
    if U.shape[1] < 2:
        raise DataError(f"{what} needs at least two arms, got {list(U.columns)}")
    if U.index.duplicated().any():
        raise DataError(f"{what}: duplicate qid {U.index[U.index.duplicated()][0]!r}")
    vals = U.to_numpy(dtype=float)
    if np.isnan(vals).any():
        q = U.index[np.isnan(vals).any(axis=1)][0]
        raise DataError(
            f"{what}: qid {q!r} has a missing utility; use complete queries only "
            "(utility_matrix drops failed ones)"
        )


def _router_output(U: pd.DataFrame, out, router: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The chosen arm index per query of U and, for a scoring router, its score matrix."""
    arms = [str(a) for a in U.columns]
    qids = U.index.astype(str)
    if isinstance(out, pd.DataFrame):
        scores = out.copy()
        scores.index = scores.index.astype(str)
        scores.columns = [str(c) for c in scores.columns]
        missing_arms = [a for a in arms if a not in scores.columns]
        if missing_arms:
            raise DataError(f"router {router!r}: scores lack arm(s) {', '.join(missing_arms)}")
        missing_q = qids[~qids.isin(scores.index)]
        if len(missing_q):
            raise DataError(
                f"router {router!r}: no scores for {len(missing_q)} test queries "
                f"(first {missing_q[0]!r})"
            )
        s = scores.loc[qids, arms].to_numpy(dtype=float)
        if np.isnan(s).any():
            q = qids[np.isnan(s).any(axis=1)][0]
            raise DataError(f"router {router!r}: NaN score for qid {q!r}")
        return np.argmax(s, axis=1), s
    if isinstance(out, Mapping) and not isinstance(out, pd.Series):
        out = pd.Series(out, dtype=object)
    if not isinstance(out, pd.Series):
        raise DataError(
            f"router {router!r}: output must be a Series/dict qid -> arm or a "
            f"DataFrame of scores (qid x arm), got {type(out).__name__}"
        )
    choice = out.copy()
    choice.index = choice.index.astype(str)
    missing_q = qids[~qids.isin(choice.index)]
    if len(missing_q):
        raise DataError(
            f"router {router!r}: no choice for {len(missing_q)} test queries "
            f"(first {missing_q[0]!r})"
        )
    chosen = choice.loc[qids].astype(str)
    pos = {a: i for i, a in enumerate(arms)}
    unknown = sorted(set(chosen) - set(pos))
    if unknown:
        raise DataError(
            f"router {router!r} chose unknown arm(s) {', '.join(unknown)}; arms are "
            f"{', '.join(arms)}"
        )
    return np.array([pos[a] for a in chosen], dtype=int), None


def _costs(arms: list[str], costs: Mapping[str, float] | None) -> np.ndarray:
    if costs is None:
        return np.full(len(arms), np.nan)
    missing = [a for a in arms if a not in costs]
    if missing:
        raise ConfigError(f"arm costs lack arm(s) {', '.join(missing)}; give every arm a cost")
    return np.array([float(costs[a]) for a in arms])


def per_query_outcomes(
    U: pd.DataFrame,
    choice_or_scores,
    *,
    best_arm: str | pd.Series,
    no_retrieval: str,
    costs: Mapping[str, float] | None = None,
    gains: pd.DataFrame | None = None,
    k: int = 3,
    router: str = "router",
) -> pd.DataFrame:
    """Per-query outcomes of one router on the queries of ``U`` (one row per qid).

    Parameters
    ----------
    U : DataFrame
        Test utility matrix (qid x arm).
    choice_or_scores : Series, dict or DataFrame
        The router's chosen arm per qid, or its scores (qid x arm); extra qids are ignored.
    best_arm : str or Series
        The best single arm (chosen on train), or one per qid (pooled folds).
    no_retrieval : str
        The no-retrieval arm (a column of ``U``).
    costs : dict arm -> float, optional
        Cost of each arm (e.g. latency or passages read); NaN costs when omitted.
    gains : DataFrame, optional
        Gold gains for nDCG (qid x arm, non-negative); default `normalised_gains` of ``U``.
    k : int
        Cut-off of nDCG@k.

    Returns
    -------
    DataFrame
        Indexed by qid: ``chosen, utility, best_single_arm, best_single_utility,
        oracle_utility, tie, p_at_1, kendall_tau, ndcg, retrieved, helped, cost``.
    """
    _check_U(U)
    arms = [str(a) for a in U.columns]
    U = U.set_axis(arms, axis=1).set_axis(U.index.astype(str), axis=0)
    if no_retrieval not in arms:
        raise ConfigError(
            f"no-retrieval arm {no_retrieval!r} is not a column of U ({', '.join(arms)})"
        )
    check_int(k, "k (nDCG cut-off)", low=1)
    cost = _costs(arms, costs)
    chosen, scores = _router_output(U, choice_or_scores, router)
    u = U.to_numpy(dtype=float)
    n = len(u)
    rows = np.arange(n)
    if isinstance(best_arm, pd.Series):
        b = best_arm.copy()
        b.index = b.index.astype(str)
        if not U.index.isin(b.index).all():
            raise DataError("best_arm Series must give an arm for every query of U")
        best_names = b.loc[U.index].astype(str).to_numpy()
    else:
        best_names = np.full(n, str(best_arm), dtype=object)
    unknown = sorted(set(best_names) - set(arms))
    if unknown:
        raise DataError(f"best single arm(s) {', '.join(unknown)} not among the arms of U")
    pos = {a: i for i, a in enumerate(arms)}
    best_idx = np.array([pos[a] for a in best_names], dtype=int)
    oracle = u.max(axis=1)
    tie = np.isclose(u.max(axis=1) - u.min(axis=1), 0.0, rtol=0.0, atol=1e-12)
    r = u[rows, chosen]
    p_at_1 = (r >= oracle - ATOL).astype(float)
    tau = np.full(n, np.nan)
    ndcg = np.full(n, np.nan)
    if scores is not None:
        if gains is None:
            g = normalised_gains(U).to_numpy()
        else:
            gd = gains.copy()
            gd.index = gd.index.astype(str)
            gd.columns = [str(c) for c in gd.columns]
            if not U.index.isin(gd.index).all() or any(a not in gd.columns for a in arms):
                raise DataError("gains must cover every query and arm of U")
            g = gd.loc[U.index, arms].to_numpy(dtype=float)
        tau = kendall_tau_rows(u, scores)
        # Constant scores rank nothing: no credit rather than a NaN that the mean would skip.
        tau = np.where(np.isnan(tau) & ~tie, 0.0, tau)
        ndcg = ndcg_rows(g, scores, k=int(k))
    nr = pos[no_retrieval]
    retrieval_cols = [i for i in range(len(arms)) if i != nr]
    helped = (
        (u[:, retrieval_cols].max(axis=1) - u[:, nr] > ATOL)
        if retrieval_cols
        else np.zeros(n, bool)
    )
    out = pd.DataFrame(
        {
            "chosen": np.array(arms, dtype=object)[chosen],
            "utility": r,
            "best_single_arm": best_names,
            "best_single_utility": u[rows, best_idx],
            "oracle_utility": oracle,
            "tie": tie,
            "p_at_1": np.where(tie, np.nan, p_at_1),
            "kendall_tau": np.where(tie, np.nan, tau),
            "ndcg": np.where(tie, np.nan, ndcg),
            "retrieved": chosen != nr,
            "helped": helped,
            "cost": cost[chosen],
        },
        index=pd.Index(U.index, name="qid"),
    )
    out.attrs["has_scores"] = scores is not None
    out.attrs["k"] = int(k)
    return out


def _headroom_stat(r, b, o, axis=-1):
    num = np.mean(r, axis=axis) - np.mean(b, axis=axis)
    den = np.mean(o, axis=axis) - np.mean(b, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > ATOL, num / np.where(den > ATOL, den, 1.0), np.nan)


def summarise_outcomes(
    outcomes: pd.DataFrame,
    *,
    random_state=0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    noise_floor: float = float("nan"),
    alpha: float = 0.05,
    noise_scale: float = float("nan"),
) -> dict:
    """Aggregate per-query outcomes into one result row (a dict; see `RESULT_COLUMNS`).

    ``p_adjusted`` equals ``p_value`` here (a family of one); `evaluate_routers` corrects it.
    ``n_headroom`` counts the queries whose oracle utility beats the best single arm's (the
    queries a router can gain on). ``necessity_accuracy`` is averaged over the informative
    (untied) queries, as P@1 is: on a tie no retrieval arm beats no retrieval, so retrieving
    would count as wrong there while it costs nothing in utility.
    ``noise_scale`` (utility units: the mean per-query change that generator noise alone makes)
    gives the row's ``noise_floor`` as its share of *these* queries' headroom (NaN without
    headroom); without it, ``noise_floor`` is taken as given (a share already).
    """
    if len(outcomes) == 0:
        raise DataError("no test queries to evaluate")
    r = outcomes["utility"].to_numpy(dtype=float)
    b = outcomes["best_single_utility"].to_numpy(dtype=float)
    o = outcomes["oracle_utility"].to_numpy(dtype=float)
    kw = dict(random_state=random_state, n_resamples=n_resamples, confidence=confidence)
    ci = bootstrap_ci(r, **kw)
    ci_b = bootstrap_ci(b, **kw)
    ci_o = bootstrap_ci(o, **kw)
    head = paired_bootstrap_ci((r, b, o), _headroom_stat, **kw)
    w = paired_wilcoxon(r, b)
    best = sorted(set(outcomes["best_single_arm"]))
    informative = ~outcomes["tie"].to_numpy(dtype=bool)
    has_scores = bool(outcomes.attrs.get("has_scores", not outcomes["ndcg"].isna().all()))

    def _mean(values) -> float:  # over the informative queries only
        v = np.asarray(values, dtype=float)[informative]
        return float(np.nanmean(v)) if len(v) and not np.isnan(v).all() else float("nan")

    floor = float(noise_floor) if noise_floor is not None else float("nan")
    headroom = ci_o.estimate - ci_b.estimate
    if noise_scale is not None and not math.isnan(float(noise_scale)):
        floor = float(noise_scale) / headroom if headroom > 1e-12 else float("nan")
    hc = head.estimate
    return {
        "n_test": int(len(outcomes)),
        "n_informative": int(informative.sum()),
        "mean_utility": ci.estimate,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "best_single_arm": "|".join(best),
        "best_single_utility": ci_b.estimate,
        "best_single_ci_low": ci_b.low,
        "best_single_ci_high": ci_b.high,
        "oracle_utility": ci_o.estimate,
        "oracle_ci_low": ci_o.low,
        "oracle_ci_high": ci_o.high,
        "headroom": headroom,
        "n_headroom": int((o > b + ATOL).sum()),
        "headroom_captured": hc,
        "headroom_ci_low": head.low,
        "headroom_ci_high": head.high,
        "noise_floor": floor,
        "above_noise_floor": bool(hc > floor)
        if not (math.isnan(hc) or math.isnan(floor))
        else False,
        "wilcoxon_statistic": w.statistic,
        "p_value": w.pvalue,
        "p_adjusted": w.pvalue,
        "correction": "none",
        "significant": bool(w.pvalue < alpha),
        "direction": int(w.direction),
        "improved": int((r > b + ATOL).sum()),
        "degraded": int((r < b - ATOL).sum()),
        "equal": int((np.abs(r - b) <= ATOL).sum()),
        "has_scores": has_scores,
        "kendall_tau": _mean(outcomes["kendall_tau"]) if has_scores else float("nan"),
        "p_at_1": _mean(outcomes["p_at_1"]),
        "ndcg_at_k": _mean(outcomes["ndcg"]) if has_scores else float("nan"),
        "k": int(outcomes.attrs.get("k", 0)),
        "necessity_accuracy": _mean(outcomes["retrieved"] == outcomes["helped"]),
        "retrieval_rate": float(outcomes["retrieved"].mean()),
        "mean_cost": float(outcomes["cost"].mean()),
    }
