"""Retrievers and rerankers are scikit-learn estimators whose ``get_params`` is unchanged.

The expected dicts are what ``get_params()`` returned before the move to ``BaseEstimator``
(commit 46ab1b1): the pool's ``to_config()`` and every saved index's identity are built from
them, so a change here would make stored indexes and routers look stale.
"""

from __future__ import annotations

import pytest
from sklearn.base import BaseEstimator, clone

from ltrr.retrieval import rerankers, retrievers

TOKENIZER = {
    "lowercase": True,
    "stopwords": "english",
    "stemmer": "porter",
    "token_pattern": "(?u)\\b\\w+\\b",
}
BEFORE = {
    ("retriever", "bm25"): {"backend": "bm25s", "k1": 0.9, "b": 0.4, "tokenizer": TOKENIZER},
    ("retriever", "dense"): {
        "encoder": "minilm",
        "index_type": "flat",
        "hnsw_m": 32,
        "hnsw_ef_search": 128,
        "ivf_nlist": None,
        "nprobe": 16,
        "batch_size": 64,
    },
    ("reranker", "cross-encoder"): {
        "model": None,
        "batch_size": 32,
        "max_length": None,
        "device": "cpu",
    },
    ("reranker", "none"): {},
    ("reranker", "reg"): {"m": 5, "t": 1, "alpha": 1.0, "encoder": None, "embeddings": None},
    ("reranker", "stoch"): {
        "n_samples": 50,
        "intensity": 2.0,
        "normalize": "minmax",
        "select": "draw",
        "seed": 0,
    },
}
REGISTRIES = {"retriever": retrievers, "reranker": rerankers}


def test_every_registered_part_is_covered():
    assert {(k, n) for k, reg in REGISTRIES.items() for n in reg} == set(BEFORE)


@pytest.mark.parametrize(("kind", "name"), sorted(BEFORE))
def test_get_params_is_the_dict_it_was(kind, name):
    obj = REGISTRIES[kind].get(name)()
    assert isinstance(obj, BaseEstimator)
    params = obj.get_params()
    assert params == BEFORE[(kind, name)]
    assert list(params) == list(BEFORE[(kind, name)])  # signature order, as repr shows it
    assert obj.get_params(deep=False) == params
    copy = clone(obj)
    assert type(copy) is type(obj) and copy.get_params() == params


def test_set_params_and_from_params_round_trip():
    bm25 = retrievers.get("bm25")(k1=1.2)
    assert bm25.set_params(b=0.6) is bm25
    again = type(bm25).from_params(bm25.get_params())
    assert again.get_params() == {**BEFORE[("retriever", "bm25")], "k1": 1.2, "b": 0.6}
    stoch = rerankers.get("stoch")(seed=3)
    assert clone(stoch).get_params()["seed"] == 3
