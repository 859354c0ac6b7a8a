"""Routers, and the train-free routers that score arms by one post-retrieval feature.

A router scores every arm of every query (`Router.route_scores`, higher is better); `ranking`
orders the arms of each query and `choose` keeps the best. Ties are broken by arm order (the
order of ``raw.arms``, i.e. the pool's), so every router is deterministic. Routers are found by
name in `routers`.

Train-free routers (the LTRR paper's heuristic baselines), each scoring an arm by one feature
of `ltrr.features.extract_raw` computed on its passages:

=============  ===============================  =========================================
name           score                            reads as
=============  ===============================  =========================================
overallsim     ``overall_sim``                  query closest to the passages' centroid
avgsim         ``avg_sim``                      highest mean query-passage similarity
maxsim         ``max_sim``                      the single most similar passage
varsim         ``-var_sim``                     lowest variance of query-passage similarity
moran          ``moran``                        scores most consistent with passage
                                                similarity (Moran's I, Diaz 2007)
=============  ===============================  =========================================

The no-retrieval arm has no passages, so no post-retrieval feature: these routers give it the
score ``-inf`` and rank it last (so do they any retrieval arm that found nothing for a
query). They therefore never choose not to retrieve, unless no arm has passages; they are
baselines for *which* retriever, not *whether* to retrieve.

New routers (reference routers such as oracle or always-no-retrieval, learned routers)
subclass `Router`, implement ``route_scores`` (and ``fit`` if they learn) and register with
``@routers.register("<name>")``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from ltrr._errors import DataError
from ltrr._registry import Registry

__all__ = [
    "Router",
    "FeatureRouter",
    "OverallSimRouter",
    "AvgSimRouter",
    "MaxSimRouter",
    "VarSimRouter",
    "MoranRouter",
    "routers",
    "arm_order",
    "rank_scores",
    "routing_table",
]

routers: Registry = Registry("router")


def routing_table(raw: Any) -> pd.DataFrame:
    """The (qid, arm, ...) table of ``raw`` (RawFeatures or a DataFrame), its columns checked."""
    table = getattr(raw, "table", raw)
    if not isinstance(table, pd.DataFrame):
        raise DataError(
            f"routers take RawFeatures or a DataFrame with qid and arm, got {type(raw).__name__}"
        )
    missing = [c for c in ("qid", "arm") if c not in table.columns]
    if missing:
        raise DataError(f"the routing table is missing column(s) {', '.join(missing)}")
    return table


def arm_order(raw: Any) -> list[str]:
    """Arm tie-break order: ``raw.arms`` when given, else order of first appearance."""
    arms = getattr(raw, "arms", None)
    if arms:
        return [str(a) for a in arms]
    return [str(a) for a in pd.unique(routing_table(raw)["arm"].astype(str))]


def rank_scores(scores: pd.DataFrame, arms: list[str] | None = None) -> pd.DataFrame:
    """Add ``rank`` (1 = best) to ``DataFrame[qid, arm, score]`` within each qid.

    Higher scores rank first; NaN ranks like ``-inf``; ties go to the arm earlier in ``arms``
    (default: order of first appearance). Rows come back by query (first appearance), then rank.
    """
    missing = [c for c in ("qid", "arm", "score") if c not in scores.columns]
    if missing:
        raise DataError(f"the score table is missing column(s) {', '.join(missing)}")
    df = scores[["qid", "arm", "score"]].copy()
    df["qid"] = df["qid"].astype(str)
    df["arm"] = df["arm"].astype(str)
    arms = arms or [str(a) for a in pd.unique(df["arm"])]
    apos = {a: i for i, a in enumerate(arms)}
    unknown = sorted(set(df["arm"]) - set(apos))
    if unknown:
        raise DataError(f"scores have arm(s) {unknown} that are not in the arm order {arms}")
    qpos = {q: i for i, q in enumerate(pd.unique(df["qid"]))}
    s = df["score"].to_numpy(dtype=np.float64)
    s = np.where(np.isnan(s), -np.inf, s)
    order = np.lexsort((df["arm"].map(apos).to_numpy(), -s, df["qid"].map(qpos).to_numpy()))
    df = df.iloc[order].reset_index(drop=True)
    df["rank"] = df.groupby("qid", sort=False).cumcount().to_numpy() + 1
    return df


class Router(BaseEstimator):
    """A router: scores the arms of each query; higher is better.

    Subclasses implement `route_scores`; routers that learn override `fit`. ``__init__``
    stores parameters only (scikit-learn's contract, so ``get_params``/``clone`` work).

    Examples
    --------
    >>> import pandas as pd
    >>> table = pd.DataFrame({"qid": ["q1"] * 3, "arm": ["bm25", "dense", "none"],
    ...                       "max_sim": [0.4, 0.7, float("nan")]})
    >>> routers.get("maxsim")().choose(table).to_dict()
    {'q1': 'dense'}
    """

    name: ClassVar[str] = "abstract"
    #: what the router reads of a query: ``"raw"`` (the raw feature table) or
    #: ``"query_embedding"`` (the question's embedding: `ltrr.routers.knn.KNNRouter`)
    reads: ClassVar[str] = "raw"

    def fit(self, raw: Any = None, labels: Any = None) -> Router:
        """Learn from training data; train-free routers do nothing and return ``self``."""
        return self

    def route_scores(self, raw: Any) -> pd.DataFrame:
        """``DataFrame[qid, arm, score]``, one row per (query, arm) of ``raw``."""
        raise NotImplementedError(f"{type(self).__name__} must implement route_scores")

    def routing_inputs(self, queries: pd.DataFrame, results: pd.DataFrame) -> dict:
        """Extra `route_scores` inputs a router takes from the queries and their pool search
        (`ltrr.routers.RoutedPipeline` passes them to `ranking`); none by default."""
        return {}

    def ranking(self, raw: Any, **route_kwargs: Any) -> pd.DataFrame:
        """``DataFrame[qid, arm, score, rank]``: each query's arms, best (rank 1) first.

        ``route_kwargs`` go to `route_scores` (a router's extra inputs, e.g. ``question_states``).
        """
        return rank_scores(self.route_scores(raw, **route_kwargs), arm_order(raw))

    def choose(self, raw: Any, **route_kwargs: Any) -> pd.Series:
        """The best arm per query: a Series ``qid -> arm`` named ``"arm"``, queries in order."""
        r = self.ranking(raw, **route_kwargs)
        best = r[r["rank"] == 1]
        return pd.Series(
            best["arm"].to_numpy(), index=pd.Index(best["qid"].to_numpy(), name="qid"), name="arm"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class FeatureRouter(Router):
    """Scores each arm by one raw feature (negated when lower is better); NaN -> ``-inf``.

    Parameters
    ----------
    feature : str
        A column of the raw feature table.
    higher_is_better : bool
        False scores by the negated feature (``varsim``).

    Examples
    --------
    >>> FeatureRouter("avg_sim").feature
    'avg_sim'
    """

    name = "feature"

    def __init__(self, feature: str, *, higher_is_better: bool = True):
        self.feature = feature
        self.higher_is_better = higher_is_better

    def route_scores(self, raw: Any) -> pd.DataFrame:
        table = routing_table(raw)
        if self.feature not in table.columns:
            raise DataError(
                f"router {self.name!r} needs the raw feature column {self.feature!r}, which the "
                "table lacks; extract it with ltrr.features.extract_raw"
            )
        v = pd.to_numeric(table[self.feature], errors="coerce").to_numpy(dtype=np.float64)
        score = v if self.higher_is_better else -v
        score = np.where(np.isnan(score), -np.inf, score)
        return pd.DataFrame(
            {
                "qid": table["qid"].astype(str).to_numpy(),
                "arm": table["arm"].astype(str).to_numpy(),
                "score": score,
            }
        )

    def __repr__(self) -> str:
        if type(self) is FeatureRouter:
            return f"FeatureRouter({self.feature!r}, higher_is_better={self.higher_is_better})"
        return super().__repr__()


@routers.register("overallsim")
class OverallSimRouter(FeatureRouter):
    """Picks the arm whose passage centroid is closest to the query (``overall_sim``)."""

    name = "overallsim"

    def __init__(self):
        super().__init__("overall_sim")


@routers.register("avgsim")
class AvgSimRouter(FeatureRouter):
    """Picks the arm with the highest mean query-passage similarity (``avg_sim``)."""

    name = "avgsim"

    def __init__(self):
        super().__init__("avg_sim")


@routers.register("maxsim")
class MaxSimRouter(FeatureRouter):
    """Picks the arm with the most query-similar single passage (``max_sim``)."""

    name = "maxsim"

    def __init__(self):
        super().__init__("max_sim")


@routers.register("varsim")
class VarSimRouter(FeatureRouter):
    """Picks the arm with the lowest variance of query-passage similarity (``var_sim``)."""

    name = "varsim"

    def __init__(self):
        super().__init__("var_sim", higher_is_better=False)


@routers.register("moran")
class MoranRouter(FeatureRouter):
    """Picks the arm with the highest Moran's I of its scores (``moran``)."""

    name = "moran"

    def __init__(self):
        super().__init__("moran")
