"""The wheel a user installs (``pip install .``, not the editable install of `make env`) holds
every module of the package and every data file it reads at run time: the packaged configs,
prompts, feature specs and prebuilt caches (slow tier: builds the wheel, about 3 s here).

The data folders have no ``__init__.py``; setuptools finds them only as namespace packages
(``packages = find_namespace:``). Under ``find:`` the same files went in with a warning per
folder that the behaviour is deprecated, the way they would one day stop going in.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked(under: str) -> list[str]:
    res = subprocess.run(["git", "ls-files", "-z", under], cwd=ROOT, capture_output=True, check=True)
    return [p for p in res.stdout.decode().split("\0") if p]


def _package_files() -> list[str]:
    """Every tracked file under ltrr/, a tracked link to a folder (``feature_specs`` is one, to
    the top-level ``features/``) taken as the files in it."""
    out = []
    for rel in _tracked("ltrr"):
        path = ROOT / rel
        if path.is_symlink() and path.is_dir():
            out += [f"{rel}/{f.name}" for f in sorted(path.iterdir()) if f.is_file()]
        else:
            out.append(rel)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("the packaging test needs the checkout's git (it builds from the tracked files)")
    src = tmp_path_factory.mktemp("src")
    for rel in _tracked("."):
        # the package, its build files, and features/ (ltrr/feature_specs links to it)
        if rel.startswith(("ltrr/", "features/", "setup.cfg", "setup.py", "pyproject.toml", "README", "LICENSE",
                           "MANIFEST")):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel, follow_symlinks=False)
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                          str(out), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (wheel,) = out.glob("ltrr-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    return names, res.stdout + res.stderr


@pytest.mark.slow
def test_the_wheel_holds_every_file_of_the_package(built):
    names, _ = built
    files = _package_files()
    assert len([f for f in files if f.endswith(".py")]) > 100 and len([f for f in files if not f.endswith(".py")]) > 20
    # a data file of a kind setup.cfg's package_data does not name would be missing here
    assert [f for f in files if f not in names] == []
    assert {"ltrr/configs/demo.toml", "ltrr/prebuilt/demo-generations.jsonl.xz", "ltrr/feature_specs/paper.toml"} <= names
    # nothing else: the package and its metadata (no tests, runs, caches or compiled files)
    assert all(n.startswith("ltrr/") or n.split("/")[0].endswith(".dist-info") for n in names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


@pytest.mark.slow
def test_the_build_finds_every_data_folder_as_a_package(built):
    _, log = built
    assert "is absent from the `packages` configuration" not in log, log[-3000:]
