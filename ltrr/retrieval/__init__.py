"""Retrieval: the shared table schemas, BM25 and dense retrievers, rerankers and the arm pool.

Importing this package loads no heavy library: bm25s, rank_bm25, pyserini, faiss, torch and
sentence-transformers are imported inside the methods that need them.
"""

from ltrr.retrieval.base import (
    RESULT_COLUMNS,
    Retriever,
    corpus_fingerprint,
    passage_text,
    retrievers,
    validate_corpus,
    validate_queries,
    validate_results,
)
from ltrr.retrieval.bm25 import BM25Retriever, bm25_backends
from ltrr.retrieval.dense import DenseRetriever
from ltrr.retrieval.pool import NO_RETRIEVAL, POOL_COLUMNS, Arm, Pool, default_pool_config
from ltrr.retrieval.rerank import (
    CrossEncoderReranker,
    EmbeddingSource,
    NoReranker,
    Reranker,
    ScoreRegularizer,
    StochasticReranker,
    first_position_probs,
    pl_logits,
    plackett_luce_log_prob,
    plackett_luce_sample,
    regularization_matrix,
    regularize_scores,
    rerankers,
)

__all__ = [
    "RESULT_COLUMNS",
    "POOL_COLUMNS",
    "NO_RETRIEVAL",
    "Retriever",
    "retrievers",
    "passage_text",
    "validate_corpus",
    "validate_queries",
    "validate_results",
    "corpus_fingerprint",
    "BM25Retriever",
    "bm25_backends",
    "DenseRetriever",
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
    "Arm",
    "Pool",
    "default_pool_config",
]
