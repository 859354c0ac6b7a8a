"""The cost reward of a routing trajectory: a `CostNormaliser` turns a trajectory's cost
(`ltrr.agent.rewards.trajectory_cost`) into a reward in [0, 1], high when cheap.

Its own module so that `ltrr.agent.rewards` stays one family (the format, outcome and total
rewards); `ltrr.agent.rewards` re-exports it.

Examples
--------
>>> CostNormaliser.fixed(0.0, 2.0).cost_reward(0.5)
0.75
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ltrr._checks import check_int, is_finite
from ltrr._errors import ConfigError, DataError

__all__ = ["CostNormaliser"]


class CostNormaliser:
    """Turn trajectory costs into cost rewards in [0, 1] (1 = cheapest).

    A cost is normalised between a low and a high bound, ``(cost - lo) / (hi - lo)`` clipped to
    [0, 1], and inverted: ``cost_reward = 1 - normalised``. When ``hi == lo`` a cost at or
    below ``lo`` normalises to 0 and one above to 1 (unless ``no_spread`` is set). The bounds
    come from one of two modes:

    - **training** (``CostNormaliser(window=...)``): the ``lo_percentile`` and ``hi_percentile``
      (5th and 95th) of the last ``window`` costs passed to `update` (numpy's linear
      interpolation), so the scale follows the policy as it gets cheaper;
    - **evaluation** (`fixed` or `from_costs`): bounds set once, for instance from the costs of
      the design part, and never updated, so a trajectory's score never depends on what was
      scored before it.

    Three options give Router-R1's rule (``normalize_reward`` in ``verl/trainer/main_ppo.py:41-72``
    of ulab-uiuc/Router-R1 at 801a240; `router_r1` sets all three, and ``[agent] reward =
    "router-r1"`` uses it, `ltrr.agent.reward_options.RouterR1Reward`): ``transform = "sqrt"``
    (the square root of each cost, before the window's percentiles and before scoring),
    ``no_spread = 0.5`` (the cost reward when ``hi - lo < 1e-8``) and ``window_updates = "each"``
    (`score_batch` adds the costs to the window one at a time, each just before it is scored).

    ltrr's defaults differ on purpose. No transform: their square root tames the heavy tail of
    per-token API prices; our costs are a handful of arm calls plus a token term, bounded and
    without such a tail, the percentile window already clips outliers, and on the linear scale
    one more arm call is worth the same cost reward wherever it falls. Bounds without spread
    keep the step rule (a cost at or below them scores 1, one above scores 0), which still tells
    a dearer trajectory from one as cheap as the bounds, where 0.5 scores every cost alike; this
    matters most for fixed evaluation bounds from design scripts that all cost the same. The
    batch enters the window at once, so the rollouts of one GRPO group are scored on the same
    bounds whatever their order in the batch (one at a time, the first of a batch is scored on
    an older window than the last).

    Parameters
    ----------
    window : int
        Costs kept in training mode (the most recent ones).
    lo_percentile, hi_percentile : float
        Percentiles (0-100) of the window used as bounds in training mode.
    lo, hi : float, optional
        Fixed bounds (evaluation mode), in transformed units; set both or neither. Prefer
        `fixed` / `from_costs`.
    transform : {"identity", "sqrt"}
        Applied to every cost (the window keeps the raw costs). ``"sqrt"`` needs costs >= 0.
    no_spread : float, optional
        The cost reward, in [0, 1], of every cost when the bounds are less than 1e-8 apart;
        None keeps the step rule above.
    window_updates : {"batch", "each"}
        How `score_batch` feeds a training-mode window: the whole batch before scoring it, or
        each cost just before scoring it.

    Attributes
    ----------
    history_ : deque of float
        The training window (raw costs, oldest first).

    Examples
    --------
    >>> norm = CostNormaliser(window=21).update(range(21))
    >>> norm.bounds()
    (1.0, 19.0)
    >>> norm.cost_reward([0.0, 10.0, 25.0]).tolist()
    [1.0, 0.5, 0.0]
    >>> frozen = CostNormaliser.fixed(0.0, 4.0)
    >>> frozen.cost_reward(1.0)
    0.75
    >>> CostNormaliser.from_dict(frozen.to_dict()).cost_reward(1.0)
    0.75
    >>> r1 = CostNormaliser.router_r1(window=1000)
    >>> r1.score_batch([4.0]).tolist()  # one cost: no spread yet
    [0.5]
    >>> r1.score_batch([0.0, 16.0]).tolist()  # sqrt: window [2, 0], then [2, 0, 4]
    [1.0, 0.0]
    """

    TRANSFORMS = ("identity", "sqrt")
    WINDOW_UPDATES = ("batch", "each")
    #: Below this spread the bounds count as equal under ``no_spread`` (Router-R1's ``eps``).
    SPREAD_EPS = 1e-8

    def __init__(
        self,
        window: int = 512,
        *,
        lo_percentile: float = 5.0,
        hi_percentile: float = 95.0,
        lo: float | None = None,
        hi: float | None = None,
        transform: str = "identity",
        no_spread: float | None = None,
        window_updates: str = "batch",
    ):
        self.window = window
        self.lo_percentile = lo_percentile
        self.hi_percentile = hi_percentile
        self.lo = lo
        self.hi = hi
        self.transform = transform
        self.no_spread = no_spread
        self.window_updates = window_updates
        self.history_: deque[float] = deque()

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def fixed(cls, lo: float, hi: float, *, transform: str = "identity",
              no_spread: float | None = None) -> CostNormaliser:
        """An evaluation-mode normaliser with bounds ``lo <= hi`` (in ``transform``'s units)."""
        norm = cls(lo=lo, hi=hi, transform=transform, no_spread=no_spread)
        norm._validate()
        return norm

    @classmethod
    def from_costs(
        cls, costs: Iterable[float], *, lo_percentile: float = 5.0, hi_percentile: float = 95.0,
        transform: str = "identity", no_spread: float | None = None,
    ) -> CostNormaliser:
        """An evaluation-mode normaliser whose bounds are percentiles of ``costs`` (transformed,
        taken once)."""
        values = _costs_array(costs)
        if values.size == 0:
            raise DataError("CostNormaliser.from_costs needs at least one cost")
        _check_percentiles(lo_percentile, hi_percentile)
        probe = cls(transform=transform, no_spread=no_spread)
        probe._validate()
        lo, hi = np.percentile(probe._transformed(values), [lo_percentile, hi_percentile])
        norm = cls(lo_percentile=lo_percentile, hi_percentile=hi_percentile, lo=float(lo), hi=float(hi),
                   transform=transform, no_spread=no_spread)
        norm._validate()
        return norm

    @classmethod
    def router_r1(cls, window: int = 1000) -> CostNormaliser:
        """A training-mode normaliser with Router-R1's rule (see the class): the square root of
        each cost, the 5th-95th percentiles of the last ``window`` (theirs: 1,000), 0.5 when they
        do not differ, each cost added to the window just before it is scored."""
        norm = cls(window, transform="sqrt", no_spread=0.5, window_updates="each")
        norm._validate()
        return norm

    @property
    def mode(self) -> str:
        """``"fixed"`` (evaluation) or ``"rolling"`` (training)."""
        return "fixed" if self.lo is not None or self.hi is not None else "rolling"

    @property
    def rule(self) -> dict[str, Any]:
        """``{"transform", "no_spread", "window_updates"}``: how costs are scored, apart from
        the bounds."""
        return {"transform": self.transform, "no_spread": self.no_spread, "window_updates": self.window_updates}

    def _validate(self) -> None:
        _check_percentiles(self.lo_percentile, self.hi_percentile)
        if self.transform not in self.TRANSFORMS:
            raise ConfigError(f"CostNormaliser transform must be one of {list(self.TRANSFORMS)}, "
                              f"got {self.transform!r}")
        if self.window_updates not in self.WINDOW_UPDATES:
            raise ConfigError(f"CostNormaliser window_updates must be one of {list(self.WINDOW_UPDATES)}, "
                              f"got {self.window_updates!r}")
        if self.no_spread is not None and (not is_finite(self.no_spread) or not 0.0 <= self.no_spread <= 1.0):
            raise ConfigError(f"CostNormaliser no_spread must be None or a number in [0, 1], "
                              f"got {self.no_spread!r}")
        if self.mode == "fixed":
            if self.lo is None or self.hi is None:
                raise ConfigError("CostNormaliser: set both lo and hi (evaluation mode) or neither")
            if not (is_finite(self.lo) and is_finite(self.hi)) or self.lo > self.hi:
                raise ConfigError(
                    f"CostNormaliser bounds must be finite with lo <= hi, got lo={self.lo!r}, "
                    f"hi={self.hi!r}"
                )
        else:
            check_int(self.window, "CostNormaliser window", low=1)

    def _transformed(self, values: Any) -> Any:
        if self.transform == "identity":
            return values
        if np.any(values < 0):
            raise DataError(f"CostNormaliser transform 'sqrt' needs costs >= 0, got {float(values[values < 0][0])!r}")
        return np.sqrt(values)

    # ---- training mode -------------------------------------------------------------------
    def update(self, costs: float | Iterable[float]) -> CostNormaliser:
        """Add costs to the training window (oldest dropped beyond ``window``); returns self.

        Raises `ConfigError` in evaluation mode, whose bounds never move.
        """
        self._validate()
        if self.mode == "fixed":
            raise ConfigError(
                "this CostNormaliser has fixed bounds (evaluation mode) and is never updated; "
                "build CostNormaliser(window=...) for training"
            )
        if self.history_.maxlen != self.window:
            self.history_ = deque(self.history_, maxlen=int(self.window))
        values = _costs_array(costs)
        self._transformed(values)  # refuse a cost the transform cannot take before it enters the window
        self.history_.extend(values.tolist())
        return self

    def bounds(self) -> tuple[float, float]:
        """The current ``(lo, hi)``, in transformed units."""
        self._validate()
        if self.mode == "fixed":
            return float(self.lo), float(self.hi)  # type: ignore[arg-type]
        if not self.history_:
            raise ConfigError(
                "this CostNormaliser has seen no cost yet; call update(costs) with the batch's "
                "costs before scoring them (or use CostNormaliser.fixed for evaluation)"
            )
        window = self._transformed(np.asarray(self.history_, dtype=np.float64))
        lo, hi = np.percentile(window, [self.lo_percentile, self.hi_percentile])
        return float(lo), float(hi)

    # ---- scoring -------------------------------------------------------------------------
    def normalise(self, cost: float | Iterable[float]) -> Any:
        """Costs scaled to [0, 1] between the bounds (a float for a float, else an array)."""
        lo, hi = self.bounds()
        values, scalar = _costs_array(cost, with_shape=True)
        values = self._transformed(values)
        if self.no_spread is not None and hi - lo < self.SPREAD_EPS:
            out = np.full(values.shape, 1.0 - float(self.no_spread))
        elif hi > lo:
            # halves never overflow, and halving is exact: the same numbers as (c - lo) / (hi - lo)
            # for any representable bounds; costs outside [lo, hi] are set apart
            with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
                frac = (values / 2 - lo / 2) / (hi / 2 - lo / 2)
            out = np.where(values <= lo, 0.0, np.where(values >= hi, 1.0, np.clip(frac, 0.0, 1.0)))
        else:
            out = (values > lo).astype(np.float64)
        return float(out[0]) if scalar else out

    def cost_reward(self, cost: float | Iterable[float]) -> Any:
        """``1 - normalise(cost)``: 1 for the cheapest, 0 for the dearest."""
        n = self.normalise(cost)
        return 1.0 - n

    def score_batch(self, costs: Iterable[float]) -> Any:
        """The cost rewards of a batch of costs, in order (an array), feeding a training-mode
        window as ``window_updates`` says; an evaluation-mode normaliser is only read.

        Examples
        --------
        >>> CostNormaliser(window=10).score_batch([2.0, 0.0, 1.0]).round(3).tolist()  # one window
        [0.0, 1.0, 0.5]
        >>> each = CostNormaliser(window=10, window_updates="each")
        >>> each.score_batch([2.0, 0.0, 1.0]).round(3).tolist()  # the first saw only itself
        [1.0, 1.0, 0.5]
        """
        values = _costs_array(costs)
        if values.size == 0:
            return np.zeros(0)
        if self.mode == "fixed":
            return np.asarray(self.cost_reward(values), dtype=np.float64)
        if self.window_updates == "batch":
            return np.asarray(self.update(values).cost_reward(values), dtype=np.float64)
        return np.array([self.update([c]).cost_reward(float(c)) for c in values.tolist()], dtype=np.float64)

    # ---- persistence ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict that `from_dict` reads back (the training window included). The
        rule's options are written only when they are not ltrr's defaults, so a default
        normaliser's dict is what it was before they existed (evaluation records compare them)."""
        self._validate()
        d: dict[str, Any] = {"mode": self.mode, "window": int(self.window),
                             "lo_percentile": float(self.lo_percentile),
                             "hi_percentile": float(self.hi_percentile)}
        default = type(self)().rule
        d.update({k: v for k, v in self.rule.items() if v != default[k]})
        if self.mode == "fixed":
            d.update(lo=float(self.lo), hi=float(self.hi))  # type: ignore[arg-type]
        else:
            d["history"] = [float(c) for c in self.history_]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CostNormaliser:
        """Rebuild a normaliser from `to_dict` output; a malformed dict raises `DataError`."""
        if not isinstance(d, Mapping) or d.get("mode") not in ("fixed", "rolling"):
            raise DataError(f"not a CostNormaliser dict (mode 'fixed' or 'rolling'): {d!r}"[:200])
        keys = {"mode", "window", "lo_percentile", "hi_percentile", "lo", "hi", "history",
                "transform", "no_spread", "window_updates"}
        unknown = sorted(set(d) - keys)
        if unknown:
            raise DataError(f"CostNormaliser dict has unknown key(s) {unknown}")
        try:
            norm = cls(d.get("window", 512), lo_percentile=d.get("lo_percentile", 5.0),
                       hi_percentile=d.get("hi_percentile", 95.0), lo=d.get("lo"), hi=d.get("hi"),
                       transform=d.get("transform", "identity"), no_spread=d.get("no_spread"),
                       window_updates=d.get("window_updates", "batch"))
            if norm.mode != d["mode"]:
                raise ConfigError(f"mode {d['mode']!r} does not match its bounds")
            norm._validate()
            if norm.mode == "rolling":
                norm.update(d.get("history", []))
        except ConfigError as exc:
            raise DataError(f"bad CostNormaliser dict: {exc}") from None
        return norm

    def __repr__(self) -> str:
        default = type(self)().rule
        extra = "".join(f", {k}={v!r}" for k, v in self.rule.items() if v != default[k])
        if self.mode == "fixed":
            return f"CostNormaliser.fixed(lo={self.lo!r}, hi={self.hi!r}{extra})"
        return f"CostNormaliser(window={self.window!r}, seen={len(self.history_)}{extra})"


def _check_percentiles(lo: Any, hi: Any) -> None:
    if not (is_finite(lo) and is_finite(hi)) or not 0.0 <= lo <= hi <= 100.0:
        raise ConfigError(
            f"CostNormaliser percentiles must satisfy 0 <= lo_percentile <= hi_percentile <= 100, "
            f"got {lo!r} and {hi!r}"
        )


def _costs_array(costs: Any, *, with_shape: bool = False) -> Any:
    """Costs as a 1-d float array (and, with ``with_shape``, whether one number was given)."""
    try:
        if isinstance(costs, (int, float, np.number, np.ndarray)):
            values = np.asarray(costs, dtype=np.float64)
        else:
            values = np.asarray(list(costs), dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"costs must be numbers, got {costs!r}"[:200]) from None
    scalar = values.ndim == 0
    values = np.atleast_1d(values)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise DataError(f"costs must be finite numbers, got {costs!r}"[:200])
    return (values, scalar) if with_shape else values
