"""The replicate labels' failed items on the command line: counted as the main labels' are,
recorded so the next `ltrr label` generates them, and checked by `ltrr protocol` before it
writes anything; and the protocol's own fold count named in its errors.

A small run with test_pipeline_e2e's deterministic stand-in reader (each test makes its own
folder), so the replicate can be left out of the generation cache: the main labels are
generated first without a replicate template, then the replicate is asked for with
``--cache-only``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_pipeline_e2e import _register_reader

from ltrr.cli import main

WORDS = ["canberra", "paris", "everest", "nile", "leonardo"]
TYPES = ["alpha", "beta", "gamma"]


def _project(root: Path, *, replicate: bool, protocol: str = "") -> Path:
    ds = root / "ds"
    if not ds.exists():
        ds.mkdir()
        with (ds / "corpus.jsonl").open("w") as fh:
            for i in range(30):
                fh.write(json.dumps({"docid": f"d{i}", "title": "",
                                     "text": f"{WORDS[(i * 7) % 5]} {WORDS[i % 5]} is near {WORDS[(i + 1) % 5]} {i}"}) + "\n")
        with (ds / "queries.jsonl").open("w") as fh:
            for i in range(24):
                fh.write(json.dumps({"qid": f"q{i:02d}", "question": f"what is near {WORDS[i % 5]} {i}",
                                     "answers": [WORDS[(i + 1) % 5]], "qtype": TYPES[i % 3],
                                     "group": f"g{i // 2}"}) + "\n")
    cfg = root / "rep.toml"
    cfg.write_text(f"""
[run]
name = "rep"
seed = 7
workdir = "{root / 'rep'}"
[data]
dataset = "{ds}"
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
[[arms]]
name = "none"
retriever = "none"
[generation]
backend = "test-last-doc"
max_new_tokens = 8
cache = "{root / 'cache.sqlite'}"
[labels]
metric = "f1"
{'replicate_template = "short_answer_b"' if replicate else ''}
[train]
rankers = ["lambdamart-listwise"]
{protocol}
""")
    return cfg


@pytest.fixture
def project(tmp_path, monkeypatch):
    _register_reader()
    monkeypatch.setenv("LTRR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ltrr: error: "), err
    return err[0]


def test_cache_only_replicate_misses_are_failed_items_the_next_label_generates(project, capsys):
    """`ltrr label --cache-only` dropped the replicate items not in the cache: "0 failed items",
    a fresh record (`ltrr label` then skipped, `ltrr status` said up to date), and `ltrr protocol`
    failed with "the replicate labels miss some pairs" after writing preregistration.json."""
    cfg = _project(project, replicate=False)
    assert main(["label", str(cfg)]) == 0  # the main labels, generated into the cache
    cfg = _project(project, replicate=True)  # the same labels, and a replicate not in the cache
    capsys.readouterr()
    assert main(["label", str(cfg), "--cache-only"]) == 0
    out = capsys.readouterr().out
    record = json.loads((project / "rep" / "stages" / "label.json").read_text())["fingerprint"]
    summary = json.loads((project / "rep" / "labels" / "summary.json").read_text())
    rep = summary["replicate"]
    n_rep = rep["queries"] * 3
    assert summary["failed_items"] == 0 and rep["failed_items"] == n_rep and rep["compared_queries"] == 0
    assert record.endswith(f":failed-{n_rep}")
    assert (f"cache only: {n_rep} items are not served from the cache (missing, or cached in another "
            f"context: failed items), {n_rep} of them replicate items") in out
    assert f"{n_rep} failed items in {rep['queries']} queries): no (query, arm) pair labelled on both sides" in out
    assert main(["status", str(cfg)]) == 0
    assert f"label     to run         {n_rep} items failed when it ran (ran " in capsys.readouterr().out
    # the protocol refuses before it writes a file, and says how many pairs and what to run
    assert main(["features", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["protocol", str(cfg)]) == 2
    err = _err_line(capsys)
    assert f"the replicate labels miss {n_rep} of the {n_rep} (test query, arm) pairs" in err
    assert f"run `ltrr label {cfg}` to generate them" in err
    assert not (project / "rep" / "protocol").exists()
    # the next `ltrr label` generates them (it did "skipped: inputs unchanged")
    assert main(["label", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"{n_rep} items failed last time: labelling again" in out
    summary = json.loads((project / "rep" / "labels" / "summary.json").read_text())
    assert summary["replicate"]["failed_items"] == 0 and summary["replicate"]["compared_queries"] == rep["queries"]
    assert ":failed-" not in json.loads((project / "rep" / "stages" / "label.json").read_text())["fingerprint"]


def test_the_protocol_names_its_own_fold_count(project, capsys):
    """`[protocol] n_folds` too large for the design part said "lower [eval] n_folds", a key the
    protocol never reads."""
    cfg = _project(project, replicate=False, protocol="[protocol]\nn_folds = 12\n[eval]\nn_folds = 2\n")
    assert main(["label", str(cfg)]) == 0 and main(["features", str(cfg)]) == 0
    capsys.readouterr()
    for extra in ([], ["--design-only"]):
        assert main(["protocol", str(cfg), *extra]) == 2
        err = _err_line(capsys)
        assert "12-fold CV of the design part needs at least n_folds=12 groups" in err
        assert err.endswith("lower [protocol] n_folds") and "[eval]" not in err
    assert not (project / "rep" / "protocol").exists()


def test_a_record_that_did_not_count_the_replicate_failures_labels_again(project, capsys):
    """A run labelled before the replicate's failed items were counted has a record of success
    over a replicate with failed items; it was never relabelled. Now it is not up to date."""
    cfg = _project(project, replicate=False)
    assert main(["label", str(cfg)]) == 0
    cfg = _project(project, replicate=True)
    assert main(["label", str(cfg), "--cache-only"]) == 0
    record = project / "rep" / "stages" / "label.json"
    doc = json.loads(record.read_text())
    n_rep = int(doc["fingerprint"].rsplit("-", 1)[1])
    doc["fingerprint"] = doc["fingerprint"].split(":failed-")[0]  # as the older ltrr recorded it
    record.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["status", str(cfg)]) == 0
    status = capsys.readouterr().out
    assert "label     to run" in status and f"{n_rep} replicate items failed when it ran" in status
    assert main(["label", str(cfg)]) == 0
    assert (f"{n_rep} replicate items failed last time (an older ltrr did not count them): labelling again"
            in capsys.readouterr().out)
    assert json.loads((project / "rep" / "labels" / "summary.json").read_text())["replicate"]["failed_items"] == 0
