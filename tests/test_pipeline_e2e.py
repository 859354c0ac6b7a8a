"""The whole main job on a small dataset with a tiny real model: determinism, skips, notebook.

Every test passes alone. The runs that several tests read (run "a", and "proto" with its
protocol) are module-scoped fixtures (`run_a`, `proto`): the first test that needs one builds
it, the others reuse it, so the module builds each once, whatever the order or selection.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ltrr.cli import main

pytestmark = pytest.mark.slow

WORDS = ["canberra", "paris", "everest", "nile", "leonardo"]
TYPES = ["alpha", "beta", "gamma"]


def _dataset(root: Path) -> Path:
    ds = root / "ds"
    if ds.exists():
        return ds
    # answers are the first word of some passages, so arms differ in utility
    ds.mkdir()
    with (ds / "corpus.jsonl").open("w") as fh:
        for i in range(60):
            w = WORDS[i % 5]
            fh.write(json.dumps({"docid": f"d{i}", "title": "", "text": f"{WORDS[(i * 7) % 5]} {w} is the capital of {WORDS[(i + 1) % 5]} number {i}"}) + "\n")
    with (ds / "queries.jsonl").open("w") as fh:
        for i in range(48):
            fh.write(json.dumps({"qid": f"q{i:02d}", "question": f"what is the capital of {WORDS[i % 5]} {i}",
                                 "answers": [WORDS[(i + 1) % 5]], "qtype": TYPES[i % 3], "group": f"g{i // 2}"}) + "\n")
    return ds


def _register_reader():
    """A deterministic stand-in LLM: answers with the first word of the last document shown.

    The tiny random model of `_tiny_llm` never produces a gold answer, so every label would tie;
    this reader gives arms different utilities, which is what the pipeline's mechanics need.
    The real backend's labelling path is tested in test_labels.py (kill and resume).
    """
    from ltrr.generation import generators
    from ltrr.generation.base import Generation, Generator

    if "test-last-doc" in generators:
        return

    class Reader(Generator):
        backend = "test-last-doc"

        def __init__(self, model=None):
            self.model = model

        @property
        def identity(self):
            return "test-last-doc-1"

        def generate(self, prompts, params=None):
            out = []
            for p in prompts:
                text = p if isinstance(p, str) else "\n".join(m["content"] for m in p)
                docs = text.split("Document ")[1:]
                word = docs[-1].split(":", 1)[1].split()[0] if docs else "unknown"
                out.append(Generation(text=word, prompt_tokens=len(text.split()), completion_tokens=1))
            return out

    generators.register("test-last-doc", Reader)


def _config(root: Path, name: str, model: Path, seed: int) -> Path:
    cfg = root / f"{name}.toml"
    cfg.write_text(f"""
[run]
name = "{name}"
seed = {seed}
workdir = "{root / name}"
[data]
dataset = "{_dataset(root)}"
[retrievers.bm25]
type = "bm25"
[[arms]]
name = "bm25"
retriever = "bm25"
k = 3
[[arms]]
name = "bm25-top1"
retriever = "bm25"
k = 1
cost = 0.5
[[arms]]
name = "none"
retriever = "none"
[generation]
backend = "test-last-doc"
max_new_tokens = 8
cache = "{root / 'cache.sqlite'}"
[labels]
metric = "f1"
noise_floor_arm = "bm25"
[train]
rankers = ["lambdamart-listwise", "svm-pointwise", "ffn-pairwise"]
[eval]
splits = ["balanced", "leave-one-type-out"]
n_bootstrap = 200
""")
    return cfg


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    model = root / "unused-model"
    _register_reader()
    old = os.environ.get("LTRR_DATA_DIR")
    os.environ["LTRR_DATA_DIR"] = str(root / "data")
    yield root, model
    # later test modules (the README test) use the data root they started with
    if old is None:
        os.environ.pop("LTRR_DATA_DIR", None)
    else:
        os.environ["LTRR_DATA_DIR"] = old


def _main_out(root: Path, argv: list[str]) -> str:
    """``ltrr <argv>`` run from ``root`` (features/<run>/ is written under the working
    directory), asserted to exit 0; returns what it printed on stdout."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.chdir(root)
        code = main(argv)
    assert code == 0, f"ltrr {' '.join(argv)} exited {code}:\n{err.getvalue()}"
    return out.getvalue()


@pytest.fixture(scope="module")
def run_a(project):
    """Run "a" (seed 7), run once for the module by the first test that needs it: its config,
    and what that first, cold `ltrr run` printed (every stage computed)."""
    root, model = project
    cfg = _config(root, "a", model, 7)
    return cfg, _main_out(root, ["run", str(cfg)])


@pytest.fixture(scope="module")
def proto(project):
    """Run "proto" (seed 7, a replicate template and a [protocol] of two seeds) and its
    protocol, once for the module: its config, and what the first `ltrr protocol` printed."""
    root, model = project
    cfg = _config(root, "proto", model, 7)
    text = cfg.read_text().replace('noise_floor_arm = "bm25"', 'noise_floor_arm = "bm25"\nreplicate_template = "short_answer_b"')
    cfg.write_text(text + '\n[protocol]\nrankers = ["lambdamart-listwise", "svm-pointwise"]\nseeds = [7, 8]\nn_folds = 3\n'
                   'routers = ["knn:n_neighbors=5"]\n')
    _main_out(root, ["run", str(cfg)])
    return cfg, _main_out(root, ["protocol", str(cfg)])


