"""ltrr routing inside PyTerrier: `LTRRouterTransformer`, and ltrr's arms as transformers.

Needs the ``pyterrier`` extra (``pip install 'ltrr[pyterrier]'``); nothing in ltrr imports
this module, so ltrr runs without PyTerrier. PyTerrier's own Terrier indexes need Java; this
module does not (ltrr's arms are Python).

A PyTerrier pipeline passes a Q frame (``qid, query``) to a transformer, which returns an R
frame (``qid, query, docno, score, rank`` with ``rank`` from 0). `LTRRouterTransformer`
routes each query with a trained LTR router (``ltrr train``), sends it to the transformer of
the arm the router chose, and returns that arm's R frame with the chosen ``arm`` and the
router's ``router_score`` as columns. It composes with ``>>`` like any transformer, and works
in ``pt.Experiment``; a query routed to the no-retrieval arm has no results, so with
``batch_size`` a batch whose every query went there is one PyTerrier refuses (it raises on an
empty batch): leave ``batch_size`` out or make it large. Both transformers are retrievers: a
results frame (with ``docno``) is refused, and a blank query is skipped with a warning.

Examples
--------
>>> import pyterrier as pt  # doctest: +SKIP
>>> from ltrr.integrations.pyterrier import LTRRouterTransformer, arms
>>> routed = LTRRouterTransformer("runs/demo/models/lambdamart-listwise")  # doctest: +SKIP
>>> bm25, dense = routed.arms["bm25"], routed.arms["dense"]  # doctest: +SKIP
>>> from ir_measures import RR, nDCG  # PyTerrier parses a string measure as trec_eval's name
>>> pt.Experiment([bm25, dense, routed], topics, qrels, [nDCG @ 10, RR], baseline=0)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ltrr._errors import ConfigError, DataError, MissingDependencyError

try:
    import pyterrier as pt
except ImportError:  # the module is only imported by users who want PyTerrier
    raise MissingDependencyError("ltrr.integrations.pyterrier needs PyTerrier: pip install 'ltrr[pyterrier]'") from None

__all__ = ["ArmTransformer", "LTRRouterTransformer", "arms"]

R_COLUMNS = ["qid", "query", "docno", "score", "rank", "text"]


def _check_q_frame(topics: Any, who: str) -> pd.DataFrame:
    """The Q frame a retriever takes, checked: a results frame (with ``docno``) is refused, and
    a blank query is dropped with a warning, as PyTerrier's Terrier retriever skips it."""
    if not isinstance(topics, pd.DataFrame):
        raise DataError(f"{who} takes a PyTerrier Q frame (a DataFrame with qid and query), got {type(topics).__name__}")
    missing = [c for c in ("qid", "query") if c not in topics.columns]
    if missing:
        raise DataError(f"{who}: the input frame lacks column(s) {', '.join(missing)} "
                        f"(it has {', '.join(map(str, topics.columns)) or 'none'})")
    if "docno" in topics.columns:
        raise DataError(f"{who} is a retriever: it takes queries (qid, query), not a results frame with docno "
                        "(it cannot re-rank or be a ** feature of another retriever's results)")
    blank = topics["query"].isna() | (topics["query"].astype(str).str.strip() == "")
    if blank.any():
        import warnings

        for qid in topics.loc[blank, "qid"]:
            warnings.warn(f"{who}: skipping the empty query of qid {qid!r}", stacklevel=3)
        topics = topics[~blank]
    return topics


def _empty_r(extra: Sequence[str] = (), *, floats: tuple[str, ...] = ()) -> pd.DataFrame:
    cols = {"qid": object, "query": object, "docno": object, "score": np.float64, "rank": np.int64, "text": object}
    cols.update({c: (np.float64 if c in floats else object) for c in extra})
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in cols.items()})


def _carried(topics: pd.DataFrame) -> list[str]:
    """The input frame's other columns (``query_0`` of a query rewrite, say), which a PyTerrier
    retriever passes through to its R frame (``pt.rewrite.reset()`` reads ``query_0``)."""
    return [c for c in topics.columns if c not in R_COLUMNS]


