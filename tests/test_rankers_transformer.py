"""Tests of the cross-encoder rankers (transformer-pointwise/-pairwise/-listwise)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.rankers.base import BaseRanker, rankers
from ltrr.rankers.transformer import (
    TransformerListwiseRanker,
    TransformerPairwiseRanker,
    TransformerPointwiseRanker,
    default_backbone,
)

NAMES = ["transformer-pointwise", "transformer-pairwise", "transformer-listwise"]
COUNTRIES = [
    ("France", "Paris"),
    ("Australia", "Canberra"),
    ("Canada", "Ottawa"),
    ("Japan", "Tokyo"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"),
    ("Peru", "Lima"),
]


def make_text_data(n_queries: int = 20, seed: int = 0):
    """~20 queries x 3 arms: a passage with the answer, a distractor, and no retrieval ("")."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_queries):
        country, capital = COUNTRIES[q % len(COUNTRIES)]
        other = COUNTRIES[(q + 3) % len(COUNTRIES)][0]
        arms = [
            (f"{capital} is the capital and largest city of {country}.", 1.0),
            (f"{other} is known for its mountains, rivers and food.", 0.0),
            ("", 0.4),
        ]
        for a, (text, gain) in enumerate(arms):
            rows.append(
                {
                    "qid": f"q{q}",
                    "query_text": f"What is the capital of {country}?",
                    "arm_text": text,
                    "retrieval_score": rng.normal() + gain if a < 2 else np.nan,
                    "y": gain,
                }
            )
    df = pd.DataFrame(rows)
    return (
        df[["query_text", "arm_text", "retrieval_score"]],
        df["y"].to_numpy(),
        df["qid"].to_numpy(),
    )


@pytest.fixture(scope="module")
def text_data():
    return make_text_data()


@pytest.fixture(scope="module")
def tiny_deberta(tmp_path_factory):
    """A DeBERTa-v2 encoder built from a config (random weights) with the MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, DebertaV2Config, DebertaV2Model

    folder = tmp_path_factory.mktemp("tiny-deberta")
    tokenizer = AutoTokenizer.from_pretrained(str(default_backbone()), local_files_only=True)
    config = DebertaV2Config(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        DebertaV2Model(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return str(folder)


def _tiny(cls, backbone, **kw):
    params = {
        "backbone": backbone,
        "max_length": 64,
        "learning_rate": 1e-3,
        "batch_size": 12,
        "random_state": 0,
    }
    params.update(kw)
    return cls(**params)


@pytest.fixture(scope="module")
def tiny_fitted(tiny_deberta, text_data):
    X, y, qid = text_data
    return {name: _tiny(rankers.get(name), tiny_deberta).fit(X, y, qid=qid) for name in NAMES}


def test_registry_names():
    assert rankers.get("transformer-pointwise") is TransformerPointwiseRanker
    assert rankers.get("transformer-pairwise") is TransformerPairwiseRanker
    assert rankers.get("transformer-listwise") is TransformerListwiseRanker


def test_tags_say_text_input():
    """sklearn's numeric estimator checks skip rankers whose X is not a 2-D numeric array."""
    from sklearn.utils import get_tags

    tags = get_tags(TransformerPairwiseRanker())
    assert tags.input_tags.two_d_array is False and tags.input_tags.string is True
    assert tags.input_tags.allow_nan is True
    assert get_tags(TransformerPairwiseRanker(missing="error")).input_tags.allow_nan is False


# ---- a user's DeBERTa folder as backbone (fast) ----------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_deberta_backbone_save_load(tiny_fitted, text_data, name, tmp_path):
    est = tiny_fitted[name]
    X, _, _ = text_data
    assert type(est.module_.encoder).__name__ == "DebertaV2Model"
    assert est.feature_columns_ == ["retrieval_score"]
    assert np.isfinite(est.loss_curve_).all() and len(est.loss_curve_) == 1
    scores = est.predict(X)
    assert scores.shape == (len(X),) and scores.dtype == np.float64
    est.save(tmp_path / "m")
    saved = {p.relative_to(tmp_path / "m").as_posix() for p in (tmp_path / "m").rglob("*")}
    assert {"ranker.json", "head.safetensors", "backbone/model.safetensors"} <= saved
    assert not [p for p in saved if p.endswith((".bin", ".pkl", ".pt", ".pickle"))]
    for loader in (BaseRanker.load, type(est).load):
        back = loader(tmp_path / "m")
        assert type(back) is type(est) and back.get_params() == est.get_params()
        np.testing.assert_array_equal(back.predict(X), scores)


