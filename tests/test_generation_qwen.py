"""The llama_cpp backend on the packaged Qwen2.5-Coder GGUFs: the larger models answer when
installed, and a seeded sample of the committed demo-qwen generations and likelihoods regenerates
bit for bit (issue 25). Apart from `test_generation_llamacpp.py` (SmolLM2) so that the parallel
suite can run these slow model loads on another worker.
"""

from __future__ import annotations

import importlib.util

import pytest

from ltrr.generation import DecodingParams
from ltrr.generation.models import packaged_models

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="llama-cpp-python is built by `make env` (the llamacpp extra)")

RAG = [{"role": "user", "content": "Document 1: Canberra is the capital city of Australia.\n\n"
                                   "Using the documents above, answer the question in a few words.\n"
                                   "Question: What is the capital of Australia?"}]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_the_larger_packaged_models_answer_when_installed(name):
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    model = packaged_models.get(name)
    if importlib.util.find_spec(model.packages[0][2]) is None:
        pytest.skip(f"{name} is not installed ({model.pip_command()})")
    gen = LlamaCppGenerator(name, n_ctx=1024, n_threads=1)
    out = gen.generate([RAG], DecodingParams(max_new_tokens=16))[0]
    assert out.ok and "Canberra" in out.text
    assert gen.identity.split(":")[2] == model.sha256[:16]


# ------------------------------------------------------------------ the committed generations


@pytest.mark.slow
def test_a_sample_of_the_committed_generations_regenerates_identically(tmp_path):
    """Three generations and three likelihoods of the committed demo-qwen checkpoint (a seeded
    pick among its design-sample rows; `data/checkpoints/demo-qwen-regeneration-sample.jsonl`
    holds their prompts and cache keys) made again with the backend: the same text and the
    same log-probabilities, bit for bit."""
    import json
    from pathlib import Path

    from ltrr.generation.cache import SCORE_PARAMS, GenerationCache, cache_key
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    root = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
    model = packaged_models.get("qwen2.5-coder-0.5b")
    if importlib.util.find_spec(model.packages[0][2]) is None:
        pytest.skip(f"the generations were made by qwen2.5-coder-0.5b, not installed ({model.pip_command()})")
    gen = LlamaCppGenerator("qwen2.5-coder-0.5b", n_ctx=2048, n_threads=1)  # outputs do not depend on threads
    sample = [json.loads(line) for line in (root / "demo-qwen-regeneration-sample.jsonl").read_text().splitlines()]
    # a copy: opening a cache sets WAL mode, which would rewrite the tracked checkpoint file
    copy = tmp_path / "checkpoint.sqlite"
    copy.write_bytes((root / "demo-qwen-generations.sqlite").read_bytes())
    stored = GenerationCache(copy).get_many([r["key"] for r in sample])
    assert len(stored) == len(sample) == 6 and {r["kind"] for r in sample} == {"gen", "score"}
    for r in sample:
        if r["kind"] == "gen":
            params = DecodingParams(**{**r["params"], "stop": tuple(r["params"]["stop"])})
            assert cache_key(gen.backend, gen.identity, params, r["prompt"]) == r["key"]
            assert gen.generate([r["prompt"]], params)[0].text == stored[r["key"]].text
        else:
            request = {"likelihood_of": r["continuation"], "prompt": r["prompt"]}
            assert cache_key(gen.backend, gen.identity, SCORE_PARAMS, request) == r["key"]
            got = gen.score([r["prompt"]], [r["continuation"]])[0].extra["token_logprobs"]
            assert got == stored[r["key"]].extra["token_logprobs"]
