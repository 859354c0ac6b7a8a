"""End-to-end CLI runs on a tiny dataset, and the one-line errors for bad input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from ltrr._errors import ConfigError
from ltrr.cli import main

DOCS = [
    ("canberra", "Canberra", "Canberra is the capital city of Australia."),
    ("paris", "Paris", "Paris is the capital and largest city of France."),
    ("everest", "Mount Everest", "Mount Everest is Earth's highest mountain above sea level."),
    ("nile", "Nile", "The Nile is a major north-flowing river in northeastern Africa."),
    ("mona", "Mona Lisa", "The Mona Lisa is a portrait painting by Leonardo da Vinci."),
]
QUERIES = [
    ("q1", "capital of australia", ["Canberra"]),
    ("q2", "who painted the mona lisa", ["Leonardo da Vinci"]),
    ("q3", "highest mountain", ["Mount Everest"]),
]


def _tiny(tmp_path, with_dense=False, encoder="minilm"):
    ds = tmp_path / "tiny"
    ds.mkdir()
    with (ds / "corpus.jsonl").open("w") as fh:
        for d, t, x in DOCS:
            fh.write(json.dumps({"docid": d, "title": t, "text": x}) + "\n")
    with (ds / "queries.jsonl").open("w") as fh:
        for q, text, a in QUERIES:
            fh.write(json.dumps({"qid": q, "question": text, "answers": a, "qtype": "t"}) + "\n")
    with (ds / "qrels.jsonl").open("w") as fh:
        for (q, _, _), d in zip(QUERIES, ["canberra", "mona", "everest"], strict=True):
            fh.write(json.dumps({"qid": q, "docid": d, "relevance": 1}) + "\n")
    dense = f"""
