"""ltrr inside PyTerrier: arms as transformers, the LTR router as a transformer, pt.Experiment."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt  # the pyterrier extra is installed by make env (Makefile EXTRAS)
import pytest
from _irtiny import config_text, write_dataset

from ltrr._errors import ConfigError, DataError
from ltrr.config import load_config
from ltrr.data.io import load_dataset


def train_router(root: Path) -> tuple:
    """Index the tiny dataset, label each (query, arm) by the gold passage's reciprocal rank
    (0.3 for no retrieval) and save an LTR router trained on those labels."""
    from ltrr.features import extract_raw
    from ltrr.retrieval import Pool
    from ltrr.routers.ltr import LTRRouter

    ds = load_dataset(write_dataset(root / "ds"))
    (root / "c.toml").write_text(config_text(root / "ds", root / "run"))
    cfg = load_config(root / "c.toml")
    pool = Pool.from_run_config(cfg)
    pool.build(ds.corpus, root / "idx")
    pool.load(root / "idx")
    results = pool.search(ds.queries)
    raw = extract_raw(ds.queries, results, arms=pool.arm_names, no_retrieval=["none"],
                      embedding_source=pool.embedding_source())
    gold = dict(zip(ds.qrels["qid"], ds.qrels["docid"], strict=True))
    rr = {(q, a): 1.0 / r for q, a, r, d in zip(results["qid"], results["arm"], results["rank"], results["docid"],
                                                strict=True) if gold.get(q) == d}
    labels = pd.DataFrame([(q, a, 0.3 if a == "none" else rr.get((q, a), 0.0))
                           for q in ds.queries["qid"] for a in pool.arm_names], columns=["qid", "arm", "norm_gain"])
    router = LTRRouter(ranker="xgboost-pointwise", features="paper", random_state=0, index_dir=str(root / "idx"),
                       pool_config={"retrievers": cfg.retrievers, "rerankers": cfg.rerankers, "arms": cfg.arms,
                                    "seed": cfg.seed})
    router.fit(raw, labels).save(root / "router")
    return root / "router", router, raw, results, ds


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_router(tmp_path_factory.mktemp("pt"))


def test_experiment_routed_row_equals_ltrrs_own_figure(trained, tmp_path):
    from ltrr.eval.retrieval import routed_results, summary_table
    from ltrr.integrations.pyterrier import LTRRouterTransformer

    folder, router, raw, results, ds = trained
    routed = LTRRouterTransformer(folder)
    bm25, dense = routed.arms["bm25"], routed.arms["dense"]
    topics = ds.queries.rename(columns={"question": "query"})[["qid", "query"]]
    qrels = ds.qrels.rename(columns={"docid": "docno", "relevance": "label"})
    from ir_measures import RR, nDCG

    table = pt.Experiment([bm25, dense, routed], topics, qrels, [nDCG @ 10, RR], names=["bm25", "dense", "routed"],
                          baseline=0, correction="bonferroni", save_dir=str(tmp_path))
    table = table.set_index("name")
    assert {"nDCG@10 p-value", "RR p-value corrected"} <= set(table.columns)
    # ltrr's own figure: the router's choices on the batch features, the chosen arms' rows
    choice = router.choose(raw)
    mine = summary_table(pd.concat([results, routed_results(results, choice, name="routed")]), ds.queries, ds.qrels,
                         ["nDCG@10", "RR"], arms=["bm25", "dense", "routed"])
    for name in ("bm25", "dense", "routed"):
        assert table.loc[name, "nDCG@10"] == pytest.approx(mine.loc[name, "nDCG@10"], abs=1e-12), name
        assert table.loc[name, "RR"] == pytest.approx(mine.loc[name, "RR"], abs=1e-12), name
    assert choice.nunique() > 1  # the router routes, it does not always pick one arm
    assert sorted(os.listdir(tmp_path))[:3] == ["aggregated.csv", "bm25.res.gz", "dense.res.gz"]


def test_routed_frame_has_arm_and_router_score_and_composes(trained):
    from ltrr.integrations.pyterrier import LTRRouterTransformer

    folder, router, raw, results, ds = trained
    routed = LTRRouterTransformer(folder)
    topics = ds.queries.rename(columns={"question": "query"})[["qid", "query"]].head(12)
    out = routed(topics)
    assert {"qid", "query", "docno", "score", "rank", "arm", "router_score"} <= set(out.columns)
    for _, g in out.groupby("qid"):
        assert g["arm"].nunique() == 1 and g["rank"].tolist() == list(range(len(g)))
        assert (np.diff(g["score"].to_numpy()) < 0).all()  # scores order the ranking
    first = (routed >> pt.apply.generic(lambda df: df[df["rank"] == 0]))(topics)  # composes with >>
    assert (first["rank"] == 0).all() and set(first["qid"]) <= set(topics["qid"])
    with pytest.raises(DataError, match=r"lacks column\(s\) query"):
        routed(topics.rename(columns={"query": "text"}))
    # the input's other columns pass through, as a PyTerrier retriever's do (query_0 of a rewrite)
    rewritten = topics.assign(query_0=topics["query"], query=topics["query"] + " capital")
    kept = routed(rewritten)
    assert (kept["query_0"] == kept["qid"].map(dict(zip(topics["qid"], topics["query"], strict=True)))).all()
    assert (kept["query"].str.endswith(" capital")).all()
    empty = routed(rewritten.head(0))
    assert "query_0" in empty.columns and empty["router_score"].dtype == np.float64  # as with rows


def test_routing_retrieves_once_and_gives_what_the_arms_give(trained):
    """With ltrr's own arms the routed rows come from the search the features were made from;
    they equal the rows of the chosen arms' transformers run apart (over another pool object)."""
    from ltrr.integrations.pyterrier import LTRRouterTransformer, arms

    folder, *_, ds = trained
    routed = LTRRouterTransformer(folder)
    topics = ds.queries.rename(columns={"question": "query"})[["qid", "query"]]
    pool = routed.arms["bm25"].pool  # the router's own pool (its default arms')
    calls = []
    search = pool.search
    pool.search = lambda queries, *a, **k: calls.append(len(queries)) or search(queries, *a, **k)
    try:
        once = routed(topics)
    finally:
        del pool.search
    assert calls == [len(topics)]  # one search of every arm, no second one per chosen arm
    other = LTRRouterTransformer(folder)
    apart = LTRRouterTransformer(folder, arms=arms(other.arms["bm25"].pool))  # not the router's pool: run apart
    pd.testing.assert_frame_equal(once, apart(topics))
    assert once["arm"].nunique() > 1
    # an input that carries arm and router_score columns gets the router's, not arm_x / arm_y
    carried = routed(topics.assign(arm="stale", router_score="stale"))
    pd.testing.assert_frame_equal(carried[once.columns], once)
    assert not {"arm_x", "arm_y", "router_score_x"} & set(carried.columns)


