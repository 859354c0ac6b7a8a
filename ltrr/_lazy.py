"""Lazy package attributes (PEP 562), so importing a package costs nothing until a name is used.

`ltrr --help` and the config loader import the CLI's and the config's subpackages, which must not
pay for pandas, numpy, torch or httpx. A package lists what it exports and where each name lives,
and takes its module ``__getattr__`` from `lazy_getattr`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` on first use and returns its ``name``.

    Parameters
    ----------
    package : str
        The package's ``__name__`` (named in the error for an unknown attribute).
    exports : mapping of str to str
        Exported name -> the module that defines it.

    Returns
    -------
    callable
        ``__getattr__(name)``; an unknown name raises `AttributeError`, as a module's would.

    Examples
    --------
    >>> getattr_ = lazy_getattr("pkg", {"sqrt": "math"})
    >>> getattr_("sqrt")(4.0)
    2.0
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
