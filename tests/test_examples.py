"""Every Examples section of every ltrr module runs as written (numpydoc; pytest collects no doctests).

A module's examples are its first documentation, so one that no longer prints what it shows is a
defect like any other: the MDE of `ltrr.eval.protocol.power_analysis` read 0.0702 for a figure of
0.0704, and `ltrr.agent.sft.script_for`'s example could not be parsed, until this test ran them.
Examples that need a trained model, a built index or a network write ``# doctest: +SKIP``; they
run in an empty folder with an empty data root, so none leans on what this checkout has built
(the PyTerrier example loaded ``runs/demo``'s router, and failed on a fresh clone only).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ltrr

MODULES = sorted(m.name for m in pkgutil.walk_packages(ltrr.__path__, "ltrr.") if not m.name.endswith("__main__"))


def test_every_module_is_found():
    assert {"ltrr.eval.protocol", "ltrr.agent.sft", "ltrr.serve.app", "ltrr.integrations.pyterrier"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_examples_run_as_written(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LTRR_DATA_DIR", str(tmp_path / "data"))
    mod = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failed = []
    for test in finder.find(mod, name):
        res = runner.run(test, out=failed.append)
        assert res.failed == 0, "".join(failed)
