"""BERT answer-equivalence score: ``bem`` (Bulian et al., 2022, "Tomayto, Tomahto").

BEM is a BERT-base classifier fine-tuned on the Answer Equivalence dataset: given a question, a
reference answer and a candidate answer, it predicts whether the candidate is equivalent to the
reference. The score is the softmax probability of the "equivalent" class, best over the
reference aliases.

Input format. The official example (google/answer_equivalence/bem/1 on TF Hub, with
``tensorflow_text.combine_segments((candidate, reference, question), cls_id, sep_id)``) packs::

    [CLS] candidate [SEP] reference [SEP] question [SEP]

with WordPiece tokens of each text and no other special tokens. Token type ids depend on the
checkpoint, chosen by ``segments``:

- ``"pair"`` (default): 0 for ``[CLS] candidate [SEP]``, 1 for ``reference [SEP] question
  [SEP]``. This is what the PyTorch port ``kortukov/answer-equivalence-bem`` expects (its card
  tokenises ``text="[CLS] {candidate} [SEP]"``, ``text_pair="{reference} [SEP] {question}
  [SEP]"`` with ``add_special_tokens=False``) and what any standard BERT (2 token types) accepts.
- ``"triple"``: 0 / 1 / 2 per segment, exactly as ``combine_segments`` numbers them; only for a
  converted checkpoint whose ``type_vocab_size`` is at least 3.

Sequences longer than ``max_length`` (512 in the original) are cut from the end of the candidate
first, as the official evaluation code does, then of the question, then of the reference.
Sequences in a batch are right-padded with attention masks, which gives the same logits as the
original fixed 512-token padding.

Weights. None ship with ltrr and nothing is downloaded at run time unless the Hugging Face hub
is reachable and not disabled. Point the metric at real weights with
``bem(model=/path/to/folder)``: a folder that ``transformers.AutoModelForSequenceClassification``
and ``AutoTokenizer`` load (``config.json``, ``model.safetensors``, ``vocab.txt`` /
``tokenizer.json``), e.g. a ``huggingface-cli download kortukov/answer-equivalence-bem`` copy or
a conversion of the TF Hub SavedModel to a ``BertForSequenceClassification`` with 2 labels
(index 1 = equivalent). The default ``model`` is the hub id of that port, which loads from the
local Hugging Face cache when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ltrr._errors import ConfigError
from ltrr.metrics.base import Metric, MetricScores, Scorer, _scores, register

__all__ = ["BEM", "build_bem_inputs"]

_SEGMENT_SCHEMES = ("pair", "triple")


def build_bem_inputs(
    candidate: list[int],
    reference: list[int],
    question: list[int],
    *,
    cls_id: int,
    sep_id: int,
    segments: str = "pair",
    max_length: int = 512,
) -> tuple[list[int], list[int]]:
    """Pack token ids as ``[CLS] c [SEP] r [SEP] q [SEP]``; returns (input_ids, token_type_ids).

    Examples
    --------
    >>> build_bem_inputs([5], [6, 7], [8], cls_id=1, sep_id=2)
    ([1, 5, 2, 6, 7, 2, 8, 2], [0, 0, 0, 1, 1, 1, 1, 1])
    >>> build_bem_inputs([5], [6, 7], [8], cls_id=1, sep_id=2, segments="triple")[1]
    [0, 0, 0, 1, 1, 1, 2, 2]
    """
    budget = max_length - 4  # [CLS] and three [SEP]
    parts = {"c": list(candidate), "q": list(question), "r": list(reference)}
    over = sum(map(len, parts.values())) - budget
    for key in ("c", "q", "r"):
        if over <= 0:
            break
        cut = min(over, len(parts[key]))
        parts[key] = parts[key][: len(parts[key]) - cut]
        over -= cut
    c, r, q = parts["c"], parts["r"], parts["q"]
    ids = [cls_id, *c, sep_id, *r, sep_id, *q, sep_id]
    third = 2 if segments == "triple" else 1
    types = [0] * (len(c) + 2) + [1] * (len(r) + 1) + [third] * (len(q) + 1)
    return ids, types


@lru_cache(maxsize=4)
def _load(model: str, device: str):
    """Load tokenizer and classifier once per process for each (model, device)."""
    import torch  # noqa: F401  (transformers needs it; fail here with the import error)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = Path(model).expanduser()
    looks_local = path.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1
    if looks_local and not path.is_dir():
        raise ConfigError(
            f"BEM model folder {model!r} does not exist; give bem(model=FOLDER) a local folder "
            "with a BERT sequence classifier (config.json, weights, vocab) or a Hugging Face "
            "model id available in the local cache"
        )
    ref = str(path) if looks_local else model
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref)
        clf = AutoModelForSequenceClassification.from_pretrained(ref)
    except (OSError, ValueError) as exc:
        reason = " ".join(str(exc).split()).rstrip(".")
        raise ConfigError(
            f"could not load the BEM model {model!r} ({reason}); without hub access, download "
            "or convert the weights to a local folder (e.g. kortukov/answer-equivalence-bem) "
            "and use bem(model=/path/to/folder)"
        ) from exc
    clf.to(device)
    clf.eval()
    return tokenizer, clf


class _BEMScorer(Scorer):
    metric: BEM

    def __init__(self, metric: BEM, tokenizer, model, device: str, batch_size: int = 32):
        super().__init__(metric)
        self.tokenizer = tokenizer
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.cls_id = tokenizer.cls_token_id
        self.sep_id = tokenizer.sep_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        if self.cls_id is None or self.sep_id is None:
            raise ConfigError(
                f"BEM model {metric.model!r}: its tokenizer has no [CLS]/[SEP] tokens; BEM needs "
                "a BERT WordPiece tokenizer"
            )
        cfg = model.config
        n_labels = int(getattr(cfg, "num_labels", 0))
        if not 0 <= metric.label_index < n_labels:
            raise ConfigError(
                f"bem: label_index={metric.label_index} but the model has {n_labels} labels"
            )
        if metric.segments == "triple" and getattr(cfg, "type_vocab_size", 2) < 3:
            raise ConfigError(
                f"bem(segments=triple) needs a model with type_vocab_size >= 3, but "
                f"{metric.model!r} has {cfg.type_vocab_size}; use segments=pair"
            )
        self.max_length = min(metric.max_length, int(getattr(cfg, "max_position_embeddings", 512)))

    def _ids(self, texts: list[str]) -> dict[str, list[int]]:
        unique = list(dict.fromkeys(texts))
        enc = self.tokenizer(unique, add_special_tokens=False)["input_ids"]
        return dict(zip(unique, enc, strict=True))

    def _probabilities(self, triples: list[tuple[list[int], list[int], list[int]]]) -> np.ndarray:
        import torch

        out = []
        for s in range(0, len(triples), self.batch_size):
            packed = [
                build_bem_inputs(
                    c,
                    r,
                    q,
                    cls_id=self.cls_id,
                    sep_id=self.sep_id,
                    segments=self.metric.segments,
                    max_length=self.max_length,
                )
                for c, r, q in triples[s : s + self.batch_size]
            ]
            width = max(len(ids) for ids, _ in packed)
            ids = torch.full((len(packed), width), self.pad_id, dtype=torch.long)
            types = torch.zeros((len(packed), width), dtype=torch.long)
            mask = torch.zeros((len(packed), width), dtype=torch.long)
            for k, (i, t) in enumerate(packed):
                ids[k, : len(i)] = torch.tensor(i)
                types[k, : len(t)] = torch.tensor(t)
                mask[k, : len(i)] = 1
            with torch.inference_mode():
                logits = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    token_type_ids=types.to(self.device),
                ).logits
            probs = torch.softmax(logits.float(), dim=-1)[:, self.metric.label_index]
            out.append(probs.cpu().numpy().astype(np.float64))
        return np.concatenate(out) if out else np.zeros(0)

    def _score(self, questions, predictions, answers) -> MetricScores:
        tok = self._ids(questions + predictions + [a for al in answers for a in al])
        triples, owner = [], []
        for i, (q, p, al) in enumerate(zip(questions, predictions, answers, strict=True)):
            for a in al:
                triples.append((tok[p], tok[a], tok[q]))
                owner.append(i)
        probs = self._probabilities(triples)
        values, details = [], []
        owner_arr = np.asarray(owner)
        for i in range(len(questions)):
            per_alias = probs[owner_arr == i]
            best = int(np.argmax(per_alias))
            values.append(float(per_alias[best]))
            details.append({"best_alias": best})
        return _scores(self.metric, values, details)


@register
@dataclass(frozen=True)
class BEM(Metric):
    """Probability that the prediction is equivalent to a reference, by a BEM classifier (``bem``).

    Parameters
    ----------
    model : str
        Local folder or Hugging Face model id of a BERT sequence classifier (see module docs).
    label_index : int
        Index of the "equivalent" class in the logits (1 for BEM).
    segments : {"pair", "triple"}
        Token type scheme (see module docs).
    max_length : int
        Maximum packed length in tokens (512 for BEM).

    Examples
    --------
    >>> from ltrr.metrics import parse_metric
    >>> m = parse_metric("bem(model=/models/bem, label_index=1)")
    >>> str(m), m.model
    ('bem(model=/models/bem)', '/models/bem')
    """

    name = "bem"

    model: str = "kortukov/answer-equivalence-bem"
    label_index: int = 1
    segments: str = "pair"
    max_length: int = 512

    def bind(self, *, judge=None, encoder=None, device=None) -> Scorer:
        if self.segments not in _SEGMENT_SCHEMES:
            raise ConfigError(
                f"bem: segments={self.segments!r}; choose one of: {', '.join(_SEGMENT_SCHEMES)}"
            )
        if self.max_length < 8:
            raise ConfigError(f"bem: max_length={self.max_length} is too small; use 512")
        device = device or "cpu"
        tokenizer, model = _load(self.model, device)
        return _BEMScorer(self, tokenizer, model, device)
