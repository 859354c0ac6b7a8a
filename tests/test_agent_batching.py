"""Batched rollouts (ltrr.agent.batching): many rollouts at once, their model turns decoded in one
batch, against the one-at-a-time path on the tiny random Llama and the forced "bigram" Llama."""

from __future__ import annotations

import pytest
from _tiny_llm import save_bigram_llm, save_tiny_llm

from ltrr._errors import ConfigError, DataError
from ltrr.agent.backends import TransformersLM, hf_continue
from ltrr.agent.batching import hf_continue_batch, rollout_many
from ltrr.agent.loop import AgentLoop
from ltrr.generation.base import DecodingParams

ARMS = [{"name": "bm25", "retriever": "bm25", "k": 3, "cost": 1.0},
        {"name": "dense", "retriever": "dense", "cost": 2.0},
        {"name": "none", "retriever": "none"}]


def search(arm, query, k):
    return [("d1", "capital Doc"), ("d2", "canberra")][: k or 2]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from ltrr.generation import TransformersGenerator

    folder = tmp_path_factory.mktemp("tiny-llama")
    save_tiny_llm(folder, seed=0)
    return TransformersLM(TransformersGenerator(folder, n_threads=1))


@pytest.fixture(scope="module")
def bigram_lm(tmp_path_factory):
    from ltrr.generation import TransformersGenerator

    folder = tmp_path_factory.mktemp("bigram-llama")
    save_bigram_llm(folder)
    return TransformersLM(TransformersGenerator(folder, n_threads=1))


def test_greedy_batch_matches_one_at_a_time_across_padding(tiny_lm):
    model, tok = tiny_lm.generator.hf_model, tiny_lm.tokenizer
    prefixes = [tiny_lm.encode(t) for t in ("the capital of australia is", "paris", "a b c d e f g h i j k")]
    params = [DecodingParams(max_new_tokens=n, stop=()) for n in (7, 3, 5)]
    batched = hf_continue_batch(model, tok, list(zip(prefixes, params, strict=True)))
    single = [hf_continue(model, tok, ids, p) for ids, p in zip(prefixes, params, strict=True)]
    assert [c.ids for c in batched] == [c.ids for c in single]  # left padding changes nothing
    assert [c.n_tokens for c in batched] == [7, 3, 5] and all(c.finish == "length" for c in batched)
    assert hf_continue_batch(model, tok, []) == []


def test_a_sampled_row_depends_on_its_seed_not_its_neighbours(tiny_lm):
    model, tok = tiny_lm.generator.hf_model, tiny_lm.tokenizer
    a, b = tiny_lm.encode("the capital of australia"), tiny_lm.encode("the largest city of chile")
    hot = dict(max_new_tokens=8, temperature=1.0, top_p=0.9)
    alone = hf_continue_batch(model, tok, [(a, DecodingParams(seed=3, **hot))])[0]
    pair = hf_continue_batch(model, tok, [(b, DecodingParams(seed=9, **hot)), (a, DecodingParams(seed=3, **hot))])
    other = hf_continue_batch(model, tok, [(a, DecodingParams(seed=4, **hot))])[0]
    assert pair[1].ids == alone.ids and other.ids != alone.ids


def test_stop_strings_and_caps_are_per_row(bigram_lm):
    # the forced model writes "<think> plan </think> <search> bm25: capital </search>" first
    prompt = bigram_lm.prompt_ids([{"role": "user", "content": "capital ?"}])
    stop = DecodingParams(max_new_tokens=16, stop=("</search>", "</answer>"))
    final = DecodingParams(max_new_tokens=16, stop=("</answer>",))
    short = DecodingParams(max_new_tokens=2, stop=("</search>",))
    got = hf_continue_batch(bigram_lm.generator.hf_model, bigram_lm.tokenizer,
                            [(prompt, stop), (prompt, final), (prompt, short)])
    want = [hf_continue(bigram_lm.generator.hf_model, bigram_lm.tokenizer, prompt, p) for p in (stop, final, short)]
    assert [c.ids for c in got] == [c.ids for c in want]
    assert got[0].text.endswith("</search>") and got[0].finish == "stop"
    assert got[2].n_tokens == 2 and got[2].finish == "length"


def test_batched_rollouts_equal_sequential_ones(bigram_lm, tiny_lm):
    questions = [("q1", "capital ?"), ("q2", "capital of what ?"), ("q3", ""), ("q4", "capital !")]
    loop = AgentLoop(bigram_lm, search, ARMS, max_new_tokens=16)
    one = loop.run(questions)
    assert loop.run(questions, batch=3) == one  # the script: search, read, answer
    assert [t.stop_reason for t in one] == ["answered", "answered", "empty_question", "answered"]
    greedy = AgentLoop(tiny_lm, search, ARMS, max_new_tokens=5)
    assert greedy.run(questions, batch=4) == greedy.run(questions)