def _queries(topics: pd.DataFrame) -> pd.DataFrame:
    """A checked Q frame as ltrr's queries (``qid`` as text, ``question``)."""
    return pd.DataFrame({"qid": topics["qid"].astype(str).to_numpy(), "question": topics["query"].to_numpy()})


def _r_frame(topics: pd.DataFrame, res: pd.DataFrame) -> pd.DataFrame:
    """The R frame of one arm's `ltrr.retrieval.Pool.search` rows ``res`` for the checked Q
    frame ``topics``, with the input's other columns carried through."""
    from ltrr.data.trec import ordering_scores

    carried = _carried(topics)
    if res.empty:
        return _empty_r(carried)
    # scores decided query by query (raw where they order the ranking, else 1/rank), so a
    # query's scores do not depend on the others in its batch (pt.Experiment's batch_size)
    per_query = res.assign(arm=res["arm"].astype(str) + "\0" + res["qid"].astype(str))
    out = pd.DataFrame({"qid": res["qid"].to_numpy(), "docno": res["docid"].astype(str).to_numpy(),
                        "score": ordering_scores(per_query).to_numpy(), "rank": res["rank"].to_numpy() - 1,
                        "text": res["text"].to_numpy()})
    out["query"] = out["qid"].map(dict(zip(topics["qid"].astype(str), topics["query"], strict=True)))
    out = out[R_COLUMNS]
    if carried:
        extra = topics[carried].assign(qid=topics["qid"].astype(str)).drop_duplicates("qid")
        out = out.merge(extra, on="qid", how="left")
    return out


class ArmTransformer(pt.Transformer):
    """One arm of a loaded ltrr `ltrr.retrieval.Pool`, as a PyTerrier retriever.

    The R frame's ``score`` orders the arm's ranking as ltrr ranked it
    (`ltrr.data.trec.ordering_scores`: the arm's own score, or ``1/rank`` for an arm whose
    scores do not order it, such as a sampled reranking). The no-retrieval arm returns no rows.

    Parameters
    ----------
    pool : Pool
        A pool with its indexes loaded (``pool.load(index_dir)``).
    arm : str
        The arm's name.
    """

    def __init__(self, pool: Any, arm: str):
        self.pool = pool
        self.arm = arm

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        topics = _check_q_frame(topics, f"arm {self.arm!r}")
        if topics.empty:
            return _empty_r(_carried(topics))
        return _r_frame(topics, self.pool.search(_queries(topics), [self.arm]))

    def __repr__(self) -> str:
        return f"ArmTransformer({self.arm!r})"


def arms(pool: Any) -> dict[str, ArmTransformer]:
    """Every arm of a loaded pool as an `ArmTransformer`, by arm name, in pool order."""
    return {name: ArmTransformer(pool, name) for name in pool.arm_names}


_pool_arms = arms  # LTRRouterTransformer's ``arms`` parameter shadows the function


