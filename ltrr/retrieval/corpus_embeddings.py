"""A corpus's passage embeddings, encoded once per (encoder, corpus) and reused.

Encoding the demo's 10,033 passages with MiniLM is the slow part of ``ltrr index demo`` (435 s on
one shared core of the 2-core machine, measured; BM25 takes seconds), and the packaged configs
``demo``, ``demo-qwen`` (dataset ``demo-grown``) and ``demo-agent`` all index that same corpus.
`corpus_embeddings` keys the matrix by the encoder's identity (its weights and the CPU kernels
in effect, `ltrr._cpu`), the passage prefix, the batch size and a hash of every passage text in
order, and looks the key up:

1. in the data root's embedding cache, ``<data_root>/cache/embeddings/<key>.npy``;
2. in the matrices shipped with the package, ``ltrr/prebuilt/NAME-embeddings.npy`` with a
   sidecar ``NAME-embeddings.json`` (key, encoder identity, shape, sha256): like the prebuilt
   generation cache (`ltrr.generation.prebuilt`), the file's sha256 is checked before it is
   used, and a mismatch is an error, never a silent fallback;
3. otherwise it encodes, and writes the matrix to the cache atomically.

The same key gives the same float32 matrix the encoder would compute: ltrr pins torch's CPU
kernels on every x86-64 machine with AVX2 (by default to ones that give the same bits on AMD and
Intel CPUs), and `encode` is deterministic under them. A test
re-encodes a random sample of the shipped rows and compares them. A matrix made under other
kernels or weights has another key, so it is never used for this encoder.

Rebuilding the shipped matrix (after a change of the demo corpus or the default encoder)::

    ltrr index demo                                   # encodes, or finds the cache
    python -c "from ltrr.embed import get_encoder; from ltrr.retrieval.corpus_embeddings import export_prebuilt; \
        export_prebuilt('demo', KEY, encoder_identity=get_encoder('minilm').identity)"

where ``KEY`` is the name of the ``.npy`` that ``ltrr index demo`` wrote under
``data/cache/embeddings/`` (`corpus_key` computes it). The shipped matrix was last made so in
session 41, under the default ``portable`` kernels (8 min 5 s on 2 cores of an AMD EPYC).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ltrr._atomic import atomic_path, sha256_file, write_json_atomic
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.data.io import data_root

__all__ = ["corpus_key", "corpus_embeddings", "cache_folder", "prebuilt_embeddings", "export_prebuilt"]

_SUFFIX = "-embeddings"


def corpus_key(encoder: Any, texts: Sequence[str], batch_size: int) -> str:
    """The cache key of ``texts`` encoded as passages by ``encoder`` in batches of ``batch_size``.

    Parameters
    ----------
    encoder : ltrr.embed.Encoder
        Its ``identity`` (weights and CPU kernels) and ``passage_prefix`` enter the key.
    texts : sequence of str
        The passages, in corpus order.
    batch_size : int
        Batches pad to their longest text, which can move the last bits, so it is part of the key.

    Returns
    -------
    str
        A 32-hex-digit key.
    """
    h = hashlib.sha256()
    for t in texts:
        h.update(str(t).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    spec = {
        "identity": encoder.identity,
        "prefix": getattr(encoder, "passage_prefix", ""),
        "batch_size": int(batch_size),
        "n": len(texts),
        "texts": h.hexdigest(),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


def cache_folder() -> Path:
    """The embedding cache under the data root: ``<data_root>/cache/embeddings``."""
    return data_root() / "cache" / "embeddings"


def _prebuilt_folder() -> Path:
    return Path(str(importlib.resources.files("ltrr") / "prebuilt"))


def prebuilt_embeddings(key: str) -> tuple[Path, dict] | None:
    """The shipped matrix of ``key``, as (path of the ``.npy``, its sidecar), or None."""
    folder = _prebuilt_folder()
    if not folder.is_dir():
        return None
    for side in sorted(folder.glob(f"*{_SUFFIX}.json")):
        meta = json.loads(side.read_text(encoding="utf-8"))
        if meta.get("key") == key:
            return side.with_suffix(".npy"), meta
    return None


def _load(path: Path, n: int) -> np.ndarray | None:
    try:
        emb = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if emb.dtype != np.float32 or emb.ndim != 2 or emb.shape[0] != n:
        return None
    return np.ascontiguousarray(emb)


def _save(path: Path, emb: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        np.save(tmp, emb, allow_pickle=False)


def corpus_embeddings(
    encoder: Any, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False,
    use_cache: bool = True, log=None,
) -> np.ndarray:
    """The passage embeddings of ``texts`` under ``encoder``: cached, shipped or encoded now.

    Parameters
    ----------
    encoder : ltrr.embed.Encoder
        The passage encoder.
    texts : sequence of str
        The passages, in corpus order.
    batch_size : int
        Encoding batch size (part of the key).
    show_progress : bool
        A progress bar while encoding.
    use_cache : bool
        False: always encode, and write nothing.
    log : callable, optional
        Receives one line saying where the matrix came from.

    Returns
    -------
    numpy.ndarray
        ``(len(texts), dim)`` float32, unit rows.

    Raises
    ------
    DataError
        A shipped matrix whose sha256 or shape does not match its sidecar.
    """
    texts = [str(t) for t in texts]
    say = log or (lambda m: None)

    def encode() -> np.ndarray:
        out = encoder.encode_passages(texts, batch_size=batch_size, show_progress=show_progress)
        return np.ascontiguousarray(out, dtype=np.float32)

    if not use_cache:
        return encode()
    key = corpus_key(encoder, texts, batch_size)
    cached = cache_folder() / f"{key}.npy"
    if cached.is_file():
        emb = _load(cached, len(texts))
        if emb is not None:
            say(f"passage embeddings from the cache ({cached})")
            return emb
        say(f"ignoring an unreadable cached embedding matrix {cached}; encoding again")
    shipped = prebuilt_embeddings(key)
    if shipped is not None:
        path, meta = shipped
        if not path.is_file():
            raise NotBuiltError(f"prebuilt embeddings {path} are missing (its sidecar names key {key})")
        if sha256_file(path) != meta.get("sha256"):
            raise DataError(f"prebuilt embeddings {path} do not match the sha256 in {path.with_suffix('.json').name}; "
                            "the file is corrupt: reinstall ltrr")
        emb = _load(path, len(texts))
        if emb is None or list(emb.shape) != list(meta.get("shape", [])):
            raise DataError(f"prebuilt embeddings {path}: not a float32 matrix of shape {meta.get('shape')}")
        say(f"passage embeddings from the shipped {path.name}")
        return emb
    emb = encode()
    _save(cached, emb)
    return emb


def export_prebuilt(name: str, key: str, *, encoder_identity: str, dest: str | Path | None = None) -> Path:
    """Ship the cached matrix ``key`` as ``NAME-embeddings.npy`` with its sidecar.

    Parameters
    ----------
    name : str
        The prebuilt's name (``demo``).
    key : str
        A key of the data root's embedding cache (`corpus_key`).
    encoder_identity : str
        The identity of the encoder that made the matrix (``get_encoder(name).identity``),
        recorded in the sidecar so a reader can tell which model and kernels made it. Required:
        a sidecar without it cannot be checked against the encoder a user runs.
    dest : str or Path, optional
        Folder to write to; the package's ``ltrr/prebuilt`` by default.

    Returns
    -------
    Path
        The written ``.npy``.

    Raises
    ------
    ConfigError
        ``encoder_identity`` is empty.
    NotBuiltError
        The cache holds no matrix ``key``.
    """
    if not str(encoder_identity).strip():
        raise ConfigError("export_prebuilt: give encoder_identity (get_encoder(NAME).identity); the sidecar "
                          "records which encoder and kernels made the matrix")
    src = cache_folder() / f"{key}.npy"
    if not src.is_file():
        raise NotBuiltError(f"no cached embedding matrix {src}; index the corpus first (`ltrr index CONFIG`)")
    emb = np.load(src, allow_pickle=False)
    folder = Path(dest) if dest is not None else _prebuilt_folder()
    out = folder / f"{name}{_SUFFIX}.npy"
    _save(out, np.ascontiguousarray(emb, dtype=np.float32))
    write_json_atomic(out.with_suffix(".json"), {
        "key": key, "encoder_identity": encoder_identity, "shape": list(emb.shape),
        "sha256": sha256_file(out), "made_by": "ltrr index (ltrr.retrieval.corpus_embeddings.corpus_embeddings)",
    }, indent=1)
    return out
