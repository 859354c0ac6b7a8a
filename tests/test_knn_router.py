"""KNNRouter: learns which kind of query each arm serves, round-trips, and refuses bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.features import RawFeatures
from ltrr.routers import KNNRouter, make_router, parse_router_spec, routers
from ltrr.routers.reference import BestSingleRouter

ARMS = ["bm25", "dense", "none"]


def clustered(n_per=30, dim=6, seed=0, noise=0.3):
    """Three query clusters; in cluster c arm c is right 80% of the time, the others 30%."""
    rng = np.random.default_rng(seed)
    centres = np.eye(3, dim)
    qids, emb, rows = [], [], []
    for c in range(3):
        for i in range(n_per):
            qid = f"c{c}-{i:02d}"
            qids.append(qid)
            emb.append(centres[c] + noise * rng.normal(size=dim))
            for a, arm in enumerate(ARMS):
                rows.append((qid, arm, float(rng.uniform() < (0.8 if a == c else 0.3))))
    table = pd.DataFrame({"qid": np.repeat(qids, 3), "arm": ARMS * len(qids)})
    raw = RawFeatures(table=table, query_embeddings=np.asarray(emb), qids=qids, arms=ARMS, no_retrieval=["none"])
    labels = pd.DataFrame(rows, columns=["qid", "arm", "utility"])
    return raw, labels


def test_knn_learns_which_cluster_each_arm_serves():
    raw, labels = clustered()
    train = [q for q in raw.qids if int(q[-2:]) % 3]
    test = [q for q in raw.qids if not int(q[-2:]) % 3]
    router = KNNRouter(n_neighbors=10).fit(raw.subset(train), labels[labels.qid.isin(train)])
    chosen = router.choose(raw.subset(test))
    right = np.mean([a == ARMS[int(q[1])] for q, a in chosen.items()])
    assert right >= 0.85  # 0.87 here; the label noise (0.8 vs 0.3) caps it below 1
    # the best single arm can be right on one cluster only
    single = BestSingleRouter().fit(raw.subset(train), labels[labels.qid.isin(train)]).choose(raw.subset(test))
    assert np.mean([a == ARMS[int(q[1])] for q, a in single.items()]) <= 0.34


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 12))
def test_knn_with_every_neighbour_and_no_prior_is_the_best_single_arm(seed, n):
    """With n_neighbors >= the training queries and uniform weights, every query gets each arm's
    training mean: the ranking is the best single arm's, whatever the query."""
    rng = np.random.default_rng(seed)
    qids = [f"q{i}" for i in range(n)]
    raw = RawFeatures(table=pd.DataFrame({"qid": np.repeat(qids, 3), "arm": ARMS * n}),
                      query_embeddings=rng.normal(size=(n, 4)), qids=qids, arms=ARMS, no_retrieval=["none"])
    labels = pd.DataFrame({"qid": np.repeat(qids, 3), "arm": ARMS * n, "utility": rng.uniform(size=3 * n).round(1)})
    s = KNNRouter(n_neighbors=n + 5, prior_weight=0.0).fit(raw, labels).route_scores(raw)
    means = labels.groupby("arm")["utility"].mean()
    for _, g in s.groupby("qid"):
        np.testing.assert_allclose(g["score"].to_numpy(), means.loc[g["arm"]].to_numpy())


def test_a_save_interrupted_over_an_old_one_leaves_a_folder_that_reads_as_not_built(tmp_path, monkeypatch):
    import ltrr.routers.knn as knn

    raw, labels = clustered(n_per=10)
    folder = KNNRouter(n_neighbors=5).fit(raw, labels).save(tmp_path / "knn")

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(knn, "write_arrays_atomic", crash)
    with pytest.raises(OSError, match="disk full"):
        KNNRouter(n_neighbors=3).fit(raw, labels).save(folder)
    # the old manifest went first: never the old router.json over a half-written new router
    with pytest.raises(NotBuiltError, match="router.json"):
        KNNRouter.load(folder)


def test_knn_save_load_and_the_per_query_path_agree(tmp_path):
    from types import SimpleNamespace

    raw, labels = clustered(n_per=10)
    router = KNNRouter(n_neighbors=5, weights="similarity").fit(raw, labels)
    router.utility_ = np.asfortranarray(router.utility_)  # safetensors would scramble it as is
    loaded = KNNRouter.load(router.save(tmp_path / "knn"))
    assert sorted(p.name for p in (tmp_path / "knn").iterdir()) == ["knn.safetensors", "router.json"]
    a, b = router.route_scores(raw), loaded.route_scores(raw)
    pd.testing.assert_frame_equal(a, b)
    one = a[a.qid == raw.qids[4]].sort_values(["score"], ascending=False, kind="stable")
    q = SimpleNamespace(query_embedding=raw.query_embeddings[4], arms=ARMS)
    assert [arm for arm, _ in loaded.route_query(q)] == one["arm"].tolist()


def test_knn_params_of_numpy_types_save_as_numbers(tmp_path):
    raw, labels = clustered(n_per=10)
    router = KNNRouter(n_neighbors=np.int64(5)).fit(raw, labels)
    assert KNNRouter.load(router.save(tmp_path / "knn")).n_neighbors == 5


