"""GBDT rankers trained on Dask: `lightgbm.dask.DaskLGBMRanker` for ``lambdamart-listwise``,
`xgboost.dask.DaskXGBRanker` for ``xgboost-pairwise`` and ``xgboost-listwise``.

Inside ``with dask_training(client):`` these rankers' ``fit`` trains on the Dask cluster
instead of in process: same parameters, same canonical row order, and the fitted booster is
kept, so the ranker saves, loads and predicts as usual.

LightGBM's Dask ranker takes the group sizes chunked like the rows: chunk i of ``group`` must
describe whole queries of chunk i of ``X``. `query_partitions` cuts the rows only at query
boundaries and `check_group_partitions` refuses any partition that splits a query.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError

__all__ = ["dask_training", "active_client", "query_partitions", "check_group_partitions", "fit_lambdamart_on_dask",
           "fit_xgboost_ranker_on_dask"]

_CLIENT: contextvars.ContextVar = contextvars.ContextVar("ltrr_dask_client", default=None)


@contextlib.contextmanager
def dask_training(client) -> Iterator[None]:
    """GBDT rankers fitted in this block train on ``client``'s cluster."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)


def active_client():
    """The Dask client of the innermost enclosing `dask_training` block, or None outside one."""
    return _CLIENT.get()


def query_partitions(sizes: np.ndarray, n_partitions: int) -> list[tuple[int, int]]:
    """``n_partitions`` (or fewer) contiguous query ranges with about equal rows: ``(first, end)``
    indexes into ``sizes``. A query is never split.

    Examples
    --------
    >>> query_partitions(np.array([3, 3, 3, 3]), 2)
    [(0, 2), (2, 4)]
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n_partitions = min(check_int(n_partitions, "n_partitions", low=1), len(sizes))
    cum = np.cumsum(sizes)
    cuts = [int(np.searchsorted(cum, cum[-1] * k / n_partitions, side="left")) + 1 for k in range(1, n_partitions)]
    bounds = sorted({0, *[c for c in cuts if 0 < c < len(sizes)], len(sizes)})
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def check_group_partitions(row_chunks: tuple[int, ...], group_chunks: list[np.ndarray]) -> None:
    """Each partition's group sizes must add up to its rows: no query crosses a partition."""
    if len(row_chunks) != len(group_chunks):
        raise DataError(f"{len(row_chunks)} row partitions but {len(group_chunks)} group partitions")
    for i, (rows, groups) in enumerate(zip(row_chunks, group_chunks, strict=True)):
        if int(np.sum(groups)) != int(rows):
            raise DataError(f"partition {i} has {rows} rows but its queries hold {int(np.sum(groups))}: "
                            "a query crosses a partition boundary")


def _partitions(sizes: np.ndarray, client) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """One query-aligned partition per worker: rows per partition and their group sizes, checked."""
    n_workers = max(1, len(client.scheduler_info().get("workers", {})))
    parts = query_partitions(sizes, n_workers)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    row_chunks = tuple(int(starts[e] - starts[b]) for b, e in parts)
    group_chunks = [sizes[b:e] for b, e in parts]
    check_group_partitions(row_chunks, group_chunks)
    return row_chunks, group_chunks


def fit_xgboost_ranker_on_dask(X: np.ndarray, y: np.ndarray, codes: np.ndarray, sizes: np.ndarray,
                               params: dict, client):
    """Train an XGBoost ranker (``params`` holds its objective) on Dask; returns the booster.

    `DaskXGBRanker` takes Dask DataFrames and the query id of each row; each partition holds
    whole queries (checked), as in the LightGBM path.
    """
    import dask.dataframe as dd
    import pandas as pd
    from xgboost.dask import DaskXGBRanker

    row_chunks, _ = _partitions(sizes, client)
    cols = [f"f{i}" for i in range(X.shape[1])]
    bounds = np.concatenate([[0], np.cumsum(row_chunks)])
    frames = [pd.DataFrame(X[b:e], columns=cols).assign(_y=y[b:e], _qid=codes[b:e]) for b, e in zip(bounds[:-1], bounds[1:], strict=True)]
    ddf = dd.concat([dd.from_pandas(f, npartitions=1, sort=False) for f in frames], interleave_partitions=False)
    params = {k: v for k, v in params.items() if k != "n_jobs"}
    model = DaskXGBRanker(**params)
    model.client = client
    model.fit(ddf[cols], ddf["_y"], qid=ddf["_qid"])
    return model.get_booster()


def fit_lambdamart_on_dask(ranker, X: np.ndarray, grades: np.ndarray, sizes: np.ndarray, params: dict, client):
    """Train LightGBM lambdarank on Dask; returns the booster. Rows are in canonical order."""
    import dask.array as da
    from lightgbm.dask import DaskLGBMRanker

    row_chunks, group_chunks = _partitions(sizes, client)
    dX = da.from_array(np.asarray(X, dtype=np.float64), chunks=(row_chunks, X.shape[1]))
    dy = da.from_array(np.asarray(grades), chunks=(row_chunks,))
    dg = da.concatenate([da.from_array(g, chunks=(len(g),)) for g in group_chunks])
    model = DaskLGBMRanker(client=client, **params)
    return model.fit(dX, dy, group=dg).booster_
