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
  arm (there is no headroom to capture); ``n_headroom`` counts the test queries it rests on
  (the oracle beats the best single arm). It is reported beside ``noise_floor``: the mean
  per-query change that generator noise alone makes (``noise_scale``, the labels summary's
  ``noise_floor.mean_abs_diff``) as a share of the same split's headroom. It is a scale of one
  query's label noise, not a test (noise in a mean shrinks as 1/sqrt(n); ``above_noise_floor``
  only compares the two shares);
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
  positive), averaged over the informative queries like P@1: on a tie retrieving cannot help,
  and counting it wrong there would score a router that never retrieves best wherever many
  queries tie;
- cost: the share of queries retrieved and the mean cost of the chosen arms.

All metrics come from per-query outcomes (`per_query_outcomes`), so the folds of a k-fold
family pool into one estimate over every query (`evaluate_splits`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ltrr._errors import ConfigError, DataError
from ltrr.eval.outcomes import (  # the per-query layer, re-exported here
    ATOL,
    RESULT_COLUMNS,
    _check_U,
    _costs,
    best_single_arm,
    normalised_gains,
    per_query_outcomes,
    scores_from_long,
    summarise_outcomes,
    utility_matrix,
)
from ltrr.eval.splits import Split
from ltrr.eval.stats import CORRECTIONS, correct_pvalues

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
    "tie_only_routers",
    "same_choice_groups",
    "Evaluation",
    "RESULT_COLUMNS",
]


def tie_only_routers(predictions: Mapping[str, Mapping[str, object]]) -> list[str]:
    """The routers whose scores tie on every query of every split: each query's finite scores are
    one value, so the router chooses by the tie-break alone (the first such arm in the arm order).

    A train-free router's feature can be constant within every query (VarSim is 0 and Moran's I
    is 0 when each arm passes one passage); its rows are then the tie-break arm's, not a test of
    the router.

    Parameters
    ----------
    predictions : mapping split name -> {router name -> choices or scores}
        As `evaluate_splits` takes them; a router given as choices, not scores, is never listed.

    Returns
    -------
    list of str
        The routers, in first-appearance order.

    Examples
    --------
    >>> import pandas as pd
    >>> flat = pd.DataFrame({"a": [0.0, 0.0], "b": [0.0, 0.0], "none": [float("-inf")] * 2})
    >>> tie_only_routers({"s": {"flat": flat, "rises": flat.assign(b=[1.0, 0.0])}})
    ['flat']
    """
    names: dict[str, bool] = {}
    for routers in predictions.values():
        for name, out in routers.items():
            if not isinstance(out, pd.DataFrame):
                names[name] = False
                continue
            v = out.to_numpy(dtype=np.float64)
            fin = np.isfinite(v)
            hi = np.where(fin, v, -np.inf).max(axis=1)
            lo = np.where(fin, v, np.inf).min(axis=1)
            tied = bool(np.all(~fin.any(axis=1) | (hi == lo)))
            names[name] = names.get(name, True) and tied
    return [n for n, tied in names.items() if tied]


