"""The Router-R1-style rollout loop (ltrr.agent.loop, .backends, .trajectory).

A scripted model (preset continuations through a real byte-level BPE tokenizer) drives every
path deterministically; real rollouts run on the tiny random Llama of ``_tiny_llm`` and on a
tiny "bigram" Llama whose weights force a search-then-answer script through transformers'
own generation; the text-level path runs against the fake OpenAI server.
"""

from __future__ import annotations

import json

import pytest
from _fake_openai import FakeOpenAI
from _tiny_llm import save_bigram_llm, save_tiny_llm

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.agent.backends import Continuation, ContinuationLM, OpenAICompletionsLM, TransformersLM
from ltrr.agent.loop import (
    FAILED_CALL,
    INFO_HEAD,
    INFO_TAIL,
    NO_PASSAGES,
    AgentLoop,
    format_information,
)
from ltrr.agent.prompt import FINAL_ANSWER_INSTRUCTION, build_messages
from ltrr.agent.reward_options import router_r1_format
from ltrr.agent.rewards import CostNormaliser, format_reward
from ltrr.agent.trajectory import (
    Search,
    Trajectory,
    load_trajectories,
    save_trajectories,
    score_trajectories,
)
from ltrr.generation.cache import GenerationCache

ARMS = [{"name": "bm25", "retriever": "bm25", "k": 3, "cost": 1.0},
        {"name": "dense", "retriever": "dense", "cost": 2.0},
        {"name": "none", "retriever": "none"}]
COSTS = {"bm25": 1.0, "dense": 2.0, "none": 0.0}
PASSAGES = [("d1", "Canberra is the capital of Australia."), ("d2", "Sydney is its largest city.")]
SEARCH = "<think>I need the capital.</think>\n<search>bm25: capital of Australia</search>"
ANSWER = "<think>Found it.</think>\n<answer>Canberra</answer>"


