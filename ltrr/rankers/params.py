"""Constructor-parameter constraints of the rankers, declared per class and checked at ``fit``.

A ranker lists, for each ``__init__`` parameter, the values it accepts::

    param_constraints = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "loss": [StrOptions({"hinge", "squared_hinge"})],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
    }

and decorates ``fit`` with `checked_fit`. A value that meets none of its constraints raises
`RankerParameterError` (a `ConfigError`, so also a ``ValueError``, and a ``TypeError``) worded
as scikit-learn words its own: "The 'C' parameter of RankSVMRanker must be a float in the range
(0.0, inf). Got -1 instead."

Why not sklearn's: scikit-learn has the same contract (``_parameter_constraints``,
``Interval``, ``StrOptions``, ``_fit_context``), but keeps it private, and its ``_fit_context``
has changed between minor releases (1.9 added callback handling to it). ltrr does not call
another package's private names, so this module holds the small part of that contract the
rankers use. It differs in two ways a user would want: a bool is not a number here (``True``
is not an ``n_estimators``, as in ltrr's config checks), and a `StrOptions` lists its options
sorted, so a message reads the same on every run (sklearn's follows set order, which changes
with string hashing).

Constraint forms
----------------
`Interval` (over ``numbers.Integral`` or ``numbers.Real``), `StrOptions`, a type (any
instance of it), ``None``, and the strings ``"array-like"`` (a non-scalar sequence or array),
``"random_state"`` (None, an int in [0, 2**32 - 1] or a ``numpy.random.RandomState``),
``"verbose"`` (a bool or an int >= 0) and ``"boolean"``. `check_constraints` rejects any other
form when a class is defined.

sklearn's global ``skip_parameter_validation`` setting (``sklearn.set_config``, public) is
honoured, and a ranker's ``fit`` runs with it on, so sklearn estimators a ranker fits inside
(``LinearSVC``) do not check their parameters a second time, as ``_fit_context`` does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from numbers import Integral, Real
from typing import Any, TypeVar

import numpy as np

from ltrr._errors import ConfigError

__all__ = [
    "Interval",
    "StrOptions",
    "RankerParameterError",
    "check_constraints",
    "check_params",
    "checked_fit",
    "describe",
    "param_error",
    "satisfies",
]

_CLOSED = ("left", "right", "both", "neither")
_NAMED = ("array-like", "random_state", "verbose", "boolean")


class RankerParameterError(ConfigError, TypeError):
    """A ranker's constructor parameter has an invalid type or value.

    A `ConfigError` (so a ``ValueError``) and a ``TypeError``, as sklearn's own parameter
    errors are both.
    """


def _real(val: Any) -> bool:
    return isinstance(val, Real) and not isinstance(val, (bool, np.bool_))


class Interval:
    """Numbers of one kind between two bounds.

    Parameters
    ----------
    kind : {numbers.Integral, numbers.Real}
        Integral takes ints (numpy's too); Real takes any real number but NaN. Bools are
        neither.
    left, right : int, float or None
        The bounds; None is unbounded on that side.
    closed : {"left", "right", "both", "neither"}
        Which bounds belong to the interval.

    Examples
    --------
    >>> str(Interval(Real, 0, 1, closed="right"))
    'a float in the range (0.0, 1.0]'
    >>> Interval(Integral, 1, None, closed="left").accepts(True)
    False
    """

    def __init__(self, kind: type, left: float | None, right: float | None, *, closed: str):
        if kind not in (Integral, Real):
            raise TypeError(f"Interval kind must be numbers.Integral or numbers.Real, not {kind!r}")
        if closed not in _CLOSED:
            raise ValueError(f"Interval closed must be one of {_CLOSED}, not {closed!r}")
        for side, bound, inclusive in (("left", left, "left"), ("right", right, "right")):
            if bound is None:
                if closed in (inclusive, "both"):
                    raise ValueError(f"an unbounded {side} side cannot be closed")
            elif not (_real(bound) if kind is Real else isinstance(bound, Integral)):
                raise TypeError(f"Interval {side} bound {bound!r} is not of its kind")
        if left is not None and right is not None and right <= left:
            raise ValueError(f"Interval right bound {right} must exceed its left bound {left}")
        self.kind, self.left, self.right, self.closed = kind, left, right, closed

    def accepts(self, val: Any) -> bool:
        """Whether ``val`` is a number of this kind inside the bounds."""
        if not _real(val) or (self.kind is Integral and not isinstance(val, Integral)):
            return False
        if val != val:  # NaN
            return False
        if self.left is not None:
            if val < self.left or (val == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:
            if val > self.right or (val == self.right and self.closed in ("left", "neither")):
                return False
        return True

    def __str__(self) -> str:
        integral = self.kind is Integral

        def bound(b: float | None, inf: str) -> str:
            return inf if b is None else str(b if integral else float(b))

        lo = "[" if self.closed in ("left", "both") else "("
        hi = "]" if self.closed in ("right", "both") else ")"
        return (
            f"{'an int' if integral else 'a float'} in the range "
            f"{lo}{bound(self.left, '-inf')}, {bound(self.right, 'inf')}{hi}"
        )

    def __repr__(self) -> str:
        return (
            f"Interval({self.kind.__name__}, {self.left!r}, {self.right!r}, "
            f"closed={self.closed!r})"
        )


class StrOptions:
    """One of a fixed set of strings.

    Examples
    --------
    >>> str(StrOptions({"mean", "cls"}))
    "a str among {'cls', 'mean'}"
    """

    def __init__(self, options: set[str] | frozenset[str]):
        if not options or not all(isinstance(o, str) for o in options):
            raise TypeError(f"StrOptions takes a non-empty set of strings, not {options!r}")
        self.options = frozenset(options)

    def accepts(self, val: Any) -> bool:
        """Whether ``val`` is one of the options."""
        return isinstance(val, str) and val in self.options

    def __str__(self) -> str:
        return f"a str among {{{', '.join(repr(o) for o in sorted(self.options))}}}"

    def __repr__(self) -> str:
        return f"StrOptions({set(sorted(self.options))!r})"


def _known(constraint: Any) -> bool:
    return (
        constraint is None
        or isinstance(constraint, (Interval, StrOptions, type))
        or (isinstance(constraint, str) and constraint in _NAMED)
    )


def satisfies(val: Any, constraint: Any) -> bool:
    """Whether ``val`` meets one constraint (a form listed in the module docstring)."""
    if constraint is None:
        return val is None
    if isinstance(constraint, (Interval, StrOptions)):
        return constraint.accepts(val)
    if isinstance(constraint, type):
        return isinstance(val, constraint)
    if constraint == "array-like":
        return (
            hasattr(val, "__len__") or hasattr(val, "shape") or hasattr(val, "__array__")
        ) and not np.isscalar(val)
    if constraint == "random_state":
        return (
            val is None
            or isinstance(val, np.random.RandomState)
            or Interval(Integral, 0, 2**32 - 1, closed="both").accepts(val)
        )
    if constraint == "verbose":
        return isinstance(val, (bool, np.bool_)) or Interval(
            Integral, 0, None, closed="left"
        ).accepts(val)
    if constraint == "boolean":
        return isinstance(val, (bool, np.bool_))
    raise TypeError(f"unknown parameter constraint {constraint!r}")


def describe(constraint: Any) -> str:
    """How an error message names what a constraint accepts."""
    if constraint is None:
        return "None"
    if isinstance(constraint, type):
        return f"an instance of {constraint.__qualname__!r}"
    return {
        "array-like": "an array-like",
        "random_state": "an int in the range [0, 4294967295], an instance of "
        "'numpy.random.RandomState' or None",
        "verbose": "an int in the range [0, inf) or an instance of 'bool'",
        "boolean": "an instance of 'bool'",
    }.get(constraint, str(constraint)) if isinstance(constraint, str) else str(constraint)


def param_error(est: Any, name: str, allowed: str, value: Any) -> RankerParameterError:
    """The error for parameter ``name`` of ``est``: "The 'x' parameter of C must be ... Got
    ... instead." (the template of every parameter error of the rankers)."""
    return RankerParameterError(
        f"The {name!r} parameter of {type(est).__name__} must be {allowed}. Got {value!r} instead."
    )


def check_constraints(owner: str, constraints: Mapping[str, list]) -> None:
    """Raise ``TypeError`` when a declared constraint is not one of the known forms.

    Called when a ranker class is defined, so a typo in a declaration fails at import, not at
    the first ``fit`` with that value.
    """
    for name, allowed in constraints.items():
        if not isinstance(allowed, list) or not allowed:
            raise TypeError(f"{owner}.param_constraints[{name!r}] must be a non-empty list")
        for c in allowed:
            if not _known(c):
                raise TypeError(f"{owner}.param_constraints[{name!r}]: unknown constraint {c!r}")


def check_params(est: Any) -> None:
    """Check ``est``'s parameters against its class's ``param_constraints``.

    Parameters without a constraint are not checked. Raises `RankerParameterError` for the
    first parameter (in ``get_params`` order) that meets none of its constraints.
    """
    constraints: Mapping[str, list] = getattr(type(est), "param_constraints", {})
    for name, val in est.get_params(deep=False).items():
        allowed = constraints.get(name)
        if allowed is None or any(satisfies(val, c) for c in allowed):
            continue
        words = [describe(c) for c in allowed]
        text = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
        raise param_error(est, name, text, val)


F = TypeVar("F", bound=Callable[..., Any])


def checked_fit(fit: F) -> F:
    """Decorate a ranker's ``fit``: check its parameters first (`check_params`).

    Skipped when sklearn's ``skip_parameter_validation`` is set; the body runs with that setting
    on, so estimators fitted inside it do not check their parameters again.
    """
    import sklearn

    @functools.wraps(fit)
    def wrapper(est: Any, *args: Any, **kwargs: Any) -> Any:
        skip = sklearn.get_config()["skip_parameter_validation"]
        if not skip:
            check_params(est)
        with sklearn.config_context(skip_parameter_validation=True):
            return fit(est, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
