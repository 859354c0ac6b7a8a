"""Dense retrieval: an `ltrr.embed` encoder plus a faiss inner-product index.

Encoders return unit vectors, so inner product is cosine similarity. Index types:

``flat`` (default)
    exact search (``IndexFlatIP``).
``hnsw``
    ``IndexHNSWFlat`` graph (``hnsw_m`` links per node, ``hnsw_ef_search`` candidates at search).
``ivf``
    ``IndexIVFFlat`` over ``ivf_nlist`` k-means cells (default ``min(4 * sqrt(N), N / 39)``, so
    every cell gets faiss's minimum of 39 training points), ``nprobe`` cells searched.

When faiss sees a GPU (``faiss.get_num_gpus() > 0``, i.e. faiss-gpu is installed), flat and ivf
searches run on it; the index saved to disk is always the CPU one.

On disk: ``params.json`` (parameters, encoder identity), ``embeddings.npy`` (one row per
document, corpus order), ``docids.json``, ``index.faiss`` and the shared ``passages.parquet``.
`DenseRetriever.doc_embeddings` reads rows of ``embeddings.npy`` so rerankers and features reuse
them instead of encoding again. The passage embeddings themselves come from
`ltrr.retrieval.corpus_embeddings`: encoded once per (encoder, corpus), then found in the data
root's cache or in the package's prebuilt matrix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError, MissingDependencyError, NotBuiltError
from ltrr.retrieval.base import Retriever, retrievers

__all__ = ["DenseRetriever", "INDEX_TYPES"]

INDEX_TYPES = ("flat", "hnsw", "ivf")


def _faiss():
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingDependencyError(
            f"dense retrieval needs faiss: pip install faiss-cpu (or faiss-gpu) ({exc})"
        ) from exc
    return faiss


def default_nlist(n_docs: int) -> int:
    """Default number of IVF cells for ``n_docs`` vectors."""
    return max(1, min(int(4 * math.sqrt(n_docs)), n_docs // 39))


@retrievers.register("dense")
class DenseRetriever(Retriever):
    """Bi-encoder retrieval over a faiss inner-product index.

    Parameters
    ----------
    encoder : str
        Encoder name for `ltrr.embed.get_encoder` (``"minilm"``, ``"e5"``) or a local
        sentence-transformers folder.
    index_type : {"flat", "hnsw", "ivf"}
        faiss index; ``flat`` is exact.
    hnsw_m : int
        HNSW links per node.
    hnsw_ef_search : int
        HNSW candidate list size at search time (higher: better recall, slower).
    ivf_nlist : int or None
        IVF cells; None picks ``min(4 * sqrt(N), N // 39)``.
    nprobe : int
        IVF cells visited per query.
    batch_size : int
        Encoding batch size.

    Examples
    --------
    >>> import pandas as pd
    >>> corpus = pd.DataFrame({"docid": ["au", "fr"], "title": ["Australia", "France"],
    ...     "text": ["Its capital is Canberra.", "Its capital is Paris."]})
    >>> dense = DenseRetriever("minilm").index(corpus)  # doctest: +SKIP
    >>> dense.search(["Which city is the French capital?"], k=1)["docid"].tolist()  # doctest: +SKIP
    ['fr']
    """

    name = "dense"
    embeds_documents = True

    def __init__(
        self,
        encoder: str = "minilm",
        *,
        index_type: str = "flat",
        hnsw_m: int = 32,
        hnsw_ef_search: int = 128,
        ivf_nlist: int | None = None,
        nprobe: int = 16,
        batch_size: int = 64,
    ):
        self.encoder = encoder
        self.index_type = index_type
        self.hnsw_m = hnsw_m
        self.hnsw_ef_search = hnsw_ef_search
        self.ivf_nlist = ivf_nlist
        self.nprobe = nprobe
        self.batch_size = batch_size

    # ---- parameters --------------------------------------------------------------------
    def validate_params(self) -> None:
        """Check parameter values; raises `ConfigError` naming the bad one."""
        if self.index_type not in INDEX_TYPES:
            raise ConfigError(
                f"DenseRetriever: index_type must be one of {list(INDEX_TYPES)}, got {self.index_type!r}"
            )
        if not isinstance(self.encoder, str) or not self.encoder:
            raise ConfigError(
                f"DenseRetriever: encoder must be a name or a folder, got {self.encoder!r}"
            )
        for name in ("hnsw_m", "hnsw_ef_search", "nprobe", "batch_size"):
            v = getattr(self, name)
            check_int(v, f"DenseRetriever: {name}", low=1)
        if self.ivf_nlist is not None:
            check_int(self.ivf_nlist, "DenseRetriever: ivf_nlist", low=1, note=" or None")

    def _encoder(self):
        from ltrr.embed import get_encoder

        return get_encoder(self.encoder)

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "encoder_identity": self._encoder().identity}

    # ---- building ----------------------------------------------------------------------
    def _build(self, docids, texts, show_progress):
        self.validate_params()
        from ltrr.retrieval.corpus_embeddings import corpus_embeddings

        enc = self._encoder()
        # encoded once per (encoder, corpus): from the data root's cache or the package's
        # prebuilt matrix when the key matches, else encoded now and cached
        emb = corpus_embeddings(enc, texts.tolist(), batch_size=self.batch_size, show_progress=show_progress)
        self.index_ = self._make_index(emb)
        self.embeddings_ = emb
        self.encoder_identity_ = enc.identity
        self._row_of = None
        self._search_index = None

    def _make_index(self, emb: np.ndarray):
        faiss = _faiss()
        n, d = emb.shape
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(d)
        elif self.index_type == "hnsw":
            index = faiss.IndexHNSWFlat(d, int(self.hnsw_m), faiss.METRIC_INNER_PRODUCT)
        else:
            nlist = int(self.ivf_nlist) if self.ivf_nlist is not None else default_nlist(n)
            if nlist > n:
                raise ConfigError(
                    f"DenseRetriever: ivf_nlist={nlist} exceeds the number of documents ({n}); "
                    "use fewer cells or index_type='flat'"
                )
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
            # faiss's k-means uses a fixed default seed, so training is deterministic
            index.train(emb)
        index.add(emb)
        self._configure(index)
        return index

    def _configure(self, index) -> None:
        if self.index_type == "hnsw":
            index.hnsw.efSearch = int(self.hnsw_ef_search)
        elif self.index_type == "ivf":
            index.nprobe = int(self.nprobe)

    def _index_for_search(self):
        if getattr(self, "_search_index", None) is None:
            faiss = _faiss()
            index = self.index_
            # HNSW has no GPU implementation in faiss; flat and IVF do
            if (
                self.index_type != "hnsw"
                and hasattr(faiss, "get_num_gpus")
                and faiss.get_num_gpus() > 0
            ):
                index = faiss.index_cpu_to_all_gpus(index)
                if self.index_type == "ivf":
                    faiss.GpuParameterSpace().set_index_parameter(index, "nprobe", int(self.nprobe))
            self._search_index = index
        return self._search_index

    # ---- searching ---------------------------------------------------------------------
    def _search(self, questions, k, show_progress):
        enc = self._encoder()
        if enc.identity != self.encoder_identity_:
            raise NotBuiltError(
                f"DenseRetriever: the index was built with encoder {self.encoder_identity_!r} but "
                f"{self.encoder!r} is now {enc.identity!r}; rebuild it with `ltrr index CONFIG`"
            )
        q = enc.encode_queries(questions, batch_size=self.batch_size, show_progress=show_progress)
        q = np.ascontiguousarray(q, dtype=np.float32)
        scores, ids = self._index_for_search().search(q, int(k))
        out = []
        for s, i in zip(scores, ids, strict=True):
            keep = i >= 0
            out.append((i[keep].astype(np.int64), s[keep].astype(np.float64)))
        return out

    @property
    def docid_rows(self) -> dict[str, int]:
        """Map docid -> row of ``embeddings.npy`` (built on first use)."""
        self._check_built()
        rows: dict[str, int] | None = getattr(self, "_row_of", None)
        if rows is None:
            rows = self._row_of = {d: i for i, d in enumerate(self.docids_.tolist())}
        return rows

    def doc_embeddings(self, docids: Sequence[str]) -> np.ndarray:
        """Stored unit-length embeddings of ``docids`` (rows of ``embeddings.npy``), ``(n, dim)``.

        An unknown docid raises `DataError`.
        """
        row_of = self.docid_rows
        rows = []
        for d in docids:
            r = row_of.get(str(d))
            if r is None:
                raise DataError(
                    f"docid {d!r} is not in this dense index ({len(self.docids_)} documents)"
                )
            rows.append(r)
        return np.asarray(self.embeddings_[np.asarray(rows, dtype=np.int64)], dtype=np.float32)

    @property
    def dim(self) -> int:
        """The dimension of the stored embeddings; `NotBuiltError` when there is no index."""
        self._check_built()
        return int(self.embeddings_.shape[1])

    # ---- persistence -------------------------------------------------------------------
    def _save(self, path):
        faiss = _faiss()
        np.save(
            path / "embeddings.npy",
            np.asarray(self.embeddings_, dtype=np.float32),
            allow_pickle=False,
        )
        (path / "docids.json").write_text(json.dumps(self.docids_.tolist()), encoding="utf-8")
        faiss.write_index(self.index_, str(path / "index.faiss"))
        return {"encoder_identity": self.encoder_identity_, "dim": self.dim}

    def _load(self, path: Path, state: dict[str, Any]) -> None:
        faiss = _faiss()
        self.validate_params()
        self.embeddings_ = np.load(path / "embeddings.npy", mmap_mode="r", allow_pickle=False)
        docids = json.loads((path / "docids.json").read_text(encoding="utf-8"))
        if docids != self.docids_.tolist():
            raise NotBuiltError(
                f"dense index {str(path)!r}: docids.json does not match passages.parquet; rebuild it "
                "with `ltrr index CONFIG`"
            )
        self.index_ = faiss.read_index(str(path / "index.faiss"))
        self._configure(self.index_)
        self.encoder_identity_ = state["encoder_identity"]
        self._row_of = None
        self._search_index = None
