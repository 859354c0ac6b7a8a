"""The ranker registry, `rankers`: every ranker class under its short name.

It sits below `ltrr.rankers.base` and `ltrr.rankers._validation`, which both read it (the
validation lists the rankers that accept NaN in its error message), so neither imports the
other to reach it. `ltrr.rankers.rankers` and `ltrr.rankers.base.rankers` are this object.
"""

from __future__ import annotations

from ltrr._registry import Registry

__all__ = ["rankers"]

rankers: Registry = Registry("ranker")
