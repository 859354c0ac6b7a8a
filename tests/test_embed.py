"""Encoders: the query memo that keeps a run's dense arm and its features from encoding every
query twice, and what it must never serve."""

from __future__ import annotations

import numpy as np
from _wiki import HashEncoder


class Kernels(HashEncoder):
    """HashEncoder whose identity can change in place (as another CPU-kernel setting would)."""

    def __init__(self):
        super().__init__()
        self.kernels = "portable"

    @property
    def identity(self) -> str:
        return f"{super().identity}:{self.kernels}"


QS = ["who wrote hamlet", "capital of peru", "boiling point of water"]


def test_the_same_queries_in_the_same_batches_are_encoded_once():
    enc = HashEncoder()
    first = enc.encode_queries(QS, batch_size=2)
    assert enc.calls == 3
    again = enc.encode_queries(list(QS), batch_size=2)
    assert enc.calls == 3
    np.testing.assert_array_equal(first, again)
    assert again.dtype == np.float32 and again.shape == (3, enc.dim)


def test_other_queries_other_batches_or_another_identity_are_encoded_again():
    enc = Kernels()
    base = enc.encode_queries(QS, batch_size=2)
    enc.encode_queries(QS[:2], batch_size=2)
    assert enc.calls == 5  # other queries
    enc.encode_queries(QS, batch_size=2)
    assert enc.calls == 8  # only the last call is kept
    enc.encode_queries(QS, batch_size=3)
    assert enc.calls == 11  # other batches: an encoder's last bits may depend on them
    enc.kernels = "avx2"
    np.testing.assert_array_equal(enc.encode_queries(QS, batch_size=3), base)
    assert enc.calls == 14  # another identity


def test_a_caller_that_writes_into_its_vectors_does_not_change_the_memo():
    enc = HashEncoder()
    got = enc.encode_queries(QS)
    want = got.copy()
    got[:] = 0.0
    np.testing.assert_array_equal(enc.encode_queries(QS), want)
    assert enc.calls == 3


def test_no_queries_are_an_empty_matrix():
    enc = HashEncoder()
    assert enc.encode_queries([]).shape == (0, enc.dim)