class LTRRouterTransformer(pt.Transformer):
    """A trained LTR router as a PyTerrier transformer: each query gets its chosen arm's R frame.

    Parameters
    ----------
    router : str, Path or LTRRouter
        A trained router folder (``ltrr train``: ``router.json``) or a fitted router with its
        pool config and index folder.
    arms : mapping of str to pt.Transformer, optional
        The transformer of each arm the router can choose, by the router's arm names (any
        PyTerrier retriever, e.g. a Terrier BM25 for ltrr's ``bm25`` arm). A no-retrieval arm
        may be left out: a query routed to it gets no rows. Default: ltrr's own arms
        (`arms` of the router's pool).

    Attributes
    ----------
    arms : dict
        The transformer of each arm.

    Raises
    ------
    ConfigError
        When ``arms`` lacks a retrieval arm the router can choose, or names an arm it cannot.

    Notes
    -----
    The mapping is checked here, not at the first query as scikit-learn would, because a
    PyTerrier pipeline is assembled once and run on many topic sets: a pipeline that cannot
    route should fail where it is built.
    """

    def __init__(self, router: Any, arms: Mapping[str, Any] | None = None):
        from ltrr.routers.ltr import LTRRouter

        self.router = LTRRouter.load(router) if isinstance(router, (str, Path)) else router
        self._pool_obj = None  # the router's pool, loaded at first use (indexes are large)
        if arms is None:
            arms = _pool_arms(self._pool())
        if not isinstance(arms, Mapping):
            raise ConfigError(f"arms is a mapping of arm name to PyTerrier transformer, got {type(arms).__name__}")
        choosable = list(self.router.arms_)
        optional = set(self.router.no_retrieval_)
        missing = [a for a in choosable if a not in arms and a not in optional]
        unknown = [a for a in arms if a not in choosable]
        if missing or unknown:
            raise ConfigError(
                "the arm mapping of LTRRouterTransformer must give a transformer for every arm the router can "
                f"choose ({', '.join(choosable)}; a no-retrieval arm may be left out): "
                + "; ".join(p for p in (f"missing {', '.join(map(repr, missing))}" if missing else "",
                                        f"not an arm of the router {', '.join(map(repr, unknown))}" if unknown else "")
                            if p))
        self.arms = dict(arms)

    def _pool(self):
        if self._pool_obj is None:
            self._pool_obj = self.router.make_pool()
        return self._pool_obj

    def choose(self, topics: pd.DataFrame) -> pd.DataFrame:
        """The router's choice per query: ``DataFrame[qid, arm, router_score]`` in input order.

        The topics are routed as one batch under their own qids (`ltrr.eval.retrieval.route_batch`),
        as ``ltrr run`` routes a dataset: a sampled reranking (``stoch``) draws its sample from
        the qid, so routing each query under a placeholder id (as `ltrr.routers.RoutedPipeline`
        does for one question) would see other passages than the run and the arm transformers.
        """
        topics = _check_q_frame(topics, "LTRRouterTransformer")
        return self._route(_queries(topics))[0]

    def _route(self, queries: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The choice per query and every arm's results, which the features were made from."""
        from ltrr.eval.retrieval import route_batch

        pool = self._pool()
        results = pool.search(queries)
        return route_batch(self.router, pool, queries, results), results

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        topics = _check_q_frame(topics, "LTRRouterTransformer")
        if topics.empty:
            return _empty_r([*_carried(topics), "arm", "router_score"], floats=("router_score",))
        choice, results = self._route(_queries(topics))
        frames = []
        for arm, sub in choice.groupby("arm", sort=False):
            if arm not in self.arms:  # a no-retrieval arm left out of the mapping: no passages
                continue
            chosen = set(sub["qid"])
            q = topics[topics["qid"].astype(str).isin(chosen)]
            t = self.arms[arm]
            if isinstance(t, ArmTransformer) and t.pool is self._pool_obj and t.arm == arm:
                # ltrr's own arm over the router's pool: its rows are among the results the
                # features were made from (one retrieval per query, not two)
                res = _r_frame(q, results[(results["arm"] == arm) & results["qid"].astype(str).isin(chosen)])
            else:
                res = t.transform(q)
            if len(res):
                frames.append(res.assign(qid=res["qid"].astype(str)))
        if not frames:
            return _empty_r([*_carried(topics), "arm", "router_score"], floats=("router_score",))
        out = pd.concat(frames, ignore_index=True)
        # the router's arm and score replace any such columns the input carried
        out = out.drop(columns=[c for c in ("arm", "router_score") if c in out.columns]).merge(choice, on="qid",
                                                                                              how="left")
        qpos = {q: i for i, q in enumerate(choice["qid"])}
        order = np.lexsort((out["rank"].to_numpy(), out["qid"].map(qpos).to_numpy()))
        return out.iloc[order].reset_index(drop=True)

    def __repr__(self) -> str:
        return f"LTRRouterTransformer({self.router.ranker!r}, arms={list(self.arms)})"
