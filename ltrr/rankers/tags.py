"""Ranker tags: what a ranker class needs and can do, read from the class, never from its name.

Each `BaseRanker` subclass declares its tags as class attributes (``needs_text``,
``allows_nan``, ``learns_missing``, ``torch_based``, ``trains_on_dask``); `ranker_tags` reads them for a registry
name, a class or an instance, so callers decide on a ranker before building one.

Examples
--------
>>> from ltrr.rankers import ranker_tags
>>> ranker_tags("transformer-pairwise").needs_text
True
>>> ranker_tags("lambdamart-listwise")
RankerTags(needs_text=False, allows_nan=True, learns_missing=False, torch_based=False, trains_on_dask=True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ltrr._errors import ConfigError
from ltrr.rankers.base import BaseRanker, rankers

__all__ = ["RankerTags", "ranker_defaults", "ranker_tags"]


@dataclass(frozen=True)
class RankerTags:
    """The tags of one ranker class.

    Attributes
    ----------
    needs_text : bool
        ``X`` is a DataFrame with the text columns ``query_text`` and ``arm_text`` (the
        cross-encoders), so a caller must join the passages' text to the feature table.
    allows_nan : bool
        NaN features are accepted with the default parameters.
    learns_missing : bool
        The ranker learns its own value for NaN features, so they need not be imputed.
    torch_based : bool
        The ranker trains a torch module.
    trains_on_dask : bool
        ``fit`` trains on a Dask cluster (``ltrr train --scheduler``).
    """

    needs_text: bool
    allows_nan: bool
    learns_missing: bool
    torch_based: bool
    trains_on_dask: bool = False


def ranker_tags(ranker: str | type | BaseRanker) -> RankerTags:
    """The `RankerTags` of a ranker given by registry name, class or instance.

    Raises
    ------
    ConfigError
        An unknown name (the message lists the registered ones), or an object that is not a
        ranker.
    """
    klass: Any = rankers.get(ranker) if isinstance(ranker, str) else ranker
    if not isinstance(klass, type):
        klass = type(klass)
    if not issubclass(klass, BaseRanker):
        raise ConfigError(
            f"ranker_tags needs a ranker name, class or instance; got {klass.__name__}"
        )
    return RankerTags(
        needs_text=bool(klass.needs_text),
        allows_nan=bool(klass.allows_nan),
        learns_missing=bool(klass.learns_missing),
        torch_based=bool(klass.torch_based),
        trains_on_dask=bool(klass.trains_on_dask),
    )


def ranker_defaults(ranker: str) -> dict[str, Any]:
    """The default parameters of the ranker registered as ``ranker`` (its ``get_params()``).

    Stages that fit rankers name them among their inputs, so a release that changes a default
    (a solver's iteration cap, say) redoes those stages instead of keeping tables fitted under the
    old one.

    Examples
    --------
    >>> ranker_defaults("svmrank-pairwise")["max_iter"]
    1000000
    """
    return rankers.get(ranker)().get_params()