def same_choice_groups(per_query: pd.DataFrame, exclude: Sequence[str] = ()) -> list[list[str]]:
    """Groups of two or more routers that choose the same arm on every (split, query).

    Parameters
    ----------
    per_query : DataFrame
        `Evaluation.per_query` (``split``, ``router``, ``qid``, ``chosen``).
    exclude : sequence of str
        Routers left out (say, `tie_only_routers`' list).

    Returns
    -------
    list of list of str
        Each group's routers; groups and their members in first-appearance order. Their rows
        are one router's.
    """
    pq = per_query[~per_query["router"].isin(list(exclude))]
    seen: dict[tuple, list[str]] = {}
    for name, rows in pq.groupby("router", sort=False):
        key = tuple(rows.sort_values(["split", "qid"])[["split", "qid", "chosen"]].astype(str).itertuples(index=False))
        seen.setdefault(key, []).append(str(name))
    return [g for g in seen.values() if len(g) > 1]


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
    noise_scale: float = float("nan"),
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
        ``headroom_captured``; ignored when ``noise_scale`` is given.
    noise_scale : float
        The mean per-query utility change that generator noise alone makes; the row's
        ``noise_floor`` is then its share of this split's headroom.
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
        noise_scale=noise_scale,
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
        One row per (split, arm): test mean utility, cost, whether it is the split's best
        single arm (``best_single``) and the share of the split's training sets that chose it
        (``best_single_share``: 1 or 0 for one split; for a pooled family the share of its
        folds, and ``best_single`` only when every fold chose the arm); the single-arm points
        of a cost-utility plot.
    by_type : DataFrame
        One row per (split, router, qtype) (empty without queries), see `by_type`.
    meta : dict
        Settings: correction, alpha, k, n_resamples, confidence, noise_floor, random_state.
    """

    table: pd.DataFrame
    per_query: pd.DataFrame
    arms: pd.DataFrame
    by_type: pd.DataFrame
    meta: dict = field(default_factory=dict)


def by_type(per_query: pd.DataFrame) -> pd.DataFrame:
    """Per (split, router, qtype) means from a per-query table with a ``qtype`` column.

    Columns: ``split, family, router, qtype``; ``n`` (test queries of the type), ``n_headroom``
    (those whose oracle utility beats the best single arm's: what the type's headroom captured
    rests on), the mean utility of the router, the best single arm and the oracle,
    ``headroom_captured`` (a share, NaN without headroom; not hidden here when ``n_headroom``
    is small, the report does that) and P@1 (over the type's informative queries).
    """
    cols = [
        "split",
        "family",
        "router",
        "qtype",
        "n",
        "n_headroom",
        "mean_utility",
        "best_single_utility",
        "oracle_utility",
        "headroom_captured",
        "p_at_1",
    ]
    if "qtype" not in per_query.columns or per_query.empty:
        return pd.DataFrame(columns=cols)
    pq = per_query.assign(
        _gain=per_query["oracle_utility"] - per_query["best_single_utility"] > ATOL
    )
    if "family" not in pq.columns:
        pq["family"] = pq["split"]
    agg = (
        pq.groupby(["split", "family", "router", "qtype"], sort=False)
        .agg(
            n=("utility", "size"),
            n_headroom=("_gain", "sum"),
            mean_utility=("utility", "mean"),
            best_single_utility=("best_single_utility", "mean"),
            oracle_utility=("oracle_utility", "mean"),
            p_at_1=("p_at_1", "mean"),
        )
        .reset_index()
    )
    agg["n_headroom"] = agg["n_headroom"].astype(int)
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
    noise_scale: float = float("nan"),
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
    noise_floor, noise_scale : float
        As `evaluate_router`'s: with ``noise_scale`` (utility units) each row's noise floor is
        its share of that row's own headroom, so a split with little headroom shows how large
        the noise is against it.

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
        noise_scale=noise_scale,
        alpha=alpha,
    )
    rows, per_q, arm_rows = [], [], []
    pooled: dict[str, dict[str, list[pd.DataFrame]]] = {}
    pooled_train: dict[str, list[int]] = {}
    pooled_best: dict[str, list[str]] = {}  # the best single arm of each fold's training queries
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
                    "best_single_share": float(arm == best),
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
            pooled_best.setdefault(sp.family, []).append(best)
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
        chose = pooled_best[fam]
        for j, arm in enumerate(U.columns):
            share = chose.count(arm) / len(chose)
            arm_rows.append(
                {
                    "split": fam,
                    "family": fam,
                    "arm": arm,
                    "mean_utility": float(means[arm]),
                    "cost": float(cost[j]),
                    "best_single": share == 1.0,  # every fold chose it
                    "best_single_share": share,
                }
            )
    table = _correct(pd.DataFrame(rows, columns=RESULT_COLUMNS), correction, alpha)
    per_query = pd.concat(per_q, ignore_index=True)
    lead = ["split", "family", "router", "qid"]
    per_query = per_query[lead + [c for c in per_query.columns if c not in lead]]
    if qtypes is not None:
        per_query["qtype"] = qtypes.reindex(per_query["qid"]).fillna("unknown").to_numpy()
    seed = int(random_state) if isinstance(random_state, (int, np.integer)) else repr(random_state)
    tied = tie_only_routers(predictions)
    meta = {
        "correction": correction,
        "alpha": alpha,
        "k": int(k),
        "n_resamples": int(n_resamples),
        "confidence": confidence,
        "noise_floor": float(noise_floor),
        "noise_scale": float(noise_scale),
        "random_state": seed,
        "no_retrieval": no_retrieval,
        "arms": list(U.columns),
        "tie_only": tied,
    }
    meta["same_choices"] = same_choice_groups(per_query, exclude=tied)
    return Evaluation(
        table=table,
        per_query=per_query,
        arms=pd.DataFrame(arm_rows),
        by_type=by_type(per_query),
        meta=meta,
    )
