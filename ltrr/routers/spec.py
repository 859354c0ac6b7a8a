"""Router specs: one string names a registered router and its parameters.

``"knn"`` or ``"knn:n_neighbors=50,weights=similarity"``: the name of a router in
`ltrr.routers.routers`, then, after a colon, comma-separated ``param=value`` pairs. A value is
read as JSON where it parses (``50``, ``0.5``, ``true``, ``"x"``), else kept as a string. Configs
use specs to list candidate routers (``[protocol] routers``).
"""

from __future__ import annotations

import json
from typing import Any

from ltrr._errors import ConfigError

__all__ = ["parse_router_spec", "make_router"]


def parse_router_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"name:a=1,b=x"`` -> ``("name", {"a": 1, "b": "x"})``.

    Examples
    --------
    >>> parse_router_spec("knn:n_neighbors=50,weights=similarity")
    ('knn', {'n_neighbors': 50, 'weights': 'similarity'})
    >>> parse_router_spec("best-single")
    ('best-single', {})
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"a router spec is a non-empty string such as 'knn:n_neighbors=50', got {spec!r}")
    name, _, rest = spec.strip().partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"router spec {spec!r}: {item!r} is not param=value")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value.strip()
    return name.strip(), params


def make_router(spec: str):
    """A new, unfitted router from a spec; an unknown name or parameter is a `ConfigError`."""
    from ltrr.routers.trainfree import routers

    name, params = parse_router_spec(spec)
    klass = routers.get(name)
    try:
        return klass(**params)
    except TypeError as exc:
        raise ConfigError(f"router spec {spec!r}: {exc}") from None
