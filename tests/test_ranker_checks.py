"""Conformance of every registered ranker: the project suite, sklearn's checks, model selection."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

from ltrr._errors import DataError
from ltrr.rankers import (
    LambdaMARTRanker,
    RankSVMRanker,
    SVMPointwiseRanker,
    XGBoostPointwiseRanker,
    mean_ndcg,
    ndcg_scorer,
    rankers,
)
from ltrr.rankers.checks import (
    RANKER_CHECKS,
    check_determinism,
    check_feature_count_mismatch,
    check_group_order_invariance,
    check_parameter_validation,
    check_ranker,
    check_ties,
    iter_ranker_checks,
    make_ranking_data,
    sklearn_check_adapter,
)

#: hyper-parameters that keep each fit small; applied where a ranker has them
FAST = {"n_estimators": 20, "n_jobs": 1, "random_state": 0}


def reads_text(name: str) -> bool:
    """Whether the ranker reads text columns (sklearn tag ``input_tags.string``)."""
    return bool(get_tags(rankers.get(name)()).input_tags.string)


NUMERIC = [name for name in rankers.names() if not reads_text(name)]
TEXT = [name for name in rankers.names() if reads_text(name)]


def fast(name: str, backbone: str | None = None):
    cls = rankers.get(name)
    params = cls().get_params()
    chosen = {k: v for k, v in FAST.items() if k in params}
    if backbone is not None:
        chosen.update(
            backbone=backbone, max_length=32, learning_rate=1e-3, batch_size=12, n_epochs=10
        )
    return cls(**chosen)


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A 1-layer BERT built from a config (random weights) with the packaged MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from ltrr.rankers.transformer import default_backbone

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(str(default_backbone()), local_files_only=True)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return str(folder)


# ---- the project suite on every registered ranker ----------------------------------------
@pytest.mark.parametrize("check", RANKER_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "name",
    NUMERIC + [pytest.param(name, marks=pytest.mark.slow) for name in TEXT],
)
def test_ranker_conformance(name, check, request):
    # Text rankers fine-tune an encoder: they run on a tiny random one (marked slow all the same).
    backbone = request.getfixturevalue("tiny_encoder") if reads_text(name) else None
    check(fast(name, backbone))


def test_iter_ranker_checks_binds_every_check():
    ranker = fast("svmrank-pairwise")
    bound = list(iter_ranker_checks(ranker))
    assert [b.func for b in bound] == list(RANKER_CHECKS)
    assert all(b.args == (ranker,) for b in bound)
    assert check_ranker(ranker) is None


# ---- the suite catches broken rankers ----------------------------------------------------
class _RowOrderDependent(RankSVMRanker):
    def fit(self, X, y, qid=None):
        super().fit(X, y, qid=qid)
        self.coef_ = self.coef_ + 0.5 * np.asarray(X, dtype=float)[0]
        return self


class _NoFeatureCheck(RankSVMRanker):
    def predict(self, X):
        return np.asarray(X, dtype=float) @ self.coef_


class _Unseeded(SVMPointwiseRanker):
    def fit(self, X, y, qid=None):
        super().fit(X, y, qid=qid)
        self.coef_ = self.coef_ + np.random.default_rng().normal(size=self.coef_.shape)
        return self


class _RowNoise(RankSVMRanker):
    def predict(self, X):
        s = super().predict(X)
        return s + 1e-3 * np.arange(len(s))


class _Unconstrained(RankSVMRanker):
    param_constraints = {"C": RankSVMRanker.param_constraints["C"]}


@pytest.mark.parametrize(
    "broken, check, match",
    [
        (_RowOrderDependent(random_state=0), check_group_order_invariance, "scores changed"),
        (_NoFeatureCheck(random_state=0), check_feature_count_mismatch, "expected .*DataError"),
        (_Unseeded(), check_determinism, "scores differ"),
        (_RowNoise(random_state=0), check_ties, "identical rows got different scores"),
        (_Unconstrained(), check_parameter_validation, r"no param_constraints for \['loss'"),
    ],
    ids=lambda v: getattr(v, "__name__", type(v).__name__),
)
def test_checks_fail_on_broken_rankers(broken, check, match):
    with pytest.raises(AssertionError, match=rf"{check.__name__} failed.*{match}"):
        check(broken)


# ---- sklearn's estimator checks ----------------------------------------------------------
# Every numeric ranker runs them, with no expected failure. The text (cross-encoder) rankers
# are left out: their X is a DataFrame of text columns while sklearn's checks feed numeric
# arrays; the project suite above covers them. sklearn skips its array-API checks itself
# unless SCIPY_ARRAY_API=1 is set before scipy is imported (they pass with it set).
@parametrize_with_checks([sklearn_check_adapter(fast(name)) for name in NUMERIC])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_sklearn_adapter_reads_missing_qid_as_one_query():
    X, y, qid = make_ranking_data(n_queries=10, random_state=0)
    adapter = sklearn_check_adapter(fast("lambdamart-listwise"))
    assert isinstance(adapter, LambdaMARTRanker) and type(adapter) is not LambdaMARTRanker
    assert adapter.get_params() == fast("lambdamart-listwise").get_params()
    one_query = fast("lambdamart-listwise").fit(X, y, qid=np.zeros(len(y)))
    np.testing.assert_array_equal(adapter.fit(X, y).predict(X), one_query.predict(X))
    pointwise = sklearn_check_adapter(fast("xgboost-pointwise"))
    assert type(pointwise) is XGBoostPointwiseRanker


# ---- model selection with grouped folds and a per-query scorer ----------------------------
def test_grid_search_with_group_kfold_routes_qid():
    X, y, qid = make_ranking_data(n_queries=45, n_items=6, n_features=4, random_state=0)
    base = LambdaMARTRanker(n_estimators=15, min_child_samples=5, random_state=0, n_jobs=1)
    grid = {"num_leaves": [2, 7]}
    cv = GroupKFold(n_splits=3)
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(base, grid, cv=cv, scoring=ndcg_scorer(k=1), error_score="raise")
        search.fit(X, y, qid=qid, groups=qid)
    assert search.best_params_["num_leaves"] in grid["num_leaves"]
    # Recompute one cell by hand: qid must have reached fit and the scorer, fold by fold.
    want = []
    for train, test in cv.split(X, y, groups=qid):
        assert not set(qid[train]) & set(qid[test])
        est = clone(base).set_params(num_leaves=7).fit(X[train], y[train], qid=qid[train])
        want.append(mean_ndcg(y[test], est.predict(X[test]), qid[test], k=1))
    cell = search.cv_results_["params"].index({"num_leaves": 7})
    got = [search.cv_results_[f"split{i}_test_score"][cell] for i in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_ndcg_scorer_without_routing_says_how_to_fix():
    X, y, qid = make_ranking_data(n_queries=5, random_state=0)
    est = fast("svmrank-pairwise").fit(X, y, qid=qid)
    with pytest.raises(DataError, match=r"needs each row's qid: enable sklearn metadata routing"):
        ndcg_scorer(k=1)(est, X, y)
    with sklearn.config_context(enable_metadata_routing=True):
        assert ndcg_scorer(k=1)(est, X, y, qid=qid) == pytest.approx(
            mean_ndcg(y, est.predict(X), qid, k=1)
        )
