"""constraints.txt pins what `make env` installs (unit tier: reads files only).

The committed results and CI were made with those versions; a dependency added to setup.cfg
without a pin would again take whatever is newest on the day (pytest 9.2 once broke the suite's
xdist grouping that way).
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt: {line!r} is not an exact pin (NAME==VERSION)"
        pins[canonicalize_name(name)] = version
    return pins


def _env_extras() -> list[str]:
    """The extras `make env` installs (the Makefile's ``EXTRAS``)."""
    m = re.search(r"^EXTRAS \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "the Makefile sets no EXTRAS"
    return m.group(1).split(",")


def _setup_cfg_requirements(extras: list[str] | None = None) -> list[Requirement]:
    """setup.cfg's requirements that apply here (markers evaluated) and those of ``extras``
    (None: every extra), the package's own name left out (an extra may name its other extras)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    table = cfg["options.extras_require"]
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in table if extras is None else extras:
        lines += table[extra].splitlines()
    reqs = [Requirement(ln.split("#")[0].strip()) for ln in lines if ln.split("#")[0].strip()]
    return [r for r in reqs if (r.marker is None or r.marker.evaluate()) and canonicalize_name(r.name) != "ltrr"]


def test_every_dependency_of_setup_cfg_is_pinned():
    # what `make env` installs: the requirements and the Makefile's extras (an opt-in extra, such
    # as the 1.5B model's parts, is not installed and pins its own versions)
    pins = _pins()
    missing = sorted({canonicalize_name(r.name) for r in _setup_cfg_requirements(_env_extras())} - set(pins))
    assert not missing, f"add these to constraints.txt (`make constraints`): {missing}"


def test_pins_satisfy_setup_cfg():
    pins = _pins()
    for req in _setup_cfg_requirements():
        name = canonicalize_name(req.name)
        if name in pins:
            assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} breaks {str(req)!r}"


def test_every_env_install_uses_the_constraints():
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("$(BIN)/.ltrr-installed:", 1)[1].split("\n\n", 1)[0]
    installs = [ln for ln in recipe.splitlines() if "pip install" in ln or "$(PIP_INSTALL)" in ln]
    assert installs
    for ln in installs:
        # the venv's own pip/setuptools/wheel upgrade is the one install not taken from the pins
        if re.search(r"--upgrade pip setuptools wheel", ln):
            continue
        assert "$(PIP_INSTALL)" in ln, f"Makefile installs without constraints.txt: {ln.strip()}"
    assert "-c constraints.txt" in make


def test_the_all_extra_is_every_extra_make_env_installs():
    """``pip install ltrr[all]`` gets what `make env` gets: every extra but the opt-in model."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "setup.cfg")
    table = cfg["options.extras_require"]
    in_all = set(re.findall(r"%\((\w+)\)s", table["all"]))
    assert in_all == set(_env_extras())
    assert set(table) - in_all == {"all", "qwen15b"}