[retrievers.dense]
type = "dense"
encoder = "{encoder}"
[[arms]]
name = "dense"
retriever = "dense"
k = 2
""" if with_dense else ""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(f"""
[run]
name = "tiny"
workdir = "{tmp_path / 'run'}"
[data]
dataset = "{ds}"
[retrievers.bm25]
type = "bm25"
[[arms]]
name = "bm25"
retriever = "bm25"
k = 2
[[arms]]
name = "none"
retriever = "none"
{dense}""")
    return cfg, ds


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("LTRR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)  # features/<run name> is relative to the working folder: never the repo's
    return tmp_path


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("ltrr: error: ")
    return err[0]


def test_status_says_where_each_stage_stands_and_runs_nothing(env, capsys):
    """``ltrr status``: up to date, to run (and why), waits (on the earlier stage its inputs name);
    it builds, retrieves and writes nothing."""
    cfg, ds = _tiny(env)
    states = lambda: {r["stage"]: (r["state"], r["detail"]) for r in json.loads(capsys.readouterr().out)}  # noqa: E731
    assert main(["status", str(cfg), "--json"]) == 0
    st = states()
    assert st["data"][0] == "built" and st["index"][0] == "to build"
    assert st["index"][1].startswith(f"no {env / 'data' / 'indexes' / 'tiny-'}")  # the folder's name and path digest
    assert {s for s, _ in list(st.values())[2:]} <= {"waits", "not configured"} and st["retrieve"] == ("waits", "on index")
    assert not (env / "data" / "indexes").exists() and not (env / "run").exists()  # nothing was made
    assert main(["index", str(cfg)]) == 0 and main(["retrieve", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["status", str(cfg), "--json"]) == 0
    st = states()
    assert st["retrieve"][0] == "up to date" and st["retrieve"][1].startswith("ran ")
    assert st["label"] == ("to run", "never ran") and st["features"] == ("to run", "never ran")  # both read retrieve only
    assert st["eval"] == ("waits", "on label") and st["train"] == ("waits", "on label")
    assert st["headline"] == ("waits", "on label")
    cfg.write_text(cfg.read_text().replace("k = 2", "k = 3"))
    assert main(["status", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "retrieve  to run         its inputs changed since it ran (ran " in out
    assert "features  waits          on retrieve" in out
    assert f"`ltrr run {cfg}` runs retrieve, then checks label, features, eval, train, headline (skipped if" in out
    assert main(["status", str(env / "nope.toml")]) == 2
    assert "does not exist" in _err(capsys)


def test_status_pools_the_label_shards_progress_snapshots(env, capsys, monkeypatch):
    """Each ``ltrr label --shard I/N`` process writes its own snapshot (none for the whole stage),
    removed when it ends; ``ltrr status`` pools the shards': running while one runs, then how far the
    stopped ones got."""
    from _tiny_llm import save_tiny_llm

    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import label_fingerprint
    from ltrr.progress import StageProgress, progress_path

    cfg, _ = _tiny(env)
    # a tiny random model answers: the snapshots are the point here, not the answers (the
    # packaged one took 50 s of loading)
    save_tiny_llm(env / "tiny-llm")
    cfg.write_text(cfg.read_text() + f'\n[generation]\nbackend = "transformers"\nmodel = "{env / "tiny-llm"}"\n'
                   'template = "short_answer"\nmax_new_tokens = 4\n')
    assert main(["index", str(cfg)]) == 0 and main(["retrieve", str(cfg)]) == 0
    run = Run(load_config(str(cfg)))
    record, fp = run.stage_record("label"), label_fingerprint(run)
    seen: list[str] = []
    enter = StageProgress.__enter__
    monkeypatch.setattr(StageProgress, "__enter__", lambda self: (seen.append(self.path.name), enter(self))[1])
    assert main(["label", str(cfg), "--shard", "1/2"]) == 0
    assert seen and set(seen) == {"label.shard-1-of-2.progress.json"}  # its own, for the label phase
    assert not list(record.parent.glob("*.progress.json"))  # a shard that finished leaves none
    monkeypatch.setattr(StageProgress, "__enter__", enter)
    states = lambda: {r["stage"]: (r["state"], r["detail"]) for r in json.loads(capsys.readouterr().out)}  # noqa: E731
    capsys.readouterr()
    a, b = (StageProgress(progress_path(record, shard=(i, 2)), fingerprint=fp, phase="label", total=20, every_s=0)
            for i in (0, 1))
    a.__enter__(), b.__enter__()
    a.update(5), b.update(10)
    assert main(["status", str(cfg), "--json"]) == 0
    st = states()
    assert st["label"][0] == "running"
    assert st["label"][1].startswith("label shards running: 2 of 2 shards, 15 of 40 items (38%)")
    assert st["eval"] == ("waits", "on label")
    b.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)  # Ctrl-C in one shard
    assert main(["status", str(cfg), "--json"]) == 0
    assert states()["label"][1].startswith("label shards running: 1 of 2 shards, 15 of 40 items")
    a.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
    assert main(["status", str(cfg), "--json"]) == 0
    state, detail = states()["label"]
    assert state == "to run" and detail.startswith("label shards stopped: 2 shards at 15 of 40 items (38%)")
    cfg.write_text(cfg.read_text() + '\n[labels]\nmetric = "em"\n')
    assert main(["status", str(cfg), "--json"]) == 0
    assert states()["label"] == ("to run", "never ran")  # the shards measured other inputs


def test_status_follows_a_labelling_from_its_progress_snapshot(env, capsys):
    """A labelling that runs (in another process) is ``running`` with how far it got, and the
    stages after it wait on it; one stopped part way is ``to run`` with how far it got; a snapshot
    of other inputs (the config changed since) is not counted."""
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import label_fingerprint
    from ltrr.progress import StageProgress, progress_path

    cfg, _ = _tiny(env)
    assert main(["index", str(cfg)]) == 0 and main(["retrieve", str(cfg)]) == 0
    run = Run(load_config(str(cfg)))
    snap = progress_path(run.stage_record("label"))
    states = lambda: {r["stage"]: (r["state"], r["detail"]) for r in json.loads(capsys.readouterr().out)}  # noqa: E731
    capsys.readouterr()
    with StageProgress(snap, fingerprint=label_fingerprint(run), phase="label", total=40, every_s=0) as p:
        p.update(10)
        assert main(["status", str(cfg), "--json"]) == 0
        st = states()
        assert st["label"][0] == "running" and st["label"][1].startswith("label running: 10 of 40 items (25%)")
        assert f"(pid {os.getpid()}, updated" in st["label"][1]
        assert st["eval"] == ("waits", "on label") and st["features"] == ("to run", "never ran")
        assert main(["status", str(cfg)]) == 0
        assert f"label is running now; `ltrr status {cfg}` again to follow it" in capsys.readouterr().out
        with pytest.raises(KeyboardInterrupt, match="Ctrl-C"):
            with StageProgress(snap, fingerprint=label_fingerprint(run), phase="label", total=40, every_s=0) as q:
                q.update(30)
                raise KeyboardInterrupt("Ctrl-C")
    assert not snap.exists()  # the outer one ended normally: it removed the file
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C"), StageProgress(
            snap, fingerprint=label_fingerprint(run), phase="label", total=40) as q:
        q.update(30)
        raise KeyboardInterrupt("Ctrl-C")
    assert main(["status", str(cfg), "--json"]) == 0
    state, detail = states()["label"]
    assert state == "to run" and detail.startswith("label stopped at 30 of 40 items (75%) 0 s ago (KeyboardInterrupt)")
    cfg.write_text(cfg.read_text() + '\n[labels]\nmetric = "em"\n')
    assert main(["status", str(cfg), "--json"]) == 0
    assert states()["label"] == ("to run", "never ran")  # the snapshot measured other inputs
    # the agent stage checks its own inputs when it runs: its eval's snapshot names its folder
    cfg.write_text(cfg.read_text() + '[agent]\nenabled = true\n')
    agent = progress_path(run.stage_record("agent"))
    with StageProgress(agent, fingerprint="eval-sft", phase="agent eval (eval-sft)", total=150, every_s=0) as p:
        p.update(15)
        assert main(["status", str(cfg), "--json"]) == 0
        state, detail = states()["agent"]
        assert state == "running" and detail.startswith("agent eval (eval-sft) running: 15 of 150 items (10%)")
    assert main(["status", str(cfg), "--json"]) == 0
    assert states()["agent"][0] == "waits"  # on the labelling, once the eval is over


def test_an_edited_corpus_answers_or_query_type_runs_the_stages_that_read_them(env, capsys):
    """A dataset folder of the user's own has no build record: its corpus is hashed, so an edited
    document retrieves again (it was "up to date" with the old passages); edited gold answers, a
    query type or group change the labels' inputs, so every stage after them runs again."""
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import label_fingerprint

    cfg, ds = _tiny(env)
    assert main(["index", str(cfg)]) == 0 and main(["retrieve", str(cfg)]) == 0
    capsys.readouterr()
    retrieve = lambda: {r["stage"]: r for r in json.loads(capsys.readouterr().out)}["retrieve"]["state"]  # noqa: E731
    assert main(["status", str(cfg), "--json"]) == 0 and retrieve() == "up to date"
    labelled = label_fingerprint(Run(load_config(str(cfg))))
    corpus = ds / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace("Canberra is the capital city", "Sydney is the largest city"))
    assert main(["status", str(cfg), "--json"]) == 0 and retrieve() == "to run"
    assert main(["retrieve", str(cfg)]) == 0
    assert "Sydney is the largest city" in " ".join(pd.read_parquet(env / "run" / "retrieval" / "results.parquet")["text"])
    moved = label_fingerprint(Run(load_config(str(cfg))))  # the retrieval changed
    queries = ds / "queries.jsonl"
    queries.write_text(queries.read_text().replace('"Canberra"', '"Canberra", "ACT"'))
    answered = label_fingerprint(Run(load_config(str(cfg))))
    queries.write_text(queries.read_text().replace('"qtype": "t"}', '"qtype": "u"}', 1))
    typed = label_fingerprint(Run(load_config(str(cfg))))
    assert len({labelled, moved, answered, typed}) == 4
    assert label_fingerprint(Run(load_config(str(cfg)))) == typed  # nothing else moves it


