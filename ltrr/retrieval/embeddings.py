"""`EmbeddingSource`: document embeddings for rerankers and features, never encoded twice.

Rows come from a built dense retriever's stored embeddings when it holds the document, else
from the encoder, cached per docid for the life of the object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ltrr._errors import DataError

__all__ = ["EmbeddingSource"]


class EmbeddingSource:
    """Document embeddings for rerankers and features, without encoding twice.

    With a built `DenseRetriever`, rows come from its stored ``embeddings.npy``; documents it
    does not hold (and every document when no retriever is given) are encoded with the encoder
    and cached per docid and text for the life of the object (a docid that comes back with
    another text, from another corpus, is encoded again).

    Parameters
    ----------
    retriever : DenseRetriever or None
        A built dense retriever whose stored embeddings are reused; its encoder is then used for
        documents it lacks.
    encoder : str
        Encoder name or folder (`ltrr.embed.get_encoder`) when no retriever is given.
    batch_size : int
        Encoding batch size.

    Examples
    --------
    >>> src = EmbeddingSource(encoder="minilm")
    >>> src.get(["d1"], ["Canberra is the capital of Australia."]).shape  # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, retriever: Any = None, *, encoder: str = "minilm", batch_size: int = 64):
        self.retriever = retriever
        self.encoder = encoder
        self.batch_size = batch_size
        self._cache: dict[str, tuple[str, np.ndarray]] = {}  # docid -> (the text encoded, its vector)
        self.n_encoded = 0  # documents encoded so far (stored rows are not counted)

    @property
    def encoder_name(self) -> str:
        """The encoder of new documents: the retriever's ``encoder``, else ``encoder``."""
        return self.retriever.encoder if self.retriever is not None else self.encoder

    def _stored_rows(self) -> dict[str, int]:
        return {} if self.retriever is None else self.retriever.docid_rows

    def get(self, docids: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """Unit-length embeddings, one row per docid, ``(n, dim)`` float32."""
        docids = [str(d) for d in docids]
        if len(docids) != len(texts):
            raise DataError(f"got {len(docids)} docids but {len(texts)} texts")
        stored = self._stored_rows()
        texts = [str(t) for t in texts]
        missing = [i for i, d in enumerate(docids)
                   if d not in stored and (d not in self._cache or self._cache[d][0] != texts[i])]
        if missing:
            from ltrr.embed import get_encoder

            enc = get_encoder(self.encoder_name)
            new = enc.encode_passages([texts[i] for i in missing], batch_size=self.batch_size)
            self.n_encoded += len(missing)
            for i, v in zip(missing, new, strict=True):
                self._cache[docids[i]] = (texts[i], np.asarray(v, dtype=np.float32))
        out = []
        stored_ids = [d for d in docids if d in stored and d not in self._cache]
        stored_vecs = (
            dict(zip(stored_ids, self.retriever.doc_embeddings(stored_ids), strict=True))
            if stored_ids
            else {}
        )
        for d in docids:
            out.append(self._cache[d][1] if d in self._cache else stored_vecs[d])
        if not out:
            return np.zeros((0, 0), dtype=np.float32)
        emb = np.vstack(out).astype(np.float32)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return emb / norms
