"""BM25 retrieval with three interchangeable backends behind one class.

Backends are found by name in `bm25_backends`:

``bm25s`` (default)
    bm25s with ``method="lucene"``: sparse precomputed scores, ~ms per query on 100k passages.
``rank_bm25``
    rank_bm25's ``BM25Okapi`` with Lucene's idf (see `_LuceneOkapi`); a pure-Python reference,
    slow (~0.1 s per query on 100k passages).
``pyserini``
    Lucene through pyserini (``pip install 'ltrr[lucene]'``, Java >= 21).

All three score with Lucene's BM25::

    score(q, d) = sum over query terms t of  idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = log(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

and all three index and search the terms of one shared `ltrr.text.Tokenizer` (Lucene gets
pre-tokenized text and a whitespace analyzer), so they agree up to Lucene's lossy encoding of
document lengths. Only documents that share a term with the query are returned (their score is
> 0); ties are broken by corpus order, as Lucene does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import tempfile
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ltrr._checks import check_number
from ltrr._errors import ConfigError, DataError, MissingDependencyError
from ltrr._registry import Registry
from ltrr.retrieval.base import Retriever, retrievers
from ltrr.text import Tokenizer

__all__ = ["BM25Retriever", "bm25_backends", "find_java_home", "import_pyserini"]

#: BM25 implementations by name
bm25_backends: Registry = Registry("BM25 backend")

MIN_JAVA = 21
JVM_ROOT = "/usr/lib/jvm"
#: where macOS installers put JDKs; each JDK's home is ``<name>.jdk/Contents/Home``
MACOS_JVM_ROOT = "/Library/Java/JavaVirtualMachines"


def top_k_positive(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the ``k`` best positive scores, ties broken by lower index."""
    scores = np.asarray(scores)
    pos = np.flatnonzero(scores > 0)
    s = scores[pos]
    if len(pos) > k:
        kth = np.partition(s, len(s) - k)[len(s) - k]
        keep = s >= kth
        pos, s = pos[keep], s[keep]
    order = np.lexsort((pos, -s))[:k]
    return pos[order], s[order]


class _Backend(ABC):
    """One BM25 implementation over pre-tokenized documents."""

    def __init__(self, k1: float, b: float):
        self.k1 = k1
        self.b = b

    @abstractmethod
    def build(self, tokens: list[list[str]], show_progress: bool) -> None: ...

    @abstractmethod
    def search(
        self, query_tokens: list[list[str]], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]: ...

    @abstractmethod
    def save(self, path: Path) -> None: ...

    @abstractmethod
    def load(self, path: Path) -> None: ...


