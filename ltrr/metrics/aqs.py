"""LLM-judged answer quality score from 1 to 5: ``aqs``.

The judge (any `ltrr.generation.Generator`, called in JSON mode) sees the question and the
answer, not the references, and must reply with one JSON object
``{"score": <integer 1-5>, "justification": "<text>"}``. The reference aliases are validated
like every metric's but not shown to the judge: AQS rates the answer as a reader would.

Failures. A failed generation, a reply with no JSON object, a missing ``score`` or
``justification``, a score that is not an integer (``4.0`` counts as 4; ``"4"`` and ``4.5`` do
not) or is outside 1-5: the item fails. ``score_details`` returns NaN for it with the error
(including an excerpt of the raw reply), so the labelling pipeline can count failures;
``score_batch``/``score`` raise `GenerationError`. A failure is never turned into a score.

An empty prediction scores the minimum (1, or 0 normalised) without a judge call, as the rubric
gives an empty answer 1.

``aqs(normalize=true)`` maps the score to [0, 1] as (s - 1) / 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ltrr._errors import GenerationError
from ltrr.metrics.base import Metric, MetricScores, Scorer, _excerpt, extract_json_object, register

__all__ = ["AnswerQuality", "AQS_SYSTEM_PROMPT", "build_aqs_messages", "parse_aqs_reply"]

AQS_SYSTEM_PROMPT = """You grade answers to questions. Rate the answer on a 1 to 5 scale:
5 = correct, complete and directly answers the question;
4 = correct, with a minor omission or unneeded extra text;
3 = partly correct, vague, or hedged between correct and incorrect options;
2 = incorrect but on topic;
1 = wrong, off topic, empty, or a refusal to answer.
Reply with one JSON object and nothing else:
{"score": <integer from 1 to 5>, "justification": "<one sentence>"}"""


def build_aqs_messages(question: str, answer: str) -> list[dict[str, str]]:
    """The chat messages sent to the judge for one (question, answer)."""
    return [
        {"role": "system", "content": AQS_SYSTEM_PROMPT},
        {"role": "user", "content": f"Question: {question}\nAnswer: {answer}"},
    ]


def parse_aqs_reply(text: str) -> tuple[int, str]:
    """Return (score, justification) from a judge reply; raise `GenerationError` if invalid.

    Examples
    --------
    >>> parse_aqs_reply('{"score": 4, "justification": "Right, but terse."}')
    (4, 'Right, but terse.')
    """
    obj = extract_json_object(text)
    if "score" not in obj:
        raise GenerationError(f"judge reply has no 'score' key: {_excerpt(text)}")
    if "justification" not in obj:
        raise GenerationError(f"judge reply has no 'justification' key: {_excerpt(text)}")
    s = obj["score"]
    if isinstance(s, bool) or not (isinstance(s, int) or (isinstance(s, float) and s.is_integer())):
        raise GenerationError(f"judge score {s!r} is not an integer: {_excerpt(text)}")
    s = int(s)
    if not 1 <= s <= 5:
        raise GenerationError(f"judge score {s} is outside 1-5: {_excerpt(text)}")
    justification = obj["justification"]
    if not isinstance(justification, str):
        raise GenerationError(f"judge justification is not a string: {_excerpt(text)}")
    return s, justification


class _AQSScorer(Scorer):
    metric: AnswerQuality

    def __init__(self, metric: AnswerQuality, judge):
        from ltrr.generation.base import DecodingParams

        super().__init__(metric)
        self.judge = judge
        self.params = DecodingParams(max_new_tokens=metric.max_new_tokens, json_mode=True)

    def _value(self, s: int) -> float:
        return (s - 1) / 4 if self.metric.normalize else float(s)

    def _score(self, questions, predictions, answers) -> MetricScores:
        n = len(questions)
        values = np.full(n, np.nan, dtype=np.float64)
        errors: list[str | None] = [None] * n
        details: list[dict[str, Any]] = [{} for _ in range(n)]
        # One judge call per distinct (question, answer); empty answers need none.
        keys: dict[tuple[str, str], list[int]] = {}
        for i, (q, p) in enumerate(zip(questions, predictions, strict=True)):
            if p.strip():
                keys.setdefault((q, p), []).append(i)
            else:
                values[i] = self._value(1)
                details[i] = {"empty_prediction": True}
        if not keys:
            return MetricScores(self.metric, values, errors, details)
        pairs = list(keys)
        try:
            gens = self.judge.generate([build_aqs_messages(q, p) for q, p in pairs], self.params)
            if len(gens) != len(pairs):
                raise GenerationError(
                    f"judge {self.judge.identity} returned {len(gens)} generations for "
                    f"{len(pairs)} prompts"
                )
        except GenerationError as exc:
            for items in keys.values():
                for i in items:
                    errors[i] = f"judge call failed: {exc}"
            return MetricScores(self.metric, values, errors, details)
        for pair, gen in zip(pairs, gens, strict=True):
            try:
                if gen.error is not None:
                    raise GenerationError(f"judge call failed: {gen.error}")
                s, why = parse_aqs_reply(gen.text)
            except GenerationError as exc:
                for i in keys[pair]:
                    errors[i] = str(exc)
                continue
            for i in keys[pair]:
                values[i] = self._value(s)
                details[i] = {"raw_score": s, "justification": why}
        return MetricScores(self.metric, values, errors, details)


@register
@dataclass(frozen=True)
class AnswerQuality(Metric):
    """LLM-judged answer quality, 1-5 (``aqs``), or [0, 1] with ``normalize=true``.

    Parameters
    ----------
    normalize : bool
        Map the 1-5 score to [0, 1] as (s - 1) / 4.
    max_new_tokens : int
        Token budget of the judge reply.

    Examples
    --------
    >>> from ltrr.metrics import parse_metric
    >>> m = parse_metric("aqs(normalize=true)")
    >>> str(m), m.value_range
    ('aqs(normalize=true)', (0.0, 1.0))
    >>> parse_metric("aqs").value_range
    (1.0, 5.0)
    """

    name = "aqs"
    needs_judge = True

    normalize: bool = False
    max_new_tokens: int = 256

    @property
    def value_range(self) -> tuple[float, float]:  # type: ignore[override]
        return (0.0, 1.0) if self.normalize else (1.0, 5.0)

    def bind(self, *, judge=None, encoder=None, device=None) -> Scorer:
        return _AQSScorer(self, self._require_judge(judge))
