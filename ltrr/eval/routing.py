"""Routing evaluation: how much downstream utility a router's arm choices buy, per split.

Inputs
------
- ``U``: the utility matrix of the test queries, a DataFrame indexed by qid with one column per
  arm (`utility_matrix` pivots the labels table into it). One column is the no-retrieval arm.
- a router's output, either its chosen arm per query (a Series qid -> arm, or a dict) or its
  scores per (qid, arm) (a DataFrame qid x arm, higher is better; `scores_from_long` pivots a
  long ``qid, arm, score`` table). A router that gives scores chooses its top-scored arm; tied
  top scores go to the first arm in ``U``'s column order.

Metrics (one row per split and router, see `evaluate_router`)
-------------------------------------------------------------
- ``mean_utility`` with a percentile-bootstrap CI over test queries;
- the best single arm, chosen on the *training* queries (highest mean train utility, ties to
  the first column), and its test utility; the oracle (per-query maximum) utility;
- ``headroom_captured = (router - best single) / (oracle - best single)`` on the test set with a
  paired bootstrap CI: 1 for the oracle router, 0 for always choosing the best single arm,
  negative when the router does worse than it, and NaN when the oracle equals the best single
  arm (there is no headroom to capture). It is reported beside ``noise_floor``, the share of
  the headroom that generator noise alone produces (``noise_floor.share_of_headroom`` of the
  labels summary); a router that captures less than that is indistinguishable from noise;
- a paired two-sided Wilcoxon test of per-query utility against the best single arm, with a
  Bonferroni (or Holm) correction across the routers compared in one split
  (`evaluate_routers`), and the counts of test queries improved / degraded / equal;
- ranking quality against the gold arm ranking (arms ranked by utility): Kendall's tau-b,
  P@1 (the chosen arm is among the gold-best arms; gold ties at the top count as correct) and
  nDCG@k of the scores against the normalised gains (``norm_gain``). These are averaged over
  the *informative* queries only: a query whose arms all have equal utility (a tie) has no
  ranking to recover. Routers that give only choices get NaN for tau and nDCG; a router whose
  scores for a query are all equal gets tau 0 for it (it ranks nothing);
- retrieval-necessity accuracy: the router retrieved (chose an arm other than the no-retrieval
  arm) if and only if retrieving helped (the best retrieval arm's gain over no retrieval is
  positive);
- cost: the share of queries retrieved and the mean cost of the chosen arms.

All metrics come from per-query outcomes (`per_query_outcomes`), so the folds of a k-fold
family pool into one estimate over every query (`evaluate_splits`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ltrr._errors import ConfigError, DataError
from ltrr.eval.splits import Split
from ltrr.eval.stats import (
    CORRECTIONS,
    bootstrap_ci,
    correct_pvalues,
    kendall_tau_rows,
    ndcg_rows,
    paired_bootstrap_ci,
    paired_wilcoxon,
)

__all__ = [
    "utility_matrix",
    "scores_from_long",
    "normalised_gains",
    "best_single_arm",
    "per_query_outcomes",
    "summarise_outcomes",
    "evaluate_router",
    "evaluate_routers",
    "evaluate_splits",
    "by_type",
    "Evaluation",
    "RESULT_COLUMNS",
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
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"k (nDCG cut-off) must be a positive integer, got {k!r}")
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
) -> dict:
    """Aggregate per-query outcomes into one result row (a dict; see `RESULT_COLUMNS`).

    ``p_adjusted`` equals ``p_value`` here (a family of one); `evaluate_routers` corrects it.
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

    def _mean(col: str) -> float:
        v = outcomes.loc[informative, col].to_numpy(dtype=float)
        return float(np.nanmean(v)) if len(v) and not np.isnan(v).all() else float("nan")

    floor = float(noise_floor) if noise_floor is not None else float("nan")
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
        "headroom": ci_o.estimate - ci_b.estimate,
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
        "improved": int((r > b + ATOL).sum()),
        "degraded": int((r < b - ATOL).sum()),
        "equal": int((np.abs(r - b) <= ATOL).sum()),
        "has_scores": has_scores,
        "kendall_tau": _mean("kendall_tau") if has_scores else float("nan"),
        "p_at_1": _mean("p_at_1"),
        "ndcg_at_k": _mean("ndcg") if has_scores else float("nan"),
        "k": int(outcomes.attrs.get("k", 0)),
        "necessity_accuracy": float((outcomes["retrieved"] == outcomes["helped"]).mean()),
        "retrieval_rate": float(outcomes["retrieved"].mean()),
        "mean_cost": float(outcomes["cost"].mean()),
    }


