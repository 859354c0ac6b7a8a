"""aqs: LLM-judged answer quality (1-5) with a scripted judge."""

from __future__ import annotations

import numpy as np
import pytest

from ltrr._errors import ConfigError, GenerationError
from ltrr.generation.base import Generation, Generator
from ltrr.metrics import AnswerQuality, parse_metric
from ltrr.metrics.aqs import AQS_SYSTEM_PROMPT, parse_aqs_reply


class ScriptedJudge(Generator):
    """Replies with a fixed text per answer (looked up from the user message)."""

    backend = "scripted"

    def __init__(self, replies: dict[str, Generation]):
        self.replies = replies
        self.calls: list[list] = []
        self.params = []

    @property
    def identity(self) -> str:
        return "scripted-aqs-judge"

    def generate(self, prompts, params=None):
        self.calls.append(list(prompts))
        self.params.append(params)
        out = []
        for messages in prompts:
            answer = messages[-1]["content"].split("\nAnswer: ", 1)[1]
            out.append(self.replies[answer])
        return out


def ok(text: str) -> Generation:
    return Generation(text=text)


REPLIES = {
    "Paris": ok('{"score": 5, "justification": "Correct and direct."}'),
    "Lyon": ok('```json\n{"score": 2, "justification": "Wrong city."}\n```'),
    "Maybe Paris": ok('Here you go: {"score": 3.0, "justification": "Hedged."} Thanks!'),
    "prose": ok("The answer is good, I would give it a 4."),
    "no-just": ok('{"score": 4}'),
    "no-score": ok('{"justification": "fine"}'),
    "six": ok('{"score": 6, "justification": "too good"}'),
    "zero": ok('{"score": 0, "justification": "bad"}'),
    "half": ok('{"score": 4.5, "justification": "between"}'),
    "string": ok('{"score": "4", "justification": "quoted"}'),
    "bool": ok('{"score": true, "justification": "yes"}'),
    "down": Generation(text="", error="timeout after 3 retries"),
}


def test_aqs_scores_and_details():
    judge = ScriptedJudge(REPLIES)
    scorer = AnswerQuality().bind(judge=judge)
    q = ["Capital of France?"] * 3
    result = scorer.score_details(q, ["Paris", "Lyon", "Maybe Paris"], [["Paris"]] * 3)
    np.testing.assert_array_equal(result.values, [5.0, 2.0, 3.0])
    assert result.n_failed == 0
    assert result.details[1] == {"raw_score": 2, "justification": "Wrong city."}
    # One batched call, in JSON mode, with the rubric as the system message.
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 3
    assert judge.params[0].json_mode is True
    assert judge.calls[0][0][0] == {"role": "system", "content": AQS_SYSTEM_PROMPT}
    assert judge.calls[0][0][1]["content"] == "Question: Capital of France?\nAnswer: Paris"


def test_aqs_normalize_flag():
    judge = ScriptedJudge(REPLIES)
    scores = (
        parse_metric("aqs(normalize=true)")
        .bind(judge=judge)
        .score_batch(["Q?"] * 3, ["Paris", "Lyon", "Maybe Paris"], [["Paris"]] * 3)
    )
    np.testing.assert_allclose(scores, [1.0, 0.25, 0.5])


@pytest.mark.parametrize(
    "answer, message",
    [
        ("prose", "not a JSON object: 'The answer is good, I would give it a 4.'"),
        ("no-just", "no 'justification' key"),
        ("no-score", "no 'score' key"),
        ("six", "judge score 6 is outside 1-5"),
        ("zero", "judge score 0 is outside 1-5"),
        ("half", "judge score 4.5 is not an integer"),
        ("string", "judge score '4' is not an integer"),
        ("bool", "judge score True is not an integer"),
        ("down", "judge call failed: timeout after 3 retries"),
    ],
)
def test_aqs_bad_replies_are_failures_never_scores(answer, message):
    scorer = AnswerQuality().bind(judge=ScriptedJudge(REPLIES))
    result = scorer.score_details(["Q?", "Q?"], [answer, "Paris"], [["Paris"], ["Paris"]])
    assert np.isnan(result.values[0]) and result.values[1] == 5.0
    assert result.n_failed == 1 and result.failed.tolist() == [True, False]
    assert message in result.errors[0]
    with pytest.raises(GenerationError, match="could not score 1 of 2 items: item 0"):
        scorer.score_batch(["Q?", "Q?"], [answer, "Paris"], [["Paris"], ["Paris"]])
    with pytest.raises(GenerationError, match="could not score 1 of 1"):
        scorer.score("Q?", answer, ["Paris"])


def test_aqs_whole_batch_failure():
    class Down(ScriptedJudge):
        def generate(self, prompts, params=None):
            raise GenerationError("server unreachable")

    result = AnswerQuality().bind(judge=Down({})).score_details(["Q?"] * 2, ["a", "b"], [["x"]] * 2)
    assert result.n_failed == 2 and "server unreachable" in result.errors[0]


def test_aqs_dedupes_and_skips_empty_answers():
    judge = ScriptedJudge(REPLIES)
    scorer = AnswerQuality().bind(judge=judge)
    scores = scorer.score_batch(["Q?", "Q?", "Q?"], ["Paris", "", "Paris"], [["Paris"]] * 3)
    np.testing.assert_array_equal(scores, [5.0, 1.0, 5.0])
    assert len(judge.calls[0]) == 1


def test_aqs_parse_reply_direct():
    assert parse_aqs_reply('{"score": 1, "justification": ""}') == (1, "")
    with pytest.raises(GenerationError, match="not a JSON object"):
        parse_aqs_reply("[1, 2]")


def test_aqs_needs_judge_and_text_form():
    with pytest.raises(ConfigError, match=r"metric aqs needs an LLM judge"):
        AnswerQuality().bind()
    m = parse_metric("aqs(normalize=true, max_new_tokens=128)")
    assert m == AnswerQuality(normalize=True, max_new_tokens=128)
    assert str(m) == "aqs(normalize=true, max_new_tokens=128)"
    assert parse_metric(str(m)) == m
    assert m.value_range == (0.0, 1.0) and AnswerQuality().value_range == (1.0, 5.0)
    with pytest.raises(ConfigError, match=r"normalize='maybe' is not a valid bool"):
        parse_metric("aqs(normalize=maybe)")