def test_deterministic(tiny_deberta, text_data):
    X, y, qid = text_data
    a = _tiny(TransformerPairwiseRanker, tiny_deberta).fit(X, y, qid=qid).predict(X)
    b = _tiny(TransformerPairwiseRanker, tiny_deberta).fit(X, y, qid=qid).predict(X)
    c = _tiny(TransformerPairwiseRanker, tiny_deberta, random_state=1).fit(X, y, qid=qid)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c.predict(X))


def test_group_order_invariant(tiny_deberta, tiny_fitted, text_data):
    X, y, qid = text_data
    perm = np.random.default_rng(5).permutation(len(y))
    est = _tiny(TransformerListwiseRanker, tiny_deberta)
    est.fit(X.iloc[perm].reset_index(drop=True), y[perm], qid=qid[perm])
    np.testing.assert_allclose(
        est.predict(X), tiny_fitted["transformer-listwise"].predict(X), rtol=1e-5, atol=1e-6
    )


def test_learned_missing_value_moves(tiny_fitted):
    # retrieval_score is NaN for the no-retrieval arm, so its fill value is trained
    for name in NAMES:
        fill = tiny_fitted[name].missing_values_
        assert fill.shape == (1,) and fill[0] != 0.0


def test_empty_arm_reads_the_marker(tiny_fitted, text_data):
    """Empty, blank, None and NaN arm texts all read as the no-retrieval marker text."""
    X, _, _ = text_data
    est = tiny_fitted["transformer-pointwise"]
    rows = X[X["arm_text"] == ""].head(3).reset_index(drop=True)
    marked = rows.assign(arm_text=est.empty_arm_text)
    expected = est.predict(marked)
    for blank in ("", None, np.nan, "   "):
        np.testing.assert_array_equal(est.predict(rows.assign(arm_text=blank)), expected)
    assert not np.array_equal(est.predict(rows.assign(arm_text="Paris is in France.")), expected)


def test_text_only(tiny_deberta, text_data):
    X, y, qid = text_data
    est = _tiny(TransformerPairwiseRanker, tiny_deberta, feature_columns=None)
    est.fit(X.drop(columns="retrieval_score"), y, qid=qid)
    assert est.feature_columns_ == []
    assert est.module_.head.in_features == 32
    assert est.predict(X.drop(columns="retrieval_score")).shape == (len(X),)


def test_pointwise_without_qid(tiny_deberta, text_data):
    X, y, qid = text_data
    a = _tiny(TransformerPointwiseRanker, tiny_deberta).fit(X, y).predict(X)
    b = _tiny(TransformerPointwiseRanker, tiny_deberta).fit(X, y, qid=qid).predict(X)
    np.testing.assert_array_equal(a, b)


# ---- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("column", ["query_text", "arm_text"])
def test_missing_text_column(tiny_deberta, tiny_fitted, text_data, column):
    X, y, qid = text_data
    with pytest.raises(DataError, match=f"no '{column}' column"):
        _tiny(TransformerListwiseRanker, tiny_deberta).fit(X.drop(columns=column), y, qid=qid)
    with pytest.raises(DataError, match=f"no '{column}' column"):
        tiny_fitted["transformer-listwise"].predict(X.drop(columns=column))


def test_not_a_dataframe(tiny_deberta, text_data):
    X, y, qid = text_data
    with pytest.raises(DataError, match="must be a pandas DataFrame"):
        _tiny(TransformerPairwiseRanker, tiny_deberta).fit(X.to_numpy(), y, qid=qid)


def test_non_numeric_feature_column(tiny_deberta, text_data):
    X, y, qid = text_data
    with pytest.raises(DataError, match="column 'arm_name' has dtype"):
        _tiny(TransformerPairwiseRanker, tiny_deberta).fit(X.assign(arm_name="bm25"), y, qid=qid)


def test_predict_with_other_columns(tiny_fitted, text_data):
    X, _, _ = text_data
    with pytest.raises(DataError, match=r"missing \['retrieval_score'\], unexpected \['other'\]"):
        tiny_fitted["transformer-pairwise"].predict(X.rename(columns={"retrieval_score": "other"}))


