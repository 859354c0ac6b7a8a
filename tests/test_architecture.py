"""The architecture: import layers, no cycles, no private names across subpackages or from
other packages.

The contracts live in setup.cfg (``[importlinter]``); `lint-imports` runs them in ``make test``
and this test runs them in the suite, so a broken contract fails both.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ltrr"
# ground-floor modules any part of ltrr may import by their private names
GROUND = {
    "ltrr._errors",
    "ltrr._registry",
    "ltrr._log",
    "ltrr._tables",
    "ltrr._version",
    "ltrr._atomic",
    "ltrr._cpu",
    "ltrr._lazy",
    "ltrr._sections",
    "ltrr._limits",
    "ltrr._checks",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _home(module: str) -> str:
    """The subpackage (or top-level module) a module belongs to: ``ltrr.rankers.base`` -> ``ltrr.rankers``."""
    return ".".join(module.split(".")[:2])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports_across_subpackages(package: Path = PACKAGE) -> list[str]:
    """``path:line: importer imports NAME from MODULE`` for every import, at any depth of the code
    (lazy imports in functions included), of a private name from another subpackage."""
    found = []
    for path in sorted(package.rglob("*.py")):
        importer = _module_name(path)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[tuple[str, str]] = []  # (module imported from, name or module imported)
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = importer.split(".")[: len(importer.split(".")) - node.level + (1 if is_pkg else 0)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [(source, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [(a.name, "") for a in node.names]
            for source, name in targets:
                if not source.startswith("ltrr"):
                    continue
                full = f"{source}.{name}" if name else source
                if full in GROUND or source in GROUND and not _private(name):
                    continue
                private_parts = [p for p in full.split(".")[1:] if _private(p)]
                if private_parts and _home(full) != _home(importer) and full not in GROUND:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {importer} imports "
                                 f"{name or source} from {source if name else 'ltrr'}")
    return found


def test_no_private_name_is_imported_from_another_subpackage():
    assert private_imports_across_subpackages() == []


def test_the_private_name_scan_finds_a_violation(tmp_path):
    pkg = tmp_path / "ltrr"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    for f in ("__init__.py", "a/__init__.py", "b/__init__.py", "b/inner.py"):
        (pkg / f).write_text("")
    (pkg / "a" / "x.py").write_text("def f():\n    from ltrr.b.inner import _secret\n"
                                    "from ltrr.a.y import _fine\nfrom ltrr._errors import ConfigError\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        found = private_imports_across_subpackages(pkg)
    finally:
        ROOT = old
    assert found == ["ltrr/a/x.py:2: ltrr.a.x imports _secret from ltrr.b.inner"]


@pytest.mark.timeout(120)
def test_import_contracts_are_kept():
    """`lint-imports` with the contracts of setup.cfg: layers, no cycles, private modules, and
    config sections that import only the ground floor."""
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from importlinter.cli import "
                                           "lint_imports_command as c; sys.exit(c())"]
    res = subprocess.run([*cmd, str(ROOT / "setup.cfg"), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in res.stdout


def private_library_imports(paths, local: set[str] = frozenset()) -> list[str]:
    """``path:line: NAME`` for every import, at any depth, of another package's private module
    or name (``from sklearn.base import _fit_context``, ``import torch._dynamo``, reported as
    ``sklearn.base._fit_context``, ``torch._dynamo``). ltrr itself is the other scans' business;
    ``local`` names the top-level helper modules of the folders scanned (``_wiki`` in tests/)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for full in names:
                top, *rest = full.split(".")
                if top == "ltrr" or top in local or not any(_private(p) for p in [top, *rest]):
                    continue
                found.append((path.relative_to(ROOT).as_posix(), node.lineno, full))
    return [f"{rel}:{line}: {full}" for rel, line, full in sorted(found)]


def test_no_code_uses_another_packages_private_names():
    """A library's private names change without notice between releases (sklearn 1.9 changed
    ``_fit_context``): the package and the benchmarks import public names only."""
    paths = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    local = {p.stem for p in (ROOT / "tests").glob("_*.py")} | {p.stem for p in (ROOT / "benchmarks").glob("_*.py")}
    assert private_library_imports(paths, local) == []


