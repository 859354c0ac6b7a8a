"""The classic rankers: XGBoost (pointwise/pairwise/listwise), LightGBM LambdaMART, linear SVMs."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pytest

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.rankers import (
    BaseRanker,
    LambdaMARTRanker,
    RankSVMRanker,
    SVMPointwiseRanker,
    XGBoostListwiseRanker,
    XGBoostPairwiseRanker,
    XGBoostPointwiseRanker,
    mean_ndcg,
    rankers,
)
from ltrr.rankers._validation import (
    canonical_order,
    preference_pairs,
    to_grades,
)
from ltrr.rankers.checks import make_ranking_data
from ltrr.rankers.params import RankerParameterError

CLASSIC = {
    "xgboost-pointwise": XGBoostPointwiseRanker,
    "xgboost-pairwise": XGBoostPairwiseRanker,
    "xgboost-listwise": XGBoostListwiseRanker,
    "lambdamart-listwise": LambdaMARTRanker,
    "svm-pointwise": SVMPointwiseRanker,
    "svmrank-pairwise": RankSVMRanker,
}
GBDT = ["xgboost-pointwise", "xgboost-pairwise", "xgboost-listwise", "lambdamart-listwise"]
LINEAR = ["svm-pointwise", "svmrank-pairwise"]


def make(name: str, **params):
    cls = rankers.get(name)
    defaults = {"random_state": 0}
    if "n_jobs" in cls().get_params():
        defaults["n_jobs"] = 1
    return cls(**{**defaults, **params})


@pytest.fixture(scope="module")
def data():
    """~200 queries x 7 arms, 6 features of which 3 informative; 150 train / 50 test queries."""
    X, y, qid = make_ranking_data(n_queries=200, n_items=7, n_features=6, random_state=0)
    test = np.isin(qid, np.unique(qid)[150:])
    return (X[~test], y[~test], qid[~test]), (X[test], y[test], qid[test])


@pytest.fixture(scope="module")
def small():
    return make_ranking_data(n_queries=20, n_items=5, n_features=4, random_state=1)


@pytest.fixture(scope="module")
def fitted(data):
    (X, y, qid), _ = data
    return {name: make(name).fit(X, y, qid=qid) for name in CLASSIC}


def test_registry_holds_the_six_classic_rankers():
    for name, cls in CLASSIC.items():
        assert rankers.get(name) is cls
        assert cls.name == name


@pytest.mark.parametrize("name", list(CLASSIC))
def test_beats_random_on_held_out_ndcg_at_1(name, data, fitted):
    _, (Xt, yt, qt) = data
    got = mean_ndcg(yt, fitted[name].predict(Xt), qt, k=1)
    random = mean_ndcg(yt, np.zeros(len(yt)), qt, k=1)  # tied scores: random-order expectation
    assert got > random + 0.15, (got, random)


@pytest.mark.parametrize("name", list(CLASSIC))
def test_save_load_gives_identical_scores(name, data, fitted, tmp_path):
    _, (Xt, _, qt) = data
    ranker = fitted[name]
    ranker.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "ranker.json").read_text())
    assert meta["ranker"] == name and meta["fitted"]["n_features_in_"] == 6
    assert set(meta["files"]) == {p.name for p in (tmp_path / "m").iterdir()} - {"ranker.json"}
    assert not any(p.name.startswith(".") for p in (tmp_path / "m").iterdir())
    back = BaseRanker.load(tmp_path / "m")
    assert type(back) is CLASSIC[name]
    assert back.get_params() == ranker.get_params()
    np.testing.assert_array_equal(back.predict(Xt), ranker.predict(Xt))
    got, want = back.rank(Xt, qt), ranker.rank(Xt, qt)
    assert all(np.array_equal(got[q], want[q]) for q in want)


@pytest.mark.parametrize("name", list(CLASSIC))
def test_nan_labels_raise(name, small):
    X, y, qid = small
    y = y.copy()
    y[4] = np.nan
    with pytest.raises(DataError, match=rf"{name}: Input y contains NaN.*Labels must be finite"):
        make(name).fit(X, y, qid=qid)


@pytest.mark.parametrize("name", list(CLASSIC))
def test_qid_length_mismatch_raises(name, small):
    X, y, qid = small
    with pytest.raises(DataError, match=r"qid has 99 entries but X has 100 rows"):
        make(name).fit(X, y, qid=qid[:-1])


@pytest.mark.parametrize("name", list(CLASSIC))
def test_feature_count_mismatch_at_predict(name, fitted, data):
    _, (Xt, _, _) = data
    with pytest.raises(DataError, match=r"X has 5 features, but \w+ is expecting 6.*same feature"):
        fitted[name].predict(Xt[:, :5])


@pytest.mark.parametrize(
    "name", ["xgboost-pairwise", "xgboost-listwise", "lambdamart-listwise", "svmrank-pairwise"]
)
def test_grouped_rankers_require_qid(name, small):
    X, y, _ = small
    with pytest.raises(DataError, match=rf"{name} learns from rows grouped by query.*qid="):
        make(name).fit(X, y)


@pytest.mark.parametrize("name", ["xgboost-pointwise", "svm-pointwise"])
def test_pointwise_rankers_ignore_qid(name, small):
    X, y, qid = small
    np.testing.assert_array_equal(
        make(name).fit(X, y).predict(X), make(name).fit(X, y, qid=qid).predict(X)
    )


@pytest.mark.parametrize("name", GBDT)
def test_gbdt_rankers_accept_nan_features(name, small):
    X, y, qid = small
    X = X.copy()
    X[::3, 1] = np.nan
    scores = make(name, n_estimators=10).fit(X, y, qid=qid).predict(X)
    assert np.isfinite(scores).all()


@pytest.mark.parametrize("name", LINEAR)
def test_linear_rankers_reject_nan_features(name, small):
    X, y, qid = small
    X = X.copy()
    X[0, 0] = np.nan
    with pytest.raises(
        DataError,
        match=rf"{name}: Input X contains NaN.*impute them first.*"
        r"accepts NaN \(.*lambdamart-listwise",
    ):
        make(name).fit(X, y, qid=qid)


@pytest.mark.parametrize("name", ["xgboost-listwise", "lambdamart-listwise"])
def test_listwise_rankers_need_unit_interval_labels(name, small):
    X, y, qid = small
    with pytest.raises(DataError, match=r"labels must be graded gains in \[0, 1\].*max 2"):
        make(name).fit(X, y * 2, qid=qid)


def test_parameter_errors_name_parameter_class_allowed_and_received(small):
    X, y, qid = small
    with pytest.raises(
        ConfigError,
        match=r"The 'n_grades' parameter of XGBoostListwiseRanker must be an int in the range "
        r"\[2, 31\]\. Got 40 instead\.",
    ):
        XGBoostListwiseRanker(n_grades=40).fit(X, y, qid=qid)
    with pytest.raises(
        RankerParameterError,
        match=r"'gain' parameter of LambdaMARTRanker must "
        r"be a str among \{.*'exponential'.*\}\. Got 'log' instead",
    ):
        LambdaMARTRanker(gain="log").fit(X, y, qid=qid)


def test_gain_and_grades_reach_the_libraries(small):
    X, y, qid = small
    lgb = LambdaMARTRanker(n_estimators=2, n_grades=4, gain="linear").fit(X, y, qid=qid)
    assert lgb.booster_.params["label_gain"] == [0.0, 1.0, 2.0, 3.0]
    lgb = LambdaMARTRanker(n_estimators=2, n_grades=3).fit(X, y, qid=qid)
    assert lgb.booster_.params["label_gain"] == [0.0, 1.0, 3.0]
    for gain, flag in (("linear", "0"), ("exponential", "1")):
        xgb = XGBoostListwiseRanker(n_estimators=2, gain=gain).fit(X, y, qid=qid)
        cfg = json.loads(xgb.booster_.save_config())["learner"]["objective"]
        assert cfg["name"] == "rank:ndcg"
        assert cfg["lambdarank_param"]["ndcg_exp_gain"] == flag


def test_to_grades_quantises_to_nearest_grade():
    y = np.array([0.0, 0.12, 0.125, 0.49, 0.5, 0.87, 1.0])
    np.testing.assert_array_equal(to_grades(y, 5, name="t"), [0, 0, 1, 2, 2, 3, 4])
    np.testing.assert_array_equal(to_grades(y, 2, name="t"), [0, 0, 0, 0, 1, 1, 1])
    with pytest.raises(DataError, match=r"t: labels must be graded gains in \[0, 1\]"):
        to_grades(np.array([-0.1, 0.5]), 5, name="t")


def test_seed_controls_sampling(small):
    X, y, qid = small

    def scores(seed):
        return (
            make("xgboost-listwise", subsample=0.6, random_state=seed).fit(X, y, qid=qid).predict(X)
        )

    np.testing.assert_array_equal(scores(3), scores(3))
    assert not np.array_equal(scores(3), scores(4))


def test_ranksvm_matches_a_reference_on_explicit_pairs(small):
    """RankSVM equals a LinearSVC trained on pairs built by brute force (Joachims' recipe)."""
    from sklearn.svm import LinearSVC

    X, y, qid = small
    ours = RankSVMRanker(tol=1e-10, max_iter=200_000, random_state=0).fit(X, y, qid=qid)
    Z = (X - X.mean(0)) / X.std(0)
    diffs, signs = [], []
    for q in np.unique(qid):
        for i, j in combinations(np.flatnonzero(qid == q), 2):
            if y[i] != y[j]:
                diffs.append(Z[i] - Z[j])
                signs.append(np.sign(y[i] - y[j]))
    ref = LinearSVC(
        loss="hinge", fit_intercept=False, tol=1e-10, max_iter=200_000, random_state=0
    ).fit(np.array(diffs), np.array(signs))
    assert ours.n_pairs_ == len(diffs)
    np.testing.assert_allclose(ours.coef_, ref.coef_.ravel(), rtol=1e-3, atol=1e-5)


def test_ranksvm_without_preference_pairs_raises(small):
    X, _, qid = small
    with pytest.raises(DataError, match=r"no query has two rows with different labels"):
        RankSVMRanker().fit(X, np.full(len(X), 0.5), qid=qid)


def test_preference_pairs_match_brute_force():
    rng = np.random.default_rng(0)
    sizes = np.array([1, 4, 3, 4, 2])
    y = rng.integers(0, 3, sizes.sum()).astype(float)
    hi, lo = preference_pairs(y, sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    want = {
        (i, j) if y[i] > y[j] else (j, i)
        for s, m in zip(starts, sizes, strict=True)
        for i, j in combinations(range(s, s + m), 2)
        if y[i] != y[j]
    }
    assert set(zip(hi.tolist(), lo.tolist(), strict=True)) == want and len(hi) == len(want)


def test_canonical_order_ignores_input_order():
    X, y, qid = make_ranking_data(n_queries=6, n_items=4, n_features=3, random_state=2)
    a = canonical_order(X, y, qid)
    p = np.random.default_rng(0).permutation(len(y))
    b = canonical_order(X[p], y[p], qid[p])
    np.testing.assert_array_equal(X[a.order], X[p][b.order])
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.sizes, [4] * 6)
    mixed = canonical_order(X[:3], y[:3], np.array([2, "a", 1], dtype=object))
    np.testing.assert_array_equal(mixed.sizes, [1, 1, 1])


def test_mean_ndcg_matches_sklearn_per_query():
    from sklearn.metrics import ndcg_score

    X, y, qid = make_ranking_data(n_queries=12, n_items=5, random_state=3)
    keep = ~((qid == qid[0]) & (np.arange(len(qid)) != 0))  # query of row 0 keeps one row
    scores = np.random.default_rng(0).random(len(y))
    y, scores, qid = y[keep], scores[keep], qid[keep]
    per_query = [
        ndcg_score([y[qid == q]], [scores[qid == q]], k=3)
        for q in np.unique(qid)
        if (qid == q).sum() > 1
    ]
    assert mean_ndcg(y, scores, qid, k=3) == pytest.approx(np.mean(per_query))
    with pytest.raises(DataError, match="every query has a single row"):
        mean_ndcg([1.0, 0.0], [0.1, 0.2], [1, 2])


# ---- loading damaged or foreign folders ----------------------------------------------------
def _edit_meta(folder, **changes):
    meta = json.loads((folder / "ranker.json").read_text())
    meta.update(changes)
    (folder / "ranker.json").write_text(json.dumps(meta))


def _rehash(folder, name):
    import hashlib

    meta = json.loads((folder / "ranker.json").read_text())
    meta["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "ranker.json").write_text(json.dumps(meta))


def test_load_refuses_another_format_version(fitted, tmp_path):
    folder = fitted["xgboost-listwise"].save(tmp_path / "m")
    _edit_meta(folder, format_version=99, ltrr_version="9.9")
    with pytest.raises(DataError, match=r"format version 99 \(ltrr 9\.9\).*reads version 1"):
        BaseRanker.load(folder)


def test_load_refuses_another_ranker(fitted, tmp_path):
    folder = fitted["lambdamart-listwise"].save(tmp_path / "m")
    with pytest.raises(
        DataError,
        match=r"holds a 'lambdamart-listwise' ranker \(LambdaMARTRanker"
        r"\), not a 'xgboost-listwise'",
    ):
        XGBoostListwiseRanker.load(folder)
    # ranker.json relabelled as another ranker of the same parameters: the model file disagrees
    _edit_meta(folder, ranker="xgboost-listwise", params=fitted["xgboost-listwise"].get_params())
    with pytest.raises(
        DataError,
        match=r"expected a xgboost-json model for 'xgboost-listwise', "
        r"found 'lightgbm-text'",
    ):
        BaseRanker.load(folder)


def test_load_refuses_parameters_of_another_class(fitted, tmp_path):
    folder = fitted["svm-pointwise"].save(tmp_path / "m")
    _edit_meta(folder, ranker="svmrank-pairwise")
    with pytest.raises(DataError, match=r"parameters do not fit RankSVMRanker.*epsilon"):
        BaseRanker.load(folder)


@pytest.mark.parametrize(
    "name, model_file, match",
    [
        ("xgboost-pointwise", "model.json", "not a readable XGBoost JSON model"),
        ("lambdamart-listwise", "model.txt", "not a readable LightGBM text model"),
        ("svmrank-pairwise", "coef.npy", r"coef\.npy: expected float64 of shape \(6,\)"),
    ],
)
def test_load_refuses_tampered_model_files(name, model_file, match, fitted, tmp_path):
    folder = fitted[name].save(tmp_path / "m")
    target = folder / model_file
    if model_file.endswith(".npy"):
        np.save(target, np.zeros(3))
    else:
        target.write_text(target.read_text()[:200])
    with pytest.raises(
        DataError,
        match=rf"{model_file}: contents changed after the ranker was "
        r"saved \(SHA-256 mismatch\)",
    ):
        BaseRanker.load(folder)
    _rehash(folder, model_file)  # a forged checksum still cannot pass the format check
    with pytest.raises(DataError, match=match):
        BaseRanker.load(folder)


def test_load_refuses_missing_or_broken_files(fitted, tmp_path):
    folder = fitted["xgboost-pairwise"].save(tmp_path / "m")
    (folder / "model.json").unlink()
    with pytest.raises(DataError, match=r"model file 'model.json' is missing"):
        BaseRanker.load(folder)
    (folder / "ranker.json").write_text("{not json")
    with pytest.raises(DataError, match=r"ranker.json: not valid JSON"):
        BaseRanker.load(folder)
    (folder / "ranker.json").unlink()
    with pytest.raises(DataError, match=r"no ranker.json; not a saved ltrr ranker"):
        BaseRanker.load(folder)
    with pytest.raises(NotBuiltError, match=r"no such folder"):
        BaseRanker.load(tmp_path / "absent")


def test_save_overwrites_a_previous_model(fitted, data, tmp_path):
    _, (Xt, _, _) = data
    fitted["xgboost-pairwise"].save(tmp_path / "m")
    fitted["xgboost-listwise"].save(tmp_path / "m")
    back = BaseRanker.load(tmp_path / "m")
    assert type(back) is XGBoostListwiseRanker
    np.testing.assert_array_equal(back.predict(Xt), fitted["xgboost-listwise"].predict(Xt))


def test_a_ranker_whose_params_json_cannot_hold_is_refused_before_its_folder_changes(fitted, data, tmp_path):
    """random_state=RandomState(0) passes the ranker's checks but cannot be saved: one ConfigError,
    and the model saved there before still loads (the old save removed ranker.json first)."""
    from sklearn.base import clone

    _, (Xt, _, _) = data
    fitted["lambdamart-listwise"].save(tmp_path / "m")
    bad = clone(fitted["lambdamart-listwise"]).set_params(random_state=np.random.RandomState(0))
    (X, y, qid), _ = data
    bad.fit(X, y, qid=qid)
    with pytest.raises(ConfigError, match=r"random_state=RandomState\(MT19937\) at .* cannot be saved as JSON"):
        bad.save(tmp_path / "m")
    np.testing.assert_array_equal(BaseRanker.load(tmp_path / "m").predict(Xt), fitted["lambdamart-listwise"].predict(Xt))


def test_dataframe_features_and_string_qids(small):
    import pandas as pd

    X, y, qid = small
    df = pd.DataFrame(X, columns=["bm25", "dense", "len", "overlap"])
    sq = pd.Series([f"q{q}" for q in qid])
    ranker = make("lambdamart-listwise", n_estimators=10).fit(df, y, qid=sq)
    assert list(ranker.feature_names_in_) == ["bm25", "dense", "len", "overlap"]
    ranking = ranker.rank(df, sq)
    assert set(ranking) == set(sq) and all(len(ix) == 5 for ix in ranking.values())
    with pytest.raises(DataError, match="feature names"):
        ranker.predict(df[["dense", "bm25", "len", "overlap"]])


def test_rank_and_save_input_errors(fitted, data, tmp_path):
    _, (Xt, _, _) = data
    ranker = fitted["svm-pointwise"]
    with pytest.raises(
        DataError, match=r"svm-pointwise: rank\(X, qid\) needs one query id per row"
    ):
        ranker.rank(Xt, None)
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match=r"is a file; save a ranker into a folder"):
        ranker.save(tmp_path / "file")
