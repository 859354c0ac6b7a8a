"""Utility labels: gains, ties, failures, noise floor, and kill/resume byte-identity."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError, GenerationError
from ltrr.generation import load_template
from ltrr.generation.base import Generation, Generator
from ltrr.labels import (
    NOISE_SUFFIX,
    label_queries,
    normalise_gains,
    raise_for_failures,
    summarise,
    summary_markdown,
    total_failed_items,
)
from ltrr.metrics import parse_metric


class Reader(Generator):
    """Answers with the first word after 'Document 1:' (or 'unknown' closed-book)."""

    backend = "reader"
    identity = "reader-1"

    def __init__(self, fail_on: str | None = None):
        self.fail_on = fail_on
        self.calls = 0

    def generate(self, prompts, params=None):
        out = []
        for p in prompts:
            self.calls += 1
            text = p if isinstance(p, str) else "\n".join(m["content"] for m in p)
            if self.fail_on and self.fail_on in text:
                out.append(Generation(text="", error="HTTP 500 after 3 retries"))
                continue
            if "Document 1:" in text:
                word = text.split("Document 1:", 1)[1].split()[0]
                out.append(Generation(text=word, prompt_tokens=10, completion_tokens=1))
            else:
                out.append(Generation(text="unknown", prompt_tokens=5, completion_tokens=1))
        return out


QUERIES = pd.DataFrame({
    "qid": ["a", "b", "c"],
    "question": ["capital of australia?", "longest river?", "tallest mountain?"],
    "answers": [["Canberra"], ["Nile"], ["Everest"]],
})


def _results():
    rows = []
    docs = {
        ("a", "good"): ["Canberra is", "Sydney is"], ("a", "bad"): ["Sydney is", "Canberra is"],
        ("b", "good"): ["Nile flows", "Amazon flows"], ("b", "bad"): ["Nile flows", "Amazon"],
        ("c", "good"): ["K2 is", "Everest is"], ("c", "bad"): ["Everest is", "K2 is"],
    }
    for (qid, arm), texts in docs.items():
        for r, t in enumerate(texts, 1):
            rows.append({"qid": qid, "arm": arm, "rank": r, "docid": f"{qid}{arm}{r}", "score": 1.0 / r, "text": t})
    return pd.DataFrame(rows)


def _label(gen, **kw):
    return label_queries(QUERIES, _results(), arms=["good", "bad", "none"], no_retrieval="none",
                         generator=gen, template=load_template("short_answer"),
                         scorer=parse_metric("em").bind(), metric_name="em", seed=3, **kw)


def test_normalise_gains_cases():
    g, n, tie = normalise_gains(np.array([1.0, 0.0, 0.5]), 0.5)
    assert g.tolist() == [0.5, -0.5, 0.0] and n.tolist() == [1.0, 0.0, 0.5] and not tie
    g, n, tie = normalise_gains(np.array([0.0, 0.0, 0.0]), 0.0)
    assert n.tolist() == [0.0, 0.0, 0.0] and tie
    assert normalise_gains(np.array([0.3, 0.7]), 0.3)[1].tolist() == [0.0, 1.0]


def test_labels_gains_ties_and_provenance():
    run = _label(Reader())
    lab = run.labels.set_index(["qid", "arm"])
    assert lab.loc[("a", "good"), "utility"] == 1.0 and lab.loc[("a", "bad"), "utility"] == 0.0
    assert lab.loc[("a", "none"), "gain"] == 0.0
    assert lab.loc[("a", "good"), "norm_gain"] == 1.0 and lab.loc[("a", "bad"), "norm_gain"] == 0.0
    # b: both arms put the Nile first: gains equal to each other but above closed-book -> not a tie
    assert not lab.loc[("b", "good"), "tie"]
    assert set(run.labels["metric"]) == {"em"} and set(run.labels["generator"]) == {"reader-1"}
    assert run.labels["template"].iloc[0].startswith("short_answer")
    s = summarise(run.labels, run.noise, seed=0)
    assert s["best_single_arm"] in {"good", "bad"}
    assert s["oracle"] == pytest.approx(1.0)
    assert s["arms"]["none"]["mean"] == 0.0


def test_all_equal_utilities_is_a_tie():
    q = QUERIES.iloc[:1].assign(answers=[["Nowhere"]])
    run = label_queries(q, _results(), arms=["good", "bad", "none"], no_retrieval="none", generator=Reader(),
                        template=load_template("short_answer"), scorer=parse_metric("em").bind(), metric_name="em")
    assert run.labels["tie"].all() and (run.labels["norm_gain"] == 0).all()


def test_noise_floor_rows_permute_the_reference_arm():
    run = _label(Reader(), noise_arm="good")
    assert set(run.noise["arm"]) == {"good" + NOISE_SUFFIX}
    s = summarise(run.labels, run.noise, seed=0)
    nf = s["noise_floor"]
    # with two passages the permutation swaps them: the reader's answer changes on every query
    assert nf["disagreement_rate"] > 0 and nf["queries"] == 3


def test_failed_items_are_recorded_never_scored():
    run = _label(Reader(fail_on="Amazon flows"))
    failed = run.labels[run.labels["failed"]]
    assert len(failed) == 1 and failed["error"].iloc[0].startswith("HTTP 500")
    assert np.isnan(failed["utility"].iloc[0])
    assert run.labels.loc[run.labels["qid"] == "b", "gain"].isna().all()
    s = summarise(run.labels, run.noise)
    assert s["failed_items"] == 1 and s["labelled_queries"] == 2
    with pytest.raises(GenerationError, match=r"1 \(query, arm\) items failed"):
        raise_for_failures(s, tolerate=False)
    raise_for_failures(s, tolerate=True)


def test_an_arm_that_failed_on_every_query_leaves_no_query_complete():
    """Its column is not dropped with its failed rows: no query has every arm, so none counts as
    labelled, and the oracle is not taken over the other arms alone (it said 2 of 2 labelled)."""
    rows = [(q, a, u, a == "dense") for q in ("q1", "q2") for a, u in (("none", 0.0), ("bm25", 1.0), ("dense", 0.0))]
    labels = pd.DataFrame(rows, columns=["qid", "arm", "utility", "failed"])
    labels = labels.assign(tie=False, used_fallback=False, error="", prompt_tokens=10, completion_tokens=2,
                           truncated_passages=0)
    s = summarise(labels, None, seed=0)
    assert s["labelled_queries"] == 0 and s["failed_queries"] == 2 and np.isnan(s["oracle"])
    assert s["best_single_arm"] is None and set(s["arms"]) == {"none", "bm25", "dense"}


def test_every_item_failed_summarises_without_a_crash():
    """Every item failed, the noise-floor control's too (a label from an empty cache with
    ``--cache-only``): the summary counts them and leaves the figures NaN."""
    run = _label(Reader(fail_on="Question"), noise_arm="good")
    assert run.labels["failed"].all() and run.noise["failed"].all()
    s = summarise(run.labels, run.noise, seed=0)
    assert s["failed_items"] == 9 and s["labelled_queries"] == 0 and s["best_single_arm"] is None
    assert np.isnan(s["oracle"]) and s["noise_floor"]["queries"] == 0


def test_nothing_labelled_reports_no_headroom_conclusion():
    """`ltrr label --cache-only` with nothing in the cache printed "best single arm: None (nan)"
    and "no headroom: the best single arm is best on every query"."""
    run = _label(Reader(fail_on="Question"), noise_arm="good")
    text = summary_markdown(summarise(run.labels, run.noise, seed=0))
    assert "queries labelled: 0 of 3 (9 failed items in 3 queries)" in text
    assert "no query is labelled (each has a failed item): no best single arm, headroom or noise floor" in text
    assert "nan" not in text.split("\n\n", 1)[1] and "no headroom" not in text and "noise floor (" not in text
    labelled = summary_markdown(summarise(_label(Reader(), noise_arm="good").labels, None, seed=0))
    assert "best single arm: good" in labelled and "no query is labelled" not in labelled


def test_replicate_failures_count_and_the_replicate_line_names_the_queries_compared():
    """The replicate's failed items (a `--cache-only` miss) were dropped: 0 failures, a figure
    "over 118 queries" resting on 32. They count now, and the line says what it rests on."""
    run = _label(Reader(), noise_arm="good")
    summary = summarise(run.labels, run.noise, seed=0)
    summary["replicate"] = {"template": "short_answer_b@1", "queries": 3, "part": "test", "compared_queries": 1,
                            "failed_items": 6, "failed_queries": 2, "mean_abs_diff": 0.0, "disagreement_rate": 0.0}
    assert total_failed_items(summary) == 6
    text = summary_markdown(summary)
    assert ("replicate labels (short_answer_b@1, 3 queries of the test part; 6 failed items in 2 queries): "
            "mean |diff| 0.000 per (query, arm) on the 1 queries labelled in both, answers' utility differs on 0.0% of "
            "their pairs") in text
    with pytest.raises(GenerationError, match=r"^6 \(query, arm\) items failed: 0 in 0 queries of labels\.parquet "
                                              r"and 6 in 2 queries of replicate\.parquet"):
        raise_for_failures(summary, tolerate=False)
    raise_for_failures(summary, tolerate=True)
    summary["replicate"].update(compared_queries=0, failed_items=9, failed_queries=3)
    assert "no (query, arm) pair labelled on both sides to compare" in summary_markdown(summary)


def test_bad_label_inputs():
    q = QUERIES.copy()
    q.at[1, "answers"] = []
    with pytest.raises(DataError, match=r"query 'b' has an empty answer list"):
        label_queries(q, _results(), arms=["good", "none"], no_retrieval="none", generator=Reader(),
                      template=load_template("short_answer"), scorer=parse_metric("em").bind(), metric_name="em")
    with pytest.raises(ConfigError, match=r"no-retrieval arm 'none' must be among"):
        label_queries(QUERIES, _results(), arms=["good"], no_retrieval="none", generator=Reader(),
                      template=load_template("short_answer"), scorer=parse_metric("em").bind(), metric_name="em")


# ------------------------------------------------------------------ kill and resume, for real

def _project(tmp_path: Path, model: Path, name: str) -> Path:
    ds = tmp_path / "ds"
    if not ds.exists():
        ds.mkdir()
        words = ["canberra", "paris", "everest", "nile", "leonardo"]
        with (ds / "corpus.jsonl").open("w") as fh:
            for i in range(40):
                fh.write(json.dumps({"docid": f"d{i}", "title": words[i % 5], "text": f"{words[i % 5]} is the capital of {words[(i + 1) % 5]} {i}"}) + "\n")
        with (ds / "queries.jsonl").open("w") as fh:
            for i in range(24):
                fh.write(json.dumps({"qid": f"q{i:02d}", "question": f"what is the capital of {words[i % 5]} {i}", "answers": [words[(i + 2) % 5]]}) + "\n")
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f"""
[run]
name = "{name}"
workdir = "{tmp_path / name}"
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
backend = "transformers"
model = "{model}"
template = "short_answer"
max_new_tokens = 24
chunk_size = 2
cache = "{tmp_path / name}-cache.sqlite"
[labels]
metric = "f1"
""")
    return cfg


def _ltrr(*args, env):
    return subprocess.run([sys.executable, "-m", "ltrr.cli", *args], capture_output=True, text=True, env=env)


@pytest.mark.slow
def test_sigkill_then_resume_is_byte_identical(tmp_path):
    from _tiny_llm import save_tiny_llm

    model = tmp_path / "tiny"
    save_tiny_llm(model, seed=1)
    env = {**os.environ, "LTRR_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    ref, killed = _project(tmp_path, model, "ref"), _project(tmp_path, model, "killed")
    for cfg in (ref, killed):
        assert _ltrr("index", str(cfg), env=env).returncode == 0
    done = _ltrr("label", str(ref), env=env)
    assert done.returncode == 0, done.stderr
    ref_labels = (tmp_path / "ref" / "labels" / "labels.parquet").read_bytes()

    cache = tmp_path / "killed-cache.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "ltrr.cli", "label", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = 0
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if cache.exists():
            try:
                with sqlite3.connect(cache, timeout=1) as con:
                    rows = con.execute("select count(*) from generations").fetchone()[0]
            except sqlite3.Error:
                rows = 0
            if rows >= 8:
                break
        time.sleep(0.05)
    assert proc.poll() is None, "labelling finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "labels" / "labels.parquet").exists()  # nothing half-written
    status = _ltrr("status", str(killed), "--json", env=env)  # how far it got, from another process
    label = {r["stage"]: r for r in json.loads(status.stdout)}["label"]
    assert label["state"] == "to run" and label["detail"].startswith("label stopped at ")
    assert "(its process is gone); running it again resumes it from the generation cache" in label["detail"]

    from ltrr.generation.cache import GenerationCache

    with GenerationCache(cache) as c:
        report = c.check()
    assert report["corrupt"] == 0 and report["rows"] >= 8

    resumed = _ltrr("label", str(killed), env=env)
    assert resumed.returncode == 0, resumed.stderr
    got = (tmp_path / "killed" / "labels" / "labels.parquet").read_bytes()
    assert got == ref_labels
    summary = json.loads((tmp_path / "killed" / "labels" / "summary.json").read_text())
    assert summary["cache_hits"] >= 8  # the resumed run reused what the killed one generated
    assert not (tmp_path / "killed" / "stages" / "label.progress.json").exists()  # finished: no snapshot left

    warm = _ltrr("label", str(killed), "--force", env=env)
    assert warm.returncode == 0
    assert json.loads((tmp_path / "killed" / "labels" / "summary.json").read_text())["generator_calls"] == 0