def test_missing_query_text_value(tiny_deberta, text_data):
    X, y, qid = text_data
    X = X.copy()
    X.loc[4, "query_text"] = None
    with pytest.raises(DataError, match="'query_text' of row 4"):
        _tiny(TransformerPointwiseRanker, tiny_deberta).fit(X, y)


def test_missing_qid_and_nan_label(tiny_deberta, text_data):
    X, y, _ = text_data
    with pytest.raises(DataError, match="qid"):
        _tiny(TransformerPairwiseRanker, tiny_deberta).fit(X, y)
    y_nan = y.copy()
    y_nan[2] = np.nan
    with pytest.raises(DataError, match="y contains NaN"):
        _tiny(TransformerPointwiseRanker, tiny_deberta).fit(X, y_nan)


def test_bad_backbone(text_data, tmp_path):
    X, y, qid = text_data
    with pytest.raises(ConfigError, match="cannot load a transformer encoder"):
        TransformerPairwiseRanker(backbone=str(tmp_path)).fit(X, y, qid=qid)


def test_bad_param(tiny_deberta, text_data):
    X, y, qid = text_data
    with pytest.raises(ConfigError, match="'pooling' parameter of TransformerPairwiseRanker"):
        _tiny(TransformerPairwiseRanker, tiny_deberta, pooling="max").fit(X, y, qid=qid)


def test_load_other_format(tiny_fitted, tmp_path):
    tiny_fitted["transformer-pairwise"].save(tmp_path / "m")
    meta_file = tmp_path / "m" / "ranker.json"
    meta = json.loads(meta_file.read_text())
    meta["state"]["format"] = "ltrr-cross-encoder/0"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(DataError, match="expected a 'ltrr-cross-encoder/1' model"):
        BaseRanker.load(tmp_path / "m")


# ---- a BERT encoder, the default backbone's architecture, built from a config (fast) -----------
@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A BERT encoder (the packaged MiniLM's architecture) built from a config, random weights,
    with the MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(str(default_backbone()), local_files_only=True)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return str(folder)


@pytest.mark.parametrize("name", NAMES)
def test_bert_backbone_one_epoch_save_load(tiny_bert, text_data, name, tmp_path):
    X, y, qid = text_data
    est = _tiny(rankers.get(name), tiny_bert, n_epochs=1).fit(X, y, qid=qid)
    assert type(est.module_.encoder).__name__ == "BertModel"
    assert np.isfinite(est.loss_curve_).all() and len(est.loss_curve_) == 1
    scores = est.predict(X)
    assert scores.shape == (len(X),) and np.isfinite(scores).all()
    est.save(tmp_path / "m")
    back = BaseRanker.load(tmp_path / "m")
    assert type(back) is type(est) and type(back.module_.encoder).__name__ == "BertModel"
    np.testing.assert_array_equal(back.predict(X), scores)


# ---- the packaged MiniLM backbone: loaded and used, never trained here -------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_minilm_is_the_default_backbone_and_predicts(text_data, name, tmp_path, monkeypatch):
    """``backbone=None`` is the packaged all-MiniLM-L6-v2: a fit whose training loop is skipped
    (no optimiser step: the real model is never fine-tuned in tests) holds the packaged weights
    unchanged, predicts finite scores that differ by text, and saves and loads them."""
    import torch
    from transformers import AutoModel

    import ltrr.rankers.torch_base as torch_base

    monkeypatch.setattr(torch_base, "train_loop", lambda *a, **k: [])
    X, y, qid = text_data
    est = rankers.get(name)(max_length=64, batch_size=30, random_state=0).fit(X, y, qid=qid)
    encoder = est.module_.encoder
    assert type(encoder).__name__ == "BertModel" and est.loss_curve_ == []
    assert (encoder.config.num_hidden_layers, encoder.config.hidden_size) == (6, 384)
    want = AutoModel.from_pretrained(str(default_backbone()), local_files_only=True).state_dict()
    got = encoder.state_dict()
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    scores = est.predict(X)
    assert scores.shape == (len(X),) and np.isfinite(scores).all()
    # the marker-text arm, the answer and the distractor read differently
    assert len(np.unique(np.round(scores[:3], 6))) == 3
    est.save(tmp_path / "m")
    back = BaseRanker.load(tmp_path / "m")
    assert type(back) is type(est) and type(back.module_.encoder).__name__ == "BertModel"
    np.testing.assert_array_equal(back.predict(X), scores)