@pytest.mark.parametrize("params, match", [
    ('{lambdamart-listwis = {n_estimators = 3}}', "names 'lambdamart-listwis', not a ranker"),
    ('{lambdamart-listwise = 5}', "params.lambdamart-listwise must be a table"),
    ('{lambdamart-listwise = {n_estimatorz = 3}}', "n_estimatorz is not a parameter of lambdamart-listwise"),
    ('{lambdamart-listwise = {random_state = 7}}', r"random_state: the rankers are seeded by \[run\] seed"),
])
def test_train_params_are_checked_before_any_training(env, params, match):
    """A misspelt ranker or a non-table was dropped silently (defaults trained); an unknown
    hyper-parameter was a TypeError traceback inside training."""
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    cfg, _ = _tiny(env)
    cfg.write_text(cfg.read_text() + f"\n[train]\nparams = {params}\n")
    with pytest.raises(ConfigError, match=match):
        Run(load_config(str(cfg))).make_router("ltrr", "lambdamart-listwise")


def test_run_make_router_gives_each_router_the_runs_seed_and_no_retrieval_arm(env):
    """Routers are built from their parameters (one seed, under one name), not by their names."""
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    cfg, _ = _tiny(env)
    cfg.write_text(cfg.read_text().replace('name = "none"', 'name = "closed-book"').replace(
        'name = "tiny"', 'name = "tiny"\nseed = 11'))
    run = Run(load_config(str(cfg)))
    assert run.make_router("random").random_state == 11
    assert run.make_router("no-retrieval").arm == "closed-book"
    assert run.make_router("maxsim").get_params() == {}