def _row(
    split: str, family: str, router: str, n_train: int, summary: dict, pooled: bool = False
) -> dict:
    row = {"split": split, "family": family, "pooled": pooled, "router": router, "n_train": n_train}
    row.update(summary)
    return {c: row[c] for c in RESULT_COLUMNS}


def evaluate_router(
    U: pd.DataFrame,
    choice_or_scores,
    *,
    train_U: pd.DataFrame,
    costs: Mapping[str, float] | None,
    no_retrieval: str,
    random_state=0,
    noise_floor: float = float("nan"),
    gains: pd.DataFrame | None = None,
    k: int = 3,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    split: str = "",
    family: str = "",
    router: str = "router",
) -> pd.DataFrame:
    """Evaluate one router on one split; a one-row DataFrame with `RESULT_COLUMNS`.

    Parameters
    ----------
    U : DataFrame
        Test utility matrix (qid x arm).
    choice_or_scores : Series, dict or DataFrame
        Chosen arm per qid, or scores (qid x arm, higher is better).
    train_U : DataFrame
        Training utility matrix; picks the best single arm.
    costs : dict arm -> float or None
        Cost of each arm.
    no_retrieval : str
        The no-retrieval arm.
    random_state : int
        Seed of the bootstrap resamples (the same for every router, so their CIs share
        resamples).
    noise_floor : float
        Share of the oracle headroom explained by generator noise, shown beside
        ``headroom_captured``.
    gains : DataFrame, optional
        Gold gains for nDCG; default the normalised gains of ``U``.
    k, n_resamples, confidence, alpha
        nDCG cut-off, bootstrap resamples, CI level, significance level.

    Examples
    --------
    >>> U = pd.DataFrame({"none": [0.0, 1.0, 0.0], "bm25": [1.0, 0.0, 1.0]},
    ...                  index=pd.Index(["q1", "q2", "q3"], name="qid"))
    >>> oracle = U.idxmax(axis=1)
    >>> row = evaluate_router(U, oracle, train_U=U, costs={"none": 0, "bm25": 1},
    ...                       no_retrieval="none", n_resamples=200)
    >>> float(row["headroom_captured"].iloc[0]), float(row["necessity_accuracy"].iloc[0])
    (1.0, 1.0)
    """
    _check_U(train_U, "train_U")
    if [str(c) for c in train_U.columns] != [str(c) for c in U.columns]:
        raise DataError(
            f"train_U and U must have the same arms in the same order, got "
            f"{list(train_U.columns)} and {list(U.columns)}"
        )
    out = per_query_outcomes(
        U,
        choice_or_scores,
        best_arm=best_single_arm(train_U),
        no_retrieval=no_retrieval,
        costs=costs,
        gains=gains,
        k=k,
        router=router,
    )
    summary = summarise_outcomes(
        out,
        random_state=random_state,
        n_resamples=n_resamples,
        confidence=confidence,
        noise_floor=noise_floor,
        alpha=alpha,
    )
    return pd.DataFrame(
        [_row(split, family, router, len(train_U), summary)], columns=RESULT_COLUMNS
    )


def _correct(rows: pd.DataFrame, correction: str, alpha: float) -> pd.DataFrame:
    if correction not in CORRECTIONS:
        raise ConfigError(
            f"unknown p-value correction {correction!r}; choose one of: {', '.join(CORRECTIONS)}"
        )
    rows = rows.copy()
    for _, idx in rows.groupby("split", sort=False).groups.items():
        rows.loc[idx, "p_adjusted"] = correct_pvalues(
            rows.loc[idx, "p_value"].to_numpy(float), correction
        )
    rows["correction"] = correction
    rows["significant"] = rows["p_adjusted"] < alpha
    return rows


def evaluate_routers(
    routers: Mapping[str, object],
    U: pd.DataFrame,
    *,
    train_U: pd.DataFrame,
    costs: Mapping[str, float] | None,
    no_retrieval: str,
    correction: str = "bonferroni",
    alpha: float = 0.05,
    split: str = "",
    family: str = "",
    **kwargs,
) -> pd.DataFrame:
    """Evaluate several routers on one split; p-values corrected across them.

    ``routers`` maps a router name to its output (choices or scores). Other keyword arguments
    go to `evaluate_router`. Returns one row per router (`RESULT_COLUMNS`), ``p_adjusted``
    corrected with ``correction`` (``bonferroni``, ``holm`` or ``none``) over the routers.

    Examples
    --------
    >>> U = pd.DataFrame({"none": [0.0, 1.0, 0.0, 0.0], "bm25": [1.0, 0.0, 1.0, 1.0]},
    ...                  index=pd.Index(["q1", "q2", "q3", "q4"], name="qid"))
    >>> res = evaluate_routers({"oracle": U.idxmax(axis=1), "never": {q: "none" for q in U.index}},
    ...                        U, train_U=U, costs=None, no_retrieval="none", n_resamples=200)
    >>> res["router"].tolist(), res["headroom_captured"].tolist()
    (['oracle', 'never'], [1.0, -2.0])
    """
    if not routers:
        raise ConfigError("no routers to evaluate")
    if correction not in CORRECTIONS:
        raise ConfigError(
            f"unknown p-value correction {correction!r}; choose one of: {', '.join(CORRECTIONS)}"
        )
    rows = pd.concat(
        [
            evaluate_router(
                U,
                out,
                train_U=train_U,
                costs=costs,
                no_retrieval=no_retrieval,
                split=split,
                family=family,
                router=name,
                alpha=alpha,
                **kwargs,
            )
            for name, out in routers.items()
        ],
        ignore_index=True,
    )
    return _correct(rows, correction, alpha)


