"""A long stage's progress snapshot (`ltrr.progress`) and how ``ltrr status`` words it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from ltrr.progress import StageProgress, describe_progress, progress_path, read_progress


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_snapshot_is_written_at_most_every_few_seconds_and_removed_when_the_stage_ends(tmp_path):
    path, clock = tmp_path / "stages" / "label.progress.json", Clock()
    with StageProgress(path, fingerprint="fp", phase="label", total=100, every_s=5, clock=clock) as p:
        assert read_progress(path)["done"] == 0  # written on entry
        p.update(10)
        assert read_progress(path)["done"] == 0  # less than 5 s since the last write
        clock.t += 5
        p.update(10)
        snap = read_progress(path)
        assert (snap["done"], snap["total"], snap["state"], snap["phase"]) == (20, 100, "running", "label")
        assert (snap["pid"], snap["host"], snap["items_per_s"]) == (os.getpid(), socket.gethostname(), 4.0)
        assert sorted(q.name for q in path.parent.iterdir()) == [path.name]  # no temporary file left
    assert not path.exists()


def test_an_interrupted_stage_leaves_a_stopped_snapshot_and_its_exception_goes_on(tmp_path):
    path, clock = tmp_path / "label.progress.json", Clock()
    with pytest.raises(KeyboardInterrupt, match="^stop the labelling$"), \
            StageProgress(path, fingerprint="fp", phase="label", total=8, every_s=60, clock=clock) as p:
        p.update(3)  # not written yet (every 60 s) ...
        raise KeyboardInterrupt("stop the labelling")  # goes on unchanged
    snap = read_progress(path)
    assert (snap["state"], snap["done"], snap["reason"]) == ("stopped", 3, "KeyboardInterrupt")  # ... the last one is
    clock.t += 7200
    state, line = describe_progress(snap, "fp", now=clock)
    assert state == "stopped"
    assert line == ("label stopped at 3 of 8 items (38%) 2.0 h ago (KeyboardInterrupt); "
                    "running it again resumes it from the generation cache")


def test_the_rate_is_the_recent_one_so_a_resumed_run_s_cache_hits_do_not_promise_too_much(tmp_path):
    """A resumed labelling reads its first items from the cache in seconds; the time left is
    measured over the last five minutes only, so it settles on the generation rate."""
    path, clock = tmp_path / "p.json", Clock()
    with StageProgress(path, fingerprint="fp", phase="label", total=10_000, every_s=1, clock=clock) as p:
        clock.t += 10
        p.update(5_000)  # from the cache: 500 items/s
        for _ in range(40):  # then generated: one item every 10 s, for 400 s
            clock.t += 10
            p.update(1)
        snap = read_progress(path)
        assert snap["items_per_s"] == pytest.approx(0.1)
        state, line = describe_progress(snap, "fp", now=clock)
    assert state == "running"
    assert line.startswith("label running: 5,040 of 10,000 items (50%), about 13.8 h left (pid ")


def test_a_snapshot_of_other_inputs_or_a_gone_process_is_not_running():
    doc = {"fingerprint": "fp", "phase": "label", "state": "running", "done": 5, "total": 10, "updated": 0.0,
           "items_per_s": None, "host": socket.gethostname(), "pid": os.getpid()}
    assert describe_progress(doc, "another fingerprint") is None
    assert describe_progress(None) is None
    assert describe_progress(doc, "fp", now=lambda: 30.0) == (
        "running", f"label running: 5 of 10 items (50%) (pid {os.getpid()}, updated 30 s ago)")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = {**doc, "pid": int(gone.stdout)}  # SIGKILL leaves "running" behind; the process says otherwise
    assert describe_progress(dead, "fp", now=lambda: 120.0) == (
        "stopped", "label stopped at 5 of 10 items (50%) 2 min ago (its process is gone); "
                   "running it again resumes it from the generation cache")
    elsewhere = {**doc, "host": "another-machine", "items_per_s": 0.5}
    assert describe_progress(elsewhere, "fp", now=lambda: 0.0) == (
        "running", "label running: 5 of 10 items (50%), about 10 s left (on another-machine, updated 0 s ago)")


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", json.dumps({"done": 1})])
def test_an_unreadable_snapshot_is_no_snapshot(tmp_path, text):
    path = tmp_path / "label.progress.json"
    path.write_text(text)
    assert read_progress(path) is None
    assert read_progress(tmp_path / "missing.json") is None


def test_the_snapshot_sits_beside_its_stage_record(tmp_path):
    assert progress_path(tmp_path / "stages" / "label.json") == tmp_path / "stages" / "label.progress.json"


def test_a_second_process_leaves_a_live_process_snapshot_alone(tmp_path):
    """A second ``ltrr label`` of the workdir (``--cache-only`` beside a long run) neither
    overwrites nor removes the long run's ``running`` snapshot, so ``ltrr status`` keeps following
    it; a dead process's snapshot, or another host's, is overwritten and removed as before."""
    path = tmp_path / "stages" / "label.progress.json"
    path.parent.mkdir(parents=True)
    live = {"fingerprint": "fp", "phase": "label", "state": "running", "done": 7, "total": 100, "updated": 1.0,
            "started": 0.0, "pid": os.getppid(), "host": socket.gethostname()}  # the parent: alive, not us
    path.write_text(json.dumps(live))
    with StageProgress(path, fingerprint="fp", phase="label", total=3, every_s=0) as p:
        p.update(3)
        assert json.loads(path.read_text()) == live
    assert json.loads(path.read_text()) == live  # not this process's to remove
    with pytest.raises(RuntimeError), StageProgress(path, fingerprint="fp", phase="label", total=3, every_s=0):
        raise RuntimeError("boom")
    assert json.loads(path.read_text()) == live  # nor to mark stopped
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for other in ({**live, "pid": int(dead.stdout)}, {**live, "host": "elsewhere"}):
        path.write_text(json.dumps(other))
        with StageProgress(path, fingerprint="fp", phase="label", total=3, every_s=0) as p:
            assert read_progress(path)["pid"] == os.getpid()
        assert not path.exists()
