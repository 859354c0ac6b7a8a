"""Raw routing features: one row per (query, arm), computed from the pool's results.

Notation (all similarities are cosines of unit-normalised embeddings): ``q`` is the query
embedding, ``z_i`` the top-k passages of arm ``i`` (``d_1 .. d_n``, ``n <= k``, in rank order)
with retrieval scores ``y_1 .. y_n`` (the pool's ``score`` column), ``e(z_i)`` the mean of the
passage embeddings and ``s`` the cosine.

Pre-retrieval (the same for every arm of a query)
    ``query_length``: words in the query (``\\w+`` runs joined by ``'``/``-``);
    ``query_type``: 1 for a natural-language question, 0 for a keyword query
    (`ltrr.features.querytype`, the train-free ``rules`` classifier by default);
    the query embedding itself, stored once per query in `RawFeatures.query_embeddings`
    (reduced by PCA in `ltrr.features.FeaturePipeline`, fit on training queries only).
Post-retrieval (per arm)
    ``overall_sim`` = s(q, e(z_i)) (0 if ``e(z_i)`` is the zero vector);
    ``avg_sim``, ``max_sim``, ``var_sim``: mean, maximum and population variance (ddof 0) of
    s(q, d_j) over the arm's passages (``var_sim`` is 0 for one passage);
    ``moran``: Moran's I of the retrieval scores over the passage-similarity graph (Diaz 2007,
    "Performance prediction using spatial autocorrelation"), see below;
    ``cross_ret_sim``: the mean over the other arms m that have passages of s(e(z_i), e(z_m))
    (NaN when no other arm has passages).
Bookkeeping
    ``is_no_retrieval`` (the arm is a no-retrieval arm) and ``n_docs`` (passages used).

Moran's I, exactly: ``W[j, l] = max(0, s(d_j, d_l))`` for ``j != l`` and ``W[j, j] = 0``;
with ``moran_neighbours = m`` each row keeps only its ``m`` largest weights (ties to the
earlier rank), the rest set to 0 (W may then be asymmetric, which the statistic allows).
With ``u = y - mean(y)``::

    I = (n / sum(W)) * (u^T W u) / (u^T u)

Without autocorrelation the expected value is ``-1/(n-1)`` (-0.25 for five passages; on a
300-query sample of the demo the arms average -0.21 to -0.26); positive values mean that
similar passages got similar scores. Negative cosines are clipped to 0 because a negative
weight has no meaning as spatial proximity and lets ``sum(W)`` approach 0 and the statistic
explode. Degenerate cases give ``0.0`` (finite, so no imputation is needed, and a value a model
can learn to read): fewer than two passages, constant scores (``u = 0``), or ``sum(W) = 0``. An arm without passages gives NaN, like every other
post-retrieval feature.

An arm without passages (the no-retrieval arm always; a retrieval arm that found nothing for a
query) has NaN post-retrieval features: models that cannot take NaN get them imputed by
`ltrr.features.FeaturePipeline` (median fit on training rows, plus an indicator column).

The tables, their containers and files are in `ltrr.features.raw` (re-exported here).
Computation is batched: for a batch of queries, the passages of all arms are laid out in one
``(queries, arms, k, dim)`` array and every feature is a few numpy reductions over it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError
from ltrr.features.raw import (  # re-exported: their home was this module
    BOOK_COLUMNS,
    KEY_COLUMNS,
    POST_COLUMNS,
    PRE_COLUMNS,
    RAW_COLUMNS,
    RAW_VERSION,
    QueryRaw,
    RawFeatures,
    read_feature_tables,
    write_feature_tables,
)
from ltrr.retrieval.base import validate_queries, validate_results

__all__ = [
    "RAW_VERSION",
    "KEY_COLUMNS",
    "BOOK_COLUMNS",
    "PRE_COLUMNS",
    "POST_COLUMNS",
    "RAW_COLUMNS",
    "RawFeatures",
    "QueryRaw",
    "extract_raw",
    "extract_query",
    "query_length",
    "write_feature_tables",
    "read_feature_tables",
]


_WORDS = re.compile(r"\w+(?:['\u2019\-]\w+)*")


def query_length(question: str) -> int:
    """Words in a query: runs of word characters, joined by apostrophes or hyphens.

    Examples
    --------
    >>> query_length("What's the capital of Australia?")
    5
    """
    return len(_WORDS.findall(question))


# ---- inputs ---------------------------------------------------------------------------------
def _arm_list(arms: Any) -> list[str]:
    if isinstance(arms, str) or not isinstance(arms, Sequence) or not len(arms):
        raise ConfigError(f"arms must be a non-empty list of arm names, got {arms!r}")
    out = [str(a) for a in arms]
    dup = sorted({a for a in out if out.count(a) > 1})
    if dup:
        raise ConfigError(f"arms has duplicate name(s) {dup}; arm names must be unique")
    return out


def _no_retrieval_list(no_retrieval: Any, arms: list[str]) -> list[str]:
    if no_retrieval is None:
        return []
    nr = [no_retrieval] if isinstance(no_retrieval, str) else [str(a) for a in no_retrieval]
    bad = [a for a in nr if a not in arms]
    if bad:
        raise ConfigError(f"no_retrieval arm(s) {bad} are not among the arms {arms}")
    return nr


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


class _EncoderSource:
    """Passage embeddings straight from an `Encoder` instance (no stored ones to reuse)."""

    def __init__(self, encoder):
        self.encoder = encoder

    def get(self, docids, texts):
        return self.encoder.encode_passages(list(texts))


def _sources(encoder: Any, embedding_source: Any):
    """(query encoder or None, passage source): the name check keeps both on one encoder.

    ``encoder=None`` means the embedding source's encoder (a pool whose dense arm uses ``e5``
    gives e5 query embeddings), else ``"minilm"``.
    """
    from ltrr.retrieval.rerank import EmbeddingSource

    if encoder is None:
        encoder = str(getattr(embedding_source, "encoder_name", None) or "minilm")
    if embedding_source is not None:
        src_name = getattr(embedding_source, "encoder_name", None)
        if isinstance(encoder, str) and src_name is not None and str(src_name) != encoder:
            raise ConfigError(
                f"the embedding source uses encoder {src_name!r} but queries would be encoded "
                f"with {encoder!r}; cosines between them are meaningless: pass encoder={src_name!r}"
            )
    if isinstance(encoder, str):
        source = embedding_source or EmbeddingSource(encoder=encoder)
        return encoder, source
    if not hasattr(encoder, "encode_queries"):
        raise ConfigError(
            f"encoder must be an encoder name or an Encoder, got {type(encoder).__name__}"
        )
    return encoder, embedding_source or _EncoderSource(encoder)


def _encoder_name(encoder: Any) -> str:
    return (
        encoder
        if isinstance(encoder, str)
        else str(getattr(encoder, "name", type(encoder).__name__))
    )


# ---- the computation ------------------------------------------------------------------------
def _batch_features(
    Q: np.ndarray, D: np.ndarray, S: np.ndarray, M: np.ndarray, moran_neighbours: int | None
) -> dict[str, np.ndarray]:
    """Post-retrieval features of one batch.

    Q: (B, dim) unit queries; D: (B, A, K, dim) unit passages (zeros where padded);
    S: (B, A, K) scores; M: (B, A, K) mask of real passages. Returns (B, A) arrays.
    """
    B, A, K, dim = D.shape
    n = M.sum(-1)
    has = n > 0
    nf = np.maximum(n, 1).astype(np.float64)
    Mf = M.astype(np.float64)
    nan = np.full((B, A), np.nan)

    sims = np.matmul(D, Q[:, None, :, None])[..., 0]  # (B, A, K)
    avg = (sims * Mf).sum(-1) / nf
    mx = np.where(M, sims, -np.inf).max(-1) if K else np.full((B, A), -np.inf)
    var = (((sims - avg[..., None]) ** 2) * Mf).sum(-1) / nf

    cent = _unit((D * Mf[..., None]).sum(2) / nf[..., None])  # (B, A, dim)
    overall = np.matmul(cent, Q[:, :, None])[..., 0]
    C = np.matmul(cent, np.swapaxes(cent, 1, 2))  # (B, A, A)
    other = has[:, None, :] & ~np.eye(A, dtype=bool)[None]
    n_other = other.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cross = np.where(n_other > 0, (C * other).sum(-1) / np.maximum(n_other, 1), np.nan)

    flat = D.reshape(B * A, K, dim)
    G = np.matmul(flat, np.swapaxes(flat, 1, 2)).reshape(B, A, K, K)
    pair = M[..., :, None] & M[..., None, :] & ~np.eye(K, dtype=bool)
    W = np.where(pair, np.maximum(G, 0.0), 0.0)
    if moran_neighbours is not None and moran_neighbours < K - 1:
        # keep each row's m largest weights; a stable sort sends ties to the earlier rank
        order = np.argsort(-W, axis=-1, kind="stable")
        keep = np.zeros_like(W, dtype=bool)
        np.put_along_axis(keep, order[..., :moran_neighbours], True, axis=-1)
        W = np.where(keep, W, 0.0)
    mean_s = (S * Mf).sum(-1) / nf
    u = (S - mean_s[..., None]) * Mf
    num = np.matmul(u[..., None, :], np.matmul(W, u[..., :, None]))[..., 0, 0]
    den = (u**2).sum(-1)
    s0 = W.sum((-1, -2))
    spread = (
        np.where(M, S, -np.inf).max(-1) - np.where(M, S, np.inf).min(-1) if K else np.zeros((B, A))
    )
    ok = (n >= 2) & (spread > 0) & (s0 > 0) & (den > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        moran = np.where(ok, (n / np.where(ok, s0, 1.0)) * num / np.where(ok, den, 1.0), 0.0)

    return {
        "overall_sim": np.where(has, overall, nan),
        "avg_sim": np.where(has, avg, nan),
        "max_sim": np.where(has, mx, nan),
        "var_sim": np.where(has, var, nan),
        "moran": np.where(has, moran, nan),
        "cross_ret_sim": np.where(has, cross, nan),
    }


def _check_options(k: Any, moran_neighbours: Any) -> None:
    for name, value in (("k", k), ("moran_neighbours", moran_neighbours)):
        if value is not None:
            check_int(value, name, low=1, note=" or None")


def _raw_meta(enc: Any, k: int | None, moran_neighbours: int | None, query_type: Any) -> dict:
    return {
        "version": RAW_VERSION,
        "encoder": _encoder_name(enc),
        "k": None if k is None else int(k),
        "moran_neighbours": None if moran_neighbours is None else int(moran_neighbours),
        "query_type": query_type if isinstance(query_type, str) else type(query_type).__name__,
    }


def _layout(qi, ai, rank, scores, docids, texts, n_arms: int, k: int | None):
    """Sort result rows into (query, arm, rank) order and number each row's slot within its
    (query, arm) cell; with ``k``, keep each cell's best ``k``. Returns the sorted arrays."""
    order = np.lexsort((rank, ai, qi))
    qi, ai, scores, docids, texts = (x[order] for x in (qi, ai, scores, docids, texts))
    cell = qi * n_arms + ai
    start_of_cell = np.r_[True, cell[1:] != cell[:-1]] if len(cell) else np.zeros(0, bool)
    cell_start = (
        np.maximum.accumulate(np.where(start_of_cell, np.arange(len(cell)), 0))
        if len(cell)
        else cell
    )
    slot = np.arange(len(cell)) - cell_start
    if k is not None:
        keep = slot < k
        qi, ai, scores, docids, texts, slot = (
            x[keep] for x in (qi, ai, scores, docids, texts, slot)
        )
    return qi, ai, scores, docids, texts, slot


