"""Feature sets: which features a model reads, as a small, versioned TOML file.

A feature set (`FeatureSpec`) names the pre- and post-retrieval features to use, the PCA size
of the query embedding and the arm-indicator options (see `ltrr.features.pipeline` for the
file format and what each option does). Specs are found by name (`load_spec`): a path to a
``.toml`` file, else a file shipped in the package's ``feature_specs`` folder
(`available_specs`).
"""

from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ltrr._checks import check_int
from ltrr._errors import ConfigError
from ltrr.features.raw import BOOK_COLUMNS, KEY_COLUMNS, POST_COLUMNS

__all__ = [
    "FeatureSpec",
    "load_spec",
    "available_specs",
    "PRE_FEATURES",
    "POST_FEATURES",
    "MISSING_COLUMN",
]

PRE_FEATURES = ("query_embedding", "query_length", "query_type")
POST_FEATURES = POST_COLUMNS
SPEC_KEYS = ("name", "version", "description", "pre", "post", "pca_dim", "arm_indicator")
INDICATOR_KEYS = ("missing", "one_hot")
MISSING_COLUMN = "no_passages"


def _spec_dir():
    return importlib.resources.files("ltrr") / "feature_specs"


def available_specs() -> list[str]:
    """Names of the feature sets shipped with ltrr."""
    d = _spec_dir()
    if not d.is_dir():
        return []
    return sorted(p.name[: -len(".toml")] for p in d.iterdir() if p.name.endswith(".toml"))


def _check_list(where: str, value: Any, choices: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"{where} must be a list of feature names; choose from: {', '.join(choices)}"
        )
    out = []
    for v in value:
        if v not in choices:
            raise ConfigError(f"{where}: unknown feature {v!r}; choose from: {', '.join(choices)}")
        if v in out:
            raise ConfigError(f"{where}: feature {v!r} is listed twice")
        out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class FeatureSpec:
    """A named, versioned feature set.

    Parameters
    ----------
    name : str
    version : int
        Bump it when the set's meaning changes; a saved pipeline records it.
    pre : tuple of str
        Pre-retrieval features, from `PRE_FEATURES`.
    post : tuple of str
        Post-retrieval features, from `POST_FEATURES`.
    pca_dim : int
        Components kept of the query embedding (used with ``query_embedding``).
    missing_indicator : bool
        Add the ``no_passages`` column.
    one_hot_arms : bool
        Add one ``arm=<name>`` column per arm seen at fit.
    description : str

    Examples
    --------
    >>> spec = FeatureSpec.from_dict({"name": "tiny", "version": 1, "pre": ["query_length"],
    ...                               "post": ["max_sim"]})
    >>> spec.post, spec.pca_dim, spec.missing_indicator
    (('max_sim',), 32, True)
    """

    name: str
    version: int
    pre: tuple[str, ...]
    post: tuple[str, ...]
    pca_dim: int = 32
    missing_indicator: bool = True
    one_hot_arms: bool = False
    description: str = ""

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "feature spec") -> FeatureSpec:
        """Validate a mapping (a parsed TOML file); bad keys or values raise `ConfigError`."""
        if not isinstance(d, dict):
            raise ConfigError(f"{where} must be a table/mapping, got {type(d).__name__}")
        unknown = sorted(set(d) - set(SPEC_KEYS))
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(SPEC_KEYS)}"
            )
        for key in ("name", "version", "pre", "post"):
            if key not in d:
                raise ConfigError(f"{where}: key {key!r} is missing")
        name = d["name"]
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}: name must be a non-empty string, got {name!r}")
        version = d["version"]
        check_int(version, f"{where}: version", low=1)
        pre = _check_list(f"{where}: pre", d["pre"], PRE_FEATURES)
        post = _check_list(f"{where}: post", d["post"], POST_FEATURES)
        pca_dim = d.get("pca_dim", 32)
        check_int(pca_dim, f"{where}: pca_dim", low=1)
        ind = d.get("arm_indicator", {})
        if not isinstance(ind, dict):
            raise ConfigError(
                f"{where}: arm_indicator must be a table with keys {', '.join(INDICATOR_KEYS)}"
            )
        bad = sorted(set(ind) - set(INDICATOR_KEYS))
        if bad:
            raise ConfigError(
                f"{where}: unknown key arm_indicator.{bad[0]}; allowed keys: {', '.join(INDICATOR_KEYS)}"
            )
        for key in INDICATOR_KEYS:
            if key in ind and not isinstance(ind[key], bool):
                raise ConfigError(
                    f"{where}: arm_indicator.{key} must be true or false, got {ind[key]!r}"
                )
        description = d.get("description", "")
        if not isinstance(description, str):
            raise ConfigError(f"{where}: description must be a string")
        spec = cls(
            name=name,
            version=version,
            pre=pre,
            post=post,
            pca_dim=pca_dim,
            missing_indicator=ind.get("missing", True),
            one_hot_arms=ind.get("one_hot", False),
            description=description,
        )
        if not spec.pre and not spec.post and not spec.one_hot_arms:
            raise ConfigError(f"{where}: the feature set is empty; list features under pre or post")
        return spec

    def to_dict(self) -> dict[str, Any]:
        """The spec as a mapping in `from_dict`'s layout (the shipped TOML files' keys)."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "pre": list(self.pre),
            "post": list(self.post),
            "pca_dim": self.pca_dim,
            "arm_indicator": {"missing": self.missing_indicator, "one_hot": self.one_hot_arms},
        }

    @property
    def raw_columns(self) -> list[str]:
        """Columns of the raw table this set reads."""
        cols = [*KEY_COLUMNS, *BOOK_COLUMNS]
        cols += [c for c in self.pre if c != "query_embedding"]
        return cols + list(self.post)


def _parse_toml(text: str, where: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML ({exc})") from None


def load_spec(spec: Any = "paper") -> FeatureSpec:
    """A `FeatureSpec` from a spec, a mapping, a ``.toml`` path, or a shipped set's name.

    A string is looked up (1) as a file path, (2) as ``<name>.toml`` in the package's
    ``feature_specs`` folder. An unknown name raises `ConfigError` listing the shipped sets.
    """
    if isinstance(spec, FeatureSpec):
        return spec
    if isinstance(spec, dict):
        return FeatureSpec.from_dict(spec)
    if not isinstance(spec, (str, Path)):
        raise ConfigError(
            f"feature set must be a name, a .toml path or a mapping, got {type(spec).__name__}"
        )
    p = Path(spec)
    if p.is_file():
        return FeatureSpec.from_dict(
            _parse_toml(p.read_text(encoding="utf-8"), str(p)), where=str(p)
        )
    if p.suffix == ".toml" or os.sep in str(spec) or "/" in str(spec):
        raise ConfigError(f"feature set file {str(spec)!r} does not exist")
    res = _spec_dir() / f"{spec}.toml"
    if not res.is_file():
        raise ConfigError(
            f"unknown feature set {str(spec)!r}; choose one of: {', '.join(available_specs())}, "
            "or give a path to a .toml file"
        )
    return FeatureSpec.from_dict(
        _parse_toml(res.read_text(encoding="utf-8"), f"<feature set {spec}>"),
        where=f"feature set {spec!r}",
    )
