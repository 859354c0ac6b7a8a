"""Every Examples section of every ltrr module runs as written (numpydoc; pytest collects no doctests).

A module's examples are its first documentation, so one that no longer prints what it shows is a
defect like any other: the MDE of `ltrr.eval.protocol.power_analysis` read 0.0702 for a figure of
0.0704, and `ltrr.agent.sft.script_for`'s example could not be parsed, until this test ran them.
Examples that need a trained model, a built index or a network write ``# doctest: +SKIP``.

They run in one fresh interpreter, in an empty folder with an empty data root: so none leans on
what this checkout has built (the PyTerrier example loaded ``runs/demo``'s router, and failed on
a fresh clone only), nor on what other test modules registered in this worker's process (a test
generator backend would change what ``generators.names()`` prints).
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys

import pytest

import ltrr

MODULES = sorted(m.name for m in pkgutil.walk_packages(ltrr.__path__, "ltrr.") if not m.name.endswith("__main__"))

_RUN_ALL = """
import doctest, importlib, json, sys
import ltrr

flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
report = {}
for name in json.loads(sys.argv[1]):
    out = []
    try:
        mod = importlib.import_module(name)
        runner = doctest.DocTestRunner(optionflags=flags)
        for test in doctest.DocTestFinder().find(mod, name):
            runner.run(test, out=out.append)
        report[name] = {"attempted": runner.tries, "failures": "".join(out) if runner.failures else ""}
    except Exception as exc:  # an import or a docstring that cannot be parsed
        report[name] = {"attempted": 0, "failures": f"{type(exc).__name__}: {exc}"}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    where = tmp_path_factory.mktemp("examples")
    env = {**os.environ, "LTRR_DATA_DIR": str(where / "data")}
    res = subprocess.run([sys.executable, "-c", _RUN_ALL, json.dumps(MODULES)], cwd=where, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_every_module_is_found_and_examples_ran(report):
    assert {"ltrr.eval.protocol", "ltrr.agent.sft", "ltrr.serve.app", "ltrr.integrations.pyterrier"} <= set(MODULES)
    assert sum(r["attempted"] for r in report.values()) > 400  # 421 examples when this test was written


@pytest.mark.parametrize("name", MODULES)
def test_examples_run_as_written(name, report):
    assert report[name]["failures"] == "", report[name]["failures"]
