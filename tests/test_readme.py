"""The README's Python example runs verbatim against the demo run that `make demo` leaves.

The demo's stages are run as `ltrr run demo` runs them (data, index, retrieve, label from the
shipped prebuilt generations, features, train), in a fresh working folder that shares the data
root (built demo and indexes) with the other end-to-end tests. The eval stage is left out: the
README's example does not read its tables, and it would add ~25 s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from _data_root import data_root_lock

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# resolved at import, before any test changes the working folder or the environment
DATA = Path(os.environ.get("LTRR_DATA_DIR", "data")).resolve()


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


@pytest.fixture(scope="module")
def demo_workdir(tmp_path_factory):
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    work = tmp_path_factory.mktemp("readme")
    old_cwd, old_data = Path.cwd(), os.environ.get("LTRR_DATA_DIR")
    os.environ["LTRR_DATA_DIR"] = str(DATA)
    os.chdir(work)
    try:
        run = Run(load_config("demo"), log=lambda m: None)
        # the demo and its indexes live in the shared data root: built under its lock, then only read
        with data_root_lock(DATA):
            run.stage_data()
            run.stage_index()
        run.stage_retrieve()
        run.stage_label()
        run.stage_features()
        run.stage_train()
        yield work
    finally:
        os.chdir(old_cwd)
        if old_data is None:
            os.environ.pop("LTRR_DATA_DIR", None)
        else:
            os.environ["LTRR_DATA_DIR"] = old_data


def test_readme_has_one_python_example():
    blocks = python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) == 1 and "LTRRouter.load" in blocks[0]


def test_readme_python_example_runs_verbatim(demo_workdir, monkeypatch, capsys):
    monkeypatch.chdir(demo_workdir)
    monkeypatch.setenv("LTRR_DATA_DIR", str(DATA))
    ns: dict = {"__name__": "__readme__"}
    for block in python_blocks((ROOT / "README.md").read_text(encoding="utf-8")):
        exec(compile(block, str(ROOT / "README.md"), "exec"), ns)
    arms = ["bm25", "bm25+reg", "bm25+stoch", "dense", "dense+reg", "dense+stoch", "none"]
    assert sorted(ns["ranking"]["arm"]) == sorted(arms)
    assert ns["ranking"]["rank"].tolist() == list(range(1, 8))
    assert set(ns["hits"]["arm"]) == {"bm25", "dense+reg"}
    # the per-query fast path ranks as route() does
    fast = ns["router"].route_query(ns["qraw"])
    assert [a for a, _ in fast] == ns["ranking"]["arm"].tolist()
    assert "lambdamart" in type(ns["ranker"]).__name__.lower() or ns["ranker"].name == "lambdamart-listwise"
