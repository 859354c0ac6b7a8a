"""LambdaMART on Dask: partitions never split a query, and the model matches local training."""

from __future__ import annotations

import numpy as np
import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.dist.rankers import check_group_partitions, query_partitions


def test_query_partitions_never_split_a_query():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = rng.integers(1, 12, size=rng.integers(1, 40))
        for n in (1, 2, 3, 7):
            parts = query_partitions(sizes, n)
            assert parts[0][0] == 0 and parts[-1][1] == len(sizes) and len(parts) <= n
            assert all(b < e for b, e in parts) and all(parts[i][1] == parts[i + 1][0] for i in range(len(parts) - 1))
            starts = np.concatenate([[0], np.cumsum(sizes)])
            rows = tuple(int(starts[e] - starts[b]) for b, e in parts)
            check_group_partitions(rows, [sizes[b:e] for b, e in parts])
    with pytest.raises(DataError, match="a query crosses a partition boundary"):
        check_group_partitions((5, 4), [np.array([3, 3]), np.array([3])])
    with pytest.raises(ConfigError, match="n_partitions must be an integer >= 1, got 0"):
        query_partitions(np.array([2]), 0)


@pytest.mark.slow
def test_dask_lambdamart_matches_local_training():
    from dask.distributed import Client, LocalCluster

    from ltrr.dist.rankers import dask_training
    from ltrr.rankers import rankers
    from ltrr.rankers.base import mean_ndcg
    from ltrr.rankers.checks import make_ranking_data

    X, y, qid = make_ranking_data(n_queries=200, random_state=0)
    Xt, yt, qt = make_ranking_data(n_queries=100, random_state=1)
    local = rankers.get("lambdamart-listwise")(n_estimators=50, random_state=0).fit(X, y, qid=qid)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, dask_training(client):
        remote = rankers.get("lambdamart-listwise")(n_estimators=50, random_state=0).fit(X, y, qid=qid)
        xgb = {name: rankers.get(name)(n_estimators=30, random_state=0).fit(X, y, qid=qid)
               for name in ("xgboost-pairwise", "xgboost-listwise")}
        with pytest.raises(ConfigError, match="does not train on Dask"):
            rankers.get("xgboost-pointwise")(n_estimators=5).fit(X, y, qid=qid)
    a = mean_ndcg(yt, local.predict(Xt), qt, k=3)
    b = mean_ndcg(yt, remote.predict(Xt), qt, k=3)
    assert abs(a - b) <= 0.01, (a, b)
    for name, model in xgb.items():
        here = rankers.get(name)(n_estimators=30, random_state=0).fit(X, y, qid=qid)
        a, b = mean_ndcg(yt, here.predict(Xt), qt, k=3), mean_ndcg(yt, model.predict(Xt), qt, k=3)
        assert abs(a - b) <= 0.01, (name, a, b)


def test_scheduler_without_dask_and_bad_values(monkeypatch):
    import sys

    from ltrr._errors import MissingDependencyError
    from ltrr.dist import check_scheduler, connect

    assert check_scheduler("local:3") == "local:3" and check_scheduler("tcp://10.0.0.1:8786")
    with pytest.raises(ConfigError, match="positive worker count"):
        check_scheduler("local:0")
    for bad in ("tcp://127.0.0.1", "tcp://", "tls://127.0.0.1:8786", "tcp://host:99999", "tcp://a b:1"):
        with pytest.raises(ConfigError, match=r"--scheduler must be local\[:N\] or tcp://HOST:PORT"):
            check_scheduler(bad)  # a ValueError or TypeError traceback from distributed, after the stages
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # as if the dist extra were absent
    with pytest.raises(MissingDependencyError, match=r"pip install 'ltrr\[dist\]'"):
        connect("local:2")
