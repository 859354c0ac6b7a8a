"""ac: ragas AnswerCorrectness driven by a deterministic fake judge and a fake encoder.

The fake judge answers ragas's two prompts from their input JSON: it splits text into
sentences (statement generation) and classifies answer statements as TP when the same sentence
is in the ground truth (classification). Expected scores are computed by hand from the TP/FP/FN
counts and the embedding cosine: 0.75 * F1 + 0.25 * cos.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import zlib

import numpy as np
import pytest

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

from ltrr._errors import ConfigError, GenerationError
from ltrr.embed import Encoder
from ltrr.generation.base import Generation, Generator
from ltrr.metrics import AnswerCorrectness, parse_metric


class BagOfWordsEncoder(Encoder):
    """Deterministic hashed bag-of-words vectors (unit-normalised by the Encoder base)."""

    name = "bow"

    @property
    def dim(self) -> int:
        return 32

    @property
    def identity(self) -> str:
        return "bow32"

    def _encode(self, texts, batch_size, show_progress):
        out = np.zeros((len(texts), 32), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in re.findall(r"[a-z0-9]+", t.lower()):
                out[i, zlib.crc32(tok.encode()) % 32] += 1.0
        return out


def _sentences(text: str) -> list[str]:
    return [s.strip().rstrip(".") for s in re.split(r"(?<=\.)\s+", text.strip()) if s.strip(" .")]


def _key(s: str) -> str:
    return s.lower().strip().rstrip(".")


class ScriptedRagasJudge(Generator):
    """Answers ragas's statement and classification prompts with canned JSON.

    Failure switches, read from the prompt's input: an answer containing ``FAILGEN`` gets a
    failed Generation, ``GARBLE`` gets prose instead of JSON, and a question containing
    ``BADSCHEMA`` gets a classification that does not fit ragas's schema.
    """

    backend = "scripted"

    def __init__(self):
        self.calls: list[list[str]] = []

    @property
    def identity(self) -> str:
        return "scripted-ragas-judge"

    def generate(self, prompts, params=None):
        assert params is not None and params.json_mode
        texts = [p[-1]["content"] if isinstance(p, list) else p for p in prompts]
        self.calls.append(texts)
        return [self._answer(t) for t in texts]

    def _answer(self, prompt: str) -> Generation:
        data = json.loads(prompt.rsplit("\ninput: ", 1)[1].rsplit("\nOutput:", 1)[0])
        if "ground_truth" in data:
            if "BADSCHEMA" in data["question"]:
                return Generation(text='{"TP": "everything"}')
            truth = {_key(s) for s in data["ground_truth"]}
            given = {_key(s) for s in data["answer"]}
            tp = [s for s in data["answer"] if _key(s) in truth]
            fp = [s for s in data["answer"] if _key(s) not in truth]
            fn = [s for s in data["ground_truth"] if _key(s) not in given]
            out = {
                k: [{"statement": s, "reason": "scripted"} for s in v]
                for k, v in (("TP", tp), ("FP", fp), ("FN", fn))
            }
            return Generation(text=json.dumps(out))
        answer = data["answer"]
        if "FAILGEN" in answer:
            return Generation(text="", error="HTTP 500 from judge server")
        if "GARBLE" in answer:
            return Generation(text="Sure! The statements are: the sky is blue.")
        # Wrapped in a Markdown fence, as small local models often do.
        return Generation(
            text="```json\n" + json.dumps({"statements": _sentences(answer)}) + "\n```"
        )


def _cos(enc: Encoder, a: str, b: str) -> float:
    va, vb = enc.encode_queries([a, b])
    return float(np.dot(va, vb))


def _f1(tp: int, fp: int, fn: int) -> float:
    p = tp / (tp + fp)
    r = tp / (tp + fn)
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


@pytest.fixture
def enc():
    return BagOfWordsEncoder()


@pytest.fixture
def judge():
    return ScriptedRagasJudge()


def test_ac_reproduces_the_weighted_formula(judge, enc):
    q = ["What is the capital of France?"] * 3
    preds = [
        "Paris is the capital of France. Paris has many museums.",  # TP 1, FP 1, FN 0
        "Berlin is the capital of France.",  # TP 0, FP 1, FN 1
        "The sky is blue. Grass is green. Snow is hot.",  # TP 2, FP 1, FN 1
    ]
    refs = [
        "Paris is the capital of France.",
        "Paris is the capital of France.",
        "The sky is blue. Grass is green. Snow is cold.",
    ]
    scores = (
        AnswerCorrectness()
        .bind(judge=judge, encoder=enc)
        .score_batch(q, preds, [[r] for r in refs])
    )
    f1s = [_f1(1, 1, 0), 0.0, _f1(2, 1, 1)]
    assert f1s[0] == pytest.approx(2 / 3) and f1s[2] == pytest.approx(2 / 3)
    expected = [0.75 * f + 0.25 * _cos(enc, p, r) for f, p, r in zip(f1s, preds, refs, strict=True)]
    np.testing.assert_allclose(scores, expected, rtol=1e-6)
    # The numbers come from ragas's own prompts, not from a re-implementation.
    assert "fully understandable statements" in judge.calls[0][0]
    assert "TP (true positive)" in judge.calls[-1][0]


def test_ac_takes_the_best_alias(judge, enc):
    scorer = AnswerCorrectness().bind(judge=judge, encoder=enc)
    pred = "Paris is the capital of France."
    aliases = ["Lyon is a large city.", "Paris is the capital of France."]
    result = scorer.score_details(["Capital of France?"], [pred], [aliases])
    worse = 0.75 * 0.0 + 0.25 * _cos(enc, pred, aliases[0])
    assert result.values[0] == pytest.approx(1.0)
    assert result.values[0] > worse
    assert result.details[0]["best_alias"] == 1
    assert scorer.score("Capital of France?", pred, aliases[:1]) == pytest.approx(worse)


def test_ac_batches_judge_calls(judge, enc):
    n = 5
    q = [f"Question {i}?" for i in range(n)]
    preds = [f"Answer number {i} is right." for i in range(n)]
    refs = [[f"Answer number {i} is right."] for i in range(n)]
    scores = AnswerCorrectness().bind(judge=judge, encoder=enc).score_batch(q, preds, refs)
    np.testing.assert_allclose(scores, 1.0, rtol=1e-6)
    # Identical answer and reference prompts are asked once: one statements batch and one
    # classification batch, each with all items.
    assert [len(c) for c in judge.calls] == [n, n]


def test_ac_judge_failures_are_errors_never_scores(judge, enc):
    scorer = AnswerCorrectness().bind(judge=judge, encoder=enc)
    q = ["Q1?", "Q2?", "Q3 BADSCHEMA?", "Q4?"]
    preds = ["It is FAILGEN.", "It is GARBLE.", "It is fine.", "It is fine."]
    refs = [["It is fine."]] * 4
    result = scorer.score_details(q, preds, refs)
    assert result.n_failed == 3
    assert np.isnan(result.values[:3]).all()
    assert result.values[3] == pytest.approx(1.0)
    assert "HTTP 500" in result.errors[0]
    assert "not a JSON object" in result.errors[1] and "Sure!" in result.errors[1]
    assert "ClassificationWithReason" in result.errors[2]
    assert result.errors[3] is None
    with pytest.raises(GenerationError, match=r"could not score 3 of 4 items: item 0: .*HTTP 500"):
        scorer.score_batch(q, preds, refs)


def test_ac_one_failed_alias_fails_the_item(judge, enc):
    scorer = AnswerCorrectness().bind(judge=judge, encoder=enc)
    result = scorer.score_details(["Q?"], ["It is fine."], [["It is fine.", "FAILGEN alias."]])
    assert np.isnan(result.values[0])
    assert "HTTP 500" in result.errors[0]


def test_ac_whole_batch_failure_and_bugs(enc):
    class DownJudge(ScriptedRagasJudge):
        def generate(self, prompts, params=None):
            raise GenerationError("connection refused after 3 retries")

    class BuggyJudge(ScriptedRagasJudge):
        def generate(self, prompts, params=None):
            raise KeyError("bug in backend")

    result = (
        AnswerCorrectness()
        .bind(judge=DownJudge(), encoder=enc)
        .score_details(["Q?", "R?"], ["A.", "B."], [["A."], ["B."]])
    )
    assert result.n_failed == 2 and "connection refused" in result.errors[1]
    # Programming errors are not judge failures: they propagate.
    with pytest.raises(KeyError, match="bug in backend"):
        AnswerCorrectness().bind(judge=BuggyJudge(), encoder=enc).score_batch(
            ["Q?"], ["A."], [["A."]]
        )


def test_ac_empty_prediction_scores_zero_without_judge(judge, enc):
    scores = (
        AnswerCorrectness()
        .bind(judge=judge, encoder=enc)
        .score_batch(["Q?", "Q?"], ["", "   "], [["Paris."], ["Paris."]])
    )
    np.testing.assert_array_equal(scores, [0.0, 0.0])
    assert judge.calls == []


def test_ac_inside_a_running_event_loop(judge, enc):
    scorer = AnswerCorrectness().bind(judge=judge, encoder=enc)

    async def main():
        return scorer.score("Q?", "It is fine.", ["It is fine."])

    assert asyncio.run(main()) == pytest.approx(1.0)


def test_ac_needs_a_generator_judge(enc):
    with pytest.raises(ConfigError, match=r"needs an LLM judge: use metric.bind\(judge="):
        parse_metric("ac").bind(encoder=enc)
    with pytest.raises(ConfigError, match="judge must be an ltrr.generation.Generator, got str"):
        parse_metric("ac").bind(judge="gpt-4o", encoder=enc)
    with pytest.raises(ConfigError, match="needs an LLM judge"):
        parse_metric("ac").score("Q?", "A", ["A"])


def test_ac_text_form():
    m = parse_metric("ac(encoder=e5, max_new_tokens=256)")
    assert m == AnswerCorrectness(encoder="e5", max_new_tokens=256)
    assert str(m) == "ac(encoder=e5, max_new_tokens=256)"
    assert parse_metric(str(m)) == m and str(AnswerCorrectness()) == "ac"


@pytest.mark.slow
def test_ac_with_the_packaged_minilm(judge):
    from ltrr.embed import get_encoder

    pred, ref = (
        "Paris is the capital of France. Paris has many museums.",
        "Paris is the capital of France.",
    )
    got = AnswerCorrectness().bind(judge=judge).score("Capital?", pred, [ref])
    assert got == pytest.approx(
        0.75 * (2 / 3) + 0.25 * _cos(get_encoder("minilm"), pred, ref), rel=1e-5
    )
