"""Routers: pick the arm (retriever, or no retrieval) for each query.

Every router scores the arms of each query (``route_scores``: ``DataFrame[qid, arm, score]``,
higher is better); ``ranking`` and ``choose`` derive the order and the best arm, ties broken
by arm order. Routers are found by name in `routers`; the train-free ones (``overallsim``,
``avgsim``, ``maxsim``, ``varsim``, ``moran``) are in `ltrr.routers.trainfree`.

Examples
--------
>>> from ltrr.routers import routers
>>> {"overallsim", "avgsim", "maxsim", "varsim", "moran"} <= set(routers.names())
True
"""

from ltrr.routers.knn import KNNRouter
from ltrr.routers.ltr import LTRRouter, resolve_index_dir
from ltrr.routers.pipeline import Routed, RoutedPipeline
from ltrr.routers.reference import (
    BestSingleRouter,
    NoRetrievalRouter,
    OracleRouter,
    RandomRouter,
    score_frame,
)
from ltrr.routers.spec import make_router, parse_router_spec
from ltrr.routers.trainfree import (
    AvgSimRouter,
    FeatureRouter,
    MaxSimRouter,
    MoranRouter,
    OverallSimRouter,
    Router,
    VarSimRouter,
    arm_order,
    rank_scores,
    routers,
    routing_table,
)

__all__ = [
    "KNNRouter",
    "LTRRouter",
    "resolve_index_dir",
    "RoutedPipeline",
    "Routed",
    "OracleRouter",
    "BestSingleRouter",
    "RandomRouter",
    "NoRetrievalRouter",
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
    "score_frame",
    "routing_table",
    "make_router",
    "parse_router_spec",
]
