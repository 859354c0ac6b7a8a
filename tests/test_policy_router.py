"""PolicyRouter: rows from raw features and the LTR router, one folder, pool checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_routers import make

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.features import RawFeatures
from ltrr.policy.router import PolicyRouter

FAST = {"n_steps": 40}
LTR = {"ranker": "xgboost-pointwise", "ranker_params": {"n_estimators": 10}}


def _costs(arms):
    return {a: (0.0 if a == "none" else 1.0 + i) for i, a in enumerate(arms)}


def _reorder(raw, order):
    t = raw.table.copy()
    t["_a"] = t["arm"].map({a: i for i, a in enumerate(order)})
    t = t.sort_values(["qid", "_a"], kind="stable").drop(columns="_a").reset_index(drop=True)
    return RawFeatures(table=t, query_embeddings=raw.query_embeddings, qids=raw.qids, arms=list(order),
                       no_retrieval=raw.no_retrieval, meta=raw.meta)


@pytest.mark.parametrize("n_arms", [3, 10])
def test_policy_router_fits_saves_and_ignores_arm_order(tmp_path, n_arms):
    raw, labels = make(n_queries=60, n_arms=n_arms)
    costs = _costs(raw.arms)
    budget = 0.5 * max(costs.values())
    pol = PolicyRouter(budget, costs=costs, ltr=LTR, policy_params=FAST, n_folds=3).fit(raw, labels)
    chosen = pol.choose(raw)
    assert len(chosen) == 60 and set(chosen) <= set(raw.arms)
    probs = pol.predict_proba(raw)
    assert np.allclose(probs.groupby("qid")["prob"].sum(), 1.0)
    loaded = PolicyRouter.load(pol.save(tmp_path / "pol"))
    pd.testing.assert_series_equal(loaded.choose(raw), chosen)
    # the same pool listed in another order: identical decisions, trained or routed
    order = list(reversed(raw.arms))
    pd.testing.assert_series_equal(pol.choose(_reorder(raw, order)).sort_index(), chosen.sort_index())
    other = PolicyRouter(budget, costs=dict(reversed(list(costs.items()))), ltr=LTR, policy_params=FAST,
                         n_folds=3).fit(_reorder(raw, order), labels)
    pd.testing.assert_series_equal(other.choose(raw), chosen)


def test_the_policy_seed_reaches_its_inner_ranker():
    """policy/run.py passes the config router's get_params(), seed included; the policy's own
    random_state (``ltrr policy eval --seed N``) must still seed the LTR router it trains."""
    raw, labels = make(n_queries=40, n_arms=3)
    pol = PolicyRouter(1.0, costs=_costs(raw.arms), ltr={**LTR, "random_state": 13}, policy_params=FAST,
                       n_folds=2, random_state=7).fit(raw, labels)
    assert pol.ltr_.random_state == 7 and pol.ltr == {**LTR, "random_state": 13}


def test_policy_router_bad_input(tmp_path):
    raw, labels = make(n_queries=30, n_arms=3)
    costs = _costs(raw.arms)
    with pytest.raises(ConfigError, match="no cost for arm"):
        PolicyRouter(0.5, costs={"none": 0.0}).fit(raw, labels)
    with pytest.raises(ConfigError, match="representation must be one of features, lm"):
        PolicyRouter(0.5, costs=costs, representation="bert").fit(raw, labels)
    with pytest.raises(ConfigError, match="above the most expensive arm"):
        PolicyRouter(9.0, costs=costs, ltr=LTR, policy_params=FAST, n_folds=2).fit(raw, labels)
    with pytest.raises(DataError, match="needs the question states|needs question_states"):
        PolicyRouter(0.5, costs=costs, representation="lm", ltr=LTR, policy_params=FAST, n_folds=2).fit(raw, labels)
    pol = PolicyRouter(0.5, costs=costs, ltr=LTR, policy_params=FAST, n_folds=2).fit(raw, labels)
    small, _ = make(n_queries=10, n_arms=4)
    with pytest.raises(DataError, match="the policy was trained on the pool"):
        pol.choose(small)
    with pytest.raises(DataError, match="the policy was trained on the pool"):
        pol.check_costs_match({**costs, "none": 0.5})
    with pytest.raises(NotBuiltError, match="no policy.json"):
        PolicyRouter.load(tmp_path)


def test_policy_router_lm_representation(tmp_path):
    raw, labels = make(n_queries=40, n_arms=3)
    states = np.random.default_rng(0).normal(size=(40, 12))
    pol = PolicyRouter(1.0, costs=_costs(raw.arms), representation="lm", lm_dim=4, ltr=LTR, policy_params=FAST,
                       n_folds=2).fit(raw, labels, question_states=states)
    assert pol.head_.n_features_in_ == pol.policy_rows(raw, states).shape[2]
    loaded = PolicyRouter.load(pol.save(tmp_path / "lm"))
    pd.testing.assert_frame_equal(loaded.route_scores(raw, question_states=states),
                                  pol.route_scores(raw, question_states=states))


def test_a_failed_label_item_leaves_its_query_out_of_training():
    """One failed (query, arm) item blocked fit ("some present pairs have no utility label");
    the query is left out now, as LTRRouter.fit and `ltrr policy eval` leave it out."""
    raw, labels = make(n_queries=40, n_arms=3)
    labels = labels.copy()
    labels.loc[0, "failed"] = True
    failed_q = str(labels.loc[0, "qid"])
    pol = PolicyRouter(1.0, costs=_costs(raw.arms), ltr=LTR, policy_params=FAST, n_folds=2).fit(raw, labels)
    assert pol.n_incomplete_queries_ == 1 and pol.n_train_queries_ == 39 and failed_q not in pol.train_qids_
    assert len(pol.choose(raw)) == 40  # routing a query needs no label


def test_an_unfitted_policy_router_raises_not_fitted():
    from sklearn.exceptions import NotFittedError

    raw, _ = make(n_queries=5, n_arms=3)
    pol = PolicyRouter(1.0, costs=_costs(raw.arms))
    for call in (pol.ranking, pol.choose, pol.predict_proba, pol.route_scores):
        with pytest.raises(NotFittedError, match="PolicyRouter is not fitted"):
            call(raw)


def test_a_numpy_seed_saves_as_a_plain_int(tmp_path):
    import json

    raw, labels = make(n_queries=30, n_arms=3)
    pol = PolicyRouter(1.0, costs=_costs(raw.arms), ltr=LTR, policy_params=FAST, n_folds=2,
                       random_state=np.int64(4)).fit(raw, labels)
    folder = pol.save(tmp_path / "pol")
    assert json.loads((folder / "policy.json").read_text())["params"]["random_state"] == 4
    pd.testing.assert_series_equal(PolicyRouter.load(folder).choose(raw), pol.choose(raw))


@pytest.fixture(scope="module")
def saved_policy(tmp_path_factory):
    raw, labels = make(n_queries=30, n_arms=3)
    pol = PolicyRouter(1.0, costs=_costs(raw.arms), ltr=LTR, policy_params=FAST, n_folds=2).fit(raw, labels)
    return pol.save(tmp_path_factory.mktemp("pol") / "pol")


@pytest.mark.parametrize(("damage", "match"), [
    (lambda m: m.pop("params"), r"not a readable policy \(no entry 'params'\)"),
    (lambda m: m.pop("costs"), r"no entry 'costs'"),
    (lambda m: m.update(params=[1]), "a value or parameter does not fit"),
    (lambda m: m["params"].update(evil=1), r"unexpected keyword argument 'evil'"),
    (lambda m: m["params"].update(representation="bert"), r"representation 'bert' is not one of features, lm"),
    (lambda m: m.update(arms="abc"), r"arms must be a list of arm names, got str"),
    (lambda m: m.update(costs=[1, 2]), r"AttributeError"),
    (lambda m: m.update(costs={"a": "x"}), r"a value is wrong: could not convert string to float: 'x'"),
    (lambda m: m.update(costs={"other": 1.0}), r"costs name arms \['other'\], not its arms"),
    (lambda m: m.update(n_train_queries="x"), r"a value is wrong: invalid literal for int\(\)"),
])
def test_a_damaged_policy_json_is_one_data_error_naming_the_folder(saved_policy, tmp_path, damage, match):
    """``cls(**meta["params"])`` and key lookups raised KeyError, TypeError or ValueError."""
    import json
    import shutil

    folder = shutil.copytree(saved_policy, tmp_path / "pol")
    meta = json.loads((folder / "policy.json").read_text())
    damage(meta)
    (folder / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=rf"^{folder}: .*{match}"):
        PolicyRouter.load(folder)


def test_a_damaged_lm_pca_is_one_data_error_naming_the_folder(saved_policy, tmp_path):
    import json
    import shutil

    folder = shutil.copytree(saved_policy, tmp_path / "pol")
    meta = json.loads((folder / "policy.json").read_text())
    meta["params"]["representation"] = "lm"  # an lm policy whose PCA file is missing, then garbage
    (folder / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=rf"^{folder}: not a readable policy \(.*lm_pca\.safetensors"):
        PolicyRouter.load(folder)
    (folder / "lm_pca.safetensors").write_bytes(b"garbage!")
    with pytest.raises(DataError, match=rf"^{folder}: not a readable policy \(SafetensorError"):
        PolicyRouter.load(folder)
