"""Embedding similarity between the prediction and the reference aliases: ``semsim``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ltrr.metrics.base import Metric, MetricScores, Scorer, _scores, register

__all__ = ["SemSim", "encode_unique"]


def encode_unique(encoder, texts: list[str]) -> dict[str, np.ndarray]:
    """Encode each distinct text once; returns text -> unit vector.

    Both sides are symmetric short answers, so both go through ``encode_queries`` (E5's
    recommended prefix for symmetric similarity; MiniLM has no prefix).
    """
    unique = list(dict.fromkeys(texts))
    vectors = encoder.encode_queries(unique) if unique else np.zeros((0, 1), np.float32)
    return dict(zip(unique, vectors, strict=True))


class _SemSimScorer(Scorer):
    def __init__(self, metric: SemSim, encoder):
        super().__init__(metric)
        self.encoder = encoder

    def _score(self, questions, predictions, answers) -> MetricScores:
        non_empty = [p for p in predictions if p.strip()]
        aliases = [a for al in answers for a in al]
        vec = encode_unique(self.encoder, non_empty + aliases)
        values: list[float] = []
        details: list[dict[str, Any]] = []
        for pred, al in zip(predictions, answers, strict=True):
            if not pred.strip():
                # An empty answer says nothing; its embedding would still be close to short
                # references, so it is scored 0 rather than by cosine.
                values.append(0.0)
                details.append({"empty_prediction": True})
                continue
            # float64 and clipped: a float32 dot of a unit vector with itself can pass 1 by an ulp
            sims = [float(np.clip(np.dot(np.asarray(vec[pred], np.float64), np.asarray(vec[a], np.float64)), -1.0, 1.0))
                    for a in al]
            best = int(np.argmax(sims))
            values.append(sims[best])
            details.append({"best_alias": best})
        return _scores(self.metric, values, details)


@register
@dataclass(frozen=True)
class SemSim(Metric):
    """Cosine similarity of prediction and reference embeddings, best over aliases (``semsim``).

    Scores lie in [-1, 1] (in practice [0, 1] for sentence encoders); an empty prediction
    scores 0.

    Parameters
    ----------
    encoder : str
        An `ltrr.embed` encoder name (``minilm``, ``e5``) or a local sentence-transformers
        folder; loaded once per process through `ltrr.embed.get_encoder`.

    Examples
    --------
    >>> from ltrr.metrics import parse_metric
    >>> m = parse_metric("semsim")
    >>> str(m), m.encoder
    ('semsim', 'minilm')
    """

    name = "semsim"
    value_range = (-1.0, 1.0)

    encoder: str = "minilm"

    def bind(self, *, judge=None, encoder=None, device=None) -> Scorer:
        if encoder is None:
            from ltrr.embed import get_encoder

            encoder = get_encoder(self.encoder)
        return _SemSimScorer(self, encoder)
