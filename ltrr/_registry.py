"""Registries of named parts.

Every pluggable part (BM25 backend, reranker, encoder, generator backend, metric, ranker,
router) is found by a short name, so configs, CLI flags and result tables use the same strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from ltrr._errors import ConfigError

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Generic[T]):
    """A mapping from short names to factories of one kind of part.

    Parameters
    ----------
    kind : str
        What the registry holds, used in error messages ("reranker", "metric", ...).

    Examples
    --------
    >>> rerankers = Registry("reranker")
    >>> @rerankers.register("identity")
    ... class Identity:
    ...     pass
    >>> rerankers.get("identity").__name__
    'Identity'
    >>> "identity" in rerankers
    True
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._extras: dict[str, str] = {}

    def register(self, name: str, obj: T | None = None, *, extra: str | None = None) -> Any:
        """Register ``obj`` under ``name``; usable as a decorator.

        ``extra`` names the pip extra that provides the part's optional dependency, so a
        missing backend can say what to install.
        """

        def _add(o: T) -> T:
            if name in self._items and self._items[name] is not o:
                raise ConfigError(f"{self.kind} {name!r} is already registered")
            self._items[name] = o
            if extra:
                self._extras[name] = extra
            return o

        if obj is not None:
            return _add(obj)
        return _add

    def get(self, name: str) -> T:
        """Return the part registered as ``name``; an unknown name raises `ConfigError`."""
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ConfigError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(sorted(self._items))}"
            ) from None

    def extra_for(self, name: str) -> str | None:
        """The pip extra that provides ``name``'s optional dependency, if any."""
        return self._extras.get(name)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)


def require(module: str, *, extra: str, purpose: str) -> Any:
    """Import an optional dependency or raise `MissingDependencyError` saying what to install."""
    import importlib

    from ltrr._errors import MissingDependencyError

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{purpose} needs the {module!r} package: pip install 'ltrr[{extra}]' ({exc})"
        ) from exc


Factory = Callable[..., Any]