def test_an_arms_scores_for_a_query_do_not_depend_on_its_batch(trained):
    """The raw-or-1/rank choice was made over every query of the batch: a sampled rerank's
    scores for one query changed with the others (pt.Experiment's batch_size)."""
    from ltrr.integrations.pyterrier import LTRRouterTransformer

    folder, *_, ds = trained
    arm = LTRRouterTransformer(folder).arms["bm25+stoch"]
    topics = ds.queries.rename(columns={"question": "query"})[["qid", "query"]]
    whole = arm(topics)
    alone = pd.concat([arm(topics.iloc[[i]]) for i in range(len(topics))], ignore_index=True)
    pd.testing.assert_frame_equal(whole.reset_index(drop=True), alone)


def test_a_results_frame_is_refused_and_a_blank_query_skipped(trained):
    from ltrr.integrations.pyterrier import LTRRouterTransformer

    folder, *_, ds = trained
    routed = LTRRouterTransformer(folder)
    topics = ds.queries.rename(columns={"question": "query"})[["qid", "query"]].head(3)
    results = routed.arms["bm25"](topics)
    for t in (routed, routed.arms["bm25"]):
        with pytest.raises(DataError, match=r"is a retriever: it takes queries \(qid, query\), not a results frame"):
            t(results)
    blank = pd.concat([topics, pd.DataFrame({"qid": ["x"], "query": ["  "]})], ignore_index=True)
    for t in (routed, routed.arms["bm25"]):
        with pytest.warns(UserWarning, match="skipping the empty query of qid 'x'"):
            out = t(blank)
        assert "x" not in set(out["qid"]) and set(out["qid"]) <= set(topics["qid"])


def test_arm_mapping_must_cover_every_arm_the_router_can_choose(trained):
    from ltrr.integrations.pyterrier import LTRRouterTransformer

    folder, router, *_ = trained
    own = LTRRouterTransformer(router).arms
    with pytest.raises(ConfigError, match=r"missing 'bm25\+stoch', 'dense'"):
        LTRRouterTransformer(folder, {"bm25": own["bm25"]})
    with pytest.raises(ConfigError, match=r"not an arm of the router 'BM25'"):
        LTRRouterTransformer(folder, {**own, "BM25": own["bm25"]})
    # the no-retrieval arm may be left out: its queries get no passages
    mapping = {a: t for a, t in own.items() if a != "none"}
    assert list(LTRRouterTransformer(folder, mapping).arms) == ["bm25", "bm25+stoch", "dense"]


