"""Reference routers: oracle, best single arm, seeded random, always no-retrieval.

They bound and anchor every comparison. The oracle reads the labels of the queries it routes
(that is its definition: an upper bound, never a deployable router); the best single arm is
chosen on training labels only.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd
from sklearn.exceptions import NotFittedError

from ltrr._errors import DataError
from ltrr.routers.trainfree import Router, arm_order, routers, routing_table

__all__ = ["score_frame", "OracleRouter", "BestSingleRouter", "RandomRouter", "NoRetrievalRouter", "utility_frame"]


def utility_frame(labels: pd.DataFrame, value: str = "utility") -> pd.DataFrame:
    """Labels (long: qid, arm, utility, failed) as a qid x arm matrix; failed items are NaN.

    Query ids and arm names are strings, as `routing_table` gives them (integer qids of a
    user's table would otherwise match no routed query)."""
    missing = [c for c in ("qid", "arm", value) if c not in labels.columns]
    if missing:
        raise DataError(f"labels table is missing column(s) {', '.join(missing)}")
    lab = labels.assign(qid=labels["qid"].astype(str), arm=labels["arm"].astype(str))  # as routing tables name them
    if "failed" in lab.columns:
        lab = lab[~lab["failed"].astype(bool)]
    return lab.pivot(index="qid", columns="arm", values=value)


def score_frame(table: pd.DataFrame, score: np.ndarray) -> pd.DataFrame:
    """A router's scores as a (qid, arm, score) frame, one row per row of ``table``.

    Parameters
    ----------
    table : pandas.DataFrame
        The routing table (`routing_table`); its ``qid`` and ``arm`` become strings.
    score : array-like
        One score per row of ``table``, in its order (cast to float).
    """
    return pd.DataFrame({"qid": table["qid"].astype(str).to_numpy(), "arm": table["arm"].astype(str).to_numpy(),
                         "score": np.asarray(score, dtype=float)})


@routers.register("oracle")
class OracleRouter(Router):
    """Routes each query to its best arm by label (an upper bound; reads the labels it routes).

    ``fit(raw, labels)`` must be given the labels of every query it will route.
    """

    name = "oracle"

    def fit(self, raw: Any = None, labels: pd.DataFrame | None = None) -> OracleRouter:
        if labels is None:
            raise DataError("the oracle router needs labels: fit(raw, labels)")
        self.utility_ = utility_frame(labels)
        return self

    def route_scores(self, raw: Any) -> pd.DataFrame:
        if not hasattr(self, "utility_"):
            raise NotFittedError("OracleRouter is not fitted; call fit(raw, labels) first")
        table = routing_table(raw)
        u = self.utility_.stack(future_stack=True).rename("score")
        idx = pd.MultiIndex.from_arrays([table["qid"].astype(str), table["arm"].astype(str)])
        return score_frame(table, u.reindex(idx).to_numpy())


@routers.register("best-single")
class BestSingleRouter(Router):
    """Always the arm with the highest mean utility on the training labels."""

    name = "best-single"

    def fit(self, raw: Any = None, labels: pd.DataFrame | None = None) -> BestSingleRouter:
        if labels is None:
            raise DataError("the best-single router needs training labels: fit(raw, labels)")
        means = utility_frame(labels).dropna().mean()
        if means.empty:
            raise DataError("the best-single router got no complete labelled query")
        # ties go to the pool's order (raw.arms; without raw, the labels'), not the pivot's alphabetical one
        order = arm_order(raw) if raw is not None else [str(a) for a in pd.unique(labels["arm"].astype(str))]
        means = means.reindex([a for a in order if a in means.index] + [a for a in means.index if a not in order])
        self.arm_ = str(means.idxmax())
        self.means_ = means.to_dict()
        return self

    def route_scores(self, raw: Any) -> pd.DataFrame:
        if not hasattr(self, "arm_"):
            raise NotFittedError("BestSingleRouter is not fitted; call fit(raw, labels) first")
        table = routing_table(raw)
        return score_frame(table, (table["arm"].astype(str) == self.arm_).astype(float))


@routers.register("random")
class RandomRouter(Router):
    """A seeded random ranking of the arms per query (stable across runs and query order)."""

    name = "random"

    def __init__(self, *, random_state: int = 0):
        self.random_state = random_state

    def route_scores(self, raw: Any) -> pd.DataFrame:
        table = routing_table(raw)
        score = [
            int.from_bytes(hashlib.sha256(f"{self.random_state}:{q}:{a}".encode()).digest()[:8], "big") / 2**64
            for q, a in zip(table["qid"].astype(str), table["arm"].astype(str), strict=True)
        ]
        return score_frame(table, np.array(score))


@routers.register("no-retrieval")
class NoRetrievalRouter(Router):
    """Always answers without retrieval."""

    name = "no-retrieval"

    def __init__(self, *, arm: str = "none"):
        self.arm = arm

    def route_scores(self, raw: Any) -> pd.DataFrame:
        table = routing_table(raw)
        if self.arm not in set(table["arm"].astype(str)):
            raise DataError(f"no-retrieval router: arm {self.arm!r} is not in the table")
        return score_frame(table, (table["arm"].astype(str) == self.arm).astype(float))
