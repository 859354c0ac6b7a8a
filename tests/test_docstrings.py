"""Every public name of every public ltrr module has a docstring (numpydoc, STYLE.md item 6).

The public API is what a module lists in ``__all__`` and defines itself (a name it re-exports is
checked in the module that defines it), in a module with no private part in its dotted name.
A function or class needs its own docstring (a dataclass's generated signature is not one); a
public method defined in a class body, classmethods and staticmethods included, needs one of its
own or one it inherits from the method it overrides (`inspect.getdoc`), so an override with the
same contract may stay bare. A public property (``property`` or ``functools.cached_property``)
defined in a class body is checked the same way: its docstring is its getter's, its own or one
inherited from the property it overrides.

A module that cannot be imported because an optional extra is not installed (a missing
third-party module, or ltrr's `MissingDependencyError`) is not checked, and is named in a
warning; any other import error fails the test, so a broken module is never skipped.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
import sys
import types
import warnings

import ltrr
from ltrr._errors import MissingDependencyError


def _public_module_names() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.walk_packages(ltrr.__path__, "ltrr.")
        if not any(part.startswith("_") for part in m.name.split(".")[1:])
    )


def _needs_missing_extra(exc: ImportError) -> bool:
    """Whether ``exc`` says an optional dependency is absent, not that ltrr itself is broken."""
    if isinstance(exc, MissingDependencyError):
        return True
    return isinstance(exc, ModuleNotFoundError) and (exc.name or "ltrr").split(".")[0] != "ltrr"


def _import_public_modules() -> tuple[list[types.ModuleType], list[str]]:
    """The importable public modules, and ``name (error)`` of those an absent extra stops."""
    modules, skipped = [], []
    for name in _public_module_names():
        try:
            modules.append(importlib.import_module(name))
        except ImportError as exc:
            if not _needs_missing_extra(exc):
                raise
            skipped.append(f"{name} ({type(exc).__name__}: {exc})")
    return modules, skipped


def _own_docstring(cls: type) -> str | None:
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return None
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return None  # what `dataclass` writes for a class without a docstring
    return doc


def _public_methods(cls: type) -> list[str]:
    return [
        name
        for name, member in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod)))
    ]


_PROPERTIES = (property, functools.cached_property)


def _public_properties(cls: type) -> list[str]:
    return [name for name, member in vars(cls).items()
            if not name.startswith("_") and isinstance(member, _PROPERTIES)]


def _property_doc(cls: type, name: str) -> str | None:
    """``cls.name``'s docstring, its own or the one of the property it overrides.

    `inspect.getdoc` finds a `property`'s inherited docstring, not a `functools.cached_property`'s
    (Python 3.11), so the MRO is walked for any property the first look finds bare.
    """
    doc = inspect.getdoc(getattr(cls, name))
    if doc:
        return doc
    for klass in cls.__mro__:
        member = vars(klass).get(name)
        if isinstance(member, _PROPERTIES) and member.__doc__ and member.__doc__.strip():
            return inspect.cleandoc(member.__doc__)
    return None


def undocumented(module: types.ModuleType) -> list[str]:
    """Dotted names of ``module``'s public functions, classes, methods and properties with no
    docstring."""
    missing = []
    for attr in getattr(module, "__all__", ()):
        obj = getattr(module, attr, None)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        where = f"{module.__name__}.{attr}"
        if inspect.isclass(obj):
            if _own_docstring(obj) is None:
                missing.append(where)
            missing += [f"{where}.{m}" for m in _public_methods(obj)
                        if not inspect.getdoc(getattr(obj, m))]
            missing += [f"{where}.{p}" for p in _public_properties(obj)
                        if not _property_doc(obj, p)]
        elif not inspect.getdoc(obj):
            missing.append(where)
    return missing


def test_every_public_name_has_a_docstring():
    modules, skipped = _import_public_modules()
    names = {m.__name__ for m in modules}
    assert {"ltrr.pipeline.run", "ltrr.serve.service", "ltrr.packing.select"} <= names
    assert len(modules) > 100  # 150 public modules when this test was written
    if skipped:
        warnings.warn("docstrings not checked, optional extras missing: " + "; ".join(skipped),
                      stacklevel=1)
    missing = [name for module in modules for name in undocumented(module)]
    assert not missing, f"{len(missing)} public names without a docstring:\n" + "\n".join(missing)


_SAMPLE = '''
import dataclasses
import functools

__all__ = ["Base", "Child", "Bare", "Record", "documented", "bare", "imported"]

from os.path import join as imported


class Base:
    """A base."""

    def run(self):
        """Run."""

    def stop(self):
        """Stop."""

    @property
    def size(self):
        """Size."""
        return 0

    @functools.cached_property
    def table(self):
        """Table."""
        return {}


class Child(Base):
    """A child."""

    def run(self):
        return 1

    def extra(self):
        return 2

    @classmethod
    def make(cls):
        return cls()

    @staticmethod
    def helper():
        """Help."""

    def _private(self):
        return 3

    @property
    def size(self):
        return 1

    @functools.cached_property
    def table(self):
        return {"a": 1}

    @property
    def bare_property(self):
        return 4

    @functools.cached_property
    def bare_cached(self):
        return 5

    @property
    def _hidden(self):
        return 6


class Bare(Base):
    pass


@dataclasses.dataclass
class Record:
    x: int = 0


def documented():
    """Documented."""


def bare():
    return None


def unlisted():
    return None
'''


def test_undocumented_finds_each_kind_of_gap(monkeypatch):
    module = types.ModuleType("ltrr_docstring_sample")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # inspect.getdoc finds the classes
    exec(_SAMPLE, module.__dict__)
    assert undocumented(module) == [
        "ltrr_docstring_sample.Child.extra",
        "ltrr_docstring_sample.Child.make",
        "ltrr_docstring_sample.Child.bare_property",
        "ltrr_docstring_sample.Child.bare_cached",
        "ltrr_docstring_sample.Bare",
        "ltrr_docstring_sample.Record",
        "ltrr_docstring_sample.bare",
    ]


def test_only_a_missing_extra_is_skipped():
    assert _needs_missing_extra(ModuleNotFoundError("no dask", name="dask"))
    assert _needs_missing_extra(MissingDependencyError("pip install 'ltrr[dist]'"))
    assert not _needs_missing_extra(ModuleNotFoundError("gone", name="ltrr.gone"))
    assert not _needs_missing_extra(ImportError("cannot import name 'x'", name="ltrr.data"))
    assert not _needs_missing_extra(ImportError("cannot import name 'x'", name="numpy"))