@dataclass
class Evaluation:
    """Everything `evaluate_splits` measured.

    Attributes
    ----------
    table : DataFrame
        One row per (split, router), `RESULT_COLUMNS`; k-fold families add a pooled row
        (``pooled`` True) over all their folds' test queries.
    per_query : DataFrame
        One row per (split, router, qid) with the per-query outcomes (and ``qtype`` when
        queries were given).
    arms : DataFrame
        One row per (split, arm): test mean utility, cost, and whether it is the split's best
        single arm; the single-arm points of a cost-utility plot.
    by_type : DataFrame
        One row per (split, router, qtype) (empty without queries): n, mean utility, best
        single and oracle utility, headroom captured, P@1.
    meta : dict
        Settings: correction, alpha, k, n_resamples, confidence, noise_floor, random_state.
    """

    table: pd.DataFrame
    per_query: pd.DataFrame
    arms: pd.DataFrame
    by_type: pd.DataFrame
    meta: dict = field(default_factory=dict)


def by_type(per_query: pd.DataFrame) -> pd.DataFrame:
    """Per (split, router, qtype) means from a per-query table with a ``qtype`` column."""
    cols = [
        "split",
        "router",
        "qtype",
        "n",
        "mean_utility",
        "best_single_utility",
        "oracle_utility",
        "headroom_captured",
        "p_at_1",
    ]
    if "qtype" not in per_query.columns or per_query.empty:
        return pd.DataFrame(columns=cols)
    agg = (
        per_query.groupby(["split", "router", "qtype"], sort=False)
        .agg(
            n=("utility", "size"),
            mean_utility=("utility", "mean"),
            best_single_utility=("best_single_utility", "mean"),
            oracle_utility=("oracle_utility", "mean"),
            p_at_1=("p_at_1", "mean"),
        )
        .reset_index()
    )
    den = agg["oracle_utility"] - agg["best_single_utility"]
    agg["headroom_captured"] = np.where(
        den > ATOL,
        (agg["mean_utility"] - agg["best_single_utility"]) / den.where(den > ATOL, 1.0),
        np.nan,
    )
    return agg[cols]


