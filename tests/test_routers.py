"""Reference routers and the LTRRouter (fit, save/load, any number of arms, bad input)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.features import RAW_COLUMNS, extract_query, extract_raw
from ltrr.routers import routers
from ltrr.routers.ltr import LTRRouter
from ltrr.routers.reference import BestSingleRouter, NoRetrievalRouter, OracleRouter, RandomRouter


class DictSource:
    def __init__(self, vectors):
        self.vectors = vectors

    def get(self, docids, texts):
        return np.asarray([self.vectors[d] for d in docids], dtype=np.float64)


def make(n_queries=60, n_arms=4, dim=8, seed=0):
    """Queries whose best arm is the one whose passages lie closest to the query embedding."""
    rng = np.random.default_rng(seed)
    arms = [f"arm{i}" for i in range(n_arms - 1)] + ["none"]
    qemb = rng.normal(size=(n_queries, dim))
    qemb /= np.linalg.norm(qemb, axis=1, keepdims=True)
    vectors, rows, labels = {}, [], []
    for qi in range(n_queries):
        qid = f"q{qi:03d}"
        closeness = rng.uniform(0, 1, size=n_arms - 1)
        for ai, arm in enumerate(arms[:-1]):
            for r in range(3):
                did = f"{qid}-{arm}-{r}"
                v = closeness[ai] * qemb[qi] + (1 - closeness[ai]) * rng.normal(size=dim) / np.sqrt(dim)
                vectors[did] = v / np.linalg.norm(v)
                rows.append((qid, arm, r + 1, did, 3.0 - r, "text"))
            labels.append((qid, arm, float(closeness[ai] > 0.5)))
        labels.append((qid, "none", 0.3))
    queries = pd.DataFrame({"qid": [f"q{i:03d}" for i in range(n_queries)],
                            "question": ["what is x?" if i % 2 else "x y z" for i in range(n_queries)]})
    results = pd.DataFrame(rows, columns=["qid", "arm", "rank", "docid", "score", "text"])
    raw = extract_raw(queries, results, arms=arms, no_retrieval="none", encoder="test",
                      embedding_source=DictSource(vectors), query_embeddings=qemb)
    raw.meta["inputs"] = (queries, results, DictSource(vectors), qemb)  # for the per-query path
    lab = pd.DataFrame(labels, columns=["qid", "arm", "utility"])
    u = lab.pivot(index="qid", columns="arm", values="utility")
    gains = u.sub(u["none"], axis=0)
    lo, hi = gains.min(axis=1), gains.max(axis=1)
    norm = gains.sub(lo, axis=0).div((hi - lo).replace(0, np.nan), axis=0).fillna(0.0)
    lab["norm_gain"] = [norm.loc[q, a] for q, a in zip(lab["qid"], lab["arm"], strict=True)]
    lab["failed"] = False
    return raw, lab


def _p_at_1(router, raw, labels):
    chosen = router.choose(raw)
    u = labels.pivot(index="qid", columns="arm", values="utility")
    return float(np.mean([u.loc[q, a] == u.loc[q].max() for q, a in chosen.items()]))


@pytest.mark.parametrize("n_arms", [3, 10])
def test_ltrr_learns_and_round_trips(tmp_path, n_arms):
    raw, labels = make(n_queries=80, n_arms=n_arms)
    train, test = raw.subset(raw.qids[:60]), raw.subset(raw.qids[60:])
    router = LTRRouter(ranker="xgboost-pairwise", random_state=0).fit(train, labels)
    assert _p_at_1(router, test, labels) > _p_at_1(RandomRouter(random_state=1), test, labels)
    router.save(tmp_path / "m")
    again = LTRRouter.load(tmp_path / "m")
    pd.testing.assert_frame_equal(router.route_scores(test), again.route_scores(test))
    assert set(router.choose(test)) <= set(raw.arms)


def test_reference_routers():
    raw, labels = make(n_queries=20)
    assert _p_at_1(OracleRouter().fit(raw, labels), raw, labels) == 1.0
    best = BestSingleRouter().fit(raw, labels)
    assert set(best.choose(raw)) == {best.arm_}
    assert set(NoRetrievalRouter(arm="none").choose(raw)) == {"none"}
    a = RandomRouter(random_state=3).route_scores(raw)
    b = RandomRouter(random_state=3).route_scores(raw.subset(raw.qids[::-1]))
    m = a.merge(b, on=["qid", "arm"])
    assert np.array_equal(m["score_x"], m["score_y"])  # independent of query order
    assert {"oracle", "best-single", "random", "no-retrieval", "ltrr", "maxsim"} <= set(routers.names())


def test_reference_routers_read_integer_qids_and_break_ties_in_pool_order():
    """A user's labels with integer qids route as their string form (the oracle scored every arm
    NaN and chose the first); the best single arm's tie goes to the pool's first arm, not the
    alphabetically first (the pivot sorted the arms)."""
    from types import SimpleNamespace

    table = pd.DataFrame({"qid": ["1", "1", "2", "2"], "arm": ["zeta", "alpha"] * 2})
    raw = SimpleNamespace(table=table, arms=["zeta", "alpha"])
    labels = pd.DataFrame({"qid": [1, 1, 2, 2], "arm": ["zeta", "alpha"] * 2, "utility": [1.0, 0.0, 0.0, 1.0]})
    assert dict(OracleRouter().fit(raw, labels).choose(raw)) == {"1": "zeta", "2": "alpha"}
    best = BestSingleRouter().fit(raw, labels)  # mean 0.5 each
    assert best.arm_ == "zeta"
    assert BestSingleRouter().fit(None, labels.iloc[::-1]).arm_ == "alpha"  # without raw: the labels' order


def test_nan_labels_and_missing_pairs_are_errors():
    raw, labels = make(n_queries=10)
    bad = labels.copy()
    bad.loc[0, "norm_gain"] = np.nan
    with pytest.raises(DataError, match=r"NaN for queries that did not fail"):
        LTRRouter(ranker="svm-pointwise").fit(raw, bad)
    with pytest.raises(DataError, match=r"has no column 'gainz'"):
        LTRRouter(ranker="svm-pointwise", label="gainz").fit(raw, labels)
    failed = labels.copy()
    failed.loc[failed["qid"] == "q000", "failed"] = True
    failed.loc[failed["qid"] == "q000", "norm_gain"] = np.nan
    r = LTRRouter(ranker="svm-pointwise").fit(raw, failed)
    assert r.n_train_queries_ == 9


def test_saved_router_from_another_version_or_feature_set(tmp_path):
    raw, labels = make(n_queries=20)
    LTRRouter(ranker="svm-pointwise").fit(raw, labels).save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "router.json").read_text())
    meta["format"] = 99
    (tmp_path / "m" / "router.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"format 99"):
        LTRRouter.load(tmp_path / "m")
    meta["format"] = 1
    meta["feature_set"]["version"] = -1
    (tmp_path / "m" / "router.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"another version of feature set"):
        LTRRouter.load(tmp_path / "m")
    with pytest.raises(NotBuiltError, match=r"ltrr train"):
        LTRRouter.load(tmp_path / "nothing")


def test_the_generator_of_the_labels_is_saved_loaded_and_answered_with(tmp_path, monkeypatch):
    """save(labelled_with=...) writes generator.json; load reads it into labelled_with_, a re-save
    keeps it, a save without one removes a stale file, and a malformed record is a DataError."""
    from ltrr.generation import generators
    from ltrr.generation.base import Generation, Generator

    class Fixed(Generator):
        backend = "test-fixed-answer"

        def __init__(self, word="canberra"):
            self.word = word

        @property
        def identity(self):
            return f"test-fixed-{self.word}"

        def generate(self, prompts, params=None):
            return [Generation(text=self.word) for _ in prompts]

    if "test-fixed-answer" not in generators:
        generators.register("test-fixed-answer", Fixed)
    raw, labels = make(n_queries=20)
    rec = {"generation": {"backend": "test-fixed-answer", "word": "paris"}, "template": "few_shot"}
    LTRRouter(ranker="svm-pointwise").fit(raw, labels).save(tmp_path / "m", labelled_with=rec)
    back = LTRRouter.load(tmp_path / "m")
    assert back.labelled_with_ == rec and back.answering_template() == "few_shot"
    gen = back.answering_generator(cache=tmp_path / "cache.sqlite")
    assert gen.identity == "test-fixed-paris"
    first, again = gen.generate(["q"])[0], gen.generate(["q"])[0]  # behind the cache
    assert (first.text, first.cached, again.text, again.cached) == ("paris", False, "paris", True)
    back.save(tmp_path / "again")
    assert LTRRouter.load(tmp_path / "again").labelled_with_ == rec
    fresh = LTRRouter(ranker="svm-pointwise").fit(raw, labels)
    fresh.save(tmp_path / "m")  # no record now: the stale one goes
    assert not (tmp_path / "m" / "generator.json").exists()
    assert LTRRouter.load(tmp_path / "m").labelled_with_ is None
    assert LTRRouter.load(tmp_path / "m").answering_template() == "short_answer"
    (tmp_path / "m" / "generator.json").write_text(json.dumps({"generation": "llama", "template": 3}))
    with pytest.raises(DataError, match="not a generator record"):
        LTRRouter.load(tmp_path / "m")
    with pytest.raises(DataError, match="labelled_with: not a generator record"):
        fresh.save(tmp_path / "n", labelled_with={"template": "x"})
    assert not (tmp_path / "n").exists()  # checked before anything is written
    refit = LTRRouter.load(tmp_path / "again").fit(raw, labels)  # new labels: the record was the old ones
    assert refit.labelled_with_ is None and refit.answering_template() == "short_answer"
    refit.save(tmp_path / "refit")
    assert not (tmp_path / "refit" / "generator.json").exists()


@pytest.mark.parametrize("damage, said", [
    (lambda m: m.pop("feature_set"), "no entry 'feature_set'"),
    (lambda m: m["params"].update(colour="red"), "a value or parameter does not fit"),
    (lambda m: m.update(n_train_queries="many"), "a value is wrong"),
    (lambda m: m.update(params=["not", "a", "mapping"]), "a value or parameter does not fit"),
])
def test_a_damaged_router_json_is_one_data_error(tmp_path, capsys, damage, said):
    """A router.json with a missing or ill-typed entry (a folder damaged, or written by something
    else): one DataError naming the folder, and one error line from `ltrr route`."""
    from ltrr.cli import main

    raw, labels = make(n_queries=20)
    LTRRouter(ranker="svm-pointwise").fit(raw, labels).save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "router.json").read_text())
    damage(meta)
    (tmp_path / "m" / "router.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=f"{tmp_path / 'm'}: not a readable LTR router \\({said}"):
        LTRRouter.load(tmp_path / "m")
    assert main(["route", str(tmp_path / "m"), "q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a readable LTR router" in err


def test_a_folder_saved_over_while_it_is_read_is_an_error_not_a_mixed_router(tmp_path, monkeypatch):
    """router.json records the digests of the parts it was saved with (the feature pipeline's
    and the ranker's JSON, each holding its own files' checksums): a
    folder whose parts are another save's (ltrr train saving over it while ltrr route or serve
    loads it) is one DataError, before or after the parts are read, never a router made of two
    fits. A folder saved before the digests were recorded loads as it did."""
    import shutil

    from ltrr.rankers.base import BaseRanker

    raw, labels = make(n_queries=20)
    x = LTRRouter(ranker="svm-pointwise").fit(raw, labels).save(tmp_path / "x")
    y = LTRRouter(ranker="svm-pointwise", random_state=1).fit(raw, labels.assign(utility=1 - labels["utility"])).save(
        tmp_path / "y")
    meta = json.loads((x / "router.json").read_text())
    assert set(meta["parts"]) == {"features/pipeline.json", "ranker/ranker.json"}
    assert LTRRouter.load(x).arms_ == meta["arms"]
    # another save's ranker under this router.json: refused before anything is read
    mixed = tmp_path / "mixed"
    shutil.copytree(x, mixed)
    shutil.rmtree(mixed / "ranker")
    shutil.copytree(y / "ranker", mixed / "ranker")
    with pytest.raises(DataError, match="are not the ones router.json was saved with"):
        LTRRouter.load(mixed)
    # a save landing while the parts are read: refused after
    swapped = tmp_path / "swapped"
    shutil.copytree(x, swapped)
    real = BaseRanker.load

    def load_during_a_save(folder):
        out = real(folder)
        shutil.copy(y / "features" / "pipeline.json", swapped / "features" / "pipeline.json")
        return out

    monkeypatch.setattr(BaseRanker, "load", staticmethod(load_during_a_save))
    with pytest.raises(DataError, match="are not the ones router.json was saved with"):
        LTRRouter.load(swapped)
    monkeypatch.undo()
    # saved before router.json recorded its parts: loads, unchecked
    old = tmp_path / "old"
    shutil.copytree(x, old)
    meta.pop("parts")
    (old / "router.json").write_text(json.dumps(meta))
    assert LTRRouter.load(old).n_train_queries_ == meta["n_train_queries"]


def test_a_folder_does_not_choose_a_remote_generator(tmp_path, capsys, monkeypatch):
    """A router folder from someone else whose generator.json names a remote backend (openai,
    its endpoint and the environment variable of a key) would send every question, its passages
    and that key there: answering with it is one ConfigError naming the file and the endpoint,
    before any request; the caller's own generator (--config), or allow_remote=True, is taken."""
    from ltrr.cli import main
    from ltrr.generation.openai_backend import OpenAIGenerator

    raw, labels = make(n_queries=20)
    rec = {"generation": {"backend": "openai", "model": "x", "base_url": "http://attacker.example/v1",
                          "api_key_env": "HOME"}, "template": "short_answer"}
    LTRRouter(ranker="svm-pointwise").fit(raw, labels).save(tmp_path / "m", labelled_with=rec)
    back = LTRRouter.load(tmp_path / "m")
    with pytest.raises(ConfigError, match=r"generator.json: the router's recorded generator is openai at "
                                          r"'http://attacker.example/v1' \(key from \$HOME\)"):
        back.answering_generator(cache=tmp_path / "cache.sqlite")
    with pytest.raises(ConfigError, match="does not choose where questions"):
        back.answer("what is the capital of france?")
    gen = back.answering_generator(cache=tmp_path / "cache.sqlite", allow_remote=True)  # checked by the caller
    assert gen.remote and isinstance(gen.generator, OpenAIGenerator)
    assert gen.generator.base_url == "http://attacker.example/v1"
    # a router built here (not loaded) answers with the settings it was given
    assert LTRRouter(ranker="svm-pointwise").answering_generator(cache=tmp_path / "c2.sqlite").remote is False
    # the command line: one error line, no answer; --config only goes with --answer
    assert main(["route", str(tmp_path / "m"), "what is the capital of france?", "--answer"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attacker.example" in err and "--config CONFIG" in err
    assert main(["route", str(tmp_path / "m"), "q", "--config", "demo"]) == 2
    assert "--config gives the generator of an answer; add --answer" in capsys.readouterr().err


def test_a_save_that_cannot_finish_leaves_the_saved_router_as_it_was(tmp_path):
    """numpy scalars in the params are saved as numbers; a parameter JSON cannot hold is one
    ConfigError raised before any file of the folder is touched."""
    import numpy as np

    from ltrr._errors import ConfigError

    raw, labels = make(n_queries=20)
    router = LTRRouter(ranker="svm-pointwise", random_state=np.int64(3)).fit(raw, labels)
    router.save(tmp_path / "m")
    back = LTRRouter.load(tmp_path / "m")
    assert back.random_state == 3 and type(back.random_state) is int  # default=str gave back '3'
    before = {f: f.read_bytes() for f in sorted((tmp_path / "m").rglob("*")) if f.is_file()}
    router.set_params(pool_config={"retrievers": object()})
    with pytest.raises(ConfigError, match=r"LTRRouter params: retrievers=<object .*> cannot be saved as JSON"):
        router.save(tmp_path / "m")
    assert {f: f.read_bytes() for f in sorted((tmp_path / "m").rglob("*")) if f.is_file()} == before
    pd.testing.assert_frame_equal(LTRRouter.load(tmp_path / "m").route_scores(raw), back.route_scores(raw))


def test_router_trained_on_other_arms_refuses(tmp_path):
    raw, labels = make(n_queries=20, n_arms=4)
    other, _ = make(n_queries=5, n_arms=5)
    r = LTRRouter(ranker="svm-pointwise").fit(raw, labels)
    with pytest.raises(DataError, match=r"trained on arms"):
        r.route_scores(other)


def test_feature_table_missing_column():
    raw, labels = make(n_queries=20)
    r = LTRRouter(ranker="svm-pointwise").fit(raw, labels)
    raw.table = raw.table.drop(columns=["max_sim"])
    with pytest.raises(DataError, match=r"max_sim"):
        r.route_scores(raw)


# ---- the per-query fast path (extract_query -> route_query) agrees with the table path -------
def _one_query(raw, qid):
    queries, results, source, qemb = raw.meta["inputs"]
    i = list(queries["qid"]).index(qid)
    res = results[results["qid"] == qid].sample(frac=1.0, random_state=i)  # row order must not matter
    return extract_query(queries["question"].iloc[i], res.drop(columns="qid"), arms=raw.arms,
                         no_retrieval="none", encoder="test", embedding_source=source,
                         query_embedding=qemb[i], qid=qid)


@pytest.mark.parametrize("n_arms", [3, 10])
@pytest.mark.parametrize("ranker", ["xgboost-pairwise", "svm-pointwise", "ffn-pairwise"])
def test_route_query_matches_table_path(tmp_path, n_arms, ranker):
    raw, labels = make(n_queries=70, n_arms=n_arms)
    train = raw.subset(raw.qids[:60])
    router = LTRRouter(ranker=ranker, random_state=0, ranker_params={"n_jobs": 1} if ranker.startswith("xgb") else None)
    router.fit(train, labels)
    again = LTRRouter.load(router.save(tmp_path / "m"))
    for qid in raw.qids[60:]:
        table = raw.subset([qid])
        qraw = _one_query(raw, qid)
        for col in RAW_COLUMNS[2:]:
            np.testing.assert_array_equal(qraw.columns[col], table.table[col].to_numpy(), err_msg=col)
        np.testing.assert_array_equal(router.pipeline_.transform_query(qraw), router.pipeline_.transform(table))
        expected = router.ranking(table)
        for r in (router, again):
            got = r.route_query(qraw)
            assert [a for a, _ in got] == list(expected["arm"])
            np.testing.assert_allclose([s for _, s in got], expected["score"].to_numpy(), rtol=0, atol=1e-12)


def test_route_query_ties_go_to_the_earlier_arm():
    raw, labels = make(n_queries=30, n_arms=4)
    router = LTRRouter(ranker="xgboost-pairwise", random_state=0, ranker_params={"n_jobs": 1}).fit(raw, labels)
    router.ranker_.predict = lambda X: np.zeros(len(X))  # every arm ties
    assert [a for a, _ in router.route_query(_one_query(raw, raw.qids[0]))] == raw.arms


def test_extract_query_arm_without_passages_is_nan_like_extract_raw():
    raw, _ = make(n_queries=3, n_arms=4)
    queries, results, source, qemb = raw.meta["inputs"]
    res = results[(results["qid"] == "q000") & (results["arm"] != "arm1")]
    one = extract_query(queries["question"][0], res, arms=raw.arms, no_retrieval="none",
                        encoder="test", embedding_source=source, query_embedding=qemb[0], qid="q000")
    table = extract_raw(queries.iloc[[0]], res, arms=raw.arms, no_retrieval="none", encoder="test",
                        embedding_source=source, query_embeddings=qemb[:1])
    for col in RAW_COLUMNS[2:]:
        np.testing.assert_array_equal(one.columns[col], table.table[col].to_numpy(), err_msg=col)
    assert np.isnan(one.columns["avg_sim"][1]) and one.columns["n_docs"][1] == 0
    pd.testing.assert_frame_equal(one.to_raw().table, table.table)


@pytest.mark.parametrize("edit, match", [
    (lambda q, r: (q, pd.concat([r, r.assign(qid="other")])), "results of one query"),
    (lambda q, r: (q, r.assign(arm=r["arm"].where(r["rank"] != 1, "nope"))), r"arm\(s\) \['nope'\]"),
    (lambda q, r: (q, r.assign(arm=r["arm"].where(r["rank"] != 1, "none"))), "no-retrieval arm"),
    (lambda q, r: (q, r.assign(score=np.nan)), "non-finite score"),
    (lambda q, r: ("  ", r), "question is empty"),
    (lambda q, r: (q, r.drop(columns="docid")), "missing column"),
    (lambda q, r: (q, r.to_dict("list")), "must be a DataFrame"),
])
def test_extract_query_bad_input(edit, match):
    raw, _ = make(n_queries=2, n_arms=3)
    queries, results, source, qemb = raw.meta["inputs"]
    q, r = edit(queries["question"][0], results[results["qid"] == "q000"])
    with pytest.raises(DataError, match=match):
        extract_query(q, r, arms=raw.arms, no_retrieval="none", encoder="test",
                      embedding_source=source, query_embedding=qemb[0])


def test_route_query_refuses_other_arms_and_text_rankers():
    raw, labels = make(n_queries=30, n_arms=4)
    router = LTRRouter(ranker="svm-pointwise", random_state=0).fit(raw, labels)
    qraw = _one_query(raw, raw.qids[0])
    qraw.arms = list(reversed(qraw.arms))
    with pytest.raises(DataError, match="trained on arms"):
        router.route_query(qraw)
    router.ranker = "transformer-pairwise"
    with pytest.raises(DataError, match="reads passage text"):
        router.route_query(_one_query(raw, raw.qids[0]))
