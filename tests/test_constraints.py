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


def _requirements() -> set[str]:
    """What `make env` installs from setup.cfg: the requirements and the Makefile's extras (an
    opt-in extra, such as the 1.5B model's parts, is not installed and pins its own versions)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    extras = cfg["options.extras_require"]
    for extra in _env_extras():
        lines += extras[extra].splitlines()
    names = set()
    for line in lines:
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate():
            names.add(canonicalize_name(req.name))
    return names - {"ltrr"}  # an extra may name the package's own other extras


def test_every_dependency_of_setup_cfg_is_pinned():
    pins = _pins()
    missing = sorted(_requirements() - set(pins))
    assert not missing, f"add these to constraints.txt (`make constraints`): {missing}"


def test_pins_satisfy_setup_cfg():
    pins = _pins()
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in cfg["options.extras_require"].values():
        lines += extra.splitlines()
    for line in lines:
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name in pins and (req.marker is None or req.marker.evaluate()):
            assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} breaks {line!r}"


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
