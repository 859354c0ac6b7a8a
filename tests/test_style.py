"""The part of the house style a tool can hold: ruff with the rules of pyproject.toml
(``[tool.ruff]``: pycodestyle, pyflakes, isort, bugbear, pyupgrade, unused noqa comments, and
pycodestyle's blank-line rules, which ruff keeps in preview) over the package, the tests, the benchmarks and the notebooks;
and mypy over the package and the benchmarks (``[tool.mypy]``), in the slow tier (about 90 s
without its cache).

The import order that the CPU-kernel pins need (ltrr before numpy, `test_architecture`) is kept
beside isort's by an ``# isort: split`` comment after ``import ltrr``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff_check(folder: Path) -> tuple[int, list[str]]:
    """``ruff check`` of ``folder`` under the pyproject.toml it holds: its exit status and its
    findings, ``path:line: CODE message`` each."""
    exe = Path(sys.executable).with_name("ruff")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ruff"]
    res = subprocess.run([*cmd, "check", "--no-cache", "--output-format", "json", "."],
                         cwd=folder, capture_output=True, text=True)
    if res.returncode not in (0, 1):  # 2: ruff itself failed (a bad setting, say)
        raise RuntimeError(f"ruff failed: {res.stderr[-2000:]}")
    found = json.loads(res.stdout or "[]")
    return res.returncode, [f"{Path(f['filename']).relative_to(folder)}:{f['location']['row']}: "
                            f"{f['code']} {f['message']}" for f in found]


def test_the_code_keeps_the_projects_ruff_rules():
    rc, found = ruff_check(ROOT)
    assert (rc, found) == (0, []), "\n".join(found[:50])


def test_the_ruff_check_finds_each_kind_of_break(tmp_path):
    """The check can fail: an unused import, a missing blank line before and after a function, an
    import block out of order and a noqa comment that silences nothing are each reported under
    the project's rules."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"),
                                             encoding="utf-8")
    (tmp_path / "bad.py").write_text("import sys\nimport os\ndef f():\n    return sys\nx = 1  # noqa: E731\n", encoding="utf-8")
    rc, found = ruff_check(tmp_path)
    assert rc == 1
    assert sorted(f.split()[1] for f in found) == ["E302", "E305", "F401", "I001", "RUF100"], found


def mypy_check(folder: Path, *targets: str) -> tuple[int, list[str]]:
    """mypy under the pyproject.toml that ``folder`` holds (its ``files`` unless ``targets``):
    its exit status and its error lines."""
    res = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", *targets], cwd=folder,
                         capture_output=True, text=True)
    if res.returncode not in (0, 1):  # 2: mypy itself failed (a bad setting, say)
        raise RuntimeError(f"mypy failed: {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return res.returncode, [line for line in res.stdout.splitlines() if ": error:" in line]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_package_type_checks():
    rc, errors = mypy_check(ROOT)
    assert (rc, errors) == (0, []), "\n".join(errors[:50])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_type_check_finds_a_wrong_type(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"),
                                             encoding="utf-8")
    # a wrong annotated return, and (check_untyped_defs) a wrong sum in a function without annotations
    (tmp_path / "bad.py").write_text("def f(x: int) -> str:\n    return x\n\n\n"
                                     "def g():\n    return 1 + 'a'\n", encoding="utf-8")
    rc, errors = mypy_check(tmp_path, "bad.py")
    assert rc == 1
    assert len(errors) == 2, errors
    assert "[return-value]" in errors[0] and "[operator]" in errors[1], errors
