"""Tests of the feed-forward neural rankers (ffn-pointwise, ffn-pairwise, listnet-listwise)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from ltrr._errors import ConfigError, DataError
from ltrr.rankers.base import BaseRanker, mean_ndcg, rankers
from ltrr.rankers.checks import iter_ranker_checks
from ltrr.rankers.neural import FFNPointwiseRanker, ListNetRanker, RankNetRanker

NAMES = ["ffn-pointwise", "ffn-pairwise", "listnet-listwise"]
N_ARMS = 7
N_PRE = 3  # query-level (pre-retrieval) features
N_POST = 4  # post-retrieval features: NaN for the no-retrieval arm
POST = slice(N_ARMS + N_PRE, N_ARMS + N_PRE + N_POST)


def make_arm_data(n_queries: int = 200, seed: int = 0):
    """Synthetic routing data: 7 arms per query, the last one the no-retrieval arm.

    Features: arm one-hot, query features (same for all arms of a query), post-retrieval
    features (NaN for the no-retrieval arm). A retrieval arm's gain follows its post-retrieval
    features; the no-retrieval arm's gain follows the first query feature (easy queries are
    answered closed-book), so a model must combine the arm identity and the query features to
    know when not to retrieve.
    """
    rng = np.random.default_rng(seed)
    w = np.array([1.5, -1.0, 0.8, 0.0])
    arm_bias = np.linspace(-0.5, 0.5, N_ARMS - 1)
    qf = rng.normal(size=(n_queries, N_PRE))
    X, y, qid = [], [], []
    for q in range(n_queries):
        for a in range(N_ARMS):
            post = rng.normal(size=N_POST)
            if a == N_ARMS - 1:
                latent = 2.0 * qf[q, 0]
                post[:] = np.nan
            else:
                latent = post @ w + arm_bias[a]
            gain = 1.0 / (1.0 + np.exp(-(latent + 0.3 * rng.normal())))
            X.append(np.concatenate([np.eye(N_ARMS)[a], qf[q], post]))
            y.append(gain)
            qid.append(1000 + q)
    X, y, qid = np.array(X), np.array(y), np.array(qid)
    perm = rng.permutation(len(y))  # rows of one query are not contiguous
    return X[perm], y[perm], qid[perm]


@pytest.fixture(scope="module")
def data():
    X, y, qid = make_arm_data()
    train = qid < 1150
    return {
        "train": (X[train], y[train], qid[train]),
        "test": (X[~train], y[~train], qid[~train]),
    }


@pytest.fixture(scope="module")
def fitted(data):
    X, y, qid = data["train"]
    return {name: rankers.get(name)(random_state=0).fit(X, y, qid=qid) for name in NAMES}


def p_at_1(y, scores, qid) -> float:
    hits = []
    for q in np.unique(qid):
        ix = np.flatnonzero(qid == q)
        hits.append(y[ix[np.argmax(scores[ix])]] == y[ix].max())
    return float(np.mean(hits))


def test_registry_names():
    assert rankers.get("ffn-pointwise") is FFNPointwiseRanker
    assert rankers.get("ffn-pairwise") is RankNetRanker
    assert rankers.get("listnet-listwise") is ListNetRanker
    assert RankNetRanker.requires_qid and ListNetRanker.requires_qid
    assert not FFNPointwiseRanker.requires_qid


@pytest.mark.parametrize("name", NAMES)
def test_learns_held_out(fitted, data, name):
    X, y, qid = data["test"]
    scores = fitted[name].predict(X)
    assert scores.shape == (len(y),) and scores.dtype == np.float64
    random_ndcg = mean_ndcg(y, np.zeros(len(y)), qid, k=1)  # ties average: random expectation
    assert mean_ndcg(y, scores, qid, k=1) > random_ndcg + 0.2
    assert p_at_1(y, scores, qid) > 0.5  # random picks the best of 7 arms 1/7 of the time


@pytest.mark.parametrize("name", NAMES)
def test_picks_no_retrieval_when_best(fitted, data, name):
    """The no-retrieval arm (all post-retrieval features NaN) is chosen for the queries it wins."""
    X, y, qid = data["test"]
    scores = fitted[name].predict(X)
    wins, picked = 0, 0
    for q in np.unique(qid):
        ix = np.flatnonzero(qid == q)
        noret = ix[X[ix, N_ARMS - 1] == 1][0]
        if y[noret] == y[ix].max():
            wins += 1
            picked += ix[np.argmax(scores[ix])] == noret
    assert wins >= 5
    assert picked / wins > 0.5


@pytest.mark.parametrize("name", NAMES)
def test_learned_missing_values_train(fitted, name):
    """Only features that were NaN in training get a learned fill value; it moves from 0."""
    fill = fitted[name].missing_values_
    assert fill.shape == (N_ARMS + N_PRE + N_POST,)
    assert np.all(fill[POST] != 0.0)
    assert np.all(fill[: POST.start] == 0.0)  # never missing: no gradient, decay keeps 0
    params = dict(fitted[name].module_.named_parameters())
    assert params["missing.fill"].requires_grad


def test_missing_mean_is_fixed(data):
    X, y, qid = data["train"]
    est = RankNetRanker(missing="mean", n_epochs=3, random_state=0).fit(X, y, qid=qid)
    assert np.all(est.missing_values_ == 0.0)
    assert "missing.fill" not in dict(est.module_.named_parameters())
    assert np.isfinite(est.predict(X)).all()


def test_missing_error_rejects_nan(data):
    X, y, qid = data["train"]
    with pytest.raises(DataError, match="NaN"):
        ListNetRanker(missing="error", n_epochs=1).fit(X, y, qid=qid)


@pytest.mark.parametrize("name", NAMES)
def test_save_load_identical(fitted, data, name, tmp_path):
    est = fitted[name]
    X, _, _ = data["test"]
    est.save(tmp_path / "m")
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert files == ["ranker.json", "weights.safetensors"]
    for loader in (BaseRanker.load, type(est).load):
        back = loader(tmp_path / "m")
        assert type(back) is type(est)
        assert back.get_params() == est.get_params()
        np.testing.assert_array_equal(back.predict(X), est.predict(X))
        np.testing.assert_array_equal(back.missing_values_, est.missing_values_)
        np.testing.assert_array_equal(back.mean_, est.mean_)


@pytest.mark.parametrize("cls", [FFNPointwiseRanker, RankNetRanker, ListNetRanker])
def test_determinism(data, cls):
    X, y, qid = data["train"]
    a = cls(n_epochs=5, random_state=3).fit(X, y, qid=qid).predict(X)
    b = cls(n_epochs=5, random_state=3).fit(X, y, qid=qid).predict(X)
    c = cls(n_epochs=5, random_state=4).fit(X, y, qid=qid).predict(X)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("cls", [FFNPointwiseRanker, RankNetRanker])
def test_training_takes_no_vector_math_sqrt(data, cls, monkeypatch):
    """The optimiser's square root is the CPU's own correctly rounded one (fused AdamW), not MKL's
    vector sqrt behind ``Tensor.sqrt``, which is not correctly rounded on AMD CPUs and is on Intel
    ones: a ``Tensor.sqrt`` made one ulp off everywhere leaves the fitted scores unchanged."""
    import torch

    X, y, qid = data["train"]
    before = cls(n_epochs=3, random_state=3).fit(X, y, qid=qid).predict(X)
    sqrt = torch.Tensor.sqrt

    def one_ulp_off(self):
        out = sqrt(self)
        return torch.nextafter(out, torch.full_like(out, float("inf"))) if out.is_floating_point() else out

    monkeypatch.setattr(torch.Tensor, "sqrt", one_ulp_off)
    np.testing.assert_array_equal(cls(n_epochs=3, random_state=3).fit(X, y, qid=qid).predict(X), before)


def test_fused_adamw_takes_a_correctly_rounded_sqrt(monkeypatch):
    """Why the rankers' AdamW is fused: its step equals the single-tensor step with a correctly
    rounded ``Tensor.sqrt``, bit for bit (a torch upgrade that changed this would show here)."""
    import torch

    sqrt = torch.Tensor.sqrt
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda self: sqrt(self.double()).float())  # correctly rounded

    def steps(**kw):
        p = torch.nn.Parameter(torch.linspace(-2.0, 2.0, 4096))
        opt = torch.optim.AdamW([p], lr=1e-3, **kw)
        for i in range(5):
            p.grad = torch.randn(4096, generator=torch.Generator().manual_seed(i)) * 3
            opt.step()
        return p.detach().clone()

    assert torch.equal(steps(fused=True), steps(foreach=False))


def test_fit_leaves_global_torch_state_alone(data):
    import torch

    X, y, qid = data["train"]
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    RankNetRanker(n_epochs=1, random_state=0, n_jobs=1).fit(X, y, qid=qid)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("name", NAMES)
def test_scores_do_not_depend_on_batch(fitted, data, name):
    import torch

    X, _, _ = data["test"]
    est = fitted[name]
    one_by_one = np.concatenate([est.predict(X[i : i + 1]) for i in range(25)])
    np.testing.assert_array_equal(est.predict(X)[:25], one_by_one)
    chunked = est.module_.score_rows(torch.as_tensor(est._standardise(X)), max_elements=5000)
    np.testing.assert_array_equal(chunked.detach().numpy().astype(np.float64), est.predict(X))


def test_pickle_roundtrip(fitted, data):
    X, _, _ = data["test"]
    est = fitted["listnet-listwise"]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict(X), est.predict(X))


def test_dataframe_feature_names(data):
    import pandas as pd

    X, y, qid = data["train"]
    cols = [f"f{j}" for j in range(X.shape[1])]
    est = RankNetRanker(n_epochs=2, random_state=0).fit(pd.DataFrame(X, columns=cols), y, qid=qid)
    assert list(est.feature_names_in_) == cols
    with pytest.raises(DataError, match="feature names"):
        est.predict(pd.DataFrame(X, columns=cols[::-1]))


# ---- bad input ---------------------------------------------------------------------------
def test_nan_label(data):
    X, y, qid = data["train"]
    y = y.copy()
    y[5] = np.nan
    with pytest.raises(DataError, match="y contains NaN"):
        RankNetRanker(n_epochs=1).fit(X, y, qid=qid)


@pytest.mark.parametrize("name", NAMES)
def test_feature_count_mismatch(fitted, data, name):
    X, _, _ = data["test"]
    with pytest.raises(DataError, match=r"X has 13 features.*expecting 14"):
        fitted[name].predict(X[:, :-1])


@pytest.mark.parametrize("cls", [RankNetRanker, ListNetRanker])
def test_missing_qid(data, cls):
    X, y, _ = data["train"]
    with pytest.raises(DataError, match="qid"):
        cls(n_epochs=1).fit(X, y)


def test_pointwise_ignores_qid(data):
    X, y, qid = data["train"]
    a = FFNPointwiseRanker(n_epochs=3, random_state=0).fit(X, y).predict(X)
    b = FFNPointwiseRanker(n_epochs=3, random_state=0).fit(X, y, qid=qid).predict(X)
    np.testing.assert_array_equal(a, b)


def test_nothing_to_compare():
    X = np.arange(8, dtype=float).reshape(4, 2)
    y = np.array([1.0, 1.0, 0.5, 0.5])
    qid = np.array([0, 0, 1, 1])
    with pytest.raises(DataError, match="no pair to learn from"):
        RankNetRanker(n_epochs=1).fit(X, y, qid=qid)
    with pytest.raises(DataError, match="listwise loss needs"):
        ListNetRanker(n_epochs=1).fit(X, y, qid=np.arange(4))


def test_not_fitted(data):
    X, _, _ = data["test"]
    with pytest.raises(NotFittedError, match="This ListNetRanker instance is not fitted yet"):
        ListNetRanker().predict(X)
    with pytest.raises(NotFittedError, match="This ListNetRanker instance is not fitted yet"):
        _ = ListNetRanker().missing_values_


@pytest.mark.parametrize(
    "params, match",
    [
        ({"hidden_sizes": (8, 0)}, "'hidden_sizes' parameter of RankNetRanker must be"),
        ({"missing": "zero"}, "'missing' parameter of RankNetRanker must be"),
        ({"learning_rate": 0.0}, "'learning_rate' parameter of RankNetRanker must be"),
        ({"device": "tpu-9"}, "'device' parameter of RankNetRanker must be"),
        ({"n_jobs": 0}, "'n_jobs' parameter of RankNetRanker must be"),
    ],
)
def test_bad_params(data, params, match):
    X, y, qid = data["train"]
    with pytest.raises(ConfigError, match=match):
        RankNetRanker(**params).fit(X, y, qid=qid)


# ---- persistence errors ------------------------------------------------------------------
def _rewrite_meta(folder, edit):
    meta_file = folder / "ranker.json"
    meta = json.loads(meta_file.read_text())
    edit(meta)
    meta_file.write_text(json.dumps(meta))


def test_load_other_format(fitted, tmp_path):
    fitted["ffn-pairwise"].save(tmp_path / "m")
    _rewrite_meta(tmp_path / "m", lambda m: m["state"].update(format="ltrr-ffn/0"))
    with pytest.raises(DataError, match="expected a 'ltrr-ffn/1' model"):
        BaseRanker.load(tmp_path / "m")


def test_load_weights_of_other_feature_set(fitted, data, tmp_path):
    """Weights trained on another feature set (checksums made to match) are refused."""
    import hashlib

    X, y, qid = data["train"]
    fitted["ffn-pairwise"].save(tmp_path / "a")
    RankNetRanker(n_epochs=1, random_state=0).fit(X[:, :10], y, qid=qid).save(tmp_path / "b")
    weights = (tmp_path / "b" / "weights.safetensors").read_bytes()
    (tmp_path / "a" / "weights.safetensors").write_bytes(weights)
    digest = hashlib.sha256(weights).hexdigest()
    _rewrite_meta(tmp_path / "a", lambda m: m["files"].update({"weights.safetensors": digest}))
    with pytest.raises(DataError, match="do not fit a RankNetRanker with 14 features"):
        BaseRanker.load(tmp_path / "a")


def test_loaded_model_rejects_other_feature_set(fitted, data, tmp_path):
    fitted["listnet-listwise"].save(tmp_path / "m")
    back = BaseRanker.load(tmp_path / "m")
    X, _, _ = data["test"]
    with pytest.raises(DataError, match="X has 10 features"):
        back.predict(X[:, :10])


# ---- the shared conformance suite ------------------------------------------------------------
FAST = {"n_epochs": 30, "hidden_sizes": (16,), "random_state": 0}


@pytest.mark.parametrize(
    "check",
    [
        c
        for cls in (FFNPointwiseRanker, RankNetRanker, ListNetRanker)
        for c in iter_ranker_checks(cls(**FAST))
    ],
    ids=lambda c: f"{c.args[0].name}-{c.func.__name__}",
)
def test_conformance(check):
    check()


def test_loads_a_model_saved_before_the_torch_base():
    """A ListNet folder saved by commit 46ab1b1 (before `ltrr.rankers.torch_base`) loads with
    its parameters and scores the rows it was saved with exactly as it did then."""
    from pathlib import Path

    from ltrr.rankers.checks import make_ranking_data

    data = Path(__file__).parent / "data"
    ranker = BaseRanker.load(data / "listnet-46ab1b1")
    assert isinstance(ranker, ListNetRanker)
    assert ranker.hidden_sizes == (8, 4)  # a tuple again, as saved
    X, _, _ = make_ranking_data(n_queries=12, random_state=0)
    X[:5, 1] = np.nan
    expected = json.loads((data / "listnet-46ab1b1-predictions.json").read_text())["predictions"]
    np.testing.assert_array_equal(ranker.predict(X), np.asarray(expected))
    assert ranker.missing_values_.shape == (X.shape[1],)