@pytest.mark.slow  # executes the notebook end to end
@pytest.mark.parametrize("design", [False, True], ids=["defaults-in-sample", "design-router"])
def test_notebook_runs(trained, tmp_path, monkeypatch, design):
    """The notebook on the tiny router, measured at the arms' k (5 here). With its default paths,
    from the notebooks/ folder of a project (they are taken from the folder holding setup.cfg), on
    a router trained on every query: said to be in-sample. With a ``<ranker>-design`` router of
    the run named by the environment (a copy of the tiny router stands in for a design-only one):
    on the protocol's test part alone."""
    import shutil

    import nbformat
    from nbclient import NotebookClient

    from ltrr.pipeline import Run

    folder, *_ = trained
    root = folder.parent  # train_router's folder: the dataset ds, the config c.toml
    kernel_dir = tmp_path
    for var in ("LTRR_PT_ROUTER", "LTRR_PT_DATASET", "LTRR_PT_CONFIG", "LTRR_DATA_DIR"):
        monkeypatch.delenv(var, raising=False)
    if design:
        config = root / "c.toml"
        run = Run(load_config(config))
        folder = shutil.copytree(folder, run.workdir / "models" / "xgboost-pointwise-design", dirs_exist_ok=True)
        n_test = len(run.protocol_part("test")[0])
        monkeypatch.setenv("LTRR_PT_CONFIG", str(config))
        monkeypatch.setenv("LTRR_PT_ROUTER", str(folder))
        monkeypatch.setenv("LTRR_PT_DATASET", str(root / "ds"))
    else:  # the defaults: runs/demo/models/lambdamart-listwise and data/built/demo-grown
        project = tmp_path / "project"
        (project / "notebooks").mkdir(parents=True)
        (project / "setup.cfg").touch()
        shutil.copytree(folder, project / "runs" / "demo" / "models" / "lambdamart-listwise")
        shutil.copytree(root / "ds", project / "data" / "built" / "demo-grown")
        kernel_dir = project / "notebooks"
    monkeypatch.setenv("LTRR_PT_IMPORT", "_wiki")  # the fast hash encoder of the tiny pool
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    nb = nbformat.read(Path(__file__).parent.parent / "notebooks" / "pyterrier.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(kernel_dir)}}).execute()
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "routed" in text and all(m in text for m in ("P@5", "R@5", "nDCG@5", "RR"))
    assert "nDCG@10" not in text
    if design:
        assert f"out of sample: {n_test} topics, the test part" in text and "in-sample" not in text
    else:
        assert "in-sample: lambdamart-listwise was trained on every labelled query" in text
        assert "out of sample" not in text and list((project / "notebooks").iterdir()) == []


def test_a_router_with_a_relative_index_dir_is_routed_from_any_folder(trained, tmp_path, monkeypatch, capsys):
    """router.json keeps `index_dir` as `ltrr train` gave it, relative to the project folder
    ("data/indexes/demo-grown"): `ltrr route`, `LTRRouter.load` and the notebook (whose kernel
    runs in notebooks/) said "no index; build it first" outside that folder. The index is found
    from the current folder, then from the model folder's ancestors; none found names the paths."""
    import shutil

    from ltrr._errors import NotBuiltError
    from ltrr.cli import main
    from ltrr.integrations.pyterrier import LTRRouterTransformer
    from ltrr.routers import resolve_index_dir
    from ltrr.routers.ltr import LTRRouter

    folder, router, *_ = trained
    project = tmp_path / "project"
    shutil.copytree(router.index_dir, project / "data" / "indexes" / "tiny")
    model = project / "runs" / "tiny" / "models" / "m"
    LTRRouter.load(folder).set_params(index_dir="data/indexes/tiny").save(model)
    assert '"index_dir": "data/indexes/tiny"' in (model / "router.json").read_text()  # kept as given
    (project / "notebooks").mkdir()
    question = "what is the capital?"
    monkeypatch.chdir(project)
    expected = LTRRouter.load(model).route(question)
    for cwd in (project / "notebooks", tmp_path):
        monkeypatch.chdir(cwd)
        assert LTRRouter.load(model).route(question).equals(expected)
        assert list(LTRRouterTransformer(model).arms) == list(LTRRouterTransformer(folder).arms)
        capsys.readouterr()
        assert main(["route", str(model), question, "--json"]) == 0
        assert pd.read_json(io.StringIO(capsys.readouterr().out))["arm"].tolist() == expected["arm"].tolist()
    with pytest.warns(UserWarning, match="is not under the current folder: using .*tiny, found above the router's folder"):
        assert resolve_index_dir("data/indexes/tiny", model) == project / "data" / "indexes" / "tiny"
    # a same-named index folder above the router holding another corpus's index is refused
    other = tmp_path / "elsewhere"
    shutil.copytree(model, other / "deep" / "runs" / "m")
    from ltrr.retrieval import Pool

    pc = router.pool_config
    pool = Pool.from_config(pc["retrievers"], pc["arms"], pc.get("rerankers"), seed=pc.get("seed", 0))
    from _wiki import wiki_corpus

    pool.build(wiki_corpus(limit=50), other / "data" / "indexes" / "tiny")  # another corpus, same settings
    assert json.loads((model / "router.json").read_text())["index_corpus_sha256"]
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="found above the router's folder"), \
            pytest.raises(NotBuiltError, match="was built over other documents than the dataset's"):
        LTRRouter.load(other / "deep" / "runs" / "m").make_pool()
    monkeypatch.chdir(project)
    assert resolve_index_dir("data/indexes/tiny", model) == Path("data/indexes/tiny")  # as given, from here
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NotBuiltError, match=r"index folder 'nowhere/idx' \(as the router was trained, relative "
                                            r"to the folder it was trained in\) not found; tried .*nowhere/idx, "):
        resolve_index_dir("nowhere/idx", model)
