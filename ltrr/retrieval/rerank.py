"""Second-stage rerankers over first-stage results, found by name in `rerankers`.

A reranker takes a query's first-stage results (the pool passes the top ``depth``, 50 by
default) and returns the top ``k`` (5 by default) in a new order: ``rerank(queries, results, k)``.

``none``
    keep the first-stage order.
``reg``
    score regularization (Diaz 2005, 2007): smooth each document's score with those of its
    nearest neighbours among the retrieved documents, so documents similar to other
    high-scoring documents move up. See `ScoreRegularizer`.
``stoch``
    stochastic reranking: one ranking drawn from a Plackett-Luce distribution over the
    first-stage scores. See `StochasticReranker`.
``cross-encoder``
    a sentence-transformers ``CrossEncoder`` from a local folder.

Output rows keep the results schema (``qid, docid, score, rank, text``); ``score`` is the
reranker's score (the regularized score for ``reg``, the cross-encoder score for
``cross-encoder``, the first-stage score for ``none`` and ``stoch``, whose order comes from the
sampled ranking rather than from the score).
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError, DataError, MissingDependencyError
from ltrr._registry import Registry
from ltrr.retrieval.base import (
    RESULT_COLUMNS,
    check_k,
    empty_results,
    json_params,
    param_names,
    validate_queries,
    validate_results,
)
from ltrr.retrieval.embeddings import EmbeddingSource  # re-exported: its home was here

__all__ = [
    "Reranker",
    "rerankers",
    "EmbeddingSource",
    "NoReranker",
    "ScoreRegularizer",
    "StochasticReranker",
    "CrossEncoderReranker",
    "regularization_matrix",
    "regularize_scores",
    "pl_logits",
    "plackett_luce_sample",
    "plackett_luce_log_prob",
    "first_position_probs",
    "query_rng",
]

#: rerankers by name
rerankers: Registry = Registry("reranker")


# ---- the reranker contract -----------------------------------------------------------------
class Reranker(BaseEstimator, ABC):
    """Reorders each query's first-stage results and keeps the top ``k``.

    Subclasses implement ``_rerank_one``; ``__init__`` stores parameters only (a scikit-learn
    ``BaseEstimator``: ``get_params``/``set_params``, ``sklearn.base.clone``).
    """

    name: str = "abstract"

    @classmethod
    def _param_names(cls) -> list[str]:
        return param_names(cls)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (sklearn's) in signature order; ``deep`` changes nothing
        (the ``embeddings`` source of ``reg`` is returned as it is, not expanded)."""
        return json_params(self, super().get_params(deep=False))

    # concrete on purpose: a reranker without parameters has nothing to check
    def validate_params(self) -> None:
        """Check parameter values; raises `ConfigError` naming the bad one."""

    def rerank(self, queries: Any, results: pd.DataFrame, k: int = 5) -> pd.DataFrame:
        """Rerank ``results`` (first-stage, any depth) and keep the top ``k`` per query.

        ``queries`` gives the question text and the output order of queries; every qid in
        ``results`` must be among them. Rows come back sorted by query order, then new rank.
        """
        self.validate_params()
        k = check_k(k)
        q = validate_queries(queries)
        results = validate_results(results)
        known = set(q["qid"])
        unknown = sorted(set(results["qid"].astype(str)) - known)
        if unknown:
            raise DataError(f"results have qid(s) {unknown[:5]} that are not in queries")
        if len(results) == 0:
            return empty_results()
        # One sort of the whole table (query order, then first-stage rank, ties in row order: what
        # sorting each query's group stably gave) and one frame at the end. The loop below only
        # slices arrays: a DataFrame per query cost about 1.5 ms, 50 s of the demo's 34,392.
        qids = results["qid"].astype(str).to_numpy(dtype=object)
        position = {qid: i for i, qid in enumerate(q["qid"])}
        qpos = np.fromiter((position[x] for x in qids), dtype=np.int64, count=len(qids))
        order = np.argsort(results["rank"].to_numpy(), kind="stable")
        order = order[np.argsort(qpos[order], kind="stable")]
        qpos, qids = qpos[order], qids[order]
        scores = results["score"].to_numpy(dtype=np.float64)[order]
        docids = results["docid"].to_numpy(dtype=object)[order]
        docid_text = results["docid"].astype(str).to_numpy(dtype=object)[order].tolist()
        texts = results["text"].to_numpy(dtype=object)[order]
        text_list = texts.tolist()
        questions = q["question"].tolist()
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(qpos)) + 1, [len(qpos)]])
        rows, new_scores, ranks = [], [], []
        for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            picked, row_scores = self._rerank_one(
                qids[start], questions[qpos[start]], scores[start:end], docid_text[start:end],
                text_list[start:end], k,
            )
            picked = np.asarray(picked, dtype=np.int64)[:k]
            rows.append(start + picked)
            new_scores.append(np.asarray(row_scores, dtype=np.float64)[picked])
            ranks.append(np.arange(1, len(picked) + 1, dtype=np.int64))
        if not rows:
            return empty_results()
        rows_ = np.concatenate(rows)
        return pd.DataFrame({"qid": qids[rows_], "docid": docids[rows_], "score": np.concatenate(new_scores),
                             "rank": np.concatenate(ranks), "text": texts[rows_]})[RESULT_COLUMNS]

    @abstractmethod
    def _rerank_one(
        self,
        qid: str,
        question: str,
        scores: np.ndarray,
        docids: list[str],
        texts: list[str],
        k: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For one query's rows in first-stage order: (new order as row positions, row scores)."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


@rerankers.register("none")
class NoReranker(Reranker):
    """Keep the first-stage order; returns the top ``k``.

    Examples
    --------
    >>> import pandas as pd
    >>> res = pd.DataFrame({"qid": ["q0", "q0"], "docid": ["a", "b"], "score": [2.0, 1.0],
    ...                     "rank": [1, 2], "text": ["A", "B"]})
    >>> NoReranker().rerank(["a question"], res, k=1)["docid"].tolist()
    ['a']
    """

    name = "none"

    def _rerank_one(self, qid, question, scores, docids, texts, k):
        return np.arange(len(scores)), scores


# ---- score regularization ------------------------------------------------------------------
def regularization_matrix(embeddings: np.ndarray, m: int = 5) -> np.ndarray:
    """Row-stochastic neighbour matrix P of score regularization.

    ``W = D D^T`` over the L2-normalised rows of ``embeddings`` (cosine similarities), negative
    similarities clipped to 0. Each row keeps its ``m`` largest entries **including the document
    itself** (self-similarity 1, always kept; ties broken by position), so each document's
    smoothed score mixes its own score with those of its ``m - 1`` nearest neighbours; ``m = 1``
    gives ``P = I``. Rows are then normalised to sum to 1.
    """
    emb = np.asarray(embeddings, dtype=np.float64)
    n = emb.shape[0]
    if n == 0:
        return np.zeros((0, 0))
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    d = emb / norms
    w = np.clip(d @ d.T, 0.0, None)
    np.fill_diagonal(w, 1.0)
    m = min(int(m), n)
    select = w.copy()
    np.fill_diagonal(select, np.inf)  # self first, even against duplicate documents
    cols = np.arange(n)
    keep = np.zeros_like(w, dtype=bool)
    for i in range(n):
        top = np.lexsort((cols, -select[i]))[:m]
        keep[i, top] = True
    p = np.where(keep, w, 0.0)
    return p / p.sum(axis=1, keepdims=True)


def regularize_scores(
    scores: np.ndarray, p: np.ndarray, t: int = 1, alpha: float = 1.0
) -> np.ndarray:
    """``s~ = ((1 - alpha) I + alpha P)^t s``; with ``alpha = 1`` this is ``P^t s``.

    ``P`` is row-stochastic, so the smoothing commutes with any affine map ``a s + c`` (a > 0):
    BM25 and cosine scores need no normalisation first, and ``s~`` stays in the score's units.
    """
    s = np.asarray(scores, dtype=np.float64).copy()
    for _ in range(int(t)):
        s = (1.0 - alpha) * s + alpha * (p @ s)
    return s


@rerankers.register("reg")
class ScoreRegularizer(Reranker):
    """Score regularization (Diaz 2005, 2007) over the first-stage documents.

    ``D``: unit embeddings of a query's first-stage documents; ``W = D D^T``; each row keeps its
    ``m`` largest similarities, self included (see `regularization_matrix`); rows normalised to
    sum 1 give ``P``; the new score is ``s~ = ((1 - alpha) I + alpha P)^t s`` (``P^t s`` for the
    default ``alpha = 1``); documents are reordered by ``s~`` (ties keep first-stage order).
    ``t = 0`` returns the first-stage order and scores unchanged.

    Parameters
    ----------
    m : int
        Neighbours kept per row, self included (>= 1).
    t : int
        Strength: number of smoothing steps (>= 0).
    alpha : float
        Weight of the neighbours in each step, in [0, 1]; 1 gives plain ``P^t s``.
    encoder : str or None
        Encoder used when no ``embeddings`` source is given; None means ``"minilm"`` here, and
        in a `Pool` "the dense retriever's encoder" (see `ltrr.retrieval.pool`).
    embeddings : EmbeddingSource or None
        Where document embeddings come from; the pool passes one backed by the dense index.

    Examples
    --------
    >>> import numpy as np
    >>> p = regularization_matrix(np.eye(2), m=1)
    >>> regularize_scores([3.0, 1.0], p, t=1).tolist()
    [3.0, 1.0]
    """

    name = "reg"

    def __init__(
        self,
        m: int = 5,
        t: int = 1,
        alpha: float = 1.0,
        *,
        encoder: str | None = None,
        embeddings: EmbeddingSource | None = None,
    ):
        self.m = m
        self.t = t
        self.alpha = alpha
        self.encoder = encoder
        self.embeddings = embeddings

    def validate_params(self) -> None:
        check_int(self.m, "reg reranker: m", low=1)
        check_int(self.t, "reg reranker: t", low=0)
        check_number(self.alpha, "reg reranker: alpha", low=0, high=1)

    def _source(self) -> EmbeddingSource:
        if self.embeddings is None:
            # created on first use and kept, so the per-docid cache survives between calls
            self.embeddings = EmbeddingSource(encoder=self.encoder or "minilm")
        return self.embeddings

    def _rerank_one(self, qid, question, scores, docids, texts, k):
        if int(self.t) == 0 or len(scores) < 2:
            return np.arange(len(scores)), scores
        emb = self._source().get(docids, texts)
        smoothed = regularize_scores(scores, regularization_matrix(emb, self.m), self.t, self.alpha)
        order = np.lexsort((np.arange(len(scores)), -smoothed))
        return order, smoothed


# ---- stochastic reranking ------------------------------------------------------------------
NORMALIZATIONS = ("minmax", "zscore", "none")
SELECTIONS = ("draw", "max-prob")


def pl_logits(scores: np.ndarray, intensity: float = 2.0, normalize: str = "minmax") -> np.ndarray:
    """Plackett-Luce logits from first-stage scores: ``intensity * normalize(scores)``.

    ``minmax`` maps a query's scores to [0, 1] (all equal: all 0), so with intensity ``a`` the
    best document is at most ``e^a`` times as likely as the worst to be drawn first at each
    step; ``zscore`` uses ``(s - mean) / std``; ``none`` uses the raw scores.
    """
    s = np.asarray(scores, dtype=np.float64)
    if normalize == "minmax":
        span = s.max() - s.min() if len(s) else 0.0
        z = (s - s.min()) / span if span > 0 else np.zeros_like(s)
    elif normalize == "zscore":
        sd = s.std() if len(s) else 0.0
        z = (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)
    elif normalize == "none":
        z = s
    else:
        raise ConfigError(f"normalize must be one of {list(NORMALIZATIONS)}, got {normalize!r}")
    return float(intensity) * z


def plackett_luce_sample(
    logits: np.ndarray, n_samples: int, rng: np.random.Generator
) -> np.ndarray:
    """``n_samples`` full rankings from PL(logits) with the Gumbel-max trick.

    Sorting ``logits + G`` (G i.i.d. standard Gumbel) in decreasing order gives an exact
    Plackett-Luce sample. Returns an ``(n_samples, n)`` array of item indices, best first.
    """
    logits = np.asarray(logits, dtype=np.float64)
    g = rng.gumbel(size=(int(n_samples), len(logits)))
    return np.argsort(-(logits[None, :] + g), axis=1, kind="stable")


def _logsumexp(x: np.ndarray) -> float:
    mx = float(np.max(x))
    return mx + float(np.log(np.sum(np.exp(x - mx))))


def plackett_luce_log_prob(logits: np.ndarray, ranking: Sequence[int]) -> float:
    """Log-probability under PL(logits) of ``ranking`` (item indices, best first).

    A prefix (top-j list) gets the probability of that prefix, i.e. the product over its
    positions of ``exp(l_item) / sum of exp(l) over items not yet placed``.
    """
    logits = np.asarray(logits, dtype=np.float64)
    order = np.asarray(ranking, dtype=np.int64)
    n = len(logits)
    if len(set(order.tolist())) != len(order) or (
        len(order) and (order.min() < 0 or order.max() >= n)
    ):
        raise DataError(
            f"ranking must list distinct item indices in [0, {n}), got {order.tolist()}"
        )
    remaining = np.ones(n, dtype=bool)
    logp = 0.0
    for item in order:
        logp += logits[item] - _logsumexp(logits[remaining])
        remaining[item] = False
    return logp


def first_position_probs(logits: np.ndarray) -> np.ndarray:
    """Probability of each item being ranked first under PL(logits): ``softmax(logits)``."""
    logits = np.asarray(logits, dtype=np.float64)
    e = np.exp(logits - logits.max())
    return e / e.sum()


def query_rng(seed: int, qid: str) -> np.random.Generator:
    """A generator seeded by the run seed and a SHA-256 of the qid (stable across processes)."""
    h = int.from_bytes(hashlib.sha256(str(qid).encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([int(seed), h]))


@rerankers.register("stoch")
class StochasticReranker(Reranker):
    """Stochastic reranking: one Plackett-Luce ranking of the first-stage documents.

    Per query: logits ``= intensity * minmax(scores)`` (see `pl_logits`; ``normalize`` can
    change the scaling), ``n_samples`` rankings are drawn with the Gumbel trick
    (`plackett_luce_sample`), and one of them is kept:

    - ``select="draw"`` (default): a uniform, seeded draw among the samples (distributed as a
      single PL sample);
    - ``select="max-prob"``: the sample whose top-``k`` prefix is most probable under PL (the
      least noisy of the samples; ties to the earliest).

    Everything is seeded by ``seed`` and a SHA-256 of the qid (`query_rng`), so a run is
    reproducible and independent of query order. The returned ``score`` is the first-stage
    score; the order is the sampled one.

    Parameters
    ----------
    n_samples : int
        Rankings sampled per query (50).
    intensity : float
        Sampling intensity: the logit scale (2); 0 gives uniformly random rankings, large
        values the first-stage order.
    normalize : {"minmax", "zscore", "none"}
        Score normalisation before scaling.
    select : {"draw", "max-prob"}
        Which sample to return.
    seed : int
        Run seed (>= 0).

    Examples
    --------
    >>> import pandas as pd
    >>> res = pd.DataFrame({"qid": "q0", "docid": list("abcd"), "score": [4.0, 3.0, 2.0, 1.0],
    ...                     "rank": [1, 2, 3, 4], "text": list("ABCD")})
    >>> a = StochasticReranker(seed=1).rerank(["q"], res, k=2)
    >>> b = StochasticReranker(seed=1).rerank(["q"], res, k=2)
    >>> a["docid"].tolist() == b["docid"].tolist()
    True
    """

    name = "stoch"

    def __init__(
        self,
        n_samples: int = 50,
        intensity: float = 2.0,
        *,
        normalize: str = "minmax",
        select: str = "draw",
        seed: int = 0,
    ):
        self.n_samples = n_samples
        self.intensity = intensity
        self.normalize = normalize
        self.select = select
        self.seed = seed

    def validate_params(self) -> None:
        check_int(self.n_samples, "stoch reranker: n_samples", low=1)
        check_number(self.intensity, "stoch reranker: intensity", low=0)
        check_int(self.seed, "stoch reranker: seed", low=0)
        if self.normalize not in NORMALIZATIONS:
            raise ConfigError(
                f"stoch reranker: normalize must be one of {list(NORMALIZATIONS)}, got {self.normalize!r}"
            )
        if self.select not in SELECTIONS:
            raise ConfigError(
                f"stoch reranker: select must be one of {list(SELECTIONS)}, got {self.select!r}"
            )

    def samples(self, qid: str, scores: np.ndarray) -> np.ndarray:
        """The ``n_samples`` PL rankings for one query, ``(n_samples, n)`` (seeded by qid)."""
        logits = pl_logits(scores, self.intensity, self.normalize)
        return plackett_luce_sample(logits, self.n_samples, query_rng(self.seed, qid))

    def _rerank_one(self, qid, question, scores, docids, texts, k):
        logits = pl_logits(scores, self.intensity, self.normalize)
        rng = query_rng(self.seed, qid)
        samples = plackett_luce_sample(logits, self.n_samples, rng)
        if self.select == "draw":
            chosen = samples[int(rng.integers(len(samples)))]
        else:
            logp = [plackett_luce_log_prob(logits, s[:k]) for s in samples]
            chosen = samples[int(np.argmax(logp))]
        return chosen, scores


# ---- cross-encoder -------------------------------------------------------------------------
@rerankers.register("cross-encoder")
class CrossEncoderReranker(Reranker):
    """Rerank with a sentence-transformers ``CrossEncoder`` loaded from a local folder.

    No cross-encoder ships with ltrr; point ``model`` at a folder (e.g. a downloaded
    ``cross-encoder/ms-marco-MiniLM-L-6-v2``). Documents are reordered by the model's score
    for ``(question, passage)``; ties keep first-stage order.

    Parameters
    ----------
    model : str
        Local CrossEncoder folder (required).
    batch_size : int
        Prediction batch size.
    max_length : int or None
        Truncation length in tokens (None: the model's).
    device : str
        Torch device.

    Examples
    --------
    >>> rr = CrossEncoderReranker(model="/models/ms-marco-MiniLM-L-6-v2")  # doctest: +SKIP
    >>> rr.rerank(queries, first_stage, k=5)  # doctest: +SKIP
    """

    name = "cross-encoder"

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 32,
        max_length: int | None = None,
        device: str = "cpu",
    ):
        self.model = model
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device

    def validate_params(self) -> None:
        if not self.model:
            raise ConfigError(
                "cross-encoder reranker needs `model`: a local sentence-transformers CrossEncoder "
                "folder (none ships with ltrr)"
            )
        if not Path(self.model).is_dir():
            raise ConfigError(
                f"cross-encoder reranker: model folder {str(self.model)!r} does not exist"
            )
        check_int(self.batch_size, "cross-encoder reranker: batch_size", low=1)

    def _model(self):
        if getattr(self, "model_", None) is None:
            self.validate_params()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as exc:  # pragma: no cover - core dependency
                raise MissingDependencyError(
                    f"the cross-encoder reranker needs sentence-transformers: pip install sentence-transformers ({exc})"
                ) from exc
            kwargs: dict[str, Any] = {"device": self.device}
            if self.max_length is not None:
                kwargs["max_length"] = int(self.max_length)
            self.model_ = CrossEncoder(str(self.model), **kwargs)
        return self.model_

    def predict(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """Cross-encoder scores of ``(question, text)`` pairs."""
        if not texts:
            return np.zeros(0)
        scores = self._model().predict(
            [(question, t) for t in texts],
            batch_size=int(self.batch_size),
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(scores, dtype=np.float64).reshape(len(texts))

    def _rerank_one(self, qid, question, scores, docids, texts, k):
        ce = self.predict(question, texts)
        return np.lexsort((np.arange(len(ce)), -ce)), ce