def _post_block(Q, qi, ai, slot, scores, docids, texts, n_arms, source, moran_neighbours):
    """Post-retrieval features of the queries ``Q`` (B, dim) from their laid-out result rows
    (``qi`` relative to the block): ``({column: (B, A)}, n_docs (B, A))``."""
    B, dim = Q.shape
    uniq, first, inv = np.unique(docids, return_index=True, return_inverse=True)
    E = np.asarray(source.get(uniq.tolist(), [str(t) for t in texts[first]]))
    if E.ndim != 2 or E.shape[0] != len(uniq):
        raise DataError(f"the embedding source returned shape {E.shape} for {len(uniq)} passages")
    if E.shape[1] != dim:
        raise DataError(
            f"passage embeddings have dimension {E.shape[1]} but query embeddings {dim}: "
            "queries and passages must come from the same encoder"
        )
    E = _unit(E)
    K = int(slot.max()) + 1
    D = np.zeros((B, n_arms, K, dim))
    S = np.zeros((B, n_arms, K))
    Mk = np.zeros((B, n_arms, K), dtype=bool)
    idx = (qi, ai, slot)
    D[idx] = E[inv]
    S[idx] = scores
    Mk[idx] = True
    return _batch_features(Q, D, S, Mk, moran_neighbours), Mk.sum(-1)