def _progress(it, show_progress: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(it, disable=not show_progress, desc=desc)


# ---- bm25s ---------------------------------------------------------------------------------
@bm25_backends.register("bm25s")
class _Bm25sBackend(_Backend):
    def _bm25s(self):
        try:
            import bm25s
        except ImportError as exc:  # pragma: no cover - core dependency
            raise MissingDependencyError(
                f"the bm25s backend needs bm25s: pip install bm25s ({exc})"
            ) from exc
        return bm25s

    def build(self, tokens, show_progress):
        bm25s = self._bm25s()
        model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        # bm25s infers the corpus kind from its first element; a list of token lists is "tokens"
        model.index(tokens, show_progress=show_progress)
        self.model = model

    def search(self, query_tokens, k, show_progress):
        vocab = self.model.vocab_dict
        out = []
        for toks in _progress(query_tokens, show_progress, "bm25s"):
            known = [t for t in toks if t in vocab]
            if not known:
                out.append((np.zeros(0, np.int64), np.zeros(0)))
                continue
            # full score vector, then our own top-k: bm25s's selection breaks ties arbitrarily,
            # ours breaks them by corpus order like Lucene
            scores = self.model.get_scores(known)
            out.append(top_k_positive(scores, k))
        return out

    def save(self, path):
        self.model.save(str(path), show_progress=False)

    def load(self, path):
        self.model = self._bm25s().BM25.load(str(path), load_corpus=False, mmap=False)


# ---- rank_bm25 -----------------------------------------------------------------------------
def _lucene_okapi_class():
    try:
        from rank_bm25 import BM25Okapi
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingDependencyError(
            f"the rank_bm25 backend needs rank-bm25: pip install rank-bm25 ({exc})"
        ) from exc

    class _LuceneOkapi(BM25Okapi):
        """rank_bm25's Okapi with Lucene's idf.

        Stock ``BM25Okapi`` uses ``log((N - df + 0.5) / (df + 0.5))`` with an epsilon floor for
        terms in more than half of the documents; Lucene (and bm25s ``method="lucene"``) use
        ``log(1 + (N - df + 0.5) / (df + 0.5))``. Overriding the documented ``_calc_idf`` hook makes
        the backend a reference implementation of the same formula instead of a different one.
        """

        def _calc_idf(self, nd):
            n = self.corpus_size
            for word, df in nd.items():
                self.idf[word] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            self.average_idf = sum(self.idf.values()) / max(len(self.idf), 1)

    return _LuceneOkapi


@bm25_backends.register("rank_bm25")
class _RankBm25Backend(_Backend):
    TOKENS_FILE = "corpus_tokens.json"

    def build(self, tokens, show_progress):
        self.tokens = tokens
        self.model = _lucene_okapi_class()(tokens, k1=self.k1, b=self.b)

    def search(self, query_tokens, k, show_progress):
        out = []
        for toks in _progress(query_tokens, show_progress, "rank_bm25"):
            if not toks:
                out.append((np.zeros(0, np.int64), np.zeros(0)))
                continue
            # rank_bm25 keeps Robertson's (k1 + 1) factor; Lucene dropped it (it does not change
            # the ranking), so dividing gives scores equal to the other backends'
            scores = self.model.get_scores(toks) / (self.k1 + 1.0)
            out.append(top_k_positive(scores, k))
        return out

    def save(self, path):
        # rank_bm25 has no file format; its index is a pure function of the token lists
        path.mkdir(parents=True, exist_ok=True)
        (path / self.TOKENS_FILE).write_text(json.dumps(self.tokens), encoding="utf-8")

    def load(self, path):
        self.build(json.loads((path / self.TOKENS_FILE).read_text(encoding="utf-8")), False)


# ---- pyserini (Lucene) ---------------------------------------------------------------------
def _java_version(home: Path) -> int | None:
    """Major version of the JDK at ``home`` (from its ``release`` file or its folder name)."""
    release = home / "release"
    text = ""
    if release.is_file():
        with contextlib.suppress(OSError):
            text = release.read_text(errors="replace")
    m = re.search(r'^JAVA_VERSION="([^"]+)"', text, flags=re.M)
    if m:
        parts = m.group(1).split(".")
        try:
            major = int(parts[0])
            return int(parts[1]) if major == 1 and len(parts) > 1 else major
        except ValueError:
            return None
    m = re.search(r"(?:java|jdk|jre|temurin|openjdk|zulu|corretto)-?(\d+)", home.name)
    return int(m.group(1)) if m else None


def _has_java(home: Path) -> bool:
    return (home / "bin" / "java").exists() or (home / "bin" / "java.exe").exists()


def _jdk_homes(root: Path) -> list[Path]:
    """The JDK folders under ``root``: its sub-folders, or for a macOS bundle (``x.jdk``) its
    ``Contents/Home`` (named for its bundle when the version is read from the name)."""
    homes = []
    for entry in sorted(root.iterdir()):
        if not entry.is_dir() or entry.is_symlink():
            continue
        bundle = entry / "Contents" / "Home"
        homes.append(bundle if bundle.is_dir() else entry)
    return homes


def find_java_home(min_version: int = MIN_JAVA, jvm_root: str | Path | None = None) -> Path:
    """A JDK folder with Java >= ``min_version``.

    ``JAVA_HOME`` wins when it points to one; otherwise the newest suitable JDK under
    ``jvm_root`` is used (default: `JVM_ROOT`, and on macOS `MACOS_JVM_ROOT` too, whose bundles
    hold the JDK in ``Contents/Home``). Raises `MissingDependencyError` saying what to install.
    """
    seen = []
    env = os.environ.get("JAVA_HOME")
    if env:
        v = _java_version(Path(env))
        seen.append(f"JAVA_HOME={env} (Java {v})")
        if v is not None and v >= min_version and _has_java(Path(env)):
            return Path(env)
    roots = [Path(jvm_root)] if jvm_root is not None else [Path(JVM_ROOT)] + (
        [Path(MACOS_JVM_ROOT)] if sys.platform == "darwin" else [])
    candidates = []
    for root in (r for r in roots if r.is_dir()):
        for home in _jdk_homes(root):
            if _has_java(home):
                v = _java_version(home)
                if v is None and home.name == "Home":  # a macOS bundle: its name carries the version
                    v = _java_version(home.parent.parent)
                seen.append(f"{home} (Java {v})")
                if v is not None and v >= min_version:
                    candidates.append((v, str(home), home))
    if candidates:
        return max(candidates)[2]
    raise MissingDependencyError(
        f"the pyserini BM25 backend needs a Java >= {min_version} JDK, found "
        f"{'; '.join(seen) or 'none'}. Install one (e.g. Temurin {min_version}+ or "
        f"openjdk-{min_version}-jdk) and set JAVA_HOME to it"
    )


@contextlib.contextmanager
def _temporary_env(**values: str | None) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_PYSERINI: SimpleNamespace | None = None


def import_pyserini() -> SimpleNamespace:
    """Import pyserini's Lucene classes (``LuceneIndexer``, ``LuceneSearcher``, whitespace analyzer).

    Chooses a Java >= 21 JDK for the JVM (see `find_java_home`) and, because importing
    ``pyserini.search.lucene`` builds an OpenAI client that fails without ``OPENAI_API_KEY``,
    sets a placeholder key only while importing. Both variables are restored afterwards.
    """
    global _PYSERINI
    if _PYSERINI is not None:
        return _PYSERINI
    if importlib.util.find_spec("pyserini") is None:
        raise MissingDependencyError(
            "the pyserini BM25 backend needs pyserini: pip install 'ltrr[lucene]' "
            f"(and a Java >= {MIN_JAVA} JDK)"
        )
    # The JVM starts once per process, when jnius is first imported; after that its Java is fixed.
    java_home = None if "jnius" in sys.modules else str(find_java_home())
    placeholder = None if os.environ.get("OPENAI_API_KEY") else "ltrr-placeholder-not-a-key"
    try:
        with _temporary_env(JAVA_HOME=java_home, OPENAI_API_KEY=placeholder):
            from pyserini.analysis import JWhiteSpaceAnalyzer
            from pyserini.index.lucene import LuceneIndexer
            from pyserini.search.lucene import LuceneSearcher
    except MissingDependencyError:
        raise
    except Exception as exc:
        raise MissingDependencyError(
            f"pyserini failed to start (Java home: {java_home or 'already running JVM'}): {exc}. "
            f"It needs pip install 'ltrr[lucene]' and a Java >= {MIN_JAVA} JDK"
        ) from exc
    _PYSERINI = SimpleNamespace(
        LuceneIndexer=LuceneIndexer,
        LuceneSearcher=LuceneSearcher,
        WhitespaceAnalyzer=JWhiteSpaceAnalyzer,
    )
    return _PYSERINI


def _lucene_id(i: int) -> str:
    # Anserini rounds scores to 4 decimals and breaks ties by docid *string*; zero-padding makes
    # that order the corpus order, as in the other backends
    return f"{i:012d}"


@bm25_backends.register("pyserini", extra="lucene")
class _PyseriniBackend(_Backend):
    INDEX_DIR = "lucene"
    BATCH = 5000

    def build(self, tokens, show_progress):
        ps = import_pyserini()
        # Lucene writes to disk; an in-memory retriever keeps its index in a temporary folder
        # that `save` copies and that is removed with the object
        workdir = Path(tempfile.mkdtemp(prefix="ltrr-lucene-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(workdir), True)
        index_dir = workdir / self.INDEX_DIR
        # one thread keeps Lucene's internal doc order = corpus order, so ties break like ours
        indexer = ps.LuceneIndexer(args=["-index", str(index_dir), "-pretokenized"], threads=1)
        try:
            for start in _progress(range(0, len(tokens), self.BATCH), show_progress, "lucene"):
                batch = tokens[start : start + self.BATCH]
                indexer.add_batch_dict(
                    [
                        {"id": _lucene_id(start + i), "contents": " ".join(t)}
                        for i, t in enumerate(batch)
                    ]
                )
        finally:
            indexer.close()
        self._open(index_dir)

    def _open(self, index_dir: Path) -> None:
        ps = import_pyserini()
        searcher = ps.LuceneSearcher(str(index_dir))
        searcher.set_analyzer(ps.WhitespaceAnalyzer())
        searcher.set_bm25(float(self.k1), float(self.b))
        self.index_dir = index_dir
        self.searcher = searcher

    def search(self, query_tokens, k, show_progress):
        out: list[tuple[np.ndarray, np.ndarray]] = [
            (np.zeros(0, np.int64), np.zeros(0)) for _ in query_tokens
        ]
        todo = [i for i, t in enumerate(query_tokens) if t]
        threads = max(1, min(4, os.cpu_count() or 1))
        for start in _progress(range(0, len(todo), 256), show_progress, "lucene"):
            chunk = todo[start : start + 256]
            res = self.searcher.batch_search(
                [" ".join(query_tokens[i]) for i in chunk],
                [str(i) for i in chunk],
                k=int(k),
                threads=threads,
            )
            for i in chunk:
                hits = res.get(str(i), [])
                idx = np.asarray([int(h.docid) for h in hits], dtype=np.int64)
                sc = np.asarray([float(h.score) for h in hits], dtype=np.float64)
                keep = sc > 0
                out[i] = (idx[keep], sc[keep])
        return out

    def save(self, path):
        shutil.copytree(self.index_dir, path / self.INDEX_DIR)

    def load(self, path):
        self._open(path / self.INDEX_DIR)


# ---- the retriever -------------------------------------------------------------------------
@retrievers.register("bm25")
class BM25Retriever(Retriever):
    """Lexical BM25 retrieval (Lucene's formula) with a choice of backend.

    Parameters
    ----------
    backend : {"bm25s", "rank_bm25", "pyserini"}
        Implementation, found in `bm25_backends`.
    k1 : float
        Term-frequency saturation (>= 0); Anserini's default 0.9.
    b : float
        Length normalisation in [0, 1]; Anserini's default 0.4.
    tokenizer : Tokenizer, dict or None
        Shared lexical tokenizer (a `Tokenizer`, its ``to_dict()``, or None for the default).

    Examples
    --------
    >>> import pandas as pd
    >>> corpus = pd.DataFrame({"docid": ["au", "fr"], "title": ["Australia", "France"],
    ...     "text": ["Its capital is Canberra.", "Its capital is Paris."]})
    >>> bm25 = BM25Retriever(k1=0.9, b=0.4).index(corpus)
    >>> bm25.search(["capital of France"], k=1)["docid"].tolist()
    ['fr']
    """

    name = "bm25"

    def __init__(
        self,
        backend: str = "bm25s",
        *,
        k1: float = 0.9,
        b: float = 0.4,
        tokenizer: Tokenizer | dict[str, Any] | None = None,
    ):
        self.backend = backend
        self.k1 = k1
        self.b = b
        self.tokenizer = tokenizer

    def _resolved_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            return Tokenizer()
        if isinstance(self.tokenizer, Tokenizer):
            return self.tokenizer
        if isinstance(self.tokenizer, dict):
            return Tokenizer.from_dict(self.tokenizer)
        raise ConfigError(
            f"BM25Retriever: tokenizer must be a Tokenizer, a dict of its parameters or None, "
            f"got {type(self.tokenizer).__name__}"
        )

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        params = super().get_params(deep=deep)
        params["tokenizer"] = self._resolved_tokenizer().to_dict()
        return params

    def validate_params(self) -> None:
        """Check parameter values; raises `ConfigError` naming the bad one."""
        bm25_backends.get(self.backend)
        check_number(self.k1, "BM25Retriever: k1", low=0)
        check_number(self.b, "BM25Retriever: b", low=0, high=1)
        self._resolved_tokenizer()._setup()

    def _make_backend(self) -> _Backend:
        return bm25_backends.get(self.backend)(float(self.k1), float(self.b))

    def _build(self, docids, texts, show_progress):
        self.validate_params()
        tokenizer = self._resolved_tokenizer()
        tokens = tokenizer.tokenize_batch(texts.tolist(), show_progress=show_progress)
        # Lucene's N and avgdl count only documents with at least one term in the field; leaving
        # term-less passages out of every backend keeps the three formulas identical
        rows = np.asarray([i for i, t in enumerate(tokens) if t], dtype=np.int64)
        if len(rows) == 0:
            raise DataError(
                "corpus has no indexable terms: every passage is empty after tokenizing "
                f"with {tokenizer!r}"
            )
        backend = self._make_backend()
        backend.build([tokens[i] for i in rows], show_progress)
        self.tokenizer_ = tokenizer
        self.backend_ = backend
        self.rows_ = rows

    def _search(self, questions, k, show_progress):
        qtokens = [self.tokenizer_.tokenize(q) for q in questions]
        hits = self.backend_.search(qtokens, min(k, len(self.rows_)), show_progress)
        return [(self.rows_[ix], sc) for ix, sc in hits]

    def query_tokens(self, question: str) -> list[str]:
        """The index terms of ``question`` (what the backends search for)."""
        return self._resolved_tokenizer().tokenize(question)

    def _save(self, path):
        self.backend_.save(path / self.backend)
        np.save(path / "rows.npy", self.rows_, allow_pickle=False)
        return {"backend_dir": self.backend}

    def _load(self, path, state):
        self.validate_params()
        self.tokenizer_ = self._resolved_tokenizer()
        backend = self._make_backend()
        backend.load(path / state.get("backend_dir", self.backend))
        self.backend_ = backend
        self.rows_ = np.load(path / "rows.npy", allow_pickle=False)