def test_a_packed_arms_normalised_settings_are_in_the_retrieve_fingerprint(env):
    """The fingerprint hashed the pack table as written: when the default of top_m changed (every
    listed arm), a run's old passages stayed "up to date"; and two spellings of one packing
    differed."""
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    cfg, _ = _tiny(env)
    base = cfg.read_text() + """
[[arms]]
name = "bm25-top1"
retriever = "bm25"
k = 1
[[arms]]
name = "packed"
retriever = "packed"
"""

    def fingerprint(pack: str) -> str:
        cfg.write_text(base + f"pack = {pack}\n")
        return Run(load_config(str(cfg))).retrieve_fingerprint()

    implicit = fingerprint('{arms = ["bm25", "bm25-top1"], budget = 64}')
    assert implicit == fingerprint('{arms = ["bm25", "bm25-top1"], budget = 64, top_m = 2, selector = "knapsack"}')
    assert implicit != fingerprint('{arms = ["bm25", "bm25-top1"], budget = 64, selector = "greedy"}')


def test_the_retrieve_fingerprint_is_the_datasets_content_not_its_path(env):
    """The fingerprint held the dataset's absolute path: two clones of one project (or one moved)
    fingerprinted every stage differently, and headline.json's inputs differed between them."""
    import shutil

    from ltrr.config import load_config
    from ltrr.pipeline import Run

    cfg, _ = _tiny(env)
    first = Run(load_config(str(cfg))).retrieve_fingerprint()
    moved = env / "elsewhere" / "tiny"
    shutil.copytree(env / "tiny", moved)
    cfg.write_text(cfg.read_text().replace(f'dataset = "{env / "tiny"}"', f'dataset = "{moved}"'))
    assert Run(load_config(str(cfg))).dataset_path == moved
    assert Run(load_config(str(cfg))).retrieve_fingerprint() == first
    with (moved / "corpus.jsonl").open("a") as fh:  # the content still counts
        fh.write(json.dumps({"docid": "new", "title": "New", "text": "A new document."}) + "\n")
    assert Run(load_config(str(cfg))).retrieve_fingerprint() != first


def test_a_bad_shard_fails_before_any_stage_runs(env, capsys):
    """--shard is checked with --scheduler, before the data, index and retrieve stages (it
    failed only after them: an index built for nothing)."""
    cfg, _ = _tiny(env)
    assert main(["label", str(cfg), "--shard", "2/2"]) == 2
    assert "--shard" in _err(capsys)
    assert main(["label", str(cfg), "--shard", "0/2", "--scheduler", "local:2"]) == 2
    assert "give --shard or --scheduler, not both" in _err(capsys)
    assert not (env / "data" / "indexes").exists() and not (env / "run").exists()


def test_a_negative_question_count_is_one_error_line(env, capsys):
    cfg, _ = _tiny(env)
    assert main(["label", str(cfg), "--questions", "-3"]) == 2
    assert "[data].max_queries must be an integer >= 0, got -3" in _err(capsys)  # checked on load