def extract_raw(
    queries: pd.DataFrame,
    results: pd.DataFrame,
    *,
    arms: Sequence[str],
    no_retrieval: str | Sequence[str] | None,
    encoder: Any = None,
    embedding_source: Any = None,
    k: int | None = None,
    query_embeddings: np.ndarray | None = None,
    query_type: Any = "rules",
    moran_neighbours: int | None = None,
    batch_size: int = 256,
    show_progress: bool = False,
) -> RawFeatures:
    """Compute the raw features of every (query, arm); see the module docstring.

    Parameters
    ----------
    queries : DataFrame
        ``qid`` and ``question`` (other columns are ignored). Every query gets one row per arm,
        in this order.
    results : DataFrame
        The pool's results ``qid, arm, rank, docid, score, text``; the no-retrieval arm has no
        rows. A qid or arm not in ``queries``/``arms`` raises `DataError`.
    arms : list of str
        Every arm of the pool, in pool order (any number).
    no_retrieval : str, list of str or None
        The no-retrieval arm(s); they must have no result rows.
    encoder : str, Encoder or None
        Encoder of queries (and of passages that ``embedding_source`` lacks). None: the
        encoder of ``embedding_source`` (the pool's dense encoder), else ``"minilm"``.
    embedding_source : object with ``get(docids, texts)``, optional
        Where passage embeddings come from; pass the pool's `ltrr.retrieval.EmbeddingSource`
        over its dense index so stored embeddings are reused. Default: a fresh
        ``EmbeddingSource(encoder=encoder)`` that encodes every passage once.
    k : int or None
        Passages per arm used (the best ``k`` by rank); None uses all rows.
    query_embeddings : ndarray of shape (n_queries, dim), optional
        Precomputed query embeddings, rows in ``queries`` order (skips encoding). They are
        normalised to unit length in float64 first. A `RawFeatures.query_embeddings` holds the
        float32 of those unit vectors, not the encoder's output, so features made from it equal
        the encoding run's to float32 rounding only (the similarities differed by up to 7e-9 on
        the demo), not bit for bit.
    query_type : str or classifier
        A name in `ltrr.features.query_type_classifiers` or a fitted classifier with
        ``predict(questions)``; a trained classifier must be fit on training queries only.
    moran_neighbours : int or None
        Keep only each passage's ``m`` most similar neighbours in Moran's W (None: all).
    batch_size : int
        Queries per vectorised batch.
    show_progress : bool
        Show a progress bar over batches.

    Returns
    -------
    RawFeatures
    """
    from ltrr.features.querytype import get_query_type_classifier

    arm_list = _arm_list(arms)
    nr = _no_retrieval_list(no_retrieval, arm_list)
    q = validate_queries(queries)
    if len(q) == 0:
        raise DataError("queries is empty; features need at least one query")
    res = validate_results(results, extra=("arm",))
    _check_options(k, moran_neighbours)
    check_int(batch_size, "batch_size", low=1)

    qids = q["qid"].tolist()
    qpos = {qid: i for i, qid in enumerate(qids)}
    apos = {a: i for i, a in enumerate(arm_list)}
    res = res.assign(qid=res["qid"].astype(str), arm=res["arm"].astype(str))
    unknown_q = sorted(set(res["qid"]) - set(qpos))
    if unknown_q:
        raise DataError(f"results have qid(s) {unknown_q[:5]} that are not in queries")
    unknown_a = sorted(set(res["arm"]) - set(apos))
    if unknown_a:
        raise DataError(f"results have arm(s) {unknown_a} that are not in arms {arm_list}")
    nr_rows = sorted(set(res["arm"]) & set(nr))
    if nr_rows:
        raise DataError(
            f"no-retrieval arm(s) {nr_rows} have result rows; a no-retrieval arm has no passages"
        )
    scores = pd.to_numeric(res["score"], errors="coerce").to_numpy(dtype=np.float64)
    if not np.isfinite(scores).all():
        bad = res.loc[~np.isfinite(scores), ["qid", "arm"]].iloc[0].tolist()
        raise DataError(
            f"results have a missing or non-finite score (first at qid {bad[0]!r}, arm {bad[1]!r})"
        )

    qi = res["qid"].map(qpos).to_numpy(np.int64)
    ai = res["arm"].map(apos).to_numpy(np.int64)
    rank = pd.to_numeric(res["rank"], errors="coerce").to_numpy(np.float64)
    qi, ai, scores, docids, texts, slot = _layout(
        qi, ai, rank, scores, res["docid"].astype(str).to_numpy(), res["text"].to_numpy(),
        len(arm_list), k,
    )

    enc, source = _sources(encoder, embedding_source)
    questions = q["question"].tolist()
    if query_embeddings is None:
        from ltrr.embed import get_encoder

        qenc = get_encoder(enc) if isinstance(enc, str) else enc
        Qall = qenc.encode_queries(questions, show_progress=show_progress)
    else:
        Qall = np.asarray(query_embeddings)
        if Qall.ndim != 2 or Qall.shape[0] != len(q):
            raise DataError(
                f"query_embeddings must have shape (n_queries={len(q)}, dim), got {Qall.shape}"
            )
    Qall = _unit(Qall)

    A = len(arm_list)
    post = {c: np.full((len(q), A), np.nan) for c in POST_COLUMNS}
    n_docs = np.zeros((len(q), A), dtype=np.int64)
    bounds = np.searchsorted(qi, np.arange(0, len(q) + batch_size, batch_size))
    from tqdm.auto import tqdm

    for b in tqdm(
        range(0, len(q), batch_size), disable=not show_progress, desc="features", unit="batch"
    ):
        lo, hi = bounds[b // batch_size], bounds[b // batch_size + 1]
        e = min(b + batch_size, len(q))
        if hi == lo:
            continue
        feats, n_docs[b:e] = _post_block(
            Qall[b:e], qi[lo:hi] - b, ai[lo:hi], slot[lo:hi], scores[lo:hi], docids[lo:hi],
            texts[lo:hi], A, source, moran_neighbours,
        )
        for c in POST_COLUMNS:
            post[c][b:e] = feats[c]

    clf = get_query_type_classifier(query_type)
    qtype = np.asarray(clf.predict(questions), dtype=np.float64)
    qlen = np.array([query_length(t) for t in questions], dtype=np.float64)
    nr_mask = np.array([a in nr for a in arm_list])
    table = pd.DataFrame(
        {
            "qid": pd.Series(np.repeat(np.asarray(qids, dtype=object), A), dtype=object),
            "arm": pd.Series(np.tile(np.asarray(arm_list, dtype=object), len(q)), dtype=object),
            "is_no_retrieval": np.tile(nr_mask, len(q)),
            "n_docs": n_docs.reshape(-1),
            "query_length": np.repeat(qlen, A),
            "query_type": np.repeat(qtype, A),
            **{c: post[c].reshape(-1) for c in POST_COLUMNS},
        }
    )
    meta = _raw_meta(enc, k, moran_neighbours, query_type)
    return RawFeatures(
        table=table,
        query_embeddings=Qall.astype(np.float32),
        qids=qids,
        arms=arm_list,
        no_retrieval=nr,
        meta=meta,
    )


# ---- one query, no pandas: the routing fast path ---------------------------------------------
_CLASSIFIERS: dict[str, Any] = {}


def extract_query(
    question: str,
    results: pd.DataFrame,
    *,
    arms: Sequence[str],
    no_retrieval: str | Sequence[str] | None,
    embedding_source: Any,
    query_embedding: np.ndarray | None = None,
    encoder: Any = None,
    k: int | None = None,
    query_type: Any = "rules",
    moran_neighbours: int | None = None,
    qid: str = "q0",
) -> QueryRaw:
    """Raw features of one query with numpy only: the per-query routing path.

    `extract_raw` builds a table for many queries; routing one question at a time would spend
    most of its time in pandas there (~3.6 ms per query on the demo, against ~0.9 ms here; see
    ``benchmarks/routing.py``). The arithmetic is shared (`_layout`, `_post_block`), so both give
    the same values; a test checks it on demo queries.

    Parameters
    ----------
    question : str
    results : DataFrame
        This query's results from the pool: ``arm, rank, docid, score, text`` (a ``qid`` column
        may be there, with one value).
    arms, no_retrieval, embedding_source, encoder, k, query_type, moran_neighbours
        As in `extract_raw`; ``embedding_source`` is required (the pool's
        ``embedding_source()``), so stored passage embeddings are reused.
    query_embedding : ndarray of shape (dim,), optional
        The query's embedding, e.g. as the dense arm computed it; encoded with ``encoder`` if
        not given.
    qid : str
        Identifier carried into the output.

    Returns
    -------
    QueryRaw
    """
    arm_list = _arm_list(arms)
    nr = _no_retrieval_list(no_retrieval, arm_list)
    if not isinstance(question, str) or not question.strip():
        raise DataError("the question is empty; routing needs a non-empty question")
    if not isinstance(results, pd.DataFrame):
        raise DataError(f"results must be a DataFrame (arm, rank, docid, score, text), got {type(results).__name__}")
    missing = [c for c in ("arm", "rank", "docid", "score", "text") if c not in results.columns]
    if missing:
        raise DataError(f"results are missing column(s) {', '.join(missing)}")
    if "qid" in results.columns and len(results) > 1:
        qv = results["qid"].to_numpy()
        if (qv[1:] != qv[0]).any():
            raise DataError("extract_query takes the results of one query; use extract_raw for many")
    if embedding_source is None:
        raise ConfigError("extract_query needs an embedding_source (the pool's embedding_source())")
    apos = {a: i for i, a in enumerate(arm_list)}
    arm_col = results["arm"].to_numpy()
    ai = np.fromiter((apos.get(str(a), -1) for a in arm_col), dtype=np.int64, count=len(arm_col))
    if (ai < 0).any():
        raise DataError(f"results have arm(s) {sorted(set(map(str, arm_col[ai < 0])))} that are not in arms {arm_list}")
    if nr and np.isin(ai, [apos[a] for a in nr]).any():
        raise DataError(f"no-retrieval arm(s) {sorted(set(map(str, arm_col)) & set(nr))} have result rows; a no-retrieval arm has no passages")
    scores = np.asarray(results["score"].to_numpy(), dtype=np.float64)
    if not np.isfinite(scores).all():
        raise DataError("results have a missing or non-finite score")
    _check_options(k, moran_neighbours)
    enc, source = _sources(encoder, embedding_source)
    if query_embedding is None:
        from ltrr.embed import get_encoder

        qenc = get_encoder(enc) if isinstance(enc, str) else enc
        query_embedding = qenc.encode_queries([question])[0]
    Q = _unit(np.asarray(query_embedding, dtype=np.float64).reshape(1, -1))
    A = len(arm_list)
    qi = np.zeros(len(ai), dtype=np.int64)
    rank = np.asarray(results["rank"].to_numpy(), dtype=np.float64)
    qi, ai, scores, docids, texts, slot = _layout(
        qi, ai, rank, scores, results["docid"].to_numpy(), results["text"].to_numpy(), A, k
    )
    if len(ai):
        feats, n_docs = _post_block(Q, qi, ai, slot, scores, docids, texts, A, source, moran_neighbours)
        post = {c: feats[c][0] for c in POST_COLUMNS}
        n_docs = n_docs[0]
    else:
        post = {c: np.full(A, np.nan) for c in POST_COLUMNS}
        n_docs = np.zeros(A, dtype=np.int64)
    if isinstance(query_type, str):
        clf = _CLASSIFIERS.get(query_type)
        if clf is None:
            from ltrr.features.querytype import get_query_type_classifier

            clf = _CLASSIFIERS.setdefault(query_type, get_query_type_classifier(query_type))
    else:
        clf = query_type
    columns = {
        "is_no_retrieval": np.array([a in nr for a in arm_list]),
        "n_docs": n_docs,
        "query_length": np.full(A, float(query_length(question))),
        "query_type": np.full(A, float(np.asarray(clf.predict([question]))[0])),
        **post,
    }
    meta = _raw_meta(enc, k, moran_neighbours, query_type)
    return QueryRaw(qid=str(qid), question=question, columns=columns,
                    query_embedding=Q[0].astype(np.float32), arms=arm_list, no_retrieval=nr, meta=meta)
