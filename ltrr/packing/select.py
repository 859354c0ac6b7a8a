"""Roles, token budgets, importance scores and the selectors of context routing (RCR-Router).

- `Role`: a name, keywords, priorities per task stage and per item kind, and a budget offset;
  `DEFAULT_ROLES` are Planner, Searcher and Answerer.
- `allocate_budget`: the paper's Eq. 4, ``B_i = base + offset_i`` (never below 0).
- `importance`: ``alpha(m; role, stage) = w_kw * keyword relevance + w_stage * stage priority of
  m's kind + w_recency * decay ** (rounds since m) + w_sim * cos(m, goal)``, each signal in
  [0, 1], the weights from config (`ImportanceWeights`).
- Selectors (`selectors`): ``greedy`` is the paper's Algorithm 1 (take items by importance
  until the next one does not fit, then stop); ``greedy-skip`` skips an item that does not fit
  and goes on; ``knapsack`` is the exact 0/1 knapsack by dynamic programming over token counts
  (maximum total importance within the budget); ``knapsack-marginal`` is the exact knapsack of
  each item's importance above the least important candidate's, and ``greedy-density`` its
  greedy by that marginal importance per token (see `knapsack_marginal` for why).

A budget smaller than every item gives an empty selection, recorded as such by the caller; an
item larger than the budget is never selected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ltrr._checks import check_int
from ltrr._errors import ConfigError
from ltrr._registry import Registry
from ltrr.packing.items import MemoryItem

__all__ = ["content_words", "Role", "DEFAULT_ROLES", "ImportanceWeights", "allocate_budget", "importance", "selectors",
           "select", "greedy", "greedy_skip", "greedy_density", "knapsack", "knapsack_marginal", "marginal",
           "role_by_name", "STAGES"]

STAGES = ("plan", "search", "answer")


@dataclass(frozen=True)
class Role:
    """An agent role: what it looks for (keywords), what it values at each stage, its budget offset."""

    name: str
    keywords: tuple[str, ...] = ()
    # stage -> kind -> priority in [0, 1]
    priorities: dict = field(default_factory=dict)
    budget_offset: int = 0

    def priority(self, stage: str, kind: str) -> float:
        """The priority in [0, 1] of items of ``kind`` at task ``stage``; 0 when not listed."""
        return float(self.priorities.get(stage, {}).get(kind, 0.0))


DEFAULT_ROLES = {
    "planner": Role("planner", ("question", "sub-question", "plan", "step", "first", "then"),
                    {"plan": {"plan": 1.0, "message": 0.6, "fact": 0.4, "passage": 0.2, "tool_result": 0.2},
                     "search": {"plan": 0.8, "fact": 0.5, "message": 0.4, "passage": 0.2, "tool_result": 0.3},
                     "answer": {"plan": 0.4, "fact": 0.6, "message": 0.3, "passage": 0.2, "tool_result": 0.2}},
                    budget_offset=-128),
    "searcher": Role("searcher", ("who", "what", "when", "where", "which", "find"),
                     {"plan": {"plan": 0.6, "passage": 0.6, "fact": 0.5, "message": 0.2, "tool_result": 0.5},
                      "search": {"passage": 1.0, "tool_result": 0.9, "plan": 0.6, "fact": 0.5, "message": 0.2},
                      "answer": {"passage": 0.8, "fact": 0.7, "tool_result": 0.7, "plan": 0.3, "message": 0.2}},
                     budget_offset=0),
    "answerer": Role("answerer", ("answer", "therefore", "is", "was"),
                     {"plan": {"fact": 0.7, "passage": 0.6, "plan": 0.4, "message": 0.3, "tool_result": 0.5},
                      "search": {"fact": 0.8, "passage": 0.7, "tool_result": 0.6, "plan": 0.3, "message": 0.3},
                      "answer": {"fact": 1.0, "passage": 0.8, "tool_result": 0.7, "message": 0.4, "plan": 0.3}},
                     budget_offset=128),
}


def role_by_name(name: str, roles: dict | None = None) -> Role:
    """The role called ``name`` (case-insensitive) in ``roles``.

    Parameters
    ----------
    name : str
        A role's name, looked up lower-cased.
    roles : dict or None
        Lower-case name -> `Role`; None (or empty) means `DEFAULT_ROLES`.

    Raises
    ------
    ConfigError
        When no role has that name; the message lists the roles.
    """
    roles = roles or DEFAULT_ROLES
    key = name.lower()
    if key not in roles:
        raise ConfigError(f"unknown role {name!r}; roles: {', '.join(sorted(roles))}")
    return roles[key]


@dataclass(frozen=True)
class ImportanceWeights:
    """Weights of the importance signals, and the recency decay per round."""

    keyword: float = 0.25
    stage: float = 0.25
    recency: float = 0.15
    similarity: float = 0.35
    decay: float = 0.7


def allocate_budget(base: int, role: Role) -> int:
    """``B_i = base + offset_i`` (Eq. 4), at least 0."""
    check_int(base, "the base token budget", low=0)
    return max(0, int(base) + int(role.budget_offset))


def _words(text: str) -> set[str]:
    return {w.strip(".,;:!?()\"'").lower() for w in text.split() if w.strip(".,;:!?()\"'")}


_STOP = frozenset("a an the of in on at to for and or is was are were be by with from as that this "
                  "which who whom whose what when where why how did does do it its".split())


def content_words(text: str) -> set[str]:
    """The words of ``text`` that carry content (lower-cased, stop words dropped)."""
    return {w for w in _words(text) if w not in _STOP and len(w) > 1}


def importance(items: Sequence[MemoryItem], role: Role, stage: str, *, round: int,
               goal_embedding: Sequence[float] | np.ndarray | None = None,
               weights: ImportanceWeights = ImportanceWeights()) -> np.ndarray:
    """alpha(m; role, stage) of each item (see the module docstring), in [0, sum of weights]."""
    if stage not in STAGES:
        raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
    kw = set(k.lower() for k in role.keywords)
    g = None if goal_embedding is None else np.asarray(goal_embedding, dtype=np.float64)
    out = np.zeros(len(items))
    for i, m in enumerate(items):
        words = _words(m.text)
        kw_rel = len(words & kw) / len(kw) if kw else 0.0
        stage_p = role.priority(stage, m.kind)
        rec = weights.decay ** max(0, round - m.round)
        sim = 0.0
        if g is not None and m.embedding is not None and len(m.embedding) == len(g):
            v = np.asarray(m.embedding, dtype=np.float64)
            den = float(np.linalg.norm(v) * np.linalg.norm(g))
            sim = max(0.0, float(v @ g) / den) if den > 0 else 0.0
        out[i] = (weights.keyword * kw_rel + weights.stage * stage_p + weights.recency * rec
                  + weights.similarity * sim)
    return out


selectors: Registry = Registry("selector")
_TOL = 1e-12  # a value gain smaller than this is a tie (float sums of the same scores differ by less)


def _order(scores: np.ndarray) -> np.ndarray:
    return np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64)))


@selectors.register("greedy")
def greedy(tokens: Sequence[int], scores: Sequence[float], budget: int) -> list[int]:
    """Algorithm 1: by decreasing importance, take items until the next one does not fit."""
    chosen, used = [], 0
    for i in _order(np.asarray(scores)):
        if used + tokens[i] > budget:
            break
        chosen.append(int(i))
        used += tokens[i]
    return sorted(chosen)


@selectors.register("greedy-skip")
def greedy_skip(tokens: Sequence[int], scores: Sequence[float], budget: int) -> list[int]:
    """Like `greedy`, but an item that does not fit is skipped and the next ones are tried."""
    chosen, used = [], 0
    for i in _order(np.asarray(scores)):
        if used + tokens[i] <= budget:
            chosen.append(int(i))
            used += tokens[i]
    return sorted(chosen)


@selectors.register("knapsack")
def knapsack(tokens: Sequence[int], scores: Sequence[float], budget: int) -> list[int]:
    """Exact 0/1 knapsack by dynamic programming over token counts: O(n * min(budget, total tokens)).

    Maximises the total importance of the chosen items with total tokens <= ``budget``; among
    equal totals it keeps the later items (deterministic: an item is taken only when it beats
    the best of the items after it).

    Examples
    --------
    >>> knapsack([1, 1], [1.0, 1.0], 1), knapsack([5, 5, 5], [0.5] * 3, 10)
    ([1], [1, 2])
    """
    n = len(tokens)
    w = [int(t) for t in tokens]
    v = np.asarray(scores, dtype=np.float64)
    # The table is (n, budget + 1): a budget above the items' total would only add columns that
    # repeat the last one, so clamping it changes no choice and bounds the memory by the items.
    budget = min(int(budget), sum(w))
    best = np.zeros(budget + 1)
    take = np.zeros((n, budget + 1), dtype=bool)
    for i in range(n - 1, -1, -1):  # backwards; strictly better only, so ties resolve towards later items
        if w[i] > budget:
            continue
        cand = best[: budget + 1 - w[i]] + v[i]
        better = cand > best[w[i]:] + _TOL
        take[i, w[i]:] = better
        best[w[i]:] = np.where(better, cand, best[w[i]:])
    chosen, cap = [], budget
    for i in range(n):
        if take[i, cap]:
            chosen.append(i)
            cap -= w[i]
    return chosen


def marginal(scores: Sequence[float]) -> np.ndarray:
    """Each score above the smallest: ``s_i - min_j s_j`` (the value `knapsack_marginal` buys)."""
    v = np.asarray(scores, dtype=np.float64)
    return v - v.min() if len(v) else v


@selectors.register("knapsack-marginal")
def knapsack_marginal(tokens: Sequence[int], scores: Sequence[float], budget: int) -> list[int]:
    """Exact 0/1 knapsack of the *marginal* importance, ``s_i - min_j s_j`` (`marginal`).

    It maximises ``sum_{i in S} (s_i - s_min)`` subject to ``sum_{i in S} tokens_i <= budget``,
    exactly, by `knapsack`'s dynamic programme. An item as important as the least important
    candidate is worth 0: among the optimal sets it takes the one that also holds those that
    still fit (earliest first), so a lone candidate that fits is kept.

    Why: the knapsack's objective, a sum, is not invariant to a constant added to every score. A
    term that is the same for every candidate adds ``c`` per item taken, so it rewards the
    *number* of items, and the knapsack buys several short passages instead of one long relevant
    one. In RAG packing every candidate is a passage of round 0, so the answerer's stage priority
    (``w_stage * 0.8``) and recency (``w_recency * 1``) add the same 0.35 to each, about as much
    as the signals that tell passages apart. The greedy selectors only sort the scores, so a
    constant cannot move them; subtracting the smallest score gives the knapsack the same
    invariance (to any shift, not only to the terms that are constant) while keeping its
    exactness and its scale invariance.
    """
    v = marginal(scores)
    return _fill_zeros(knapsack(tokens, v, budget), tokens, v, budget)


def _fill_zeros(chosen: list[int], tokens: Sequence[int], value: np.ndarray, budget: int) -> list[int]:
    # items worth 0 (the least important) take the room left, earliest first: a tie-break among
    # sets of equal value, so the objective is unchanged
    used = sum(int(tokens[i]) for i in chosen)
    taken = set(chosen)
    for i in range(len(tokens)):
        if i not in taken and value[i] <= _TOL and used + int(tokens[i]) <= budget:
            taken.add(i)
            used += int(tokens[i])
    return sorted(taken)


@selectors.register("greedy-density")
def greedy_density(tokens: Sequence[int], scores: Sequence[float], budget: int) -> list[int]:
    """The knapsack's classic greedy: by decreasing marginal importance per token
    (``(s_i - s_min) / tokens_i``; `marginal`), skipping an item that does not fit.

    Items worth 0 fill the room left, as in `knapsack_marginal`; an item of 0 tokens with a
    positive value comes first. Ties keep the earlier item. It approximates `knapsack_marginal`; raw importance per token would
    not do, since a constant term makes a short item's density large whatever its content.
    """
    v = marginal(scores)
    t = np.asarray(tokens, dtype=np.float64)
    density = np.divide(v, t, out=np.where(v > _TOL, np.inf, 0.0), where=t > 0)
    chosen, used = [], 0
    for i in _order(density):
        if v[i] > _TOL and used + tokens[i] <= budget:
            chosen.append(int(i))
            used += tokens[i]
    return _fill_zeros(chosen, tokens, v, budget)


def select(items: Sequence[MemoryItem], scores: Sequence[float], budget: int, selector: str = "knapsack") -> list[MemoryItem]:
    """The items a call reads: ``selector`` over token counts and importance, in memory order."""
    check_int(budget, "the token budget", low=0)
    if len(scores) != len(items):
        raise ConfigError(f"{len(items)} items but {len(scores)} scores")
    if any(not math.isfinite(float(s)) for s in scores):
        raise ConfigError("importance scores must be finite")
    fn = selectors.get(selector)
    return [items[i] for i in fn([it.tokens for it in items], list(scores), budget)]