def evaluate_splits(
    U: pd.DataFrame,
    splits: Sequence[Split],
    predictions: Mapping[str, Mapping[str, object]],
    *,
    costs: Mapping[str, float] | None,
    no_retrieval: str,
    queries: pd.DataFrame | None = None,
    gains: pd.DataFrame | None = None,
    noise_floor: float = float("nan"),
    correction: str = "bonferroni",
    alpha: float = 0.05,
    k: int = 3,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    random_state=0,
    pool_families: Sequence[str] = ("kfold",),
) -> Evaluation:
    """Evaluate every router on every split; pool the folds of k-fold families.

    Parameters
    ----------
    U : DataFrame
        Utility matrix of all labelled queries (qid x arm); each split uses the rows of its
        train and test qids that are in it (queries without complete labels are skipped).
    splits : sequence of Split
        From `ltrr.eval.make_splits`.
    predictions : mapping split name -> {router name -> choices or scores}
        Each router's output on that split's test queries (trained on its train queries).
    queries : DataFrame, optional
        With ``qid`` and ``qtype``: adds the per-type breakdown.
    pool_families : sequence of str
        Families whose splits' test sets partition the queries; they get a pooled row named
        after the family, from the concatenated per-query outcomes (each query with the best
        single arm of its own fold). ``n_train`` of a pooled row is the mean over its folds.

    Returns
    -------
    Evaluation
    """
    _check_U(U)
    if correction not in CORRECTIONS:
        raise ConfigError(
            f"unknown p-value correction {correction!r}; choose one of: {', '.join(CORRECTIONS)}"
        )
    U = U.set_axis(U.index.astype(str), axis=0).set_axis([str(c) for c in U.columns], axis=1)
    qtypes = None
    if queries is not None:
        if "qid" not in queries.columns or "qtype" not in queries.columns:
            raise DataError("queries for the per-type breakdown need columns qid and qtype")
        qtypes = pd.Series(
            queries["qtype"].astype(str).to_numpy(), index=queries["qid"].astype(str)
        )
    cost = _costs(list(U.columns), costs)
    kw = dict(
        random_state=random_state,
        n_resamples=n_resamples,
        confidence=confidence,
        noise_floor=noise_floor,
        alpha=alpha,
    )
    rows, per_q, arm_rows = [], [], []
    pooled: dict[str, dict[str, list[pd.DataFrame]]] = {}
    pooled_train: dict[str, list[int]] = {}
    for sp in splits:
        if sp.name not in predictions:
            raise DataError(
                f"no router predictions for split {sp.name!r}; predicted splits: "
                f"{', '.join(map(str, predictions)) or 'none'}"
            )
        train_U = U[U.index.isin(sp.train)]
        test_U = U[U.index.isin(sp.test)]
        for side, part in (("train", train_U), ("test", test_U)):
            if part.empty:
                raise DataError(
                    f"split {sp.name!r}: none of its {side} queries has complete labels"
                )
        best = best_single_arm(train_U)
        means = test_U.mean(axis=0)
        for j, arm in enumerate(U.columns):
            arm_rows.append(
                {
                    "split": sp.name,
                    "family": sp.family,
                    "arm": arm,
                    "mean_utility": float(means[arm]),
                    "cost": float(cost[j]),
                    "best_single": arm == best,
                }
            )
        routers = predictions[sp.name]
        if not routers:
            raise DataError(f"split {sp.name!r}: no routers to evaluate")
        for name, out in routers.items():
            o = per_query_outcomes(
                test_U,
                out,
                best_arm=best,
                no_retrieval=no_retrieval,
                costs=costs,
                gains=gains,
                k=k,
                router=name,
            )
            rows.append(_row(sp.name, sp.family, name, len(train_U), summarise_outcomes(o, **kw)))
            pq = o.reset_index().assign(split=sp.name, family=sp.family, router=name)
            per_q.append(pq)
            if sp.family in pool_families:
                pooled.setdefault(sp.family, {}).setdefault(name, []).append(o)
        if sp.family in pool_families:
            pooled_train.setdefault(sp.family, []).append(len(train_U))
    for fam, by_router in pooled.items():
        n_train = int(round(float(np.mean(pooled_train[fam]))))
        for name, parts in by_router.items():
            o = pd.concat(parts)
            if o.index.duplicated().any():
                raise DataError(
                    f"family {fam!r} cannot be pooled: query {o.index[o.index.duplicated()][0]!r} "
                    "is in the test set of more than one of its splits"
                )
            o.attrs = dict(parts[0].attrs)
            rows.append(_row(fam, fam, name, n_train, summarise_outcomes(o, **kw), pooled=True))
            per_q.append(o.reset_index().assign(split=fam, family=fam, router=name))
        # The pooled single-arm points are means over all the family's test queries.
        fam_q = pd.concat([p for p in by_router[next(iter(by_router))]]).index
        means = U.loc[fam_q].mean(axis=0)
        for j, arm in enumerate(U.columns):
            arm_rows.append(
                {
                    "split": fam,
                    "family": fam,
                    "arm": arm,
                    "mean_utility": float(means[arm]),
                    "cost": float(cost[j]),
                    "best_single": False,
                }
            )
    table = _correct(pd.DataFrame(rows, columns=RESULT_COLUMNS), correction, alpha)
    per_query = pd.concat(per_q, ignore_index=True)
    lead = ["split", "family", "router", "qid"]
    per_query = per_query[lead + [c for c in per_query.columns if c not in lead]]
    if qtypes is not None:
        per_query["qtype"] = qtypes.reindex(per_query["qid"]).fillna("unknown").to_numpy()
    seed = int(random_state) if isinstance(random_state, (int, np.integer)) else repr(random_state)
    meta = {
        "correction": correction,
        "alpha": alpha,
        "k": int(k),
        "n_resamples": int(n_resamples),
        "confidence": confidence,
        "noise_floor": float(noise_floor),
        "random_state": seed,
        "no_retrieval": no_retrieval,
        "arms": list(U.columns),
    }
    return Evaluation(
        table=table,
        per_query=per_query,
        arms=pd.DataFrame(arm_rows),
        by_type=by_type(per_query),
        meta=meta,
    )