def test_run_twice_same_seed_identical_and_skips(project, run_a, capsys, monkeypatch):
    root, model = project
    monkeypatch.chdir(root)  # features/<run>/ is written under the working directory
    a, out = run_a  # the first run of a, made by the fixture
    b = _config(root, "b", model, 7)
    # one short headline, then where the full tables are, not their cells
    assert "Headline (" in out and "Pre-registered (seed 7" in out and "Wilcoxon p = " in out
    assert "Cost: the router's arms" in out and "full tables" in out and "plot:" in out
    # and where its figures reproduce: the machine's vendor and kernels, from environment.json
    assert "Computed on " in out and "kernels" in out.split("Computed on ", 1)[1].splitlines()[0]
    assert "Mean downstream utility" not in out
    # the paper's splits are drawn from every query: the report says to choose nothing on them
    report = (root / "a" / "reports" / "eval.md").read_text()
    assert "the protocol's test part included (the paper's splits): read them to explore, and choose no design" in report
    assert main(["run", str(b)]) == 0
    # b's retrieval, [features] and kernels are a's: its tables are copied from features/a, not made again
    assert "[features] copied from features/a (made of the same inputs) -> features/b" in capsys.readouterr().out
    ra, rb = (root / "a" / "reports" / "results.csv").read_bytes(), (root / "b" / "reports" / "results.csv").read_bytes()
    assert ra == rb
    assert main(["run", str(a)]) == 0
    out = capsys.readouterr().out
    for stage in ("retrieve", "label", "features", "eval"):
        assert f"[{stage}] skipped: inputs unchanged" in out
    for png in ("utility", "headroom", "per_type", "cost_utility"):
        assert (root / "a" / "reports" / "plots" / f"{png}.png").stat().st_size > 1000