def test_a_closed_stdout_pipe_ends_the_command_quietly(env):
    """`ltrr ... | head`: the reader going away is exit 141 (as SIGPIPE in a shell), no traceback."""
    cfg, _ = _tiny(env)
    code = ("import sys, ltrr.cli as c\n"
            "def gone(msg): raise BrokenPipeError(32, 'Broken pipe')\n"
            f"c._out = gone\nsys.exit(c.main(['status', {str(cfg)!r}]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (res.returncode, res.stderr) == (141, "")


def test_help_is_fast_and_lazy():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, ltrr.cli; ltrr.cli.build_parser(); "
         "print(sorted(m for m in ('torch','transformers','pyserini','faiss','sentence_transformers','pandas','ragas',"
         "'importlib.metadata') if m in sys.modules))"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == "[]"  # importlib.metadata alone took 19 ms, for numpy's version (ltrr._cpu)


def test_installed_versions_are_read_beside_the_package_as_importlib_metadata_reads_them():
    from importlib import metadata

    from ltrr._cpu import _installed_version

    for dist in ("numpy", "pandas", "pytest"):
        assert _installed_version(dist) == metadata.version(dist)
    assert _installed_version("no_such_distribution_here") is None


def test_index_search_run_on_tiny_dataset(env, capsys):
    cfg, _ = _tiny(env)
    assert main(["index", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["search", str(cfg), "--arm", "bm25", "capital of australia"]) == 0
    out = capsys.readouterr().out
    assert "canberra" in out.splitlines()[0]
    assert main(["search", str(cfg), "--arm", "none", "capital of australia"]) == 0
    assert "retrieves nothing" in capsys.readouterr().out
    assert main(["run", str(cfg), "--retrieval-only"]) == 0
    out = capsys.readouterr().out
    assert "\n| nDCG@10 |" in out and (env / "run" / "retrieval" / "results.parquet").exists()
    assert main(["run", str(cfg), "--retrieval-only"]) == 0
    assert "[retrieve] skipped: inputs unchanged" in capsys.readouterr().out


def test_features_made_under_other_cpu_kernels_are_made_again(env, monkeypatch):
    """numpy's, faiss's and torch's kernels change the features' last bits (ltrr._cpu), so the
    features stage's inputs name them: a table made under other kernels is not reused."""
    import ltrr.pipeline.features
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    cfg, _ = _tiny(env)
    assert main(["index", str(cfg)]) == 0
    lines: list[str] = []
    run = Run(load_config(cfg), log=lines.append)
    run.stage_retrieve()
    run.stage_features()
    run.stage_features()
    assert "[features] skipped" in lines[-1]
    pinned = ltrr.pipeline.features.numeric_kernels()
    monkeypatch.setattr(ltrr.pipeline.features, "numeric_kernels", lambda: {**pinned, "numpy": "native"})
    run.stage_features()
    assert "[features] skipped" not in "\n".join(lines[-2:]) and "rows" in lines[-1]


def test_a_changed_ranker_default_redoes_the_stages_that_fit_it(env, monkeypatch):
    """The eval and train stages name the rankers' defaults among their inputs, so a release that
    changes one (svmrank-pairwise's iteration cap went from 100,000 to 1,000,000) refits them."""
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.evaluate import eval_fingerprint
    from ltrr.rankers import RankSVMRanker, ranker_defaults

    cfg, _ = _tiny(env)
    run = Run(load_config(cfg), log=lambda m: None)
    before = eval_fingerprint(run), run.train_fingerprint("svmrank-pairwise"), run.train_fingerprint("lambdamart-listwise")
    assert ranker_defaults("svmrank-pairwise")["max_iter"] == 1_000_000
    monkeypatch.setattr(RankSVMRanker.__init__, "__kwdefaults__",
                        {**RankSVMRanker.__init__.__kwdefaults__, "max_iter": 100_000})
    assert ranker_defaults("svmrank-pairwise")["max_iter"] == 100_000
    after = eval_fingerprint(run), run.train_fingerprint("svmrank-pairwise"), run.train_fingerprint("lambdamart-listwise")
    assert after[0] != before[0] and after[1] != before[1]
    assert after[2] == before[2]  # another ranker's fit is kept


@pytest.mark.slow
def test_dense_arm_through_cli(env, capsys):
    cfg, _ = _tiny(env, with_dense=True)
    assert main(["search", str(cfg), "--arm", "dense", "--json", "which river flows north in africa"]) == 2
    assert "ltrr index" in _err(capsys)  # index not built yet: a clear line, nothing written
    assert not (env / "data" / "indexes").exists()
    assert main(["index", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["search", str(cfg), "--arm", "dense", "--json", "which river flows north in africa"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["docid"] == "nile" and rows[0]["rank"] == 1


@pytest.mark.slow
def test_features_follow_the_pools_dense_encoder(env, capsys):
    """A pool whose dense arm uses e5 gets e5 query embeddings in its features (it used to be
    refused: the feature extractor defaulted to MiniLM queries against e5 passages)."""
    from ltrr.config import load_config
    from ltrr.features import read_feature_tables
    from ltrr.pipeline import Run

    cfg, _ = _tiny(env, with_dense=True, encoder="e5")
    assert main(["index", str(cfg)]) == 0
    run = Run(load_config(cfg), log=lambda m: None)
    run.stage_retrieve()
    raw = read_feature_tables(run.stage_features())
    assert raw.meta["encoder"] == "e5"
    assert raw.table.loc[raw.table["arm"] == "dense", "overall_sim"].notna().all()


def test_run_force_redoes_every_stage(env, monkeypatch):
    """`ltrr run --force` promises to redo stages even if up to date: every stage gets it (the
    label and features stages used to be skipped by their fingerprints)."""
    from ltrr import pipeline

    cfg, _ = _tiny(env)
    seen = {}

    def record(name, ret=None):
        def stage(self, *args, **kw):
            seen[name] = kw.get("force")
            return ret
        return stage

    monkeypatch.setattr(pipeline.Run, "stage_data", lambda self, force=False: None)
    monkeypatch.setattr(pipeline.Run, "stage_index", lambda self: None)
    monkeypatch.setattr(pipeline.Run, "stage_retrieve", record("retrieve"))
    monkeypatch.setattr(pipeline.Run, "retrieval_report", lambda self: None)
    monkeypatch.setattr(pipeline.Run, "stage_label", record("label"))
    monkeypatch.setattr(pipeline.Run, "stage_features", record("features"))
    monkeypatch.setattr(pipeline.Run, "stage_eval", record("eval", {}))
    monkeypatch.setattr(pipeline.Run, "stage_train", record("train", env / "model"))
    monkeypatch.setattr("ltrr.pipeline.stages.protocol_docs",
                        lambda run, seeds, force: [seen.__setitem__("headline", force)])
    for report in ("route_hint", "headline_text", "results_notes"):
        monkeypatch.setattr(f"ltrr.pipeline.stages.{report}", lambda *a: "")
    assert main(["run", str(cfg), "--force"]) == 0
    assert seen == {"retrieve": True, "label": True, "features": True, "eval": True, "train": True, "headline": True}
    assert main(["run", str(cfg)]) == 0
    assert seen == {"retrieve": False, "label": False, "features": False, "eval": False, "train": False,
                    "headline": False}


def test_unknown_arm(env, capsys):
    cfg, _ = _tiny(env)
    assert main(["index", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["search", str(cfg), "--arm", "bm99", "x"]) == 2
    assert "unknown arm 'bm99'" in _err(capsys)


def test_missing_index(env, capsys):
    cfg, _ = _tiny(env)
    assert main(["search", str(cfg), "--arm", "bm25", "capital"]) == 2
    assert "ltrr index" in _err(capsys)


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_query(env, capsys, text):
    cfg, _ = _tiny(env)
    main(["index", str(cfg)])
    capsys.readouterr()
    assert main(["search", str(cfg), "--arm", "bm25", text]) == 2
    assert "empty" in _err(capsys)


def test_label_builds_what_it_needs_first(env, monkeypatch):
    """On a fresh clone `ltrr label CONFIG` runs the data, index and retrieve stages before it
    labels (as `ltrr retrieve` does): a config naming the demo builder used to fail with "dataset
    folder data/built/demo does not exist"."""
    from ltrr import pipeline

    cfg, _ = _tiny(env)
    order = []
    monkeypatch.setattr(pipeline.Run, "stage_data", lambda self, force=False: order.append("data"))
    monkeypatch.setattr(pipeline.Run, "stage_index", lambda self: order.append("index"))
    monkeypatch.setattr(pipeline.Run, "stage_retrieve", lambda self, force=False: order.append("retrieve"))
    monkeypatch.setattr(pipeline.Run, "stage_label", lambda self, **kw: order.append("label"))
    assert main(["label", str(cfg)]) == 0
    assert order == ["data", "index", "retrieve", "label"]


def test_index_of_a_missing_dataset_folder_is_one_clear_error(env, capsys):
    """`ltrr index` runs the data stage first: a dataset folder that does not exist (and names no
    builder) is one error line and exit 2, with no index written."""
    cfg, _ = _tiny(env)
    cfg.write_text(cfg.read_text().replace(str(env / "tiny"), str(env / "nowhere")))
    assert main(["index", str(cfg)]) == 2
    assert "does not exist" in _err(capsys)
    assert not (env / "data" / "indexes").exists()


def test_bad_config_key(env, capsys):
    cfg, _ = _tiny(env)
    cfg.write_text(cfg.read_text().replace("[run]", "[run]\nseeed = 3"))
    assert main(["index", str(cfg)]) == 2
    assert "unknown config key [run].seeed" in _err(capsys)
    assert not (env / "data" / "indexes").exists()


def test_unknown_cpu_kernel_mode(env, capsys, monkeypatch):
    """A misspelt LTRR_CPU_KERNELS is one error line and exit 2 before any stage runs (import stays
    quiet and pins as by default; `numeric_kernels`, every stage's input, raises)."""
    cfg, _ = _tiny(env)
    monkeypatch.setenv("LTRR_CPU_KERNELS", "portabel")
    assert main(["index", str(cfg)]) == 2
    assert "LTRR_CPU_KERNELS='portabel' is not one of portable, avx2, native (unset means portable)" in _err(capsys)
    assert not (env / "data" / "indexes").exists()
    from ltrr._cpu import numeric_kernels

    with pytest.raises(ConfigError, match="LTRR_CPU_KERNELS"):
        numeric_kernels()


def test_malformed_jsonl_and_duplicates_via_cli(env, capsys):
    cfg, ds = _tiny(env)
    lines = (ds / "queries.jsonl").read_text().splitlines()
    (ds / "queries.jsonl").write_text("\n".join(lines[:1] + ['{"qid": "q9", "question": "x"'] + lines[1:]) + "\n")
    assert main(["data", "stats", str(ds)]) == 2
    assert "queries.jsonl:2: invalid JSON" in _err(capsys)
    (ds / "queries.jsonl").write_text("\n".join(lines + lines[:1]) + "\n")
    assert main(["run", str(cfg)]) == 2
    assert "duplicate qid 'q1'" in _err(capsys)
    assert not (env / "run" / "retrieval" / "results.parquet").exists()
    assert not (env / "data" / "indexes").exists()
    (ds / "queries.jsonl").write_text('{"qid": "q1"}\n')
    assert main(["data", "stats", str(ds)]) == 2
    assert "queries.jsonl:1: missing field question" in _err(capsys)


def test_unknown_dataset_builder(env, capsys):
    assert main(["data", "build", "nosuch"]) == 2
    assert "unknown dataset builder 'nosuch'" in _err(capsys)


def test_console_script_exit_code(env):
    cfg, _ = _tiny(env)
    proc = subprocess.run([sys.executable, "-m", "ltrr.cli", "search", str(cfg), "--arm", "bm25", "x"],
                          capture_output=True, text=True, env={**__import__("os").environ})
    assert proc.returncode == 2
    assert proc.stderr.startswith("ltrr: error:") and "Traceback" not in proc.stderr


def test_data_stats_prints_counts_as_integers(env, capsys):
    _, ds = _tiny(env)
    assert main(["data", "stats", str(ds)]) == 0
    out = capsys.readouterr().out
    assert "| t | 3 | 3 | 3.3 | 1.0 |" in out, out


def test_data_stats_of_one_beir_split_and_an_unknown_split(tmp_path, capsys):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "T", "text": "t1"}) + "\n")
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"{q}?"}) + "\n"
                                                    for q in ("q1", "q2", "q3")))
    (tmp_path / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td1\t1\n")
    assert main(["data", "stats", str(tmp_path), "--split", "dev"]) == 0
    assert "1 queries" in capsys.readouterr().out
    assert main(["data", "stats", str(tmp_path)]) == 0
    assert "3 queries" in capsys.readouterr().out
    assert main(["data", "stats", str(tmp_path), "--split", "test"]) == 2
    err = _err(capsys)
    assert "no qrels split 'test' (qrels/test.tsv); its splits: dev" in err


def test_quiet_and_verbose_set_the_level(env, capsys):
    cfg, _ = _tiny(env)
    assert main(["-q", "run", str(cfg), "--retrieval-only"]) == 0
    out = capsys.readouterr().out
    assert "[retrieve]" not in out and "[index]" not in out  # stage lines hidden
    assert "Retrieval effectiveness of each arm (ir_measures, all judged queries)" in out  # results still printed
    assert main(["--verbose", "run", str(cfg), "--retrieval-only"]) == 0
    out = capsys.readouterr().out
    assert "[retrieve] input fingerprint" in out and "[retrieve] skipped: inputs unchanged" in out
    assert main(["run", str(cfg), "--retrieval-only", "--force"]) == 0
    out = capsys.readouterr().out
    assert "input fingerprint" not in out
    assert "[retrieve] start: 3 queries x 2 arms" in out
    with pytest.raises(SystemExit, match="^2$"):  # argparse: not allowed together
        main(["-q", "-v", "run", str(cfg)])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.slow
def test_log_off_a_terminal_has_no_progress_redraws(env, tmp_path):
    """`ltrr run > log 2>&1`: no carriage returns (tqdm redraws) from ltrr or the libraries
    underneath (bm25s, sentence-transformers), and one start and one end line per stage."""
    import os

    cfg, _ = _tiny(env, with_dense=True)
    log = tmp_path / "log"
    with log.open("wb") as fh:
        proc = subprocess.run([sys.executable, "-m", "ltrr.cli", "run", str(cfg), "--retrieval-only"],
                              stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "LTRR_DATA_DIR": str(env / "data")},
                              cwd=tmp_path, timeout=300)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "\r" not in text
    assert "Batches" not in text and "it/s" not in text, text
    for stage in ("index", "retrieve"):
        assert f"[{stage}] start:" in text, text
    assert "[retrieve] 10 rows for 3 queries x 3 arms in " in text, text


