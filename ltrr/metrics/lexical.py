"""Lexical answer metrics with SQuAD v1.1 normalisation: ``em``, ``f1``, ``contains``.

Normalisation follows the official SQuAD v1.1 evaluation script: lowercase, drop ASCII
punctuation, drop the articles a/an/the, collapse whitespace. Each prediction is compared with
every reference alias and the best alias counts.

- ``em``: 1 if the normalised prediction equals a normalised alias, else 0.
- ``f1``: token-level F1 between the normalised prediction and alias (bag of tokens), as in the
  official script: 0 when no token is shared (so two empty strings score 0, as in v1.1).
- ``contains``: 1 if a normalised alias occurs in the normalised prediction as a contiguous run
  of whole tokens ("paris" is in "it is paris france", not in "parisian"); an alias that
  normalises to nothing (e.g. "The") never matches.

These few lines are written here rather than taken from a package: the official script is not
packaged on PyPI, and the packages that copy it (HF ``evaluate``) fetch it from the hub at run
time, which these machines cannot do. ``tests/test_metrics_lexical.py`` checks agreement with the
official formulas.
"""

from __future__ import annotations

import re
import string
from abc import abstractmethod
from collections import Counter
from dataclasses import dataclass

from ltrr.metrics.base import Metric, MetricScores, Scorer, _scores, register

__all__ = [
    "normalize_answer",
    "exact_match_score",
    "f1_score",
    "contains_score",
    "EM",
    "F1",
    "Contains",
    "Recall",
]

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalisation: lowercase, no punctuation, no articles, single spaces.

    Examples
    --------
    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match_score(prediction: str, reference: str) -> float:
    """1.0 if both normalise to the same string, else 0.0.

    As the SQuAD v1.1 script: an empty answer matches a gold answer that normalises to nothing
    (an article alone, "A"), while token F1 scores it 0 and ``contains`` never matches such an
    alias. Gold answers that are articles or letters (multiple choice) want ``contains``."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


def _f1_tokens(pred: list[str], ref: list[str]) -> float:
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, reference: str) -> float:
    """SQuAD v1.1 token F1 of the normalised strings."""
    return _f1_tokens(normalize_answer(prediction).split(), normalize_answer(reference).split())


def _contains_tokens(pred: list[str], ref: list[str]) -> float:
    k = len(ref)
    if k == 0 or k > len(pred):
        return 0.0
    return float(any(pred[i : i + k] == ref for i in range(len(pred) - k + 1)))


def _recall_tokens(pred: list[str], ref: list[str]) -> float:
    if not ref:
        return 0.0
    return sum((Counter(pred) & Counter(ref)).values()) / len(ref)


def contains_score(prediction: str, reference: str) -> float:
    """1.0 if the normalised reference is a whole-token contiguous run of the prediction."""
    return _contains_tokens(
        normalize_answer(prediction).split(), normalize_answer(reference).split()
    )


class _LexicalScorer(Scorer):
    def __init__(self, metric: Metric, pair_fn):
        super().__init__(metric)
        self._pair_fn = pair_fn

    def _score(self, questions, predictions, answers) -> MetricScores:
        values, details = [], []
        for pred, aliases in zip(predictions, answers, strict=True):
            p = normalize_answer(pred)
            p_tokens = p.split()
            per_alias = [self._pair_fn(p, p_tokens, normalize_answer(a)) for a in aliases]
            best = max(range(len(per_alias)), key=per_alias.__getitem__)
            values.append(per_alias[best])
            details.append({"best_alias": best})
        return _scores(self.metric, values, details)


@dataclass(frozen=True)
class _Lexical(Metric):
    @staticmethod
    @abstractmethod
    def _pair(p: str, p_tokens: list[str], a: str) -> float:
        """Score one (normalised prediction, its tokens, normalised alias) pair."""

    def bind(self, *, judge=None, encoder=None, device=None) -> Scorer:
        return _LexicalScorer(self, self._pair)


@register
@dataclass(frozen=True)
class EM(_Lexical):
    """Exact match after SQuAD normalisation, best over aliases (``em``).

    Examples
    --------
    >>> EM().score("Who wrote Hamlet?", "Shakespeare.", ["William Shakespeare", "shakespeare"])
    1.0
    """

    name = "em"

    @staticmethod
    def _pair(p, p_tokens, a):
        return float(p == a)


@register
@dataclass(frozen=True)
class F1(_Lexical):
    """SQuAD token F1, best over aliases (``f1``).

    Examples
    --------
    >>> F1().score("Who wrote Hamlet?", "the poet Shakespeare", ["William Shakespeare"])
    0.5
    """

    name = "f1"

    @staticmethod
    def _pair(p, p_tokens, a):
        return _f1_tokens(p_tokens, a.split())


@register
@dataclass(frozen=True)
class Contains(_Lexical):
    """1 if a normalised alias appears as whole tokens in the normalised prediction (``contains``).

    Examples
    --------
    >>> Contains().score("Capital?", "It is Paris, France.", ["paris"])
    1.0
    >>> Contains().score("Capital?", "Parisian", ["paris"])
    0.0
    """

    name = "contains"

    @staticmethod
    def _pair(p, p_tokens, a):
        return _contains_tokens(p_tokens, a.split())


@register
@dataclass(frozen=True)
class Recall(_Lexical):
    """Token recall: the share of a normalised alias's tokens found in the prediction, best
    over aliases (``recall``). Unlike F1 it does not penalise a long, sentence-shaped answer
    that contains the gold tokens, which is how small models answer.

    Examples
    --------
    >>> Recall().score("Who?", "The painter was Leonardo da Vinci.", ["Leonardo da Vinci"])
    1.0
    >>> Recall().score("Who?", "Leonardo", ["Leonardo da Vinci"])
    0.3333333333333333
    """

    name = "recall"

    @staticmethod
    def _pair(p, p_tokens, a):
        return _recall_tokens(p_tokens, a.split())
