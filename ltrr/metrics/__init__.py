"""Utility metrics: named value objects scored on (question, prediction, reference aliases).

Registered names: ``em``, ``f1``, ``recall``, ``contains`` (SQuAD-normalised lexical), ``semsim``
(embedding cosine), ``bem`` (BERT answer equivalence), ``ac`` (ragas AnswerCorrectness with an
LLM judge), ``aqs`` (LLM-judged answer quality, 1-5). See `ltrr.metrics.base` for the contract.

Heavy libraries (torch, transformers, ragas) load only when a metric is bound.
"""

from ltrr.metrics.ac import AnswerCorrectness
from ltrr.metrics.aqs import AnswerQuality
from ltrr.metrics.base import (
    Metric,
    MetricScores,
    Scorer,
    extract_json_object,
    metrics,
    parse_metric,
    parse_metrics,
    validate_inputs,
)
from ltrr.metrics.bem import BEM
from ltrr.metrics.lexical import (
    EM,
    F1,
    Contains,
    Recall,
    contains_score,
    exact_match_score,
    f1_score,
    normalize_answer,
)
from ltrr.metrics.semantic import SemSim

__all__ = [
    "Metric",
    "MetricScores",
    "Scorer",
    "metrics",
    "parse_metric",
    "parse_metrics",
    "validate_inputs",
    "extract_json_object",
    "EM",
    "F1",
    "Contains",
    "Recall",
    "SemSim",
    "BEM",
    "AnswerCorrectness",
    "AnswerQuality",
    "normalize_answer",
    "exact_match_score",
    "f1_score",
    "contains_score",
]