def test_progress_bars_follow_the_terminal_and_the_level(monkeypatch):
    import logging

    from ltrr import _log

    monkeypatch.setattr(_log, "_interactive", lambda: True)
    monkeypatch.setattr(_log.logger, "level", logging.NOTSET)
    assert _log.progress_enabled()  # the Python API on a terminal or in a notebook
    monkeypatch.setattr(_log.logger, "level", logging.WARNING)
    assert not _log.progress_enabled()  # --quiet
    monkeypatch.setattr(_log.logger, "level", logging.INFO)
    monkeypatch.setattr(_log, "_interactive", lambda: False)
    assert not _log.progress_enabled()  # redirected to a file


def test_an_imported_ipykernel_is_not_a_notebook(monkeypatch):
    """A process that imported ipykernel (as an earlier notebook test in the same pytest worker
    may) but runs no kernel stays quiet off a terminal; inside a kernel's shell it draws."""
    import types

    from ltrr import _log

    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not _log._interactive()

    class ZMQInteractiveShell:  # the kernel's shell class, by name
        pass

    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: ZMQInteractiveShell()
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert _log._interactive()
    fake.get_ipython = lambda: None  # IPython imported, no shell running
    assert not _log._interactive()


def test_every_stage_is_a_command_and_retrieve_runs_alone(env, capsys):
    """`ltrr run`'s stages are registered in run order, each is also a command, and `ltrr retrieve`
    writes the retrieval results and their report by itself (indexing first); a stage's inputs'
    fingerprint is the one its stage record keeps."""
    from ltrr.cli import build_parser
    from ltrr.pipeline.stages import RUN_ORDER, stages

    assert set(RUN_ORDER) == set(stages.names())
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in RUN_ORDER:
        assert stages.get(name).command.split()[0] in sub.choices, name
    cfg, _ = _tiny(env)
    assert main(["retrieve", str(cfg)]) == 0
    out = capsys.readouterr().out
    # short on the terminal: every measure over all queries, the first per type; the rest in a file
    assert "Retrieval effectiveness of each arm (ir_measures, all judged queries)" in out
    assert "\n| measure |" in out and "\n| nDCG@10 |" in out and "\n| RR |" in out and "\n| P@1 |" in out
    assert "\nnDCG@10 per query type:\n| qtype |" in out and "\nRR per query type" not in out
    report = env / "run" / "reports" / "retrieval.md"
    assert f"every measure per query type: {report}" in out
    assert all(f"### {m}" in report.read_text() for m in ("nDCG@10", "RR", "P@1"))
    assert (env / "run" / "retrieval" / "results.parquet").is_file()
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    run = Run(load_config(str(cfg)), log=lambda m: None)
    retrieve = stages.get("retrieve")
    assert retrieve.fingerprint(run) == run.fingerprint_of("retrieve") and retrieve.is_fresh(run)
    assert not stages.get("features").is_fresh(run)  # never ran
    assert main(["retrieve", str(cfg)]) == 0  # unchanged inputs: skipped, same table
    out = capsys.readouterr().out
    assert "[retrieve] skipped: inputs unchanged" in out
    assert "Retrieval effectiveness of each arm (ir_measures, all judged queries)" in out


