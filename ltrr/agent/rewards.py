"""Rewards of a multi-round routing trajectory (Router-R1, Zhang, Feng & You, 2025).

A trajectory is scored by three parts, combined hierarchically by `total_reward`:

- `format_reward`: 0 when the assistant output follows the protocol (``<think>`` reasoning,
  ``<search>ARM: sub-query</search>`` calls each followed by an ``<information>`` block, one
  final ``<answer>``), -1 otherwise, with the name of every rule it breaks.
- `outcome_reward`: how well the answer matches the gold aliases, by a metric of ltrr's
  registry (``recall`` by default; the best alias counts, as in labelling).
- the cost reward: `trajectory_cost` (arm costs plus injected tokens at a price) turned into a
  reward in [0, 1] by a `CostNormaliser` (high when cheap).

Everything here is a pure function of plain values (numpy only), so a trainer, an evaluator and
a test compute the same numbers.

This is the ``"ltrr"`` reward of ``[agent] reward``; ``"router-r1"`` reproduces Router-R1's
released rules for parity (`ltrr.agent.reward_options`, whose `LtrrReward` says why ours differs:
tags nested in order, a search naming its arm exactly, any registry metric as the outcome, the
cost counted only for a correct answer).

Examples
--------
>>> text = "<think>I need a fact.</think><search>bm25: capital of Australia</search>"
>>> text += "<information>Canberra is the capital.</information>"
>>> text += "<think>Found it.</think><answer>Canberra</answer>"
>>> format_reward(text, arms=["bm25", "none"])
(0.0, [])
>>> outcome_reward("Canberra", ["Canberra"])
1.0
>>> cost = trajectory_cost(["bm25"], {"bm25": 1.0}, injected_tokens=100, token_price=0.001)
>>> round(cost, 3)
1.1
>>> norm = CostNormaliser.fixed(0.0, 2.0)
>>> total_reward(0.0, 1.0, norm.cost_reward(cost), alpha=0.2)
0.89
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ltrr._errors import ConfigError, DataError

__all__ = [
    "TAGS",
    "FORMAT_RULES",
    "SEARCH_ERRORS",
    "CostNormaliser",
    "format_reward",
    "outcome_reward",
    "parse_search",
    "total_reward",
    "trajectory_cost",
]

#: The protocol's tags, in the order the rules name them.
TAGS = ("think", "search", "information", "answer")
#: Why a ``<search>`` call is not valid (`parse_search`); `format_reward` reports them with a
#: ``search_`` prefix.
SEARCH_ERRORS = ("no_arm", "several_arms", "unknown_arm", "empty_query")
#: Every rule `format_reward` checks, by its stable short name, in the order it reports them.
FORMAT_RULES = (
    "unbalanced_tags",
    "nested_tags",
    "empty_think",
    "answer_count",
    "no_think",
    "search_information_mismatch",
    "bad_start",
    "bad_end",
    *(f"search_{e}" for e in SEARCH_ERRORS),
)
_TAG = re.compile(r"<(/?)(" + "|".join(TAGS) + r")>")


def _blocks(text: str, tag: str) -> list[str]:
    """Contents of the well-formed ``<tag>...</tag>`` blocks (non-greedy, left to right)."""
    return re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.S)


def parse_search(content: str, arms: Iterable[str]) -> tuple[str | None, str, str | None]:
    """Split the content of a ``<search>`` block into ``(arm, sub-query, error)``.

    The content must be ``ARM: sub-query``: one prefix naming an arm of ``arms`` (exact
    spelling), a colon, a non-empty sub-query. ``error`` is None for a valid call, else one of
    `SEARCH_ERRORS`: ``no_arm`` (no ``ARM:`` prefix), ``several_arms`` (the sub-query itself
    starts with another ``ARM:`` prefix), ``unknown_arm``, ``empty_query``. A colon inside the
    sub-query is kept (``bm25: film: the matrix`` searches ``film: the matrix``).

    Examples
    --------
    >>> parse_search(" bm25: who painted the Mona Lisa ", ["bm25", "dense"])
    ('bm25', 'who painted the Mona Lisa', None)
    >>> parse_search("google: Mona Lisa", ["bm25"])
    ('google', 'Mona Lisa', 'unknown_arm')
    >>> parse_search("bm25: dense: Mona Lisa", ["bm25", "dense"])
    ('bm25', 'dense: Mona Lisa', 'several_arms')
    >>> parse_search("Mona Lisa", ["bm25"])
    (None, 'Mona Lisa', 'no_arm')
    """
    names = set(arms)
    content = content.strip()
    if ":" not in content:
        return None, content, "no_arm"
    arm, query = (part.strip() for part in content.split(":", 1))
    if not arm:
        return None, query, "no_arm"
    if ":" in query and query.split(":", 1)[0].strip() in names:
        return arm, query, "several_arms"
    if arm not in names:
        return arm, query, "unknown_arm"
    if not query:
        return arm, query, "empty_query"
    return arm, query, None


def format_reward(text: str, arms: Iterable[str]) -> tuple[float, list[str]]:
    """Check the assistant output of a trajectory against the protocol.

    Parameters
    ----------
    text : str
        Everything after the prompt: what the model wrote and what the loop injected
        (``Trajectory.text``).
    arms : iterable of str
        The arm names a ``<search>`` may call.

    Returns
    -------
    score : float
        0.0 when every rule holds, -1.0 otherwise.
    reasons : list of str
        The names (`FORMAT_RULES`) of the broken rules, each once, in `FORMAT_RULES` order:

        - ``unbalanced_tags``: a closing tag without its opening tag, or a tag left open
          (``think``, ``search``, ``information``, ``answer``);
        - ``nested_tags``: a tag opened inside another;
        - ``empty_think``: a ``<think></think>`` with nothing but whitespace inside;
        - ``answer_count``: not exactly one ``<answer>``;
        - ``no_think``: no ``<think>`` at all;
        - ``search_information_mismatch``: as many ``<search>`` as ``<information>`` fails;
        - ``bad_start`` / ``bad_end``: the output (whitespace stripped) does not start with
          ``<think>`` / end with ``</answer>``;
        - ``search_no_arm``, ``search_several_arms``, ``search_unknown_arm``,
          ``search_empty_query``: a search block that `parse_search` rejects.

    Examples
    --------
    >>> format_reward("<think>easy</think><answer>Paris</answer>", ["bm25"])
    (0.0, [])
    >>> format_reward("<answer>Paris</answer><answer>Rome</answer>", ["bm25"])
    (-1.0, ['answer_count', 'no_think', 'bad_start'])
    """
    arms = list(arms)
    broken: set[str] = set()
    stack: list[str] = []
    opened = dict.fromkeys(TAGS, 0)
    for m in _TAG.finditer(text):
        closing, tag = m.group(1) == "/", m.group(2)
        if closing:
            if stack and stack[-1] == tag:
                stack.pop()
            else:
                broken.add("unbalanced_tags")
                if tag in stack:  # close what was opened, so one slip is not reported twice
                    del stack[len(stack) - 1 - stack[::-1].index(tag):]
        else:
            if stack:
                broken.add("nested_tags")
            stack.append(tag)
            opened[tag] += 1
    if stack:
        broken.add("unbalanced_tags")
    if any(not b.strip() for b in _blocks(text, "think")):
        broken.add("empty_think")
    if opened["answer"] != 1:
        broken.add("answer_count")
    if opened["think"] == 0:
        broken.add("no_think")
    if opened["search"] != opened["information"]:
        broken.add("search_information_mismatch")
    stripped = text.strip()
    if not stripped.startswith("<think>"):
        broken.add("bad_start")
    if not stripped.endswith("</answer>"):
        broken.add("bad_end")
    for content in _blocks(text, "search"):
        error = parse_search(content, arms)[2]
        if error:
            broken.add(f"search_{error}")
    reasons = [r for r in FORMAT_RULES if r in broken]
    return (-1.0 if reasons else 0.0), reasons


def outcome_reward(
    answer: str | None,
    gold_aliases: Sequence[str],
    metric: Any = "recall",
    *,
    question: str = "",
) -> float:
    """Score an answer against its gold aliases with a metric of `ltrr.metrics`.

    Parameters
    ----------
    answer : str or None
        The text inside ``<answer>``; None (no answer) scores 0.
    gold_aliases : sequence of str
        Accepted answers; the best-scoring alias counts, as in labelling.
    metric : str or Metric
        A metric name or text form of the registry (``recall``, ``em``, ``f1``, ``contains``,
        ``semsim``, ``bem``); judge metrics (``ac``, ``aqs``) are refused: a reward is computed
        for every rollout and must not call an LLM.
    question : str
        Passed to the metric (lexical metrics ignore it).

    Returns
    -------
    float
        The metric's score, in its range ([0, 1] for ``recall``).

    Examples
    --------
    >>> outcome_reward("Leonardo", ["Leonardo da Vinci", "Leonardo"])
    1.0
    >>> outcome_reward("Leonardo", ["Leonardo da Vinci"])
    0.3333333333333333
    >>> outcome_reward(None, ["Paris"])
    0.0
    """
    from ltrr.metrics import Metric, parse_metric, validate_inputs

    m = parse_metric(metric) if isinstance(metric, str) else metric
    if not isinstance(m, Metric):
        raise ConfigError(f"outcome_reward metric must be a metric name or Metric, got {metric!r}")
    if m.needs_judge:
        raise ConfigError(
            f"outcome_reward cannot use the judge metric {str(m)!r} (an LLM call per rollout); "
            "use recall, em, f1, contains, semsim or bem"
        )
    validate_inputs([question], [answer or ""], [gold_aliases])
    if answer is None:
        return 0.0
    return float(m.score(question, answer, list(gold_aliases)))


def trajectory_cost(
    searches: Sequence[str],
    arm_costs: Mapping[str, float],
    injected_tokens: int,
    token_price: float = 0.0,
) -> float:
    """The cost of a trajectory, in the pool's arm-cost units.

    ``sum(arm_costs[arm] for arm in searches) + injected_tokens * token_price``: an arm's cost
    is its relative cost in the pool (`ltrr.retrieval.pool.Arm.cost`, 1.0 for a retrieving arm
    by default, 0.0 for ``none``) and ``token_price`` is the cost, in those same units, of one
    token the loop injects into the context (the ``<information>`` blocks the model reads).

    Parameters
    ----------
    searches : sequence of str
        The arm of each valid search, in order (an invalid call runs no arm and costs nothing).
    arm_costs : mapping of str to float
        Cost of each arm (``Pool.costs``).
    injected_tokens : int
        Tokens injected by the loop.
    token_price : float
        Cost units per injected token (>= 0).

    Examples
    --------
    >>> trajectory_cost(["bm25", "dense", "bm25"], {"bm25": 1.0, "dense": 2.0}, 0)
    4.0
    >>> trajectory_cost([], {}, injected_tokens=500, token_price=0.002)
    1.0
    """
    if isinstance(searches, str):
        raise DataError("searches must be a list of arm names, got one string; wrap it in a list")
    if not _finite(token_price) or token_price < 0:
        raise ConfigError(f"token_price must be a finite number >= 0, got {token_price!r}")
    if isinstance(injected_tokens, bool) or not isinstance(injected_tokens, (int, np.integer)) \
            or injected_tokens < 0:
        raise DataError(f"injected_tokens must be an integer >= 0, got {injected_tokens!r}")
    total = 0.0
    for arm in searches:
        if arm not in arm_costs:
            raise ConfigError(
                f"no cost for arm {arm!r}; arm_costs has: {', '.join(sorted(map(str, arm_costs)))}"
            )
        total += float(arm_costs[arm])
    return total + int(injected_tokens) * float(token_price)


def total_reward(
    format_score: float,
    outcome: float,
    cost_reward: float,
    alpha: float,
    *,
    correct_threshold: float = 1.0,
) -> float:
    """Combine the reward parts hierarchically.

    A bad format (``format_score < 0``) gives -1 and nothing else counts. Otherwise the reward is
    ``(1 - alpha) * outcome``, plus ``alpha * cost_reward`` only when the answer is correct,
    that is ``outcome >= correct_threshold``: a cheap wrong answer earns nothing for being cheap.

    Parameters
    ----------
    format_score : float
        From `format_reward` (0 or -1).
    outcome : float
        From `outcome_reward`.
    cost_reward : float
        From `CostNormaliser.cost_reward`, in [0, 1].
    alpha : float
        Weight of the cost term, in [0, 1].
    correct_threshold : float
        The outcome from which an answer counts as correct; the default 1.0 means full recall
        (every token of some gold alias is in the answer).

    Examples
    --------
    >>> total_reward(-1.0, 1.0, 1.0, alpha=0.5)
    -1.0
    >>> total_reward(0.0, 1.0, 0.5, alpha=0.5)
    0.75
    >>> total_reward(0.0, 0.5, 1.0, alpha=0.5)  # not correct: the cost term does not count
    0.25
    """
    if not _finite(alpha) or not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must be a number in [0, 1], got {alpha!r}")
    for name, value in (("format_score", format_score), ("outcome", outcome),
                        ("cost_reward", cost_reward), ("correct_threshold", correct_threshold)):
        if not _finite(value):
            raise DataError(f"total_reward: {name} must be a finite number, got {value!r}")
    if format_score < 0:
        return -1.0
    reward = (1.0 - alpha) * float(outcome)
    if outcome >= correct_threshold:
        reward += alpha * float(cost_reward)
    return reward


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) \
        and math.isfinite(float(x))


class CostNormaliser:
    """Turn trajectory costs into cost rewards in [0, 1] (1 = cheapest).

    A cost is normalised between a low and a high bound, ``(cost - lo) / (hi - lo)`` clipped to
    [0, 1], and inverted: ``cost_reward = 1 - normalised``. When ``hi == lo`` a cost at or
    below ``lo`` normalises to 0 and one above to 1. The bounds come from one of two modes:

    - **training** (``CostNormaliser(window=...)``): the ``lo_percentile`` and ``hi_percentile``
      (5th and 95th) of the last ``window`` costs passed to `update` (numpy's linear
      interpolation), so the scale follows the policy as it gets cheaper;
    - **evaluation** (`fixed` or `from_costs`): bounds set once, for instance from the costs of
      the design part, and never updated, so a trajectory's score never depends on what was
      scored before it.

    Parameters
    ----------
    window : int
        Costs kept in training mode (the most recent ones).
    lo_percentile, hi_percentile : float
        Percentiles (0-100) of the window used as bounds in training mode.
    lo, hi : float, optional
        Fixed bounds (evaluation mode); set both or neither. Prefer `fixed` / `from_costs`.

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
    """

    def __init__(
        self,
        window: int = 512,
        *,
        lo_percentile: float = 5.0,
        hi_percentile: float = 95.0,
        lo: float | None = None,
        hi: float | None = None,
    ):
        self.window = window
        self.lo_percentile = lo_percentile
        self.hi_percentile = hi_percentile
        self.lo = lo
        self.hi = hi
        self.history_: deque[float] = deque()

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def fixed(cls, lo: float, hi: float) -> CostNormaliser:
        """An evaluation-mode normaliser with bounds ``lo <= hi``."""
        norm = cls(lo=lo, hi=hi)
        norm._validate()
        return norm

    @classmethod
    def from_costs(
        cls, costs: Iterable[float], *, lo_percentile: float = 5.0, hi_percentile: float = 95.0
    ) -> CostNormaliser:
        """An evaluation-mode normaliser whose bounds are percentiles of ``costs`` (taken once)."""
        values = _costs_array(costs)
        if values.size == 0:
            raise DataError("CostNormaliser.from_costs needs at least one cost")
        _check_percentiles(lo_percentile, hi_percentile)
        lo, hi = np.percentile(values, [lo_percentile, hi_percentile])
        norm = cls(lo_percentile=lo_percentile, hi_percentile=hi_percentile, lo=float(lo), hi=float(hi))
        norm._validate()
        return norm

    @property
    def mode(self) -> str:
        """``"fixed"`` (evaluation) or ``"rolling"`` (training)."""
        return "fixed" if self.lo is not None or self.hi is not None else "rolling"

    def _validate(self) -> None:
        _check_percentiles(self.lo_percentile, self.hi_percentile)
        if self.mode == "fixed":
            if self.lo is None or self.hi is None:
                raise ConfigError("CostNormaliser: set both lo and hi (evaluation mode) or neither")
            if not (_finite(self.lo) and _finite(self.hi)) or self.lo > self.hi:
                raise ConfigError(
                    f"CostNormaliser bounds must be finite with lo <= hi, got lo={self.lo!r}, "
                    f"hi={self.hi!r}"
                )
        elif isinstance(self.window, bool) or not isinstance(self.window, (int, np.integer)) \
                or self.window < 1:
            raise ConfigError(f"CostNormaliser window must be a positive integer, got {self.window!r}")

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
        self.history_.extend(_costs_array(costs).tolist())
        return self

    def bounds(self) -> tuple[float, float]:
        """The current ``(lo, hi)``."""
        self._validate()
        if self.mode == "fixed":
            return float(self.lo), float(self.hi)  # type: ignore[arg-type]
        if not self.history_:
            raise ConfigError(
                "this CostNormaliser has seen no cost yet; call update(costs) with the batch's "
                "costs before scoring them (or use CostNormaliser.fixed for evaluation)"
            )
        lo, hi = np.percentile(np.asarray(self.history_), [self.lo_percentile, self.hi_percentile])
        return float(lo), float(hi)

    # ---- scoring -------------------------------------------------------------------------
    def normalise(self, cost: float | Iterable[float]) -> Any:
        """Costs scaled to [0, 1] between the bounds (a float for a float, else an array)."""
        lo, hi = self.bounds()
        values, scalar = _costs_array(cost, with_shape=True)
        if hi > lo:
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

    # ---- persistence ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict that `from_dict` reads back (the training window included)."""
        self._validate()
        d: dict[str, Any] = {"mode": self.mode, "window": int(self.window),
                             "lo_percentile": float(self.lo_percentile),
                             "hi_percentile": float(self.hi_percentile)}
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
        keys = {"mode", "window", "lo_percentile", "hi_percentile", "lo", "hi", "history"}
        unknown = sorted(set(d) - keys)
        if unknown:
            raise DataError(f"CostNormaliser dict has unknown key(s) {unknown}")
        try:
            norm = cls(d.get("window", 512), lo_percentile=d.get("lo_percentile", 5.0),
                       hi_percentile=d.get("hi_percentile", 95.0), lo=d.get("lo"), hi=d.get("hi"))
            if norm.mode != d["mode"]:
                raise ConfigError(f"mode {d['mode']!r} does not match its bounds")
            norm._validate()
            if norm.mode == "rolling":
                norm.update(d.get("history", []))
        except ConfigError as exc:
            raise DataError(f"bad CostNormaliser dict: {exc}") from None
        return norm

    def __repr__(self) -> str:
        if self.mode == "fixed":
            return f"CostNormaliser.fixed(lo={self.lo!r}, hi={self.hi!r})"
        return f"CostNormaliser(window={self.window!r}, seen={len(self.history_)})"


def _check_percentiles(lo: Any, hi: Any) -> None:
    if not (_finite(lo) and _finite(hi)) or not 0.0 <= lo <= hi <= 100.0:
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