def test_sampled_batches_are_reproducible_and_count_calls(tiny_lm):
    loop = AgentLoop(tiny_lm, search, ARMS, max_new_tokens=6, temperature=1.0)
    jobs = [(loop, "the capital of australia", f"q{i}", seed) for i, seed in enumerate([1, 2, 3, 1])]
    first = rollout_many(jobs, batch=4)
    again = rollout_many(jobs[::-1], batch=2)[::-1]  # other batch compositions, same samples
    assert first == again
    assert first[0].response_ids == first[3].response_ids and first[0].response_ids != first[1].response_ids
    assert loop.misses == 8 and loop.hits == 0  # 8 rollouts of one turn (random weights close no tag)


def test_rollout_many_bad_input(tiny_lm):
    from ltrr.agent.backends import Continuation, ContinuationLM

    loop = AgentLoop(tiny_lm, search, ARMS, max_new_tokens=4)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="rollout batch must be an integer >= 1"):
            rollout_many([(loop, "q", "q1", None)], batch=bad)

    class NoBatch(ContinuationLM):
        backend, identity, token_level = "x", "x", False

        def render(self, messages):
            return "Q"

        def count_tokens(self, text):
            return len(text.split())

        def continue_(self, ids, text, params):
            return Continuation("<answer>a</answer>", [], 1, "stop")

    plain = AgentLoop(NoBatch(), search, ARMS)
    with pytest.raises(ConfigError, match="cannot decode in batches"):
        rollout_many([(plain, "q", "q1", None), (plain, "r", "q2", None)], batch=2)
    assert [t.answer for t in rollout_many([(plain, "q", "q1", None), (plain, "r", "q2", None)])] == ["a", "a"]
    with pytest.raises(ConfigError, match="share one model"):
        rollout_many([(plain, "q", "q1", None), (loop, "r", "q2", None)], batch=2)
    with pytest.raises(DataError, match="question must be a string"):  # a rollout's error reaches the caller
        rollout_many([(loop, "q", "q1", None), (loop, 3, "q2", None)], batch=2)


def test_a_failed_model_call_is_an_error_continuation_then_an_error(tiny_lm):
    from ltrr._errors import GenerationError
    from ltrr.agent.batching import raise_on_model_errors

    class OutOfMemory:
        training, device = False, "cpu"

        def eval(self):
            return self

        def train(self, mode=True):
            return self

        def forward(self, **kwargs):
            raise RuntimeError("CUDA out of memory")

        __call__ = forward

    got = hf_continue_batch(OutOfMemory(), tiny_lm.tokenizer, [([1, 2], DecodingParams(max_new_tokens=3))] * 2)
    assert [c.finish for c in got] == ["error", "error"] and "CUDA out of memory" in got[0].error
    loop = AgentLoop(tiny_lm, search, ARMS, max_new_tokens=3)
    good = loop.run([("q1", "the capital")])
    raise_on_model_errors(good, "eval")  # nothing failed: no error
    tiny_lm_broken = AgentLoop(tiny_lm, search, ARMS, max_new_tokens=3)
    tiny_lm_broken._continue_fn = lambda ids, text, params: got[0]
    bad = good + [tiny_lm_broken.rollout("the capital", qid="q2")]
    assert bad[1].stop_reason == "error"
    with pytest.raises(GenerationError, match=r"GRPO step 3: 1 of 2 rollouts failed .*CUDA out of memory"):
        raise_on_model_errors(bad, "GRPO step 3")


def test_grpo_rollouts_stop_on_a_failed_model_call(tmp_path, monkeypatch):
    """An out-of-memory turn must not be scored -1 and trained on: the step raises (and the
    run resumes from its checkpoint)."""
    from types import SimpleNamespace

    from ltrr._errors import GenerationError
    from ltrr.agent import backends
    from ltrr.agent.backends import Continuation
    from ltrr.agent.grpo import LiveLM, RouterRollouts
    from ltrr.agent.rewards import CostNormaliser
    from ltrr.generation import TransformersGenerator

    folder = tmp_path / "bigram"
    save_bigram_llm(folder)
    policy = TransformersLM(TransformersGenerator(str(folder), n_threads=1))
    live = LiveLM(policy, policy.generator.hf_model)
    loop = AgentLoop(live, search, ARMS, k=1, max_turns=2, max_new_tokens=12, temperature=1.0)
    roll = RouterRollouts(lambda qid: loop, {"capital ?": "q1"}, {"q1": ["canberra"]}, {"bm25": 1.0},
                          CostNormaliser(window=8), 2)
    monkeypatch.setattr(backends, "hf_continue", lambda *a, **k: Continuation(text="", finish="error",
                                                                          error="OutOfMemoryError: CUDA"))
    trainer = SimpleNamespace(model=policy.generator.hf_model, state=SimpleNamespace(global_step=0),
                              accelerator=SimpleNamespace(unwrap_model=lambda m: m))
    with pytest.raises(GenerationError, match="GRPO step 1: 2 of 2 rollouts failed"):
        roll(["capital ?"] * 2, trainer)
