"""Train-free routers: each picks the expected arm on a hand example; ties, NaN, the interface."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.features import RawFeatures
from ltrr.routers import FeatureRouter, Router, rank_scores, routers

NAN = math.nan
ARMS = ["bm25", "dense", "dense+reg", "none"]


def hand_table():
    # q1: every feature favours a different arm; q2 exercises ties and a retrieval arm with no docs
    rows = [
        # qid, arm,        overall, avg,  max,  var,   moran
        ("q1", "bm25", 0.50, 0.40, 0.90, 0.050, 0.10),
        ("q1", "dense", 0.70, 0.45, 0.60, 0.020, -0.30),
        ("q1", "dense+reg", 0.60, 0.55, 0.70, 0.030, 0.40),
        ("q1", "none", NAN, NAN, NAN, NAN, NAN),
        ("q2", "bm25", 0.30, 0.30, 0.50, 0.010, 0.00),
        ("q2", "dense", 0.30, 0.30, 0.50, 0.010, 0.00),
        ("q2", "dense+reg", NAN, NAN, NAN, NAN, NAN),
        ("q2", "none", NAN, NAN, NAN, NAN, NAN),
    ]
    return pd.DataFrame(
        rows, columns=["qid", "arm", "overall_sim", "avg_sim", "max_sim", "var_sim", "moran"]
    )


def as_raw(table, arms=ARMS):
    return RawFeatures(
        table=table,
        query_embeddings=np.zeros((2, 1)),
        qids=["q1", "q2"],
        arms=arms,
        no_retrieval=["none"],
        meta={},
    )


@pytest.mark.parametrize(
    "name, expected",
    [
        ("overallsim", "dense"),
        ("avgsim", "dense+reg"),
        ("maxsim", "bm25"),
        ("varsim", "dense"),
        ("moran", "dense+reg"),
    ],
)
def test_each_router_picks_expected_arm(name, expected):
    router = routers.get(name)().fit()
    choice = router.choose(as_raw(hand_table()))
    assert choice.name == "arm" and choice.index.name == "qid"
    assert choice["q1"] == expected
    # q2: bm25 and dense tie on every feature -> the earlier arm in pool order
    assert choice["q2"] == "bm25"


def test_varsim_picks_lowest_variance():
    t = pd.DataFrame({"qid": "q", "arm": ["a", "b", "c"], "var_sim": [0.3, 0.001, 0.2]})
    assert routers.get("varsim")().choose(t).to_dict() == {"q": "b"}
    scores = routers.get("varsim")().route_scores(t)
    assert scores["score"].tolist() == [-0.3, -0.001, -0.2]


def test_no_retrieval_and_empty_arms_rank_last():
    raw = as_raw(hand_table())
    for name in ("overallsim", "avgsim", "maxsim", "varsim", "moran"):
        r = routers.get(name)().ranking(raw)
        q1 = r[r["qid"] == "q1"]
        assert q1["arm"].iloc[-1] == "none" and q1["score"].iloc[-1] == -np.inf
        q2 = r[r["qid"] == "q2"]
        # both featureless arms are last, in pool order
        assert q2["arm"].tolist()[-2:] == ["dense+reg", "none"]
        assert q1["rank"].tolist() == [1, 2, 3, 4]


def test_tie_break_follows_arm_order_not_row_order():
    t = hand_table()
    shuffled = t.iloc[::-1].reset_index(drop=True)
    assert routers.get("maxsim")().choose(as_raw(shuffled))["q2"] == "bm25"
    # with another pool order, the tie goes the other way
    other = ["dense", "bm25", "dense+reg", "none"]
    assert routers.get("maxsim")().choose(as_raw(t, arms=other))["q2"] == "dense"


def test_plain_dataframe_and_query_order():
    t = hand_table()
    choice = routers.get("overallsim")().choose(t.iloc[::-1])
    assert choice.index.tolist() == ["q2", "q1"]


def test_registry_and_errors():
    assert {"avgsim", "maxsim", "moran", "overallsim", "varsim"} <= set(routers.names())
    with pytest.raises(ConfigError, match="unknown router 'bogus'; choose one of: .*maxsim"):
        routers.get("bogus")
    with pytest.raises(DataError, match="needs the raw feature column 'moran'"):
        routers.get("moran")().route_scores(hand_table().drop(columns="moran"))
    with pytest.raises(DataError, match="missing column"):
        routers.get("moran")().route_scores(pd.DataFrame({"qid": ["q"]}))
    with pytest.raises(NotImplementedError, match="route_scores"):
        Router().route_scores(hand_table())


def test_custom_router_subclass_and_rank_scores():
    class Constant(Router):
        name = "constant"

        def route_scores(self, raw):
            t = raw.table
            return pd.DataFrame(
                {"qid": t["qid"], "arm": t["arm"], "score": (t["arm"] == "none").astype(float)}
            )

    assert Constant().choose(as_raw(hand_table())).tolist() == ["none", "none"]
    r = rank_scores(
        pd.DataFrame({"qid": ["q"] * 3, "arm": ["x", "y", "z"], "score": [1.0, NAN, 2.0]})
    )
    assert r["arm"].tolist() == ["z", "x", "y"] and r["rank"].tolist() == [1, 2, 3]
    assert repr(FeatureRouter("avg_sim")) == "FeatureRouter('avg_sim', higher_is_better=True)"
    assert FeatureRouter("var_sim", higher_is_better=False).get_params() == {
        "feature": "var_sim",
        "higher_is_better": False,
    }