# ---- a scripted model over a real tokenizer ---------------------------------------------------
@pytest.fixture(scope="module")
def btok():
    """A byte-level BPE tokenizer (exact text round trip) with an end-of-sequence token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<eos>"], show_progress=False)
    tok.train_from_iterator([SEARCH + INFO_HEAD + format_information(PASSAGES) + INFO_TAIL + ANSWER] * 20,
                            trainer)
    return tok


class ScriptedLM(ContinuationLM):
    """Returns preset continuations, token by token, stopping as a real decoder does: after the
    token that completes a stop string, at ``<eos>`` or at ``max_new_tokens``."""

    backend = "scripted"
    identity = "scripted-1"

    def __init__(self, tok, replies, *, error=None):
        self.tok, self.replies, self.error = tok, list(replies), error
        self.calls: list[tuple[list[int], object]] = []
        self.returned: list[list[int]] = []
        self.eos = tok.token_to_id("<eos>")

    @property
    def context_length(self) -> int:
        return 8192

    def render(self, messages):
        return "".join(f"[{m['role']}] {m['content']}\n" for m in messages) + "[assistant] "

    def encode(self, text):
        return self.tok.encode(text).ids

    def decode(self, ids):
        return self.tok.decode(list(ids))

    def continue_(self, ids, text, params):
        self.calls.append((list(ids), params))
        if self.error:
            return Continuation(text="", finish="error", error=self.error)
        new: list[int] = []
        for i in self.encode(self.replies.pop(0) if self.replies else "<eos>"):
            if len(new) == params.max_new_tokens:
                break
            new.append(i)
            if i == self.eos or any(s in self.decode(new) for s in params.stop):
                break
        self.returned.append(new)
        out = self.decode(new)
        finish = "stop" if any(s in out for s in params.stop) else "eos" if self.eos in new else "length"
        return Continuation(out, new, len(new), finish)


class Corpus:
    """A search callable that records its calls."""

    def __init__(self, passages=PASSAGES, error=None):
        self.passages, self.error, self.calls = passages, error, []

    def __call__(self, arm, query, k):
        self.calls.append((arm, query, k))
        if self.error:
            raise self.error
        return self.passages[:k] if k else self.passages


def _info_ids(lm, passages=PASSAGES):
    return lm.encode(INFO_HEAD) + lm.encode(format_information(passages)) + lm.encode(INFO_TAIL)


# ---- the main path and the exact mask ---------------------------------------------------------
def test_search_then_answer_with_an_exact_token_mask(btok):
    lm, corpus = ScriptedLM(btok, [SEARCH, ANSWER]), Corpus()
    t = AgentLoop(lm, corpus, ARMS, k=2).rollout("What is the capital of Australia?", qid="q1")
    assert (t.answer, t.stop_reason, t.issues, t.error) == ("Canberra", "answered", [], None)
    assert corpus.calls == [("bm25", "capital of Australia", 2)]
    assert [(x.role, x.kind) for x in t.turns] == [("model", "search"), ("injected", "information"),
                                                   ("model", "answer")]
    prompt = lm.encode(lm.render(build_messages("What is the capital of Australia?", ARMS)))
    info = _info_ids(lm)
    # the trajectory is the prompt, then each segment exactly as written or injected
    assert lm.calls[0][0] == prompt
    assert lm.calls[1][0] == prompt + lm.returned[0] + info  # the model continued the stored ids
    assert t.ids == prompt + lm.returned[0] + info + lm.returned[1]
    assert t.mask == [0] * len(prompt) + [1] * len(lm.returned[0]) + [0] * len(info) + [1] * len(lm.returned[1])
    assert t.prompt_tokens == len(prompt) and t.response_ids == t.ids[len(prompt):]
    assert [seg for _, seg in t.segments()] == [lm.returned[0], info, lm.returned[1]]
    assert all(lm.decode(seg) == turn.text for turn, seg in t.segments())
    assert t.labels() == [i if m else -100 for i, m in zip(t.ids, t.mask, strict=True)]
    assert (t.model_tokens, t.injected_tokens) == (len(lm.returned[0]) + len(lm.returned[1]), len(info))
    assert t.searches == [Search("bm25", "capital of Australia", True, docids=["d1", "d2"],
                                 injected_tokens=len(info))]
    assert t.text == SEARCH + INFO_HEAD + format_information(PASSAGES) + INFO_TAIL + ANSWER
    assert format_reward(t.text, t.arms) == (0.0, [])
    params = lm.calls[0][1]
    assert (params.stop, params.temperature, params.seed, params.max_new_tokens) == (
        ("</search>", "</answer>"), 0.0, 0, 256)
    assert t.model == "scripted-1" and t.arms == ["bm25", "dense", "none"] and t.token_level


def test_no_retrieval_arm_still_answers_with_an_information_block(btok):
    lm = ScriptedLM(btok, ["<think>a</think><search>none: capital</search>", ANSWER])
    t = AgentLoop(lm, Corpus(passages=[]), ARMS).rollout("Capital?")
    assert t.turns[1].text == INFO_HEAD + NO_PASSAGES + INFO_TAIL
    assert t.searches[0].valid and t.searches[0].docids == [] and format_reward(t.text, t.arms)[0] == 0.0


# ---- bad input that must not crash --------------------------------------------------------------
def test_invalid_searches_are_recorded_and_an_unknown_arm_gets_a_none_block(btok):
    replies = ["<think>a</think><search>google: capital</search>",
               "<think>b</think><search>bm25:   </search>",
               "<think>c</think> bm25: capital</search>"]
    lm, corpus = ScriptedLM(btok, replies + [ANSWER]), Corpus()
    t = AgentLoop(lm, corpus, ARMS, max_turns=4).rollout("Capital?")
    assert corpus.calls == []
    none_block = lm.encode(INFO_HEAD) + lm.encode(FAILED_CALL) + lm.encode(INFO_TAIL)
    assert [(s.arm, s.query, s.valid, s.reason, s.injected_tokens) for s in t.searches] == [
        ("google", "capital", False, "unknown_arm", len(none_block)), ("bm25", "", False, "empty_query", 0),
        (None, "", False, "malformed_tag", 0)]
    # Router-R1 (generation.py:403-407): an unknown model gets <information>None</information>,
    # masked like any injected block; its other invalid routes get nothing (generation.py:418-423)
    assert [(x.role, x.kind) for x in t.turns] == [("model", "search"), ("injected", "information"),
                                                   ("model", "search"), ("model", "search"), ("model", "answer")]
    assert t.turns[1].text == INFO_HEAD + "None" + INFO_TAIL
    assert t.issues == ["invalid_search"] and (t.answer, t.stop_reason) == ("Canberra", "answered")
    assert t.ids == lm.calls[0][0] + lm.returned[0] + none_block + sum(lm.returned[1:], [])
    assert t.response_mask == [1] * len(lm.returned[0]) + [0] * len(none_block) + [1] * sum(map(len, lm.returned[1:]))
    assert t.information_tokens == 0 and t.cost(COSTS, token_price=1.0) == 0.0  # a failed call costs nothing
    # the None block balances its search: only the rules the calls break are left
    assert format_reward(t.text, t.arms)[1] == ["unbalanced_tags", "search_information_mismatch",
                                                "search_unknown_arm", "search_empty_query"]
    # ... the mismatch was the empty query's (no block) and the malformed tag's; the unknown arm alone:
    t = AgentLoop(ScriptedLM(btok, [replies[0], ANSWER]), Corpus(), ARMS).rollout("Capital?")
    assert format_reward(t.text, t.arms)[1] == ["search_unknown_arm"]
    assert router_r1_format(t.text, t.arms)[1] == ["search_unknown_arm"]


def test_an_arm_named_in_another_case_is_run_as_the_format_rules_accept_it(btok):
    """Router-R1 lower-cases the name when routing (route_service.py:173) and in its format check
    (main_ppo.py:76). Before, the loop needed the exact spelling while reward = "router-r1"
    accepted any case: `BM25: q` was never run, yet its format passed with no passages."""
    lm, corpus = ScriptedLM(btok, ["<think>a</think><search>BM25: capital of Australia</search>", ANSWER]), Corpus()
    t = AgentLoop(lm, corpus, ARMS, k=1).rollout("Capital?")
    assert corpus.calls == [("bm25", "capital of Australia", 1)]
    assert [(s.arm, s.valid) for s in t.searches] == [("bm25", True)] and t.cost(COSTS) == 1.0
    assert format_reward(t.text, t.arms) == (0.0, []) and router_r1_format(t.text, t.arms) == (0.0, [])
    # two arms equal ignoring case and neither written exactly: none runs, both rules say unknown
    twins = [{"name": "bm25", "retriever": "bm25"}, {"name": "BM25", "retriever": "bm25"}]
    lm, corpus = ScriptedLM(btok, ["<think>a</think><search>Bm25: capital</search>", ANSWER]), Corpus()
    t = AgentLoop(lm, corpus, twins).rollout("Capital?")
    assert corpus.calls == [] and t.searches[0].reason == "unknown_arm"
    assert "search_unknown_arm" in format_reward(t.text, t.arms)[1]
    assert "search_unknown_arm" in router_r1_format(t.text, t.arms)[1]


def test_an_observation_over_max_obs_tokens_is_truncated_and_flagged(btok):
    long = [("d1", "Canberra is the capital of Australia. " * 30)]
    lm = ScriptedLM(btok, [SEARCH, ANSWER])
    t = AgentLoop(lm, Corpus(long), ARMS, max_obs_tokens=10).rollout("Capital?")
    body = lm.encode(format_information(long))
    assert len(body) > 10
    head, tail = lm.encode(INFO_HEAD), lm.encode(INFO_TAIL)
    assert t.searches[0].truncated and t.searches[0].injected_tokens == len(head) + 10 + len(tail)
    assert t.turns[1].text == INFO_HEAD + lm.decode(body[:10]) + INFO_TAIL
    assert [seg for _, seg in t.segments()][1] == head + body[:10] + tail
    assert t.issues == ["obs_truncated"] and t.stop_reason == "answered"


def test_a_model_that_never_closes_a_tag_stops_at_the_turn_cap(btok):
    lm = ScriptedLM(btok, ["<think>" + "and so on " * 50])
    t = AgentLoop(lm, Corpus(), ARMS, max_new_tokens=12).rollout("Capital?")
    assert (t.stop_reason, t.issues, t.answer) == ("unclosed_tag", ["unclosed_tag"], None)
    assert [(x.kind, x.n_tokens) for x in t.turns] == [("length", 12)] and len(lm.calls) == 1
    eos = ScriptedLM(btok, ["<think>done</think> bye<eos>"])
    t = AgentLoop(eos, Corpus(), ARMS).rollout("Capital?")
    assert (t.stop_reason, t.turns[0].kind, t.turns[0].text) == ("unclosed_tag", "eos", "<think>done</think> bye")
    assert t.ids[-1] == eos.eos and t.mask[-1] == 1  # the end-of-sequence id is the model's


def test_max_turns_exhausted_asks_for_the_answer(btok):
    lm, corpus = ScriptedLM(btok, [SEARCH, SEARCH, ANSWER]), Corpus()
    t = AgentLoop(lm, corpus, ARMS, max_turns=2).rollout("Capital?")
    assert len(corpus.calls) == 2 and len(t.searches) == 2
    assert [x.kind for x in t.turns] == ["search", "information", "search", "information",
                                         "final_instruction", "answer"]
    assert t.turns[4].text == FINAL_ANSWER_INSTRUCTION and t.turns[4].role == "injected"
    assert lm.calls[2][1].stop == ("</search>", "</answer>")  # a search still ends the last turn
    assert (t.answer, t.stop_reason, t.issues) == ("Canberra", "max_turns", ["max_turns"])
    assert t.ids == lm.calls[2][0] + lm.returned[2]
    assert format_reward(t.text, t.arms) == (0.0, [])
    # the last turn may still end without an answer
    lm = ScriptedLM(btok, [SEARCH, "<think>" + "hmm " * 200])
    cap = len(lm.encode(SEARCH)) + 1
    t = AgentLoop(lm, Corpus(), ARMS, max_turns=1, max_new_tokens=cap).rollout("Capital?")
    assert (t.answer, t.stop_reason, t.issues) == (None, "unclosed_tag", ["max_turns", "unclosed_tag"])
    # no search at all: the instruction comes first
    lm = ScriptedLM(btok, [ANSWER])
    t = AgentLoop(lm, Corpus(), ARMS, max_turns=0).rollout("Capital?")
    assert [x.kind for x in t.turns] == ["final_instruction", "answer"] and t.stop_reason == "max_turns"


FAKE = "<information>\nDoc 1: Canberra is the capital of Australia.\n</information>"
FAKE_FINAL = f"<think>One more.</think><search>bm25: capital</search>{FAKE}<think>Found it.</think><answer>Canberra</answer>"


class LeakyLM(ScriptedLM):
    """A scripted model whose backend ignores the stop strings: each reply comes back whole."""

    def continue_(self, ids, text, params):
        self.calls.append((list(ids), params))
        new = self.encode(self.replies.pop(0) if self.replies else "<eos>")
        self.returned.append(new)
        return Continuation(self.decode(new), new, len(new), "stop")


@pytest.mark.parametrize("model", [ScriptedLM, LeakyLM])
def test_a_search_in_the_final_turn_ends_the_rollout_unanswered(btok, model):
    """Router-R1 cuts its last turn at </search> (generation.py:286-318, :63-68): a search there
    ends the rollout with no answer. The model below also writes the <information> block the search
    would get and the answer; before the fix that turn stopped only at </answer>, so the fake block
    balanced the count, the format scored 0 and the fake search cost nothing."""
    lm, corpus = model(btok, [SEARCH, FAKE_FINAL]), Corpus()
    t = AgentLoop(lm, corpus, ARMS, max_turns=1, k=2).rollout("What is the capital of Australia?", qid="q1")
    assert corpus.calls == [("bm25", "capital of Australia", 2)]  # the fake search ran nothing
    assert [(x.role, x.kind) for x in t.turns] == [("model", "search"), ("injected", "information"),
                                                   ("injected", "final_instruction"), ("model", "search")]
    last = t.turns[-1].text
    assert last.endswith("</search>") and "<information>" not in last and "<answer>" not in last
    assert [(s.arm, s.query, s.valid, s.reason, s.injected_tokens) for s in t.searches] == [
        ("bm25", "capital of Australia", True, None, t.searches[0].injected_tokens),
        ("bm25", "capital", False, "past_budget", 0)]  # recorded, nothing injected
    assert (t.answer, t.stop_reason, t.issues) == (None, "max_turns", ["max_turns", "search_past_budget"])
    assert t.text.count("<information>") == 1 and t.injected_tokens == sum(
        x.n_tokens for x in t.turns if x.role == "injected")
    # the model-written ids stop at the search: nothing past it is trainable (mask 1)
    assert t.ids == lm.calls[1][0] + lm.encode(last) and t.response_mask[-len(lm.encode(last)):] == [1] * len(
        lm.encode(last))
    assert t.cost(COSTS) == 1.0  # one search ran
    assert format_reward(t.text, t.arms) == (-1.0, ["answer_count", "search_information_mismatch", "bad_end"])
    assert router_r1_format(t.text, t.arms) == (-1.0, ["answer_count", "search_information_mismatch", "bad_end"])
    for reward in ("ltrr", "router-r1"):
        totals = score_trajectories([t], [["Canberra"]], arm_costs=COSTS, normaliser=CostNormaliser.fixed(0.0, 2.0),
                                    alpha=0.2, metric="em", reward=reward)
        assert totals == [-1.0] and t.rewards["outcome"] == 0.0


@pytest.mark.parametrize("model", [ScriptedLM, LeakyLM])
@pytest.mark.parametrize("replies", [
    # a turn that writes a block with no search at all, then answers
    [f"<think>I know it.</think>{FAKE}<think>So.</think><answer>Canberra</answer>"],
    # a block written before a real search: the real one is injected too
    [f"<think>a</think>{FAKE}<search>bm25: capital</search>", ANSWER],
    # a block written after a search it should answer, in the same turn (only a leaky backend gets that far)
    [f"<think>a</think><search>bm25: capital</search>{FAKE}<think>b</think><answer>Canberra</answer>"],
    # a block to balance each invalid call that injects nothing
    ["<think>a</think><search>bm25:   </search>", f"{FAKE}{ANSWER}"],
    ["<think>a</think><search>capital</search>", f"{FAKE}{ANSWER}"],
    ["<think>a</think><search>bm25: dense: capital</search>", f"{FAKE}{ANSWER}"],
    ["<think>a</think> bm25: capital</search>", f"{FAKE}{ANSWER}"],
])
def test_a_model_written_information_block_never_passes_the_format_rules(btok, model, replies):
    t = AgentLoop(model(btok, replies), Corpus(), ARMS, max_turns=3).rollout("Capital?")
    assert format_reward(t.text, t.arms)[0] == -1.0
    assert router_r1_format(t.text, t.arms)[0] == -1.0
    written = sum(x.text.count("<information>") for x in t.turns if x.role == "model")
    injected = sum(x.text.count("<information>") for x in t.turns if x.role == "injected")
    assert written + injected == t.text.count("<information>") and injected == sum(
        s.injected_tokens > 0 for s in t.searches)  # every injected block is a recorded search's


def test_a_backend_that_writes_past_the_closing_tag_is_cut_there(btok):
    lm = LeakyLM(btok, [SEARCH + " and then <answer>Sydney</answer>", ANSWER])
    t = AgentLoop(lm, Corpus(), ARMS).rollout("Capital?")
    assert t.turns[0].text == SEARCH and t.response_ids[: len(lm.encode(SEARCH))] == lm.encode(SEARCH)
    assert (t.answer, t.stop_reason) == ("Canberra", "answered") and format_reward(t.text, t.arms) == (0.0, [])


@pytest.mark.parametrize("question", ["", "   \n\t"])
def test_an_empty_question_is_recorded_without_a_model_call(btok, question):
    lm = ScriptedLM(btok, [ANSWER])
    t = AgentLoop(lm, Corpus(), ARMS).rollout(question, qid="blank")
    assert lm.calls == [] and t.turns == [] and t.ids == [] and t.answer is None
    assert (t.qid, t.stop_reason, t.issues) == ("blank", "empty_question", ["empty_question"])
    with pytest.raises(DataError, match="question must be a string"):
        AgentLoop(lm, Corpus(), ARMS).rollout(None)


def test_the_total_token_budget_ends_the_rollout(btok):
    lm = ScriptedLM(btok, ["<think>" + "and so on " * 50])
    prompt = len(lm.encode(lm.render(build_messages("Capital?", ARMS))))
    t = AgentLoop(lm, Corpus(), ARMS, max_total_tokens=prompt + 5).rollout("Capital?")
    assert (t.stop_reason, t.issues, t.turns[0].n_tokens) == ("token_cap", ["token_cap"], 5)
    lm = ScriptedLM(btok, [SEARCH, ANSWER])
    budget = prompt + len(lm.encode(SEARCH)) + 3  # the observation uses up the rest
    t = AgentLoop(lm, Corpus(), ARMS, max_total_tokens=budget).rollout("Capital?")
    assert t.stop_reason == "token_cap" and [x.kind for x in t.turns] == ["search", "information"]


def test_search_errors_and_backend_errors_are_recorded(btok):
    lm = ScriptedLM(btok, [SEARCH, ANSWER])
    t = AgentLoop(lm, Corpus(error=DataError("index not built")), ARMS).rollout("Capital?")
    assert t.searches[0].reason == "search_error: index not built" and not t.searches[0].valid
    assert t.issues == ["search_error"] and t.stop_reason == "answered"
    # as Router-R1's failed request (generation.py:408-411): a None block, masked, so the format
    # does not punish an infrastructure failure; the call costs nothing
    assert [(x.role, x.kind, x.text) for x in t.turns[1:2]] == [("injected", "information", INFO_HEAD + "None" + INFO_TAIL)]
    assert t.searches[0].injected_tokens == t.turns[1].n_tokens > 0 and t.response_mask.count(0) == t.turns[1].n_tokens
    assert format_reward(t.text, t.arms) == (0.0, []) and router_r1_format(t.text, t.arms) == (0.0, [])
    assert t.cost(COSTS, token_price=1.0) == 0.0
    t = AgentLoop(ScriptedLM(btok, [], error="HTTP 500"), Corpus(), ARMS).rollout("Capital?")
    assert (t.stop_reason, t.error, t.issues, t.turns) == ("error", "HTTP 500", ["error"], [])
    with pytest.raises(DataError, match="must return \\(docid, text\\) pairs"):
        AgentLoop(ScriptedLM(btok, [SEARCH]), lambda a, q, k: [1, 2], ARMS).rollout("Capital?")


def test_a_built_pool_is_searched_through_pool_search(btok, tmp_path):
    import pandas as pd

    from ltrr.retrieval.pool import Pool

    corpus = pd.DataFrame({"docid": ["au", "fr"], "title": ["Australia", "France"],
                           "text": ["Its capital is Canberra.", "Its capital is Paris."]})
    pool = Pool.from_config({"lex": {"type": "bm25"}}, [{"name": "bm25", "retriever": "lex", "k": 2},
                                                         {"name": "none", "retriever": "none"}])
    pool.build(corpus, tmp_path / "index", show_progress=False)
    lm = ScriptedLM(btok, ["<think>a</think><search>bm25: capital of France</search>",
                           "<think>b</think><search>none: x</search>", ANSWER])
    loop = AgentLoop.from_pool(lm, pool, k=1)
    t = loop.rollout("What is the capital of France?")
    assert [(s.arm, s.docids) for s in t.searches] == [("bm25", ["fr"]), ("none", [])]
    assert t.turns[1].text == INFO_HEAD + "Doc 1: France Its capital is Paris." + INFO_TAIL
    assert "- bm25: lexical retrieval" in t.prompt  # the family comes from the retriever's type
    assert t.cost(pool.costs) == 1.0


def test_settings_are_checked_when_rolling_out(btok):
    lm = ScriptedLM(btok, [])
    for kwargs, match in [({"max_turns": -1}, "max_turns must be an integer >= 0"),
                          ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
                          ({"k": 0}, "k must be an integer >= 1"),
                          ({"top_p": 0}, r"top_p must be a number in \(0, 1\], got 0"),
                          ({"temperature": -1}, "temperature must be a number >= 0, got -1")]:
        with pytest.raises(ConfigError, match=match):
            AgentLoop(lm, Corpus(), ARMS, **kwargs).rollout("q")
    with pytest.raises(ConfigError, match="unique, non-empty names"):
        AgentLoop(lm, Corpus(), ARMS + ARMS[:1]).rollout("q")
    with pytest.raises(ConfigError, match="must be a ContinuationLM"):
        AgentLoop(object(), Corpus(), ARMS).rollout("q")
    with pytest.raises(ConfigError, match=r"must not hold ':'.*\['bm25:rm3'\]"):  # 'bm25: rm3: q' could never call it
        AgentLoop(lm, Corpus(), ARMS + [{"name": "bm25:rm3", "retriever": "bm25"}]).rollout("q")


# ---- caching ----------------------------------------------------------------------------------
def test_every_continuation_is_cached(btok, tmp_path):
    cache = GenerationCache(tmp_path / "llm.sqlite")
    first = AgentLoop(ScriptedLM(btok, [SEARCH, ANSWER]), Corpus(), ARMS, cache=cache)
    t1 = first.rollout("Capital?", qid="q1")
    assert first.counters == {"hits": 0, "misses": 2} and len(cache) == 2
    replay = ScriptedLM(btok, [])  # would answer nothing: every turn must come from the cache
    again = AgentLoop(replay, Corpus(), ARMS, cache=cache)
    t2 = again.rollout("Capital?", qid="q1", seed=7)  # greedy: the seed cannot matter
    assert replay.calls == [] and again.counters == {"hits": 2, "misses": 0}
    assert all(x.cached for x in t2.turns if x.role == "model")
    assert (t2.ids, t2.mask, t2.text, t2.answer) == (t1.ids, t1.mask, t1.text, t1.answer)
    # another prefix, or sampling with another seed, misses
    other = AgentLoop(ScriptedLM(btok, [ANSWER]), Corpus(), ARMS, cache=cache)
    other.rollout("Another question?")
    sampled = AgentLoop(ScriptedLM(btok, [ANSWER]), Corpus(), ARMS, cache=cache, temperature=0.7)
    sampled.rollout("Capital?", seed=1)
    assert other.counters["misses"] == 1 and sampled.counters["misses"] == 1
    cache.close()


# ---- persistence and scoring --------------------------------------------------------------------
def _trajectories(btok):
    loop = AgentLoop(ScriptedLM(btok, [SEARCH, ANSWER, "<think>no</think>" + "x " * 200]), Corpus(), ARMS,
                     max_new_tokens=40)
    return loop.run([("q1", "Capital of Australia?"), ("q2", "Unanswerable?"), ("q3", "  ")])


def test_jsonl_round_trip(btok, tmp_path):
    trajs = _trajectories(btok)
    assert [t.stop_reason for t in trajs] == ["answered", "unclosed_tag", "empty_question"]
    score_trajectories(trajs, {"q1": ["Canberra"], "q2": ["x"], "q3": ["y"]}, arm_costs=COSTS,
                       normaliser=CostNormaliser.fixed(0.0, 2.0), alpha=0.2)
    path = save_trajectories(trajs, tmp_path / "out" / "traj.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["model_tokens"] == trajs[0].model_tokens
    assert load_trajectories(path) == trajs
    assert not list(path.parent.glob("*.tmp*"))


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: "{not json", "invalid JSON"),
        (lambda d: "[1, 2]", "must be a JSON object"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "stop_reason"}), "missing field.*stop_reason"),
        (lambda d: json.dumps({**d, "stop_reason": "bored"}), "stop_reason 'bored' is not one of"),
        (lambda d: json.dumps({**d, "mask": d["mask"][:-1]}), "ids has \\d+ tokens but mask"),
        (lambda d: json.dumps({**d, "mask": [1 - m for m in d["mask"]]}), "mask does not match the turns"),
        (lambda d: json.dumps({**d, "model_tokens": 1}), "model_tokens is 1 but the turns add up"),
        (lambda d: json.dumps({**d, "surprise": 1}), "unknown trajectory field"),
        (lambda d: json.dumps({**d, "turns": [{"role": "model"}]}), "malformed turn or search"),
        (lambda d: json.dumps({**d, "turns": [{**d["turns"][0], "kind": "think"}]}), "role/kind"),
    ],
)
def test_malformed_lines_name_the_file_and_line(btok, tmp_path, edit, match):
    good = _trajectories(btok)[0].to_dict()
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + edit(good) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"bad.jsonl:3: .*{match}"):
        load_trajectories(path)


def test_loading_a_missing_file():
    with pytest.raises(NotBuiltError, match="no trajectories file"):
        load_trajectories("/nonexistent/traj.jsonl")


def test_score_trajectories_stores_every_reward_part(btok):
    good, bad, empty = _trajectories(btok)
    norm = CostNormaliser(window=10)
    totals = score_trajectories([good, bad, empty], [["Canberra"], ["x"], ["y"]], arm_costs=COSTS,
                                normaliser=norm, alpha=0.5, token_price=0.0)
    assert list(norm.history_) == [1.0, 0.0, 0.0]  # the rolling window saw the batch first
    assert good.rewards["format"] == 0.0 and good.rewards["outcome"] == 1.0 and good.rewards["cost"] == 1.0
    assert good.rewards["total"] == pytest.approx(0.5 + 0.5 * good.rewards["cost_reward"])
    assert bad.rewards["format"] == -1.0 and "bad_end" in bad.rewards["format_reasons"]
    assert totals == [good.rewards["total"], -1.0, -1.0]
    priced = good.cost(COSTS, token_price=0.01)
    assert priced == pytest.approx(1.0 + 0.01 * good.searches[0].injected_tokens)
    with pytest.raises(DataError, match="2 gold alias lists"):
        score_trajectories([good], [["a"], ["b"]], arm_costs=COSTS, normaliser=norm)
    with pytest.raises(DataError, match="no gold answers for qid"):
        score_trajectories([good], {"zz": ["a"]}, arm_costs=COSTS, normaliser=norm)


# ---- real models ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from ltrr.generation import TransformersGenerator

    folder = tmp_path_factory.mktemp("tiny-llama")
    save_tiny_llm(folder, seed=0)
    return TransformersLM(TransformersGenerator(folder, n_threads=1))


def test_real_rollout_on_the_tiny_random_model(tiny_lm):
    import torch

    loop = AgentLoop(tiny_lm, Corpus(), ARMS, max_new_tokens=6)
    t = loop.rollout("what is the capital of australia ?", qid="q1")
    # random weights never write a tag: the turn ends at its cap (or at the end of sequence)
    assert t.stop_reason == "unclosed_tag" and len(t.turns) == 1 and 1 <= t.model_tokens <= 6
    messages = build_messages("what is the capital of australia ?", ARMS)
    prompt = tiny_lm.generator.encode_ids(tiny_lm.generator.render(messages))
    assert t.ids[: t.prompt_tokens] == prompt and t.prompt == tiny_lm.render(messages)
    with torch.inference_mode():
        out = tiny_lm.generator.hf_model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False,
                                                  pad_token_id=1)
    assert t.response_ids == out[0, len(prompt):].tolist()  # the model's own ids, not re-tokenised
    assert t.mask == [0] * len(prompt) + [1] * t.model_tokens
    assert t.turns[0].text == tiny_lm.decode(t.response_ids)


def test_same_seed_same_trajectory(tiny_lm):
    loop = AgentLoop(tiny_lm, Corpus(), ARMS, max_new_tokens=8, temperature=1.0)
    a = loop.rollout("the capital of australia", seed=3)
    b = loop.rollout("the capital of australia", seed=3)
    c = loop.rollout("the capital of australia", seed=4)
    assert a == b and a.seed == 3
    assert a.response_ids != c.response_ids
    assert AgentLoop(tiny_lm, Corpus(), ARMS, max_new_tokens=8, temperature=1.0, seed=3).rollout(
        "the capital of australia") == a


@pytest.fixture(scope="module")
def bigram_lm(tmp_path_factory):
    """`_tiny_llm.save_bigram_llm`: the real transformers generation writes a search, reads the
    injected block, then answers."""
    from ltrr.generation import TransformersGenerator

    folder = tmp_path_factory.mktemp("bigram-llama")
    save_bigram_llm(folder)
    return TransformersLM(TransformersGenerator(folder, n_threads=1))


def test_forced_real_rollout_keeps_exact_ids(bigram_lm):
    corpus = Corpus([("d1", "capital Doc"), ("d2", "canberra")])
    t = AgentLoop(bigram_lm, corpus, ARMS, max_new_tokens=16).rollout("capital ?", qid="q1")
    assert (t.answer, t.stop_reason, t.issues) == ("canberra", "answered", [])
    assert corpus.calls == [("bm25", "capital", 3)]
    assert [x.text for x in t.turns if x.role == "model"] == [
        "<think> plan </think> <search> bm25: capital </search>", "<answer> canberra </answer>"]
    segments = [seg for _, seg in t.segments()]
    enc = bigram_lm.encode
    assert segments[1] == enc(INFO_HEAD) + enc(format_information(corpus.passages)) + enc(INFO_TAIL)
    assert t.ids == t.ids[: t.prompt_tokens] + segments[0] + segments[1] + segments[2]
    assert segments[0] == enc(t.turns[0].text) and segments[2] == enc(t.turns[2].text)
    assert t.mask == [0] * t.prompt_tokens + [1] * 7 + [0] * len(segments[1]) + [1] * 3


def test_continuation_lms_are_built_from_a_generator_config(tiny_lm):
    from ltrr.agent.backends import continuation_lms, make_continuation_lm

    assert continuation_lms.names() == ["llama_cpp", "openai", "transformers"]
    lm = make_continuation_lm({"backend": "transformers", "model": str(tiny_lm.generator.weights_path),
                               "n_threads": 1})
    assert isinstance(lm, TransformersLM) and lm.identity == tiny_lm.identity
    lm = make_continuation_lm({"backend": "openai", "model": "m", "base_url": "http://localhost:1/v1"},
                              tokenizer=tiny_lm.tokenizer)
    assert isinstance(lm, OpenAICompletionsLM) and lm.tokenizer is tiny_lm.tokenizer
    with pytest.raises(ConfigError, match="uses its model's own tokenizer"):
        make_continuation_lm({"backend": "transformers", "model": str(tiny_lm.generator.weights_path)},
                             tokenizer=tiny_lm.tokenizer)
    with pytest.raises(ConfigError, match="unknown generator backend 'vllm'"):
        make_continuation_lm({"backend": "vllm"})


# ---- text level: an OpenAI-compatible /v1/completions server --------------------------------
def test_openai_completions_rollout(bigram_lm):
    from ltrr.generation import OpenAIGenerator

    script = [("text", "<think>a</think><search>bm25: capital</search> never seen"),
              ("text_vllm", "<think>b</think><answer>Canberra</answer>")]
    with FakeOpenAI(script) as fake, OpenAIGenerator("m", base_url=fake.base_url, api_key_env=None,
                                                     max_retries=0) as gen:
        lm = OpenAICompletionsLM(gen)
        t = AgentLoop(lm, Corpus(), ARMS).rollout("Capital?")
        bodies = [r["body"] for r in fake.requests]
        assert [r["path"] for r in fake.requests] == ["/v1/completions"] * 2
    assert (t.answer, t.stop_reason, t.token_level, t.ids, t.mask) == ("Canberra", "answered", False, [], [])
    assert [x.text for x in t.turns if x.role == "model"] == [
        "<think>a</think><search>bm25: capital</search>", "<think>b</think><answer>Canberra</answer>"]
    assert bodies[0]["prompt"] == t.prompt == lm.render(build_messages("Capital?", ARMS))
    assert bodies[1]["prompt"] == t.prompt + t.turns[0].text + t.turns[1].text
    assert bodies[0]["stop"] == ["</search>", "</answer>"] and bodies[0]["temperature"] == 0.0
    assert t.turns[0].n_tokens == 2  # the server's usage (words, in the fake)
    assert format_reward(t.text, t.arms) == (0.0, [])
    back = Trajectory.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t
    # with the served model's tokenizer: its chat template, and counts and cuts in its tokens
    with FakeOpenAI([("text", "<think>a</think><search>bm25: capital</search>"),
                     ("text", "<think>done</think> I give up", "stop")]) as fake, \
            OpenAIGenerator("m", base_url=fake.base_url, api_key_env=None, max_retries=0) as gen:
        lm = OpenAICompletionsLM(gen, tokenizer=bigram_lm.tokenizer)
        t = AgentLoop(lm, Corpus([("d1", "capital " * 50)]), ARMS, max_obs_tokens=4).rollout("capital ?")
    assert t.prompt.endswith("<s> assistant : ")
    assert t.turns[1].text == INFO_HEAD + "Doc 1: capital capital" + INFO_TAIL and t.searches[0].truncated
    assert t.turns[1].n_tokens == 6
    assert (t.stop_reason, t.turns[2].kind) == ("unclosed_tag", "eos")


def test_openai_completions_failure_is_recorded():
    from ltrr.generation import OpenAIGenerator

    with OpenAIGenerator("m", base_url="http://127.0.0.1:9/v1", api_key_env=None, max_retries=0,
                         timeout=2) as gen:
        t = AgentLoop(OpenAICompletionsLM(gen), Corpus(), ARMS).rollout("Capital?")
    assert t.stop_reason == "error" and "connection error" in t.error
    with pytest.raises(ConfigError, match="needs an OpenAIGenerator"):
        OpenAICompletionsLM("http://localhost")
    # without a local tokenizer, tokens are estimated (1.3 a word) and passages cut by words
    lm = OpenAICompletionsLM(gen)
    assert lm.count_tokens("one two three four five six") == 7
    assert lm.truncate("one two three four five six", 4) == ("one two three", True)
    assert lm.truncate("one two", 4) == ("one two", False)