def test_router_specs():
    assert parse_router_spec("knn:n_neighbors=50, weights=similarity,prior_weight=0.5") == (
        "knn", {"n_neighbors": 50, "weights": "similarity", "prior_weight": 0.5})
    assert make_router("knn:n_neighbors=7").n_neighbors == 7
    assert isinstance(make_router("best-single"), BestSingleRouter)
    assert "knn" in routers.names()
    with pytest.raises(ConfigError, match="not param=value"):
        parse_router_spec("knn:50")
    with pytest.raises(ConfigError, match="unknown router 'nope'"):
        make_router("nope")
    with pytest.raises(ConfigError, match="unexpected keyword argument 'k'"):
        make_router("knn:k=5")
    with pytest.raises(ConfigError, match="non-empty string"):
        parse_router_spec("")


@pytest.mark.parametrize("params, match", [
    ({"n_neighbors": 0}, "n_neighbors must be an integer >= 1"),
    ({"n_neighbors": 2.5}, "n_neighbors must be an integer >= 1"),
    ({"weights": "distance"}, "weights must be one of uniform, similarity"),
    ({"prior_weight": -1}, "prior_weight must be a number >= 0"),
])
def test_knn_bad_parameters_are_config_errors(params, match):
    raw, labels = clustered(n_per=3)
    with pytest.raises(ConfigError, match=match):
        KNNRouter(**params).fit(raw, labels)


def test_knn_bad_input(tmp_path):
    raw, labels = clustered(n_per=3)
    with pytest.raises(NotFittedError, match=r"KNNRouter is not fitted; call fit\(raw, labels\)"):
        KNNRouter().route_scores(raw)
    with pytest.raises(DataError, match="needs training labels"):
        KNNRouter().fit(raw)
    with pytest.raises(DataError, match="RawFeatures with query embeddings"):
        KNNRouter().fit(raw.table, labels)
    with pytest.raises(DataError, match="no training query with a label for every arm"):
        KNNRouter().fit(raw, labels.assign(qid="x" + labels["qid"]))
    router = KNNRouter(n_neighbors=2).fit(raw, labels)
    other = RawFeatures(table=raw.table.assign(arm=raw.table["arm"].replace("dense", "e5")),
                        query_embeddings=raw.query_embeddings, qids=raw.qids, arms=["bm25", "e5", "none"])
    with pytest.raises(DataError, match=r"also has \['e5'\]"):
        router.route_scores(other)
    with pytest.raises(DataError, match="dimension 3; the router was trained on 6"):
        router.scores_for(np.ones((1, 3)))
    with pytest.raises(NotBuiltError, match="no saved knn router"):
        KNNRouter.load(tmp_path)
    router.save(tmp_path / "k")
    (tmp_path / "k" / "router.json").write_text('{"router": "ltrr", "format": 1}')
    with pytest.raises(DataError, match="not a knn router"):
        KNNRouter.load(tmp_path / "k")


def _safetensors(arrays: dict) -> bytes:
    from safetensors.numpy import save

    return save({k: np.ascontiguousarray(v) for k, v in arrays.items()})


@pytest.mark.parametrize(("damage", "match"), [
    (lambda m: m.pop("params"), r"not a readable knn router \(no entry 'params'\)"),
    (lambda m: m.pop("arms"), r"no entry 'arms'"),
    (lambda m: m.update(params=[5]), r"a value or parameter does not fit: .*must be a mapping"),
    (lambda m: m["params"].update(evil=1), r"does not fit: .*unexpected keyword argument 'evil'"),
    (lambda m: m["params"].update(n_neighbors="x"), r"router\.json's parameters do not fit KNNRouter: .*n_neighbors"),
    (lambda m: m["params"].update(weights="gauss"), r"parameters do not fit KNNRouter: .*weights must be one of"),
    (lambda m: m.update(arms="bm25"), r"router\.json's arms must be a list of arm names, got str"),
    (lambda m: m.update(arms=["bm25", "dense"]), r"knn\.safetensors does not match router\.json's arms"),
])
def test_a_damaged_router_json_is_one_data_error_naming_the_folder(tmp_path, damage, match):
    """``cls(**meta["params"])`` and key lookups raised KeyError, TypeError or ValueError."""
    import json

    raw, labels = clustered(n_per=3)
    folder = KNNRouter(n_neighbors=2).fit(raw, labels).save(tmp_path / "k")
    meta = json.loads((folder / "router.json").read_text())
    damage(meta)
    (folder / "router.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=rf"^{folder}: .*{match}"):
        KNNRouter.load(folder)


@pytest.mark.parametrize(("content", "match"), [
    (b"not a safetensors file", r"not a readable knn router \(SafetensorError"),
    (b"", r"not a readable knn router \(SafetensorError"),
    (_safetensors({"embeddings": np.ones((3, 6))}), r"no entry 'utility'"),
    (_safetensors({"embeddings": np.ones(9), "utility": np.ones((9, 3))}), "does not match router.json's arms"),
    (_safetensors({"embeddings": np.ones((0, 6)), "utility": np.ones((0, 3))}), "holds no training query"),
])
def test_a_damaged_knn_safetensors_is_one_data_error_naming_the_folder(tmp_path, content, match):
    raw, labels = clustered(n_per=3)
    folder = KNNRouter(n_neighbors=2).fit(raw, labels).save(tmp_path / "k")
    (folder / "knn.safetensors").write_bytes(content)
    with pytest.raises(DataError, match=rf"^{folder}: .*{match}"):
        KNNRouter.load(folder)


def test_a_router_json_nested_too_deeply_is_a_data_error(tmp_path):
    raw, labels = clustered(n_per=3)
    folder = KNNRouter(n_neighbors=2).fit(raw, labels).save(tmp_path / "k")
    (folder / "router.json").write_text('{"params": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(DataError, match=r"router\.json: JSON nested too deeply"):
        KNNRouter.load(folder)
