"""The retriever contract and the table schemas every retrieval part shares.

Tables (PyTerrier-style, validated on entry; a missing column is named in the error):

corpus
    ``docid`` (str, unique), ``title``, ``text``. The passage a retriever indexes and returns is
    ``passage_text(title, text)``, i.e. ``title + "\\n" + text``.
queries
    ``qid`` (str, unique), ``question``; a plain list of strings is accepted too (qids become
    ``"q0"``, ``"q1"``, ...). An empty or whitespace-only question is an error.
results
    ``qid, docid, score, rank, text``; ``rank`` is 1-based; rows are sorted by the queries' input
    order, then rank. The pool adds ``arm``.

A `Retriever` follows the estimator contract: ``__init__`` stores parameters only; ``index``
validates the corpus, builds and sets trailing-underscore state, returns ``self``; ``search``
before ``index``/``load`` raises `NotBuiltError`. ``save(dir)`` writes ``params.json`` (JSON
parameters and metadata), ``passages.parquet`` (docid, text) and the backend's own files into a
temporary folder that is renamed into place, so a crash never leaves a half-written index.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from ltrr._atomic import write_json_atomic
from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr._registry import Registry
from ltrr._version import __version__

__all__ = [
    "RESULT_COLUMNS",
    "Retriever",
    "retrievers",
    "passage_text",
    "validate_corpus",
    "validate_queries",
    "validate_results",
    "corpus_fingerprint",
    "check_k",
    "empty_results",
]

#: registry of first-stage retrievers by type name ("bm25", "dense")
retrievers: Registry = Registry("retriever")

RESULT_COLUMNS = ["qid", "docid", "score", "rank", "text"]
FORMAT_VERSION = 1
META_FILE = "params.json"
PASSAGES_FILE = "passages.parquet"


def passage_text(title: Any, text: Any) -> str:
    """The passage text indexed and returned for a document: ``title + "\\n" + text``.

    A missing or blank title gives the text alone, so title-less corpora are not prefixed by a
    blank line.

    Examples
    --------
    >>> passage_text("Canberra", "Canberra is the capital of Australia.")
    'Canberra\\nCanberra is the capital of Australia.'
    >>> passage_text("", "No title.")
    'No title.'
    """
    title = _as_text(title)
    text = _as_text(text)
    return f"{title}\n{text}" if title.strip() else text


def _as_text(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, float) and np.isnan(x):
        return ""
    return x if isinstance(x, str) else str(x)


def _missing_columns(df: pd.DataFrame, required: Sequence[str], what: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(
            f"{what} is missing column(s) {missing}; {what} needs columns {list(required)} "
            f"(found {list(map(str, df.columns))})"
        )


def _examples(values: Sequence[Any], n: int = 5) -> str:
    vals = list(dict.fromkeys(values))
    more = f" and {len(vals) - n} more" if len(vals) > n else ""
    return ", ".join(repr(v) for v in vals[:n]) + more


def validate_corpus(corpus: Any) -> pd.DataFrame:
    """Check a corpus table and return a clean copy (``docid`` as str; blank title/text as "").

    Raises `DataError` naming a missing column, a duplicate or missing docid, or an empty corpus.
    """
    if not isinstance(corpus, pd.DataFrame):
        raise DataError(
            "corpus must be a pandas DataFrame with columns ['docid', 'title', 'text'], "
            f"got {type(corpus).__name__}"
        )
    _missing_columns(corpus, ["docid", "title", "text"], "corpus")
    if len(corpus) == 0:
        raise DataError("corpus has no documents; give at least one row")
    out = corpus.copy()
    if out["docid"].isna().any():
        bad = np.flatnonzero(out["docid"].isna().to_numpy())[:5].tolist()
        raise DataError(f"corpus has missing docid values at row(s) {bad}; every row needs a docid")
    out["docid"] = out["docid"].astype(str)
    dup = out["docid"][out["docid"].duplicated()]
    if len(dup):
        raise DataError(
            f"corpus has duplicate docid(s) {_examples(dup.tolist())}; docids must be unique"
        )
    out["title"] = [_as_text(t) for t in out["title"]]
    out["text"] = [_as_text(t) for t in out["text"]]
    return out.reset_index(drop=True)


def validate_queries(queries: Any) -> pd.DataFrame:
    """Check queries and return a ``DataFrame[qid, question]`` (``qid`` as str, input order kept).

    ``queries`` is a DataFrame with ``qid`` and ``question`` or a list of strings (qids become
    ``"q0"``, ``"q1"``, ...). An empty or whitespace-only question raises `DataError` naming its
    qid; so do duplicate qids.
    """
    if isinstance(queries, str):
        raise DataError(
            "queries must be a list of strings or a DataFrame with qid and question, got one string; wrap it in a list"
        )
    if isinstance(queries, pd.DataFrame):
        _missing_columns(queries, ["qid", "question"], "queries")
        if queries["qid"].isna().any():
            raise DataError("queries has missing qid values; every query needs a qid")
        qids = queries["qid"].astype(str).tolist()
        questions = queries["question"].tolist()
    elif isinstance(queries, (list, tuple, pd.Series, np.ndarray)):
        questions = list(queries)
        qids = [f"q{i}" for i in range(len(questions))]
    else:
        raise DataError(
            "queries must be a DataFrame with columns ['qid', 'question'] or a list of strings, "
            f"got {type(queries).__name__}"
        )
    seen: set[str] = set()
    dups = [q for q in qids if q in seen or seen.add(q)]  # type: ignore[func-returns-value]
    if dups:
        raise DataError(f"queries have duplicate qid(s) {_examples(dups)}; qids must be unique")
    for qid, question in zip(qids, questions, strict=True):
        if not isinstance(question, str):
            if question is None or (isinstance(question, float) and np.isnan(question)):
                raise DataError(f"query {qid!r} is empty; every query needs a non-blank question")
            raise DataError(f"query {qid!r} is not a string (got {type(question).__name__})")
        if not question.strip():
            raise DataError(
                f"query {qid!r} is empty or whitespace only; every query needs a non-blank question"
            )
    return pd.DataFrame(
        {"qid": pd.Series(qids, dtype=object), "question": pd.Series(questions, dtype=object)}
    )


def validate_results(results: Any, *, extra: Sequence[str] = ()) -> pd.DataFrame:
    """Check a results table has ``qid, docid, score, rank, text`` (plus ``extra``); returns it."""
    if not isinstance(results, pd.DataFrame):
        raise DataError(f"results must be a pandas DataFrame, got {type(results).__name__}")
    _missing_columns(results, [*RESULT_COLUMNS, *extra], "results")
    return results


def empty_results(extra: Sequence[str] = ()) -> pd.DataFrame:
    """A results table with no rows and the schema's dtypes."""
    cols: dict[str, pd.Series] = {
        "qid": pd.Series([], dtype=object),
        "docid": pd.Series([], dtype=object),
        "score": pd.Series([], dtype=np.float64),
        "rank": pd.Series([], dtype=np.int64),
        "text": pd.Series([], dtype=object),
    }
    for c in extra:
        cols[c] = pd.Series([], dtype=object)
    return pd.DataFrame(cols)


