"""Checks of one scalar value: an integer or a number in a range, with one message for each.

Every setting of ltrr that must be, say, a positive integer is checked here, by one test and in
one wording, the same as a config key's (`ltrr._sections`)::

    >>> check_int(3, "DenseRetriever: batch_size", low=1)
    3
    >>> check_int(0, "DenseRetriever: batch_size", low=1)
    Traceback (most recent call last):
    ...
    ltrr._errors.ConfigError: DenseRetriever: batch_size must be an integer >= 1, got 0
    >>> check_number(0.5, "[rerank] alpha", low=0, high=1)
    0.5

What counts:

- an integer is a `numbers.Integral` (Python's and numpy's integers), never a bool, although
  ``bool`` subclasses ``int``: ``True`` for a count is a mistake, not a 1;
- a number is a `numbers.Real` (integers included), never a bool, and never NaN, which lies in
  no range (without a range too: no setting of ltrr means anything by NaN). Infinity is a number
  and lies in a range that is open on its side (``>= 0``), not in a bounded one.

A failed check raises ``error(message)``, `ConfigError` unless the caller passes another class
(`DataError` for a value read from a file) or a factory (the server's HTTP rejection). The
message names the value as the caller does (``"--rounds"``, ``"[agent] n_eval"``,
``"reg reranker: m"``), says what is allowed and repeats what was got, so it fits on one line.

This module is on the ground floor: it imports only the standard library and `ltrr._errors`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral, Real
from typing import Any

from ltrr._errors import ConfigError

__all__ = ["check_int", "check_number", "in_range", "is_finite", "is_int", "is_number", "range_words"]


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python's or numpy's), a bool excepted."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number other than NaN (an integer included), a bool excepted."""
    # NaN is the one value unequal to itself; math.isnan would overflow on an int past a float's range
    return isinstance(value, Real) and not isinstance(value, bool) and bool(value == value)


def is_finite(value: Any) -> bool:
    """Whether ``value`` is a finite real number (an integer, of any size, included), a bool excepted."""
    return is_int(value) or (is_number(value) and math.isfinite(value))


def range_words(low: float | None = None, high: float | None = None, *, low_open: bool = False,
                high_open: bool = False) -> str:
    """A range in words: ``>= 1``, ``> 0``, ``<= 2``, ``in [0, 1]``, ``in (0, 1]``; ``""`` for none."""
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low!r}, {high!r}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low!r}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high!r}"
    return ""


def in_range(value: float, low: float | None = None, high: float | None = None, *, low_open: bool = False,
             high_open: bool = False) -> bool:
    """Whether ``value`` lies in the range (NaN lies in none)."""
    if value != value:  # NaN, unbounded range included
        return False
    above = low is None or (value > low if low_open else value >= low)
    below = high is None or (value < high if high_open else value <= high)
    return bool(above and below)


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: the message stays one readable line."""
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python will print
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _fail(error: Callable[[str], Exception], name: str, kind: str, words: str, note: str, value: Any):
    allowed = f"{kind} {words}" if words else kind
    return error(f"{name} must be {allowed}{note}, got {_shown(value)}")


def check_int(value: Any, name: str, *, low: int | None = None, high: int | None = None, note: str = "",
              error: Callable[[str], Exception] = ConfigError) -> int:
    """``value`` as an ``int``, if it is an integer in ``[low, high]``.

    Parameters
    ----------
    value : object
        The value to check.
    name : str
        How the message names it (``"--rounds"``, ``"DenseRetriever: k"``).
    low, high : int, optional
        The closed range; ``None`` leaves that side open.
    note : str, default ""
        Words put after the range in the message (``" (0: all)"``).
    error : callable, default ConfigError
        Builds the exception from the message.

    Returns
    -------
    int

    Raises
    ------
    ConfigError
        (or what ``error`` builds) ``value`` is not an integer, is a bool, or is out of range:
        ``name must be an integer >= 1, got 0``.
    """
    if not is_int(value) or not in_range(value, low, high):
        raise _fail(error, name, "an integer", range_words(low, high), note, value)
    return int(value)


def check_number(value: Any, name: str, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False, note: str = "",
                 error: Callable[[str], Exception] = ConfigError) -> float:
    """``value`` as a ``float``, if it is a number (not NaN) in the range.

    Parameters
    ----------
    value : object
        The value to check.
    name : str
        How the message names it.
    low, high : float, optional
        The range's ends; ``None`` leaves that side unbounded.
    low_open, high_open : bool, default False
        Whether that end is excluded (``> 0`` rather than ``>= 0``).
    note : str, default ""
        Words put after the range in the message (``" seconds"``).
    error : callable, default ConfigError
        Builds the exception from the message.

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        (or what ``error`` builds) ``value`` is not a real number, is a bool or NaN, or is out
        of range: ``name must be a number in [0, 1], got 2``.
    """
    if is_number(value) and in_range(value, low, high, low_open=low_open, high_open=high_open):
        try:
            return float(value)
        except OverflowError:  # an integer past a float's range: no setting can use it
            pass
    raise _fail(error, name, "a number", range_words(low, high, low_open=low_open, high_open=high_open), note,
                value)
