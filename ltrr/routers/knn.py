"""KNNRouter: route a query to the arm that served its nearest training queries best.

A pre-retrieval router (no passage is read): the query embedding is compared by cosine
similarity with the embeddings of the training queries, and each arm is scored by the mean
utility it got on the ``n_neighbors`` nearest of them, shrunk towards the arm's mean over all
training queries::

    score(q, a) = (sum_j w_j u_ja + prior_weight * mean_j' u_j'a) / (sum_j w_j + prior_weight)

with ``w_j = 1`` (``weights="uniform"``) or ``w_j = max(cos(q, q_j), 0)``
(``weights="similarity"``) over the neighbours ``j``. The prior term breaks ties (equal
neighbour means, which are common with 0/1 utilities) in favour of the arm that is best overall,
and keeps a query with few informative neighbours close to the best single arm.

kNN on query embeddings is a strong baseline for routing between LLMs (Shnitzer et al., 2023,
"Large Language Model Routing with Benchmark Datasets"); here it routes between retrieval arms.
It estimates each arm's expected utility near the query directly, so it needs no per-query
normalisation of the labels and no feature of the arms' passages. It learns which *kinds* of
query (phrasing, topic, form of the expected answer) each arm serves best; it cannot see how
good an arm's passages are for one query, which the post-retrieval features of `LTRRouter` do.

The neighbour search is scikit-learn's `~sklearn.neighbors.NearestNeighbors` (brute-force
cosine). Saved as one folder: ``router.json`` and ``knn.safetensors`` (training embeddings and
the utility matrix).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.exceptions import NotFittedError

from ltrr._atomic import manifest_last, plain_json, write_arrays_atomic, write_json_atomic
from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr._version import __version__
from ltrr.routers.reference import score_frame, utility_frame
from ltrr.routers.trainfree import Router, routers, routing_table

__all__ = ["KNNRouter", "KNN_FORMAT"]

KNN_FORMAT = 1
_WEIGHTS = ("uniform", "similarity")


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def _embeddings_of(raw: Any, what: str) -> tuple[list[str], np.ndarray]:
    qids = getattr(raw, "qids", None)
    emb = getattr(raw, "query_embeddings", None)
    if qids is None or emb is None:
        raise DataError(f"the knn router {what} RawFeatures with query embeddings "
                        "(ltrr.features.extract_raw), got " + type(raw).__name__)
    emb = np.asarray(emb)
    if emb.ndim != 2 or emb.shape[0] != len(qids):
        raise DataError(f"query_embeddings must have shape (n_queries={len(qids)}, dim), got {emb.shape}")
    return [str(q) for q in qids], emb


@routers.register("knn")
class KNNRouter(Router):
    """Nearest-neighbour router on query embeddings.

    Parameters
    ----------
    n_neighbors : int
        Training queries consulted per query (fewer if fewer were trained on).
    weights : {"uniform", "similarity"}
        Equal weights, or each neighbour weighted by its cosine similarity (clipped at 0).
    prior_weight : float
        Pseudo-count of the arm's overall training mean (>= 0; see the module docstring).
    label : str
        Labels column averaged over the neighbours (``"utility"``: the metric of the generated
        answer; a gain column gives the same choice when the no-retrieval utility is shared).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from ltrr.features import RawFeatures
    >>> def raw(qids, emb):
    ...     t = pd.DataFrame({"qid": np.repeat(qids, 2), "arm": ["bm25", "none"] * len(qids)})
    ...     return RawFeatures(table=t, query_embeddings=np.asarray(emb, float), qids=qids,
    ...                        arms=["bm25", "none"], no_retrieval=["none"])
    >>> train = raw(["a", "b"], [[1, 0], [0, 1]])
    >>> labels = pd.DataFrame({"qid": ["a", "a", "b", "b"], "arm": ["bm25", "none"] * 2,
    ...                        "utility": [1.0, 0.0, 0.0, 1.0]})
    >>> r = KNNRouter(n_neighbors=1, prior_weight=0.0).fit(train, labels)
    >>> r.choose(raw(["x", "y"], [[0.9, 0.1], [0.2, 0.8]])).to_dict()
    {'x': 'bm25', 'y': 'none'}
    """

    name = "knn"
    reads = "query_embedding"

    def __init__(self, n_neighbors: int = 25, *, weights: str = "uniform", prior_weight: float = 1.0,
                 label: str = "utility"):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.prior_weight = prior_weight
        self.label = label

    def _check_params(self) -> None:
        check_int(self.n_neighbors, "knn router: n_neighbors", low=1)
        if self.weights not in _WEIGHTS:
            raise ConfigError(f"knn router: weights must be one of {', '.join(_WEIGHTS)}, got {self.weights!r}")
        check_number(self.prior_weight, "knn router: prior_weight", low=0)

    def fit(self, raw: Any = None, labels: pd.DataFrame | None = None) -> KNNRouter:
        """Keep the embeddings and per-arm utilities of the training queries that have every arm."""
        from sklearn.neighbors import NearestNeighbors

        self._check_params()
        if labels is None:
            raise DataError("the knn router needs training labels: fit(raw, labels)")
        qids, emb = _embeddings_of(raw, "is trained on")
        U = utility_frame(labels, value=self.label).dropna()
        known = [q for q in qids if q in U.index]
        if not known:
            raise DataError("the knn router got no training query with a label for every arm")
        row = {q: i for i, q in enumerate(qids)}
        self.arms_ = [str(a) for a in getattr(raw, "arms", None) or U.columns if str(a) in U.columns]
        self.utility_ = U.loc[known, self.arms_].to_numpy(dtype=np.float64)
        self.embeddings_ = _unit(emb[[row[q] for q in known]])
        self.prior_ = self.utility_.mean(axis=0)
        self.n_train_queries_ = len(known)
        self.index_ = NearestNeighbors(metric="cosine", algorithm="brute").fit(self.embeddings_)
        return self

    def scores_for(self, embeddings: np.ndarray) -> np.ndarray:
        """``(n_queries, n_arms)`` scores of query embeddings, arms in ``self.arms_`` order."""
        if not hasattr(self, "index_"):
            raise NotFittedError("KNNRouter is not fitted; call fit(raw, labels) or KNNRouter.load(folder)")
        emb = _unit(np.atleast_2d(embeddings))
        if emb.shape[1] != self.embeddings_.shape[1]:
            raise DataError(f"query embeddings have dimension {emb.shape[1]}; the router was trained on "
                            f"{self.embeddings_.shape[1]} (another embedder?)")
        k = min(int(self.n_neighbors), self.n_train_queries_)
        dist, idx = self.index_.kneighbors(emb, n_neighbors=k)
        w = np.ones_like(dist) if self.weights == "uniform" else np.clip(1.0 - dist, 0.0, None)
        num = np.einsum("qk,qka->qa", w, self.utility_[idx]) + self.prior_weight * self.prior_
        den = w.sum(axis=1, keepdims=True) + self.prior_weight
        return num / np.where(den > 0, den, 1.0)

    def route_scores(self, raw: Any) -> pd.DataFrame:
        table = routing_table(raw)
        qids, emb = _embeddings_of(raw, "routes")
        unknown = sorted(set(table["arm"].astype(str)) - set(getattr(self, "arms_", [])))
        if hasattr(self, "arms_") and unknown:
            raise DataError(f"the knn router was trained on arms {self.arms_}; the table also has {unknown}")
        s = self.scores_for(emb)
        qpos = pd.Index(qids).get_indexer(table["qid"].astype(str))
        if (qpos < 0).any():
            raise DataError("the routing table has query ids without a query embedding")
        apos = pd.Index(self.arms_).get_indexer(table["arm"].astype(str))
        return score_frame(table, s[qpos, apos])

    def route_query(self, qraw: Any) -> list[tuple[str, float]]:
        """Rank the arms of one query (`ltrr.features.QueryRaw`): ``[(arm, score), ...]``, best first."""
        s = self.scores_for(np.asarray(qraw.query_embedding, dtype=np.float64).reshape(1, -1))[0]
        pos = {a: i for i, a in enumerate(self.arms_)}
        arms = [str(a) for a in qraw.arms]
        missing = [a for a in arms if a not in pos]
        if missing:
            raise DataError(f"the knn router was trained on arms {self.arms_}, not {missing}")
        order = sorted(range(len(arms)), key=lambda i: (-s[pos[arms[i]]], i))
        return [(arms[i], float(s[pos[arms[i]]])) for i in order]

    # ---- persistence ---------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save into folder ``path``: ``knn.safetensors`` then ``router.json`` (written last)."""
        if not hasattr(self, "index_"):
            raise NotFittedError("KNNRouter is not fitted")
        meta = {"format": KNN_FORMAT, "router": "knn", "ltrr_version": __version__,
                "params": plain_json(self.get_params(), "KNNRouter params"), "arms": self.arms_}
        with manifest_last(path, "router.json") as path:
            write_arrays_atomic(path / "knn.safetensors", {"embeddings": self.embeddings_, "utility": self.utility_})
            write_json_atomic(path / "router.json", meta, indent=2, sort_keys=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> KNNRouter:
        """Load a router saved by `save`.

        Raises
        ------
        NotBuiltError
            ``path`` holds no ``router.json`` or ``knn.safetensors``.
        DataError
            One message naming ``path`` for a damaged folder: a missing or ill-typed entry of
            ``router.json``, a parameter this class does not take or out of its range, a
            damaged ``knn.safetensors`` or one that does not match ``router.json``.
        """
        from safetensors.numpy import load_file
        from sklearn.neighbors import NearestNeighbors

        from ltrr.data.io import read_saved_meta, saved_model_errors

        path = Path(path)
        meta = read_saved_meta(path / "router.json", "no saved knn router (router.json and knn.safetensors)")
        if not (path / "knn.safetensors").is_file():
            raise NotBuiltError(f"{path}: no saved knn router (router.json and knn.safetensors)")
        if meta.get("router") != "knn" or meta.get("format") != KNN_FORMAT:
            raise DataError(f"{path}: not a knn router in format {KNN_FORMAT} (router {meta.get('router')!r}, "
                            f"format {meta.get('format')!r})")
        with saved_model_errors(path, "knn router"):
            router = cls(**meta["params"])
            try:
                router._check_params()
            except ConfigError as exc:
                raise DataError(f"{path}: router.json's parameters do not fit KNNRouter: {exc}") from None
            arms = meta["arms"]
            if not isinstance(arms, list) or not all(isinstance(a, str) for a in arms):
                raise DataError(f"{path}: router.json's arms must be a list of arm names, got {type(arms).__name__}")
            arrays = load_file(str(path / "knn.safetensors"))
            router.embeddings_, router.utility_ = arrays["embeddings"], arrays["utility"]
            router.arms_ = list(arms)
            if router.embeddings_.ndim != 2 or router.utility_.shape != (router.embeddings_.shape[0], len(arms)):
                raise DataError(f"{path}: knn.safetensors does not match router.json's arms")
            if not len(router.embeddings_):
                raise DataError(f"{path}: knn.safetensors holds no training query; the folder is damaged")
            router.prior_ = router.utility_.mean(axis=0)
            router.n_train_queries_ = int(router.utility_.shape[0])
            router.index_ = NearestNeighbors(metric="cosine", algorithm="brute").fit(router.embeddings_)
        return router

    def __repr__(self) -> str:
        return (f"KNNRouter(n_neighbors={self.n_neighbors}, weights={self.weights!r}, "
                f"prior_weight={self.prior_weight}, label={self.label!r})")
