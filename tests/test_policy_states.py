"""The lm representation's question states: a manual forward pass, batching, the cache, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from ltrr._errors import ConfigError
from ltrr.policy.states import question_states


def test_states_match_a_manual_forward_pass_and_are_cached(tiny, tmp_path):
    import torch

    from ltrr.generation.transformers_backend import TransformersGenerator

    gen = TransformersGenerator(tiny)
    qs = ["the capital of australia is", "what is the nile", "paris"]
    last = question_states(gen, qs, pooling="last", batch_size=2, cache_dir=tmp_path)
    mean = question_states(gen, qs, pooling="mean", batch_size=3)
    for i, q in enumerate(qs):  # one question at a time, no padding
        enc = gen.tokenizer(q, return_tensors="pt")
        with torch.no_grad():
            h = gen.hf_model(**enc, output_hidden_states=True).hidden_states[-1][0].float().numpy()
        np.testing.assert_allclose(last[i], h[-1], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(mean[i], h.mean(axis=0), rtol=1e-4, atol=1e-5)
    files = list(tmp_path.glob("states-*-last.safetensors"))
    assert len(files) == 1
    # from the cache, in another order and with a repeat; a new question is computed
    again = question_states(gen, [qs[2], qs[0], qs[2], "everest"], cache_dir=tmp_path)
    np.testing.assert_array_equal(again[:3], last[[2, 0, 2]])
    assert again.shape == (4, last.shape[1])


def test_states_bad_input(tiny):
    from ltrr.generation.base import Generator

    with pytest.raises(ConfigError, match="pooling must be one of last, mean"):
        question_states({"backend": "transformers", "model": str(tiny)}, ["x"], pooling="cls")

    class Remote(Generator):
        backend = "remote"
        identity = "remote-1"

        def generate(self, prompts, params=None):
            return []

    with pytest.raises(ConfigError, match="does not expose; use the transformers or llama_cpp backend"):
        question_states(Remote(), ["x"])


def test_an_interrupted_pass_keeps_the_states_it_made(tiny, tmp_path):
    """The states were saved only after the whole loop: an interruption lost every one."""
    from ltrr.generation.transformers_backend import TransformersGenerator

    gen = TransformersGenerator(tiny)
    real = gen.hf_model.forward
    calls = []

    def forward(*args, **kwargs):  # the second batch is interrupted
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("Ctrl-C")
        return real(*args, **kwargs)

    gen.hf_model.forward = forward
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C"):
        question_states(gen, ["a", "b", "c", "d"], batch_size=2, cache_dir=tmp_path)
    gen.hf_model.forward = real
    from safetensors.numpy import load_file

    (saved,) = tmp_path.glob("states-*-last.safetensors")
    assert len(load_file(str(saved))) == 2  # the first batch's two questions