def check_k(k: Any, name: str = "k") -> int:
    """Validate a positive integer cutoff."""
    return check_int(k, name, low=1)


def corpus_fingerprint(docids: Sequence[str], texts: Sequence[str]) -> str:
    """SHA-256 of the docids and passage texts, in order: identifies the corpus an index holds."""
    h = hashlib.sha256()
    for d, t in zip(docids, texts, strict=True):
        h.update(d.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\x01")
    return h.hexdigest()


def replace_dir(tmp: Path, final: Path) -> None:
    """Move the finished folder ``tmp`` to ``final``, replacing an older one."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def param_names(cls: type) -> list[str]:
    """The ``__init__`` parameter names of ``cls`` in signature order (sklearn's own list is
    sorted; the signature order is the one repr and saved configs have always shown)."""
    sig = inspect.signature(cls.__init__)  # type: ignore[misc]  # the class's own, not an instance's
    return [
        p.name
        for p in sig.parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def json_params(est: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` (sklearn's ``get_params(deep=False)`` of ``est``) in signature order, each
    parameter object that has ``to_dict`` replaced by that dict."""
    return {
        n: params[n].to_dict() if hasattr(params[n], "to_dict") else params[n]
        for n in param_names(type(est))
    }


def _not_built(what: str) -> NotBuiltError:
    return NotBuiltError(
        f"{what}: no index; build it first with `ltrr index CONFIG` (or call .index(corpus) "
        "in Python)"
    )


class Retriever(BaseEstimator, ABC):
    """A first-stage retriever over a corpus table.

    Subclasses set ``name`` (their registry name) and implement ``_build``, ``_search``,
    ``_save`` and ``_load``. Parameters are the ``__init__`` arguments, stored unchanged; as a
    scikit-learn ``BaseEstimator`` it has ``get_params``/``set_params`` and works with
    ``sklearn.base.clone``.

    Examples
    --------
    >>> import pandas as pd
    >>> from ltrr.retrieval import BM25Retriever
    >>> corpus = pd.DataFrame({"docid": ["a", "b"], "title": ["Cats", "Dogs"],
    ...                        "text": ["Cats purr.", "Dogs bark."]})
    >>> r = BM25Retriever().index(corpus)
    >>> r.search(["why do cats purr"], k=1)[["qid", "docid", "rank"]].values.tolist()
    [['q0', 'a', 1]]
    """

    name: str = "abstract"
    #: a tag: the index holds document embeddings that the pool's ``reg`` rerankers and the
    #: features reuse (`ltrr.retrieval.embeddings.EmbeddingSource` reads ``encoder``,
    #: ``docid_rows`` and ``doc_embeddings``)
    embeds_documents: ClassVar[bool] = False

    # ---- parameters --------------------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        return param_names(cls)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (sklearn's), as JSON-safe values in signature order.

        A parameter object with ``to_dict`` (a `Tokenizer`) is given as that dict, which is
        what saved indexes and pool configs record. ``deep`` changes nothing: no parameter is
        an estimator.
        """
        return json_params(self, super().get_params(deep=False))

    def __sklearn_clone__(self) -> Retriever:
        # sklearn's clone checks that the new object holds the very parameter objects it was
        # given; a tokenizer given back as its dict is a new object each call, so clone goes
        # through from_params instead (an unfitted copy with equal parameters).
        return type(self).from_params(self.get_params())

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Retriever:
        """Build an unfitted retriever from `get_params` output; unknown keys raise `ConfigError`."""
        allowed = set(cls._param_names())
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ConfigError(
                f"{cls.name} retriever: unknown parameter(s) {unknown}; allowed: {sorted(allowed)}"
            )
        return cls(**params)

    @abstractmethod
    def validate_params(self) -> None:
        """Check parameter values; raises `ConfigError` naming the bad one."""

    def identity(self) -> dict[str, Any]:
        """What must match for a stored index to be reused: parameters plus extra identity."""
        return {"retriever": self.name, "params": self.get_params()}

    # ---- building and searching --------------------------------------------------------
    @property
    def is_built(self) -> bool:
        """Whether it holds an index (`index` ran, or `load` made it)."""
        return hasattr(self, "docids_")

    def _check_built(self) -> None:
        if not self.is_built:
            raise _not_built(type(self).__name__)

    @property
    def n_docs(self) -> int:
        """Documents in the index; `NotBuiltError` when there is none."""
        self._check_built()
        return len(self.docids_)

    def index(self, corpus: pd.DataFrame, *, show_progress: bool = False) -> Retriever:
        """Index a corpus table (``docid, title, text``); returns ``self``."""
        corpus = validate_corpus(corpus)
        docids = np.asarray(corpus["docid"].tolist(), dtype=object)
        texts = np.asarray(
            [passage_text(t, x) for t, x in zip(corpus["title"], corpus["text"], strict=True)],
            dtype=object,
        )
        self._build(docids, texts, show_progress)
        self.docids_ = docids
        self.texts_ = texts
        self.corpus_sha256_ = corpus_fingerprint(docids.tolist(), texts.tolist())
        return self

    def search(self, queries: Any, k: int = 10, *, show_progress: bool = False) -> pd.DataFrame:
        """Top-``k`` passages per query as a results table (``qid, docid, score, rank, text``).

        A query may get fewer than ``k`` rows: BM25 returns only documents that share a term
        with it, and no index returns more rows than it has documents.
        """
        self._check_built()
        q = validate_queries(queries)
        k = check_k(k)
        if len(q) == 0:
            return empty_results()
        hits = self._search(q["question"].tolist(), min(k, len(self.docids_)), show_progress)
        return self._results_frame(q["qid"].tolist(), hits)

    def _results_frame(
        self, qids: list[str], hits: list[tuple[np.ndarray, np.ndarray]]
    ) -> pd.DataFrame:
        lens = [len(ix) for ix, _ in hits]
        if sum(lens) == 0:
            return empty_results()
        idx = np.concatenate([np.asarray(ix, dtype=np.int64) for ix, _ in hits])
        scores = np.concatenate([np.asarray(s, dtype=np.float64) for _, s in hits])
        return pd.DataFrame(
            {
                "qid": np.repeat(np.asarray(qids, dtype=object), lens),
                "docid": self.docids_[idx],
                "score": scores,
                "rank": np.concatenate([np.arange(1, n + 1, dtype=np.int64) for n in lens]),
                "text": self.texts_[idx],
            }
        )

    @abstractmethod
    def _build(self, docids: np.ndarray, texts: np.ndarray, show_progress: bool) -> None:
        """Build the index over ``texts`` (row i is document ``docids[i]``)."""

    @abstractmethod
    def _search(
        self, questions: list[str], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per question: (row indices, scores), best first, at most ``k``."""

    # ---- persistence -------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the index into folder ``path`` (replaced atomically); returns the folder."""
        self._check_built()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
        tmp.mkdir()
        try:
            pd.DataFrame({"docid": self.docids_, "text": self.texts_}).to_parquet(
                tmp / PASSAGES_FILE, index=False
            )
            extra = self._save(tmp) or {}
            meta = {
                **self.identity(),
                "class": type(self).__name__,
                "ltrr_version": __version__,
                "format_version": FORMAT_VERSION,
                "n_docs": int(len(self.docids_)),
                "corpus_sha256": self.corpus_sha256_,
                "state": extra,
            }
            write_json_atomic(tmp / META_FILE, meta, indent=2, sort_keys=True)
            replace_dir(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @staticmethod
    def read_meta(path: str | Path) -> dict[str, Any]:
        """The ``params.json`` of a saved index; `NotBuiltError` if the folder holds none."""
        path = Path(path)
        meta_file = path / META_FILE
        if not meta_file.is_file():
            raise _not_built(f"index folder {str(path)!r}")
        try:
            return json.loads(meta_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise NotBuiltError(
                f"index folder {str(path)!r} has an unreadable {META_FILE} ({exc}); rebuild it with "
                "`ltrr index CONFIG`"
            ) from None

    @classmethod
    def load(cls, path: str | Path) -> Retriever:
        """Load a saved index. ``Retriever.load`` picks the class from the stored metadata."""
        path = Path(path)
        meta = cls.read_meta(path)
        if meta.get("format_version") != FORMAT_VERSION:
            raise NotBuiltError(
                f"index folder {str(path)!r} has format version {meta.get('format_version')!r}, "
                f"this ltrr reads {FORMAT_VERSION}; rebuild it with `ltrr index CONFIG`"
            )
        target = retrievers.get(meta["retriever"]) if cls is Retriever else cls
        if target.name != meta["retriever"]:
            raise ConfigError(
                f"index folder {str(path)!r} holds a {meta['retriever']!r} index, not {target.name!r}"
            )
        obj = target.from_params(meta["params"])
        passages = pd.read_parquet(path / PASSAGES_FILE)
        obj.docids_ = np.asarray(passages["docid"].tolist(), dtype=object)
        obj.texts_ = np.asarray(passages["text"].tolist(), dtype=object)
        obj.corpus_sha256_ = meta["corpus_sha256"]
        obj._load(path, meta.get("state") or {})
        return obj

    @abstractmethod
    def _save(self, path: Path) -> dict[str, Any] | None:
        """Write backend files into ``path``; may return JSON-safe state for ``params.json``."""

    @abstractmethod
    def _load(self, path: Path, state: dict[str, Any]) -> None:
        """Restore backend state from ``path``."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"