def test_old_flag_names_still_parse_with_a_deprecation_warning(capsys):
    """One name and one unit per concept (--part, --questions, --cost-budget, --token-budget[s]);
    each old name parses into the same value and says it is deprecated, on stderr."""
    from ltrr.cli import build_parser

    p = build_parser()
    cases = [
        (["policy", "eval", "c", "--on", "design"], "part", "design", "--part"),
        (["policy", "train", "c", "--budget", "0.4"], "cost_budget", 0.4, "--cost-budget"),
        (["agent", "eval", "c", "--n", "6"], "questions", 6, "--questions"),
        (["label", "c", "--max-queries", "5"], "questions", 5, "--questions"),
        (["route", "m", "q", "--context-budget", "64"], "token_budget", 64, "--token-budget"),
        (["context", "run", "c", "--budget", "64"], "token_budget", 64, "--token-budget"),
        (["context", "pack", "c", "--budgets", "16,40"], "token_budgets", "16,40", "--token-budgets"),
    ]
    for argv, dest, value, new in cases:
        assert getattr(p.parse_args(argv), dest) == value
        assert f"{argv[-2]} is deprecated; use {new}" in capsys.readouterr().err
        assert getattr(p.parse_args([*argv[:-2], new, argv[-1]]), dest) == value
        assert capsys.readouterr().err == ""
    assert p.parse_args(["policy", "eval", "c"]).part == "test"
    assert p.parse_args(["route", "m", "q"]).token_budget == 0
    with pytest.raises(SystemExit, match="^2$"):
        p.parse_args(["policy", "train", "c"])  # required under either name
    assert "--cost-budget" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="^0$"):
        p.parse_args(["policy", "eval", "-h"])
    help_text = capsys.readouterr().out
    assert "--part" in help_text and "protocol --seed" not in help_text  # no such flag exists


def test_quiet_worker_restarts_drops_only_lokys_restart_warning():
    """loky warns from its executor's manager thread when it replaces a worker that grew (the
    eval's and the protocol's parallel fits): inside `quiet_worker_restarts` that one warning is
    dropped, from any thread; every other warning still shows, and outside the block it shows."""
    import threading
    import warnings

    from ltrr._log import quiet_worker_restarts

    restart = "A worker stopped while some jobs were given to the executor. This can be caused by a too short"

    def from_a_thread(message):
        t = threading.Thread(target=warnings.warn, args=(message, UserWarning))
        t.start()
        t.join()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_worker_restarts():
            from_a_thread(restart)
            from_a_thread("something else")
        from_a_thread(restart)
    assert [str(w.message)[:20] for w in caught] == ["something else", restart[:20]]
