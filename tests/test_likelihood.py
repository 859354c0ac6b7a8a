"""The likelihood utility: teacher-forced log-probabilities of the gold answer, cached."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.generation.base import Generation, Generator


def test_score_matches_a_manual_forward_pass(tiny):
    import torch

    from ltrr.generation.transformers_backend import TransformersGenerator

    gen = TransformersGenerator(tiny)
    prompt = [{"role": "user", "content": "the capital of australia is"}]
    out = gen.score([prompt, prompt], ["canberra", "da vinci"])
    assert [g.completion_tokens for g in out] == [1, 2]
    ids = gen.encode_ids(gen.render(prompt))
    cont = gen.tokenizer("da vinci", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = gen.hf_model(input_ids=torch.tensor([ids + cont])).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    want = [float(logp[len(ids) - 1 + j, t]) for j, t in enumerate(cont)]
    np.testing.assert_allclose(out[1].extra["token_logprobs"], want, rtol=1e-5)
    assert all(v <= 0 for v in out[0].extra["token_logprobs"])
    assert out[0].prompt_tokens == len(ids)


def test_an_alias_that_tokenises_to_nothing_is_a_clear_error(tiny):
    from ltrr.generation.transformers_backend import TransformersGenerator

    with pytest.raises(DataError, match=r"the gold answer '  ' tokenises to nothing.*remove or fix that alias"):
        TransformersGenerator(tiny).score(["the capital is"], ["  "])


def test_a_backend_without_log_probabilities_says_so():
    class Plain(Generator):
        backend, identity = "plain", "plain-1"

        def generate(self, prompts, params=None):
            return []

    with pytest.raises(ConfigError, match=r"the 'plain' generator backend returns no log-probabilities"):
        Plain().score(["q"], ["a"])


class _Scorer(Generator):
    backend = "fake-scorer"
    identity = "fake-scorer-1"

    def __init__(self):
        self.calls = 0

    def generate(self, prompts, params=None):
        return [Generation(text="x") for _ in prompts]

    def score(self, prompts, continuations):
        self.calls += len(prompts)
        return [Generation(text="", completion_tokens=len(c.split()),
                           extra={"token_logprobs": [-float(len(c))] * len(c.split())}) for c in continuations]


def test_scores_are_cached_apart_from_generations(tmp_path):
    from ltrr.generation.cache import CachedGenerator, GenerationCache

    inner = _Scorer()
    gen = CachedGenerator(inner, GenerationCache(tmp_path / "c.sqlite"))
    a = gen.score(["p", "p"], ["ab", "ab c"])
    assert inner.calls == 2 and gen.generator_calls == 2
    b = gen.score(["p", "p"], ["ab", "ab c"])
    assert inner.calls == 2 and gen.hits == 2
    assert [g.extra["token_logprobs"] for g in b] == [g.extra["token_logprobs"] for g in a]
    assert gen.generate(["p"])[0].text == "x"  # same prompt, a generation: another key
    assert gen.generator_calls == 3


def test_labels_carry_likelihood_and_its_gains():
    from ltrr.generation import load_template
    from ltrr.labels import label_queries
    from ltrr.metrics import parse_metric

    queries = pd.DataFrame({"qid": ["q1", "q2"], "question": ["who?", "where?"],
                            "answers": [["ab", "abcdef"], ["xyz"]]})
    results = pd.DataFrame({"qid": ["q1", "q2"], "arm": ["bm25", "bm25"], "rank": [1, 1],
                            "docid": ["d1", "d2"], "score": [1.0, 1.0], "text": ["t1", "t2"]})
    run = label_queries(queries, results, arms=["bm25", "none"], no_retrieval="none", generator=_Scorer(),
                        template=load_template("short_answer"), scorer=parse_metric("f1").bind(),
                        metric_name="f1", likelihood=True)
    lab = run.labels.set_index(["qid", "arm"])
    # best alias: "ab" (-2 per token) beats "abcdef" (-6)
    assert lab.loc[("q1", "bm25"), "likelihood"] == -2.0
    assert lab.loc[("q2", "none"), "likelihood"] == -3.0
    assert (lab.xs("none", level="arm")["likelihood_gain"] == 0).all()
    assert {"likelihood_gain", "likelihood_norm_gain"} <= set(run.labels.columns)


def test_openai_scores_from_echoed_prompt_logprobs():
    from _fake_openai import FakeOpenAI

    from ltrr._errors import GenerationError
    from ltrr.generation.openai_backend import OpenAIGenerator

    with FakeOpenAI() as server:
        gen = OpenAIGenerator("m", base_url=server.base_url, api_key_env=None, max_retries=0)
        out = gen.score([[{"role": "user", "content": "who painted it?"}]], ["Leonardo da Vinci"])
        # the continuation's tokens: " Leonardo" is glued to the prompt's trailing blank lines
        assert out[0].extra["token_logprobs"] == [-0.8, -0.2, -0.5]
        body = server.requests[-1]["body"]
        assert body["echo"] is True and body["logprobs"] == 0
        assert body["prompt"] == "who painted it?\n\nLeonardo da Vinci"
        server.default = "nologprobs"
        with pytest.raises(GenerationError, match="returned no prompt log-probabilities.*such as vLLM"):
            gen.score(["q"], ["a"])
        with pytest.raises(DataError, match="tokenises to nothing"):
            gen.score(["q"], [" "])