def test_the_library_private_name_scan_finds_a_violation(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    f = tmp_path / "m.py"
    f.write_text("from sklearn.utils._param_validation import Interval\n"
                 "def g():\n    from sklearn.base import _fit_context, clone\n"
                 "import torch._dynamo\nfrom ltrr._errors import ConfigError\nimport _wiki\n"
                 "from sklearn.base import BaseEstimator\n")
    assert private_library_imports([f], {"_wiki"}) == [
        "m.py:1: sklearn.utils._param_validation.Interval", "m.py:3: sklearn.base._fit_context",
        "m.py:4: torch._dynamo"]


# cpu_determinism.py measures the kernel pins of ltrr._cpu themselves, on two machines
PRIVATE_ALLOWED_OUTSIDE = {("benchmarks/cpu_determinism.py", "ltrr._cpu")}


def private_ltrr_imports(paths) -> list[str]:
    """``path:line: module`` for every import of a private ltrr module (``ltrr._x``, ``ltrr.a._y``)
    or of a private name from an ltrr module (``from ltrr import _log``, ``from ltrr.eval.headline
    import _cv_candidate``, reported as ``ltrr._log``, ``ltrr.eval.headline._cv_candidate``) in
    Python files or notebooks outside the package."""
    import json

    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code")
            text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                source = node.module or ""
                # the module itself, and each name taken from it (a private name is private too)
                names = [source] + [f"{source}.{a.name}" for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                names = []
            rel = path.relative_to(ROOT).as_posix()
            for mod in dict.fromkeys(names):
                if mod.split(".")[0] != "ltrr" or not any(_private(p) for p in mod.split(".")[1:]):
                    continue
                # an allowed private module also covers the names imported from it
                if any(mod == m or mod.startswith(m + ".") for r, m in PRIVATE_ALLOWED_OUTSIDE if r == rel):
                    continue
                found.append((rel, node.lineno, mod))
    return [f"{rel}:{line}: {mod}" for rel, line, mod in sorted(found)]


def test_benchmarks_and_notebooks_use_public_names_only():
    """Scripts and notebooks outside the package are its users: they import ltrr's public modules
    (ltrr.errors, ltrr.progress, ltrr.data.io, ltrr.eval.report re-export what they need)."""
    paths = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert paths
    assert private_ltrr_imports(paths) == []


def imports_before_ltrr(paths) -> list[str]:
    """``path:line: module`` for the first module-level import outside the standard library of each
    script (a notebook: its first code cell) when it is not of ltrr (``import ltrr``, or ``from
    ltrr.x import y``, which loads ``ltrr`` first). ``import ltrr`` pins
    numpy's, OpenBLAS's, faiss's and torch's CPU kernels only for libraries not loaded yet
    (`ltrr._cpu`), so a script that loads one first computes with its own kernels, not the
    ``ltrr`` command's (a design study's recomputed features differed by up to 7e-9 so)."""
    import json

    std = set(sys.stdlib_module_names) | {"__future__"}
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            text = next("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code")
        for node in ast.parse(text, str(path)).body:
            if isinstance(node, ast.Import):
                module = node.names[0].name
            elif isinstance(node, ast.ImportFrom) and not node.level:
                module = node.module or ""
            else:
                continue
            if module.split(".")[0] in std:
                continue
            if module.split(".")[0] != "ltrr":
                found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}: {module}")
            break
    return found


def test_benchmarks_and_notebooks_import_ltrr_before_other_libraries():
    paths = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert imports_before_ltrr(paths) == []


def test_the_import_order_scan_finds_a_library_loaded_first(tmp_path):
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        ok = tmp_path / "ok.py"
        ok.write_text("from __future__ import annotations\nimport os\nimport ltrr\nimport numpy\n")
        late = tmp_path / "late.py"
        late.write_text("import json\nimport numpy as np\n\nimport ltrr\n")
        inner = tmp_path / "inner.py"
        inner.write_text("import pandas\n\ndef f():\n    import ltrr\n")
        sub = tmp_path / "sub.py"
        sub.write_text("from ltrr.config import load_config\nimport numpy\n")
        nb = tmp_path / "nb.ipynb"
        nb.write_text('{"cells": [{"cell_type": "markdown", "source": ["import numpy"]}, '
                      '{"cell_type": "code", "source": ["import os\\n", "import pandas\\n"]}]}')
        assert imports_before_ltrr([ok, late, inner, sub, nb]) == [
            "late.py:2: numpy", "inner.py:1: pandas", "nb.ipynb:2: pandas"]
    finally:
        ROOT = old


def test_the_outside_scan_finds_a_private_import(tmp_path):
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        f = tmp_path / "bench.py"
        f.write_text("import ltrr\nfrom ltrr.errors import DataError\ndef g():\n    from ltrr._log import bar\n"
                     "import ltrr.eval._x as y\nfrom ltrr import _log, __version__\n"
                     "from ltrr.eval.headline import _cv_candidate, fit_predict_candidate\n"
                     "from ltrr.progress import configure\n")
        assert private_ltrr_imports([f]) == ["bench.py:4: ltrr._log", "bench.py:5: ltrr.eval._x",
                                             "bench.py:6: ltrr._log",
                                             "bench.py:7: ltrr.eval.headline._cv_candidate"]
    finally:
        ROOT = old


def test_the_public_errors_are_the_raised_ones():
    """ltrr.errors re-exports every error class, as the same objects the package raises."""
    import ltrr._errors as private
    import ltrr.errors as public

    assert sorted(public.__all__) == sorted(private.__all__)
    assert all(getattr(public, n) is getattr(private, n) for n in private.__all__)