def test_one_config_name_in_two_workdirs_never_reads_the_others_features(project, capsys, monkeypatch):
    """features/<name>/ is shared by every workdir of a config name: tables another workdir wrote
    since are made again, never passed as fresh, and a later stage refuses them until then."""
    root, model = project
    monkeypatch.chdir(root)
    one = _config(root, "shared", model, 7)
    two = root / "shared-8.toml"  # the same name, another workdir and seed (so other retrieval)
    two.write_text(one.read_text().replace("seed = 7", "seed = 8").replace(str(root / "shared"), str(root / "shared8")))
    for cfg in (one, two):
        assert main(["retrieve", str(cfg)]) == 0 and main(["label", str(cfg)]) == 0
        assert main(["features", str(cfg)]) == 0
    capsys.readouterr()
    meta = json.loads((root / "features" / "shared" / "raw_meta.json").read_text())
    assert meta["inputs"] == json.loads((root / "shared8" / "stages" / "features.json").read_text())["fingerprint"]
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import stages

    assert not stages.get("features").is_fresh(Run(load_config(str(one))))  # its record alone says fresh
    from ltrr.pipeline.stages import stage_status

    said = {r["stage"]: r for r in stage_status(Run(load_config(str(one))))}["features"]
    assert said["state"] == "to run" and said["detail"].startswith("its outputs were made of other inputs")
    assert main(["eval", str(one)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # refused before the stage reads a table: the features stage is to run for this config
    assert len(err) == 1 and "stage eval reads the features stage's outputs" in err[0]
    assert "its outputs were made of other inputs" in err[0]
    assert not (root / "shared" / "reports" / "results.csv").exists()
    assert main(["features", str(one)]) == 0
    out = capsys.readouterr().out
    # made again: computed, or copied from features/a when the first test's config (the same
    # retrieval) ran before this test
    assert "[features] skipped" not in out
    assert "[features] copied from features/a" in out or "[features] start" in out
    assert main(["eval", str(one)]) == 0
    assert main(["features", str(one)]) == 0
    assert "[features] skipped: inputs unchanged" in capsys.readouterr().out
    assert stages.get("features").is_fresh(Run(load_config(str(one))))


def test_other_seed_changes_the_splits(project, run_a, capsys, monkeypatch):
    root, model = project
    monkeypatch.chdir(root)
    c = _config(root, "c", model, 8)
    assert main(["run", str(c)]) == 0
    capsys.readouterr()
    a = pd.read_csv(root / "a" / "reports" / "results.csv")
    c_ = pd.read_csv(root / "c" / "reports" / "results.csv")
    na = a.loc[a["split"] == "balanced", "n_test"].iloc[0], a.loc[a["split"] == "balanced", "mean_utility"].tolist()
    nc = c_.loc[c_["split"] == "balanced", "n_test"].iloc[0], c_.loc[c_["split"] == "balanced", "mean_utility"].tolist()
    assert na != nc


def test_train_and_route(project, run_a, capsys, monkeypatch):
    root, model = project
    monkeypatch.chdir(root)
    a, _ = run_a
    assert main(["train", str(a), "--ranker", "xgboost-pairwise"]) == 0
    capsys.readouterr()
    assert main(["route", str(root / "a" / "models" / "xgboost-pairwise"), "--json", "what is the capital of paris"]) == 0
    ranking = json.loads(capsys.readouterr().out)
    assert sorted(r["arm"] for r in ranking) == ["bm25", "bm25-top1", "none"]
    assert main(["train", str(a), "--ranker", "nosuch"]) == 2
    assert "unknown ranker 'nosuch'" in capsys.readouterr().err
    # a router fitted on Dask (its model depends on the workers' partitions) is not kept by a local train
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    run = Run(load_config(str(a)), log=lambda m: None)
    run.stage_train("xgboost-pairwise", force=True, trained_on="dask")
    record = json.loads((root / "a" / "stages" / "train-xgboost-pairwise.json").read_text())
    assert record["trained_on"] == "dask" and record["fingerprint"].endswith(":dask")
    said = []
    Run(load_config(str(a)), log=said.append).stage_train("xgboost-pairwise")
    assert not any("skipped" in m for m in said)  # fitted again, here
    Run(load_config(str(a)), log=said.append).stage_train("xgboost-pairwise")
    assert "[train] skipped" in said[-1]
    # the router answers by the generator and template its labels measured (generator.json), cached
    model = root / "a" / "models" / "xgboost-pairwise"
    rec = json.loads((model / "generator.json").read_text())
    assert rec == {"generation": {"backend": "test-last-doc"}, "template": "short_answer"}
    assert main(["route", str(model), "--answer", "what is the capital of paris"]) == 0
    said = capsys.readouterr().out.strip().splitlines()[-1]
    assert said.startswith("answer (") and said.split(": ", 1)[1] in WORDS + ["unknown"]
    from ltrr.routers import LTRRouter

    gen = LTRRouter.load(model).answering_generator()
    assert gen.identity == "test-last-doc-1" and type(gen).__name__ == "CachedGenerator"
    (model / "generator.json").unlink()  # a router saved before the record: the train stage saves it again
    assert main(["train", str(a), "--ranker", "xgboost-pairwise"]) == 0
    assert "[train] skipped" not in capsys.readouterr().out and (model / "generator.json").is_file()
    (model / "generator.json").write_text("[1, 2]")
    assert main(["route", str(model), "--answer", "what is the capital of paris"]) == 2
    assert "generator.json: expected a JSON object" in capsys.readouterr().err
    assert main(["train", str(a), "--ranker", "xgboost-pairwise", "--force"]) == 0


def test_missing_stage_output_is_named(project, capsys, monkeypatch):
    root, model = project
    monkeypatch.chdir(root)
    d = _config(root, "d", model, 7)
    assert main(["eval", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltrr: error: stage eval needs") and "labels.parquet" in err and "stage label" in err


def test_notebook_executes_on_the_run(project, run_a, monkeypatch):
    """The analysis notebook, run as Jupyter runs it (the kernel in the project's notebooks/)
    with the default run directory: it finds runs/demo from the project root (the folder holding
    setup.cfg), makes no folder in notebooks/, and no output of it says nan."""
    import re

    import nbformat
    from nbclient import NotebookClient

    root, _ = project
    proj = root / "nbproj"  # a project folder whose runs/demo is run "a"
    (proj / "notebooks").mkdir(parents=True, exist_ok=True)
    (proj / "setup.cfg").touch()
    (proj / "runs").mkdir(exist_ok=True)
    if not (proj / "runs" / "demo").exists():
        (proj / "runs" / "demo").symlink_to(root / "a", target_is_directory=True)
    monkeypatch.delenv("LTRR_RUN_DIR", raising=False)
    monkeypatch.setenv("LTRR_NOTEBOOK_OUT", str(root / "nb"))
    nb = nbformat.read(Path(__file__).parent.parent / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(proj / "notebooks")}}).execute()
    assert list((proj / "notebooks").iterdir()) == []
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    texts = [o.get("text", "") for o in outputs] + [v for o in outputs for k, v in o.get("data", {}).items()
                                                   if k.startswith("text/")]
    assert any(str(proj.resolve() / "runs" / "demo") in t for t in texts)  # the run directory it printed
    nans = [t for t in texts if re.search(r"\bnan%?\b", t, re.IGNORECASE)]
    assert not nans, nans
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4
    for png in ("utility", "headroom", "cost_utility"):
        assert (root / "nb" / f"{png}.png").stat().st_size > 1000


def test_no_headroom_prints_words_not_nan(project, capsys, monkeypatch):
    """Two arms that retrieve the same passages and a closed-book arm that never wins: the
    oracle equals the best single arm on every split. The tables, notes and plots say so."""
    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "flat", model, 7)
    text = cfg.read_text().replace('name = "bm25-top1"\nretriever = "bm25"\nk = 1', 'name = "bm25-copy"\nretriever = "bm25"\nk = 3')
    cfg.write_text(text)
    assert main(["run", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower(), out
    assert "no headroom on this split: every arm ties or 'bm25' is best" in out
    assert "captured n/a (no headroom" in out  # the headline
    assert "no headroom: the best single arm is best on every query" in out  # the label summary
    report = (root / "flat" / "reports" / "eval.md").read_text()
    assert "nan" not in report.lower() and "no headroom on this split" in report
    assert "| ltrr:lambdamart-listwise | no headroom |" in report
    assert "noise alone makes (the bm25 arm's passages in another order), as a share of each split's" in report
    assert (root / "flat" / "reports" / "plots" / "headroom.png").stat().st_size > 1000


def test_protocol_preregisters_then_tests_once(project, proto):
    root, model = project
    _, out = proto  # the protocol's first run, made by the fixture
    assert "Pre-registered (seed 7" in out and "Wilcoxon p = " in out and "Over 2 partition seeds" in out
    pre = json.loads((root / "proto" / "protocol" / "seed-7" / "preregistration.json").read_text())
    head = json.loads((root / "proto" / "protocol" / "seed-7" / "headline.json").read_text())
    assert pre["router"] in {c["router"] for c in pre["candidates"]} and len(pre["candidates"]) == 3
    assert pre["candidates"][2]["router"] == "knn:n_neighbors=5" and pre["candidates"][2]["label"] == "utility"
    assert head["headline"]["n_test"] == pre["n_test"] and pre["power"]["mde"] > 0
    # replicate labels of exactly the test part, under the reworded template
    rep = pd.read_parquet(root / "proto" / "labels" / "replicate.parquet")
    assert rep["qid"].nunique() == pre["n_test"] and set(rep["template"]) == {"short_answer_b@1"}
    nc = head["headline"]["noise_corrected"]
    assert nc["n"] == pre["n_test"] and "Noise-corrected headroom" in out
    assert {r["router"] for r in head["secondary"]} == {c["router"] for c in pre["candidates"]}


def test_protocol_design_only_preregisters_the_same_choice_without_test_labels(project, proto, monkeypatch,
                                                                                tmp_path):
    """`run_protocol(design_only=True)` (after the `proto` fixture's protocol), given labels
    whose test part is missing and whose remaining test rows are garbage: the same
    preregistration.json, byte for byte, as the full protocol's; a design query without complete
    labels is a clear error."""
    import numpy as np

    from ltrr._errors import DataError
    from ltrr.config import load_config
    from ltrr.eval.headline import run_protocol
    from ltrr.eval.protocol import design_test_partition
    from ltrr.pipeline import Run

    root, model = project
    monkeypatch.chdir(root)
    run = Run(load_config(proto[0]), log=lambda m: None)
    p = run.config.protocol
    labels, raw = run.training_inputs("protocol")
    part = design_test_partition(run.dataset.queries, design_size=p.design_size, random_state=7)
    test = labels["qid"].isin(set(part.test))
    # half of the test queries unlabelled, the rest failed with nonsense utilities: never read
    garbage = labels[test & labels["qid"].isin(list(part.test)[::2])].copy()
    garbage["utility"], garbage["failed"] = np.nan, True
    partial = pd.concat([labels[~test], garbage], ignore_index=True)
    monkeypatch.setattr(run, "training_inputs", lambda stage="train": (partial, raw))
    kwargs = dict(design_size=p.design_size, seed=7, rankers=p.rankers, train_labels=p.train_labels,
                  feature_sets=p.feature_sets or None, n_folds=p.n_folds, routers=p.routers)
    doc = run_protocol(run, out_dir=tmp_path / "pre", design_only=True, **kwargs)
    full = root / "proto" / "protocol" / "seed-7" / "preregistration.json"
    assert (tmp_path / "pre" / "preregistration.json").read_bytes() == full.read_bytes()
    assert doc == {"preregistration": json.loads(full.read_text())}
    assert not (tmp_path / "pre" / "headline.json").exists()
    # the full protocol with a failed test item: the same preregistration (its planned test size,
    # which no test item's outcome moves); the headline says how many test queries it left out
    from ltrr.eval.headline import protocol_summary

    one_failed = labels.copy()
    one_failed.loc[one_failed["qid"] == part.test[0], "failed"] = True
    monkeypatch.setattr(run, "training_inputs", lambda stage="train": (one_failed, raw))
    doc = run_protocol(run, out_dir=tmp_path / "failed", **kwargs)
    assert (tmp_path / "failed" / "preregistration.json").read_bytes() == full.read_bytes()
    assert doc["headline"]["n_test"] == doc["preregistration"]["n_test"] - 1
    assert doc["headline"]["n_test_left_out"] == 1
    assert f"Left out: 1 of the {doc['preregistration']['n_test']} pre-registered test queries" in protocol_summary([doc])
    assert "n_test_left_out" not in json.loads((root / "proto" / "protocol" / "seed-7" / "headline.json").read_text())["headline"]
    # a design query with a failed item: one clear error, no preregistration written
    broken = partial.copy()
    broken.loc[broken["qid"] == part.train[0], "failed"] = True
    monkeypatch.setattr(run, "training_inputs", lambda stage="train": (broken, raw))
    with pytest.raises(DataError, match="1 of the .* design queries have no complete labels"):
        run_protocol(run, out_dir=tmp_path / "broken", design_only=True, **kwargs)
    assert not (tmp_path / "broken").exists()


def test_cli_labels_the_cached_design_part_and_preregisters_before_the_test_part_exists(project, capsys,
                                                                                         monkeypatch):
    """The long-labelling workflow on the command line: the cache holds the design part only
    (filled as `benchmarks/relabel.py` does); `ltrr label --cache-only` labels from it with 0
    generator calls, the test items failed and tolerated; `ltrr protocol --design-only` writes the
    choice; once `ltrr label` has generated the rest, the full `ltrr protocol` writes the same
    preregistration, byte for byte. Bad input: a design part not in the cache, and --cache-only
    with the cache off, are one error line each, nothing written."""
    from ltrr.config import load_config
    from ltrr.eval.protocol import design_test_partition
    from ltrr.pipeline import Run

    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "early", model, 7)
    text = cfg.read_text().replace('noise_floor_arm = "bm25"', 'noise_floor_arm = "bm25"\nreplicate_template = "short_answer_b"')
    text = text.replace(f'cache = "{root / "cache.sqlite"}"', f'cache = "{root / "early-cache.sqlite"}"')
    cfg.write_text(text + '\n[protocol]\nrankers = ["lambdamart-listwise", "svm-pointwise"]\nn_folds = 3\n')
    # a design part not in the (empty) cache: the design-only choice is refused
    assert main(["retrieve", str(cfg)]) == 0 and main(["label", str(cfg), "--cache-only"]) == 0
    assert "not served from the cache (missing, or cached in another context: failed items)" in capsys.readouterr().out
    assert main(["features", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["protocol", str(cfg), "--design-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "design queries have no complete labels" in err
    assert not (root / "early" / "protocol").exists()
    assert main(["label", str(cfg), "--cache-only", "--no-cache"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    # the design part generated (into the cache only), then labelled and pre-registered from it
    run = Run(load_config(cfg), log=lambda m: None)
    part = design_test_partition(run.dataset.queries, design_size=0.7, random_state=7)
    run.stage_label(only=list(part.train))
    assert main(["label", str(cfg), "--cache-only"]) == 0
    out = capsys.readouterr().out
    assert "0 generator calls" in out
    assert "items are not served from the cache (missing, or cached in another context: failed items)" in out
    assert json.loads((root / "early" / "stages" / "label.json").read_text())["fingerprint"].split(":")[1].startswith("failed-")
    assert main(["protocol", str(cfg), "--design-only"]) == 0
    out = capsys.readouterr().out
    assert "Pre-registered (seed 7" in out and "no test label was read" in out
    early = (root / "early" / "protocol" / "seed-7-design-only" / "preregistration.json").read_bytes()
    assert not (root / "early" / "protocol" / "seed-7").exists()
    # the rest generated; the full protocol chooses the same, byte for byte
    assert main(["label", str(cfg)]) == 0 and main(["protocol", str(cfg)]) == 0
    capsys.readouterr()
    assert (root / "early" / "protocol" / "seed-7" / "preregistration.json").read_bytes() == early


def test_context_pack_on_the_protocol_test_part(project, proto, capsys, monkeypatch):
    """`ltrr context pack` (after the `proto` fixture's protocol): packed contexts within each
    budget, the plain routed arm's row, utilities for the knapsack packings, gaps and ablations."""
    root, model = project
    monkeypatch.chdir(root)
    cfg, _ = proto
    assert main(["context", "pack", str(cfg), "--token-budgets", "16,40", "--answer", "--ablations"]) == 0
    out = capsys.readouterr().out
    assert "router (the protocol's choice)" in out and "optimality gap" in out
    per = pd.read_parquet(root / "proto" / "context" / "packing_per_query.parquet")
    pre = json.loads((root / "proto" / "protocol" / "seed-7" / "preregistration.json").read_text())
    assert per["qid"].nunique() == pre["n_test"]
    for b in (16, 40):
        for sel in ("knapsack", "greedy", "greedy-skip"):
            assert (per[per["context"] == f"packed@{b}/{sel}"]["tokens"] <= b).all()
    # exact >= greedy on the selector objective, query by query
    ks = per[per["context"] == "packed@40/knapsack"].set_index("qid")["importance"]
    gr = per[per["context"] == "packed@40/greedy"].set_index("qid")["importance"]
    assert (ks + 1e-9 >= gr.loc[ks.index]).all()
    assert per[per["context"] == "packed@40/knapsack"]["utility"].notna().all()
    assert per[per["context"] == "plain"]["utility"].notna().all()
    # only the answered (knapsack) packings carry a utility: never one averaged over closed-book queries alone
    assert per[per["context"].isin(["packed@40/greedy", "packed@16/greedy-skip"])]["utility"].isna().all()
    table = pd.read_csv(root / "proto" / "context" / "packing.csv")
    assert table.loc[table["context"] == "packed@40/greedy", "utility"].isna().all()
    assert {"plain", "budget=2048", "no-similarity@16", "no-prior@16"} <= set(table["context"])
    assert main(["context", "pack", str(cfg), "--token-budgets", "x"]) == 2
    assert "--token-budgets must be comma-separated integers" in capsys.readouterr().err


def test_context_pack_compares_the_marginal_knapsack_with_both_objectives_gaps(project, proto, capsys,
                                                                                   monkeypatch):
    """`ltrr context pack --selector knapsack-marginal --selectors ...` (issue 29): the chosen
    selector is compared with the others, and each objective's gap is against its own exact
    selector: no selector beats the exact one on its objective."""
    root, model = project
    monkeypatch.chdir(root)
    cfg, _ = proto
    assert main(["context", "pack", str(cfg), "--token-budgets", "40", "--selector", "knapsack-marginal",
                 "--selectors", "knapsack,greedy"]) == 0
    per = pd.read_parquet(root / "proto" / "context" / "packing_per_query.parquet")
    assert (per[per["context"] == "packed@40/knapsack-marginal"]["tokens"] <= 40).all()
    gaps = pd.read_csv(root / "proto" / "context" / "packing_gaps.csv")
    assert set(zip(gaps["objective"], gaps["selector"], strict=True)) == {
        ("importance", "greedy"), ("importance", "knapsack-marginal"),
        ("marginal_importance", "knapsack"), ("marginal_importance", "greedy")}
    assert (gaps["mean_gap"].dropna() >= -1e-9).all()


def test_context_pack_answers_in_shards_that_the_run_without_a_shard_replays(project, proto, capsys,
                                                                                 monkeypatch):
    """`ltrr context pack --answer --shard I/N` answers every N-th test query into the cache and
    writes no table; after all shards the run without one generates nothing and writes the
    tables. A shard without --answer, or a malformed one, is one error line and exit 2."""
    import shutil
    import sqlite3

    from ltrr.config import load_config
    from ltrr.pipeline import Run

    root, model = project
    monkeypatch.chdir(root)
    cfg, _ = proto
    shutil.rmtree(root / "proto" / "context", ignore_errors=True)
    cache = Run(load_config(str(cfg))).cache_path

    def rows() -> int:
        with sqlite3.connect(cache) as conn:
            return conn.execute("SELECT COUNT(*) FROM generations").fetchone()[0]

    args = ["context", "pack", str(cfg), "--token-budgets", "24", "--selector", "greedy-density", "--answer"]
    answered = 0
    for i in (0, 1):
        assert main([*args, "--shard", f"{i}/2"]) == 0
        out = capsys.readouterr().out
        assert f"shard {i}/2: " in out and "no table written" in out
        answered += int(out.split(f"shard {i}/2: ")[1].split()[0])
    pre = json.loads((root / "proto" / "protocol" / "seed-7" / "preregistration.json").read_text())
    assert answered == pre["n_test"]
    assert not (root / "proto" / "context" / "packing.csv").exists()
    n = rows()
    assert main(args) == 0
    capsys.readouterr()
    assert rows() == n  # every answer was a shard's cache hit
    per = pd.read_parquet(root / "proto" / "context" / "packing_per_query.parquet")
    assert per.loc[per["context"] == "packed@24/greedy-density", "utility"].notna().all()
    for bad, says in ((["--shard", "0/2"], "give --answer too"), (["--answer", "--shard", "2/2"], "got 2/2"),
                      (["--answer", "--shard", "a/b"], "--shard must look like I/N")):
        assert main(["context", "pack", str(cfg), "--token-budgets", "24", *bad]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1


def test_eval_and_protocol_identical_with_1_and_2_threads(project, capsys, monkeypatch):
    """The same config and seed in separate processes with OMP_NUM_THREADS 1 and 2 (and the
    protocol's candidates in 1 and 2 processes): the eval's results.csv and the protocol's
    headline are identical; a re-run skips a seed whose inputs are unchanged."""
    import subprocess
    import sys

    from ltrr._cpu import numeric_kernels

    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "threads", model, 7)
    text = cfg.read_text().replace('rankers = ["lambdamart-listwise", "svm-pointwise", "ffn-pairwise"]',
                                   'rankers = ["lambdamart-listwise"]')
    cfg.write_text(text + '\n[protocol]\nrankers = ["lambdamart-listwise", "svm-pointwise"]\nn_folds = 3\n')
    assert main(["run", str(cfg)]) == 0
    capsys.readouterr()
    outputs = []
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "LTRR_DATA_DIR": str(root / "data")}
        for cmd in (["eval", str(cfg), "--force"], ["protocol", str(cfg), "--force", "--n-jobs", threads]):
            proc = subprocess.run([sys.executable, "-m", "ltrr.cli", "-q", *cmd], cwd=root, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr
        seed7 = root / "threads" / "protocol" / "seed-7"
        outputs.append(((root / "threads" / "reports" / "results.csv").read_bytes(),
                        (seed7 / "headline.json").read_bytes(), (seed7 / "preregistration.json").read_bytes()))
        assert set(json.loads((seed7 / "timings.json").read_text())) == {"design_seconds", "cv_seconds"}
        machine = json.loads((seed7 / "environment.json").read_text())  # where it ran, beside the results too
        assert machine["kernels"] == numeric_kernels() and machine["versions"]["lightgbm"]
    # byte-identical: wall-clock times and the machine live in timings.json and environment.json
    assert outputs[0] == outputs[1]
    head = root / "threads" / "protocol" / "seed-7" / "headline.json"
    before = head.stat().st_mtime_ns
    assert main(["protocol", str(cfg)]) == 0
    assert head.stat().st_mtime_ns == before  # skipped: inputs unchanged


def test_eval_fits_in_2_processes_give_the_same_tables(project, capsys, monkeypatch):
    """``[eval] n_jobs = 2`` fits one job per split in worker processes (a torch ranker
    among them): results.csv is byte-identical to the one-process run's, the setting is no input
    of the stage's fingerprint, and a bad value is one clear error line."""
    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "jobs", model, 7)
    assert main(["run", str(cfg)]) == 0
    capsys.readouterr()
    results = root / "jobs" / "reports" / "results.csv"
    one = results.read_bytes()
    cfg.write_text(cfg.read_text().replace("n_bootstrap = 200", "n_bootstrap = 200\nn_jobs = 2"))
    assert main(["eval", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "[eval] skipped: inputs unchanged" in out
    # a warm run still says where the plots are, as the cold one did
    plots = root / "jobs" / "reports" / "plots"
    assert all(f"plot:   {plots / name}" in out for name in ("utility.png", "headroom.png", "cost_utility.png"))
    assert main(["eval", str(cfg), "--force"]) == 0
    assert ", 2 processes" in capsys.readouterr().out
    assert results.read_bytes() == one
    cfg.write_text(cfg.read_text().replace("n_jobs = 2", "n_jobs = 0"))
    assert main(["eval", str(cfg), "--force"]) == 2
    err = capsys.readouterr().err
    assert "config key [eval].n_jobs must be an integer >= 1, got 0" in err and err.count("\n") == 1  # on load
    assert results.read_bytes() == one  # nothing half-written


def test_label_shards_fill_the_cache_replicate_included(project, capsys, monkeypatch):
    """`ltrr label --shard i/N` fills the cache with its queries and their replicate: the
    unsharded run afterwards makes no generator call and writes both tables."""
    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "shards", model, 7)
    text = cfg.read_text().replace('noise_floor_arm = "bm25"', 'noise_floor_arm = "bm25"\nreplicate_template = "short_answer_b"')
    cfg.write_text(text.replace(f"cache = \"{root / 'cache.sqlite'}\"", f"cache = \"{root / 'shards.sqlite'}\""))
    assert main(["index", str(cfg)]) == 0
    for i in range(2):
        assert main(["label", str(cfg), "--shard", f"{i}/2"]) == 0
    assert not (root / "shards" / "labels" / "labels.parquet").exists()
    # a chunk of design queries alone has no replicate query: nothing to do there, no error
    from ltrr.config import load_config
    from ltrr.eval.protocol import design_test_partition
    from ltrr.pipeline import Run

    run = Run(load_config(cfg), log=lambda m: None)
    part = design_test_partition(run.dataset.queries, design_size=run.config.protocol["design_size"],
                                 random_state=run.config.seed)
    run.stage_label(only=sorted(part.train)[:1], tolerate_failures=True)
    capsys.readouterr()
    assert main(["label", str(cfg)]) == 0
    summary = json.loads((root / "shards" / "labels" / "summary.json").read_text())
    assert summary["generator_calls"] == 0 and summary["replicate"]["queries"] > 0
    assert (root / "shards" / "labels" / "replicate.parquet").exists()
    assert main(["label", str(cfg), "--shard", "2/2", "--force"]) == 2
    assert "--shard must be I/N with 0 <= I < N, got 2/2" in capsys.readouterr().err

    # `ltrr cache export` writes exactly what the labelling used, replicate included: merged into
    # an empty cache, it labels the run again with no generator call
    out = root / "shards-export.jsonl.gz"
    assert main(["cache", "export", str(cfg), str(out)]) == 0
    assert main(["cache", "merge", str(out), "--into", str(root / "from-export.sqlite")]) == 0
    cfg.write_text(cfg.read_text().replace(f"cache = \"{root / 'shards.sqlite'}\"",
                                           f"cache = \"{root / 'from-export.sqlite'}\""))
    capsys.readouterr()
    assert main(["label", str(cfg), "--force"]) == 0
    again = json.loads((root / "shards" / "labels" / "summary.json").read_text())
    assert again["generator_calls"] == 0 and again["cache_hits"] > 0


def test_tolerated_failures_are_retried_by_the_next_label_run(project, capsys, monkeypatch):
    """A labelling whose failed items were tolerated does not mark the stage done: the next
    `ltrr label` generates the failed items again (every other item from the cache), and the
    label fingerprint the later stages see changes; a complete labelling is then skipped."""
    from ltrr.config import load_config
    from ltrr.generation import generators
    from ltrr.generation.base import Generation
    from ltrr.generation.cache import CachedGenerator
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import label_fingerprint

    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "retry", model, 7)
    cfg.write_text(cfg.read_text().replace(f"cache = \"{root / 'cache.sqlite'}\"", f"cache = \"{root / 'retry.sqlite'}\""))
    assert main(["index", str(cfg)]) == 0 and main(["retrieve", str(cfg)]) == 0

    class Flaky(generators.get("test-last-doc")):
        def generate(self, prompts, params=None):  # every third prompt of a call fails
            out = super().generate(prompts, params)
            return [Generation(text="", error="server down") if i % 3 == 0 else g for i, g in enumerate(out)]

    run = Run(load_config(cfg), log=lambda m: None)
    real = run.make_generator()
    run.stage_label(tolerate_failures=True, generator=CachedGenerator(Flaky(), real.cache))
    first = json.loads((root / "retry" / "labels" / "summary.json").read_text())
    fp = label_fingerprint(run)
    assert first["failed_items"] > 0 and run.fingerprint_of("label") == f"{fp}:failed-{first['failed_items']}"
    capsys.readouterr()
    assert main(["label", str(cfg)]) == 0
    assert f"{first['failed_items']} items failed last time: labelling again" in capsys.readouterr().out
    second = json.loads((root / "retry" / "labels" / "summary.json").read_text())
    # only what failed is generated again (the noise-floor control's failed calls included)
    assert second["failed_items"] == 0 and 0 < second["generator_calls"] < first["generator_calls"]
    assert second["cache_hits"] > 0 and run.fingerprint_of("label") == fp
    assert main(["label", str(cfg)]) == 0
    assert "[label] skipped: inputs unchanged" in capsys.readouterr().out


def test_an_untolerated_labelling_failure_leaves_no_record_that_vouches_for_its_tables(project, monkeypatch):
    """The labels table is written before the failures raise: the stage record is written with
    them (under a failed fingerprint), so an older record of other inputs never says they are fresh."""
    from ltrr._errors import GenerationError
    from ltrr.config import load_config
    from ltrr.generation import generators
    from ltrr.generation.base import Generation
    from ltrr.generation.cache import CachedGenerator
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import label_fingerprint

    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "unretried", model, 7)
    cfg.write_text(cfg.read_text().replace(f"cache = \"{root / 'cache.sqlite'}\"", f"cache = \"{root / 'unretried.sqlite'}\""))
    assert main(["index", str(cfg)]) == 0 and main(["retrieve", str(cfg)]) == 0
    run = Run(load_config(cfg), log=lambda m: None)
    run.record("label", label_fingerprint(run), 1.0)  # a record that says "fresh" (another config's, say)

    class Down(generators.get("test-last-doc")):
        def generate(self, prompts, params=None):
            return [Generation(text="", error="server down") for _ in prompts]

    with pytest.raises(GenerationError, match="items failed"):
        run.stage_label(tolerate_failures=False, generator=CachedGenerator(Down(), run.make_generator().cache))
    assert (root / "unretried" / "labels" / "labels.parquet").exists()
    assert run.fingerprint_of("label").startswith(f"{label_fingerprint(run)}:failed-")
    assert not Run(load_config(cfg)).is_fresh("label", label_fingerprint(run), [root / "unretried" / "labels" / "labels.parquet"])


def test_policy_stage_train_and_route(project, capsys, monkeypatch):
    """[policy] makes `ltrr run` evaluate budgeted policies; `ltrr policy train` saves one that
    `ltrr route` reads; bad budgets and another pool are one-line errors."""
    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "pol", model, 7)
    text = cfg.read_text().replace('rankers = ["lambdamart-listwise", "svm-pointwise", "ffn-pairwise"]',
                                   'rankers = ["lambdamart-listwise"]')
    cfg.write_text(text + '\n[policy]\nfractions = [0.25, 0.75]\nn_folds = 3\nparams = {n_steps = 60}\n')
    assert main(["run", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "Budgeted routing policy" in out and "| grpo |" in out and "| exact |" in out
    assert "| grpo - exact, utility |" in out
    ev = json.loads((root / "pol" / "policy" / "eval-features" / "eval.json").read_text())
    assert [b["fraction"] for b in ev["budgets"]] == [0.25, 0.75]
    for b in ev["budgets"]:
        assert b["oracle"]["utility"] >= b["policy_grpo"]["utility"] - 1e-9
        # 14 test queries hold the budget only loosely; the demo's figures are in the notes
        assert 0 <= b["policy_grpo"]["cost"] <= 1.0 and isinstance(b["policy_exact"]["within_budget"], bool)
        # GRPO against the exact trainer, paired on the same test queries
        tp = b["trainers_paired"]
        assert (tp["a"], tp["b"]) == ("grpo", "exact") and tp["a_better"] + tp["b_better"] == tp["n_differ"]
        assert tp["mean_diff"] == pytest.approx(b["policy_grpo"]["utility"] - b["policy_exact"]["utility"])
        assert 0.0 <= tp["p_value"] <= 1.0 and (tp["n_differ"] > 0 or tp["p_value"] == 1.0)
    assert (root / "pol" / "policy" / "eval-features" / "cost_utility.png").stat().st_size > 1000
    # wall-clock time stays out of the tables (timings.json holds it), so a rerun gives the same
    # tables; the cost-penalised baseline reports whether it held the budget; eval.json names
    # the saved policy
    assert "train s" not in out and "seconds" not in json.dumps(ev)
    assert all(isinstance(b["ltrr_cost_penalised"]["within_budget"], bool) for b in ev["budgets"])
    timings = json.loads((root / "pol" / "policy" / "eval-features" / "timings.json").read_text())
    assert len(timings["fits"]) == 4 and all(f["seconds"] >= 0 for f in timings["fits"])
    run_policy = root / "pol" / "policies" / Path(ev["saved_policy"]).name
    assert (run_policy / "policy.json").is_file()
    # --on design: an inner split of the design part, so the test part's queries are never read
    assert main(["policy", "eval", str(cfg), "--part", "design"]) == 0
    assert capsys.readouterr().out.startswith("Held-out design queries")
    inner = json.loads((root / "pol" / "policy" / "eval-features-design" / "eval.json").read_text())
    assert inner["on"] == "design" and inner["n_train"] + inner["n_test"] == ev["n_train"]
    # --seed: another partition (and head seed), in a folder of its own, the run's tables untouched
    assert main(["policy", "eval", str(cfg), "--seed", "8"]) == 0
    other = json.loads((root / "pol" / "policy" / "eval-features-seed8" / "eval.json").read_text())
    assert other["seed"] == 8 and ev["seed"] == 7 and other["n_train"] + other["n_test"] == ev["n_train"] + ev["n_test"]
    assert json.loads((root / "pol" / "policy" / "eval-features" / "eval.json").read_text()) == ev
    assert main(["run", str(cfg)]) == 0
    assert "[policy] skipped: inputs unchanged" in capsys.readouterr().out
    # a standalone evaluation rewrites the stage's eval.json (without saved_policy): the stage
    # record names the policy, so the next run still skips
    assert main(["policy", "eval", str(cfg)]) == 0
    assert main(["run", str(cfg)]) == 0
    assert "[policy] skipped: inputs unchanged" in capsys.readouterr().out
    # the saved policy is one of the stage's outputs: deleted, it is trained again
    shutil.rmtree(run_policy)
    assert main(["run", str(cfg)]) == 0
    assert "[policy] skipped" not in capsys.readouterr().out and (run_policy / "policy.json").is_file()
    assert json.loads((root / "pol" / "policy" / "eval-features" / "eval.json").read_text()) == ev
    assert main(["policy", "train", str(cfg), "--cost-budget", "0.4", "--trainer", "exact"]) == 0
    folder = root / "pol" / "policies" / "features-exact-B0.4"
    assert (folder / "policy.json").exists() and str(folder) in capsys.readouterr().out
    assert main(["route", str(folder), "what is the capital of paris"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[0].lstrip().startswith("1 ")
    policies = root / "pol" / "policies"
    saved = sorted(p.name for p in policies.iterdir())  # the run's policy, and the one above
    assert "features-exact-B0.4" in saved and len(saved) == 2
    assert main(["policy", "train", str(cfg), "--cost-budget", "5"]) == 2
    assert "above the most expensive arm's cost 1.0" in capsys.readouterr().err
    assert main(["policy", "train", str(cfg), "--cost-budget", "-1"]) == 2
    assert "the budget must be a number >= 0, got -1" in capsys.readouterr().err
    # a refused budget writes no policy folder (features-grpo-B5, features-grpo-B-1)
    assert sorted(p.name for p in policies.iterdir()) == saved
    # token costs: the prompt tokens an arm adds over no retrieval, plus its measured latency
    cfg.write_text(cfg.read_text().replace("[policy]\n", '[policy]\ncost = "tokens"\nlatency_weight = 0.0\n'))
    assert main(["policy", "eval", str(cfg)]) == 0
    ev_config = ev
    ev = json.loads((root / "pol" / "policy" / "eval-features-tokens" / "eval.json").read_text())
    assert json.loads((root / "pol" / "policy" / "eval-features" / "eval.json").read_text()) == ev_config
    rec = ev["costs_record"]
    assert rec["cost"] == "tokens" and rec["costs"]["none"] == 0.0 and rec["costs"]["bm25"] > rec["costs"]["bm25-top1"] > 0
    assert set(rec["latency_seconds"]) == {"bm25", "bm25-top1", "none"}
    cfg.write_text(cfg.read_text().replace('cost = "tokens"', 'cost = "euros"'))
    assert main(["policy", "eval", str(cfg)]) == 2
    assert "config key [policy].cost must be one of config, tokens, got 'euros'" in capsys.readouterr().err
    # token costs are measured on the training queries alone, and a query with a failed item is
    # left out of its part (its NaN made every mean NaN, and training raised)
    import ltrr.policy.run as policy_run

    cfg.write_text(cfg.read_text().replace('cost = "euros"', 'cost = "tokens"'))
    seen = {}
    real = policy_run.arm_costs

    def spy(run, labels):
        seen["qids"] = set(labels["qid"].astype(str))
        return real(run, labels)

    path = root / "pol" / "labels" / "labels.parquet"
    kept = path.read_bytes()
    labels = pd.read_parquet(path)
    first, last = sorted(set(labels["qid"]))[0], sorted(set(labels["qid"]))[-1]
    labels.loc[labels.index[labels["qid"] == first][:1], "failed"] = True
    labels.loc[labels.index[labels["qid"] == last][:1], "failed"] = True
    labels.to_parquet(path)
    try:
        monkeypatch.setattr(policy_run, "arm_costs", spy)
        assert main(["policy", "eval", str(cfg)]) == 0
        assert "[policy] left 2 queries with a failed or missing label item out of the evaluation" in \
            capsys.readouterr().out
        # training leaves them out too (one failed item blocked `ltrr policy train`)
        monkeypatch.setattr(policy_run, "arm_costs", real)
        assert main(["policy", "train", str(cfg), "--cost-budget", "0.4"]) == 0
        assert "[policy] left 2 queries with a failed or missing label item out of training" in \
            capsys.readouterr().out
    finally:
        path.write_bytes(kept)
    failed = json.loads((root / "pol" / "policy" / "eval-features-tokens" / "eval.json").read_text())
    assert failed["n_train"] + failed["n_test"] == ev["n_train"] + ev["n_test"] - 2
    assert np.isfinite(failed["ltrr_top1"]["utility"]) and len(seen["qids"]) == failed["n_train"]
    assert first not in seen["qids"] and last not in seen["qids"]


def test_exclude_qtypes(project, capsys, monkeypatch):
    """[data] exclude_qtypes leaves a query type out of the run; a type the dataset lacks is a
    one-line error before any stage runs."""
    root, model = project
    monkeypatch.chdir(root)
    cfg = _config(root, "excl", model, 7)
    base = cfg.read_text()
    cfg.write_text(base.replace("[data]\n", '[data]\nexclude_qtypes = ["alpha"]\n'))
    assert main(["index", str(cfg)]) == 0
    assert main(["label", str(cfg)]) == 0
    qids = set(pd.read_parquet(root / "excl" / "retrieval" / "results.parquet")["qid"])
    assert qids and not any(int(q.removeprefix("q")) % 3 == 0 for q in qids)  # TYPES[0] = "alpha"
    capsys.readouterr()
    cfg.write_text(base.replace("[data]\n", '[data]\nexclude_qtypes = ["multihop"]\n'))
    assert main(["label", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[data] exclude_qtypes names 'multihop', not a query type of" in err[0]
