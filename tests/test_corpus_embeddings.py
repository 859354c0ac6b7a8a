"""Corpus passage embeddings, encoded once per (encoder, corpus): the cache, the shipped matrix
and what each kind of bad file gets."""

from __future__ import annotations

import json

import _wiki
import numpy as np
import pandas as pd
import pytest

import ltrr.retrieval.corpus_embeddings as ce
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.retrieval import DenseRetriever, Retriever


class Counting:
    """A deterministic toy encoder that counts the passages it encodes."""

    identity = "toy:v1"
    passage_prefix = ""

    def __init__(self):
        self.encoded = 0

    def encode_passages(self, texts, *, batch_size=64, show_progress=False):
        self.encoded += len(texts)
        rng = [np.random.default_rng(sum(map(ord, t))).normal(size=8) for t in texts]
        x = np.asarray(rng, dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


TEXTS = ["Cats purr.", "Dogs bark.", "Canberra is the capital of Australia."]


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("LTRR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(ce, "_prebuilt_folder", lambda: tmp_path / "shipped")
    return tmp_path


def test_encoded_once_then_read_from_the_cache(root):
    enc = Counting()
    a = ce.corpus_embeddings(enc, TEXTS)
    assert enc.encoded == 3 and a.dtype == np.float32 and a.shape == (3, 8)
    b = ce.corpus_embeddings(enc, TEXTS)
    assert enc.encoded == 3 and np.array_equal(a, b)
    assert (ce.cache_folder() / f"{ce.corpus_key(enc, TEXTS, 64)}.npy").is_file()


def test_the_key_follows_texts_order_batch_size_and_encoder_identity():
    enc, other = Counting(), Counting()
    other.identity = "toy:v2"
    k = ce.corpus_key(enc, TEXTS, 64)
    assert k == ce.corpus_key(Counting(), list(TEXTS), 64)
    assert len({k, ce.corpus_key(enc, TEXTS[::-1], 64), ce.corpus_key(enc, TEXTS, 32),
                ce.corpus_key(other, TEXTS, 64), ce.corpus_key(enc, TEXTS[:2], 64)}) == 5


def test_no_cache_encodes_and_writes_nothing(root):
    enc = Counting()
    ce.corpus_embeddings(enc, TEXTS, use_cache=False)
    ce.corpus_embeddings(enc, TEXTS, use_cache=False)
    assert enc.encoded == 6 and not ce.cache_folder().exists()


def test_an_unreadable_cache_file_is_encoded_again(root):
    enc = Counting()
    path = ce.cache_folder() / f"{ce.corpus_key(enc, TEXTS, 64)}.npy"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a matrix")
    lines = []
    a = ce.corpus_embeddings(enc, TEXTS, log=lines.append)
    assert enc.encoded == 3 and "unreadable" in lines[0]
    assert np.array_equal(np.load(path), a)  # replaced by the good matrix


def test_a_shipped_matrix_is_used_when_its_key_matches(root):
    enc = Counting()
    key = ce.corpus_key(enc, TEXTS, 64)
    want = ce.corpus_embeddings(enc, TEXTS)
    out = ce.export_prebuilt("toy", key, encoder_identity=enc.identity)
    assert out == root / "shipped" / "toy-embeddings.npy"
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["key"] == key and meta["shape"] == [3, 8]
    (ce.cache_folder() / f"{key}.npy").unlink()
    lines = []
    got = ce.corpus_embeddings(enc, TEXTS, log=lines.append)
    assert enc.encoded == 3 and np.array_equal(got, want) and "shipped toy-embeddings.npy" in lines[0]
    # another corpus does not match it: encoded
    ce.corpus_embeddings(enc, TEXTS[:2])
    assert enc.encoded == 5


def test_a_corrupt_or_missing_shipped_matrix_is_one_clear_error(root):
    enc = Counting()
    key = ce.corpus_key(enc, TEXTS, 64)
    ce.corpus_embeddings(enc, TEXTS)
    out = ce.export_prebuilt("toy", key, encoder_identity=enc.identity)
    (ce.cache_folder() / f"{key}.npy").unlink()
    data = bytearray(out.read_bytes())
    data[-1] ^= 0xFF
    out.write_bytes(bytes(data))
    with pytest.raises(DataError, match="do not match the sha256"):
        ce.corpus_embeddings(enc, TEXTS)
    out.unlink()
    with pytest.raises(NotBuiltError, match="are missing"):
        ce.corpus_embeddings(enc, TEXTS)
    with pytest.raises(NotBuiltError, match="no cached embedding matrix"):
        ce.export_prebuilt("toy", "0" * 32, encoder_identity=enc.identity)
    # a sidecar that cannot say which encoder made the matrix is refused, and nothing is written
    with pytest.raises(ConfigError, match="give encoder_identity"):
        ce.export_prebuilt("toy2", key, encoder_identity=" ")
    assert not (root / "shipped" / "toy2-embeddings.npy").exists()


def test_a_dense_index_built_twice_encodes_once(root, monkeypatch):
    corpus = pd.DataFrame({"docid": ["a", "b", "c"], "title": ["Cats", "Dogs", "Canberra"],
                           "text": ["Cats purr.", "Dogs bark.", "The capital of Australia."]})
    encoded = []  # passages per encode_passages call of any "test-hash" encoder instance
    real = _wiki.HashEncoder.encode_passages

    def counting(self, texts, *args, **kw):
        encoded.append(len(texts))
        return real(self, texts, *args, **kw)

    monkeypatch.setattr(_wiki.HashEncoder, "encode_passages", counting)
    one = DenseRetriever("test-hash").index(corpus).save(root / "one")
    assert sum(encoded) == 3  # the first build encodes every passage
    two = DenseRetriever("test-hash").index(corpus).save(root / "two")
    assert sum(encoded) == 3  # the second build encodes none: it found the first one's matrix
    a, b = Retriever.load(one), Retriever.load(two)
    q = pd.DataFrame({"qid": ["q"], "question": ["why do cats purr"]})
    pd.testing.assert_frame_equal(a.search(q, k=3), b.search(q, k=3))
    assert encoded == [3]  # loading and searching encode no passage


@pytest.mark.slow
def test_the_shipped_demo_matrix_is_what_minilm_encodes():
    """A random sample of the shipped demo rows, encoded again here, gives the same vectors (to
    float32 rounding: a sample's batches pad differently from the full corpus's)."""
    from ltrr.data.demo import load_wiki_corpus
    from ltrr.embed import get_encoder
    from ltrr.retrieval import passage_text

    meta = json.loads((ce._prebuilt_folder() / "demo-embeddings.json").read_text())
    corpus = load_wiki_corpus()
    texts = [passage_text(t, x) for t, x in zip(corpus["title"], corpus["text"], strict=True)]
    enc = get_encoder("minilm")
    assert ce.corpus_key(enc, texts, 64) == meta["key"] and enc.identity == meta["encoder_identity"]
    shipped = np.load(ce._prebuilt_folder() / "demo-embeddings.npy")
    rows = np.random.default_rng(20261126).choice(len(texts), size=16, replace=False)
    again = enc.encode_passages([texts[i] for i in rows], batch_size=64)
    np.testing.assert_allclose(again, shipped[rows], atol=1e-5)
    assert (np.sum(again * shipped[rows], axis=1) > 0.99999).all()
