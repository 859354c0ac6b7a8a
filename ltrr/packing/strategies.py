"""Strategies and settings of the multi-agent loop (`ltrr.context.agents`).

- `LoopSpec`: the ``[context]`` keys of the loop (``base_budget``, ``rounds``,
  ``max_subquestions``, ``strategies``, ``roles``, ``dedup_threshold``) with the packing keys it
  shares (``selector``, ``weights``), validated; roles of the config merged over `DEFAULT_ROLES`.
- `Strategy` and the registry `strategies`: how an agent's context is chosen from the memory,
  ``full-context``, ``static``, ``rcr-oneshot`` and ``rcr-iterative`` (see `ltrr.context.agents`).

Both sit here, below the loop, because they are packing: a strategy chooses the items a call
reads within a budget, and `LoopSpec` is the loop's part of the ``[context]`` table, which
`ltrr.config` validates at load time without importing anything above this package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ltrr._checks import check_int, check_number, is_number
from ltrr._errors import ConfigError
from ltrr._registry import Registry
from ltrr.packing.items import KINDS, MemoryItem
from ltrr.packing.select import (
    DEFAULT_ROLES,
    STAGES,
    ImportanceWeights,
    Role,
    allocate_budget,
    content_words,
    importance,
    role_by_name,
    select,
)

__all__ = ["AGENTS", "MAX_ROUNDS", "STRATEGIES", "LoopSpec", "Strategy", "strategies"]

STRATEGIES = ("full-context", "static", "rcr-oneshot", "rcr-iterative")
AGENTS = ("planner", "searcher", "answerer")
MAX_ROUNDS = 3
_ROLE_KEYS = ("keywords", "priorities", "budget_offset")


# ---- configuration ----------------------------------------------------------------------------
def _int_in(where: str, key: str, v: Any, lo: int, hi: int | None = None) -> int:
    return check_int(v, f"{where}.{key}", low=lo, high=hi)


def _role(where: str, name: str, spec: Any, base: Role | None) -> Role:
    if not isinstance(spec, Mapping) or set(spec) - set(_ROLE_KEYS):
        raise ConfigError(f"{where}.roles.{name} must be a table with keys among {', '.join(_ROLE_KEYS)}, got {spec!r}")
    kw = spec.get("keywords", base.keywords if base else ())
    if not isinstance(kw, (list, tuple)) or not all(isinstance(k, str) for k in kw):
        raise ConfigError(f"{where}.roles.{name}.keywords must be a list of strings, got {kw!r}")
    prio = {s: dict(k) for s, k in (base.priorities if base else {}).items()}
    given = spec.get("priorities", {})
    if not isinstance(given, Mapping):
        raise ConfigError(f"{where}.roles.{name}.priorities must be a table stage -> kind -> number, got {given!r}")
    for stage, kinds in given.items():
        if stage not in STAGES or not isinstance(kinds, Mapping):
            raise ConfigError(f"{where}.roles.{name}.priorities: stages are {', '.join(STAGES)}, each a table "
                              f"kind -> number; got {stage!r} = {kinds!r}")
        for kind, p in kinds.items():
            if kind not in KINDS or not is_number(p) or not 0 <= p <= 1:
                raise ConfigError(f"{where}.roles.{name}.priorities.{stage}: kinds are {', '.join(KINDS)}, each a "
                                  f"number in [0, 1]; got {kind!r} = {p!r}")
            prio.setdefault(stage, {})[kind] = float(p)
    offset = spec.get("budget_offset", base.budget_offset if base else 0)
    return Role(name, tuple(kw), prio, check_int(offset, f"{where}.roles.{name}.budget_offset"))


@dataclass(frozen=True)
class LoopSpec:
    """Settings of the agent loop (the ``[context]`` table; see the module docstring).

    ``roles`` holds every role by name (`DEFAULT_ROLES` with the config's ``roles`` merged over
    them); ``agent_roles`` says which role each agent plays (by default its own name).
    ``selector`` and ``weights`` are the packing settings of the same table.
    """

    base_budget: int = 512
    rounds: int = 2
    max_subquestions: int = 3
    strategies: tuple[str, ...] = STRATEGIES
    roles: Mapping[str, Role] = field(default_factory=lambda: dict(DEFAULT_ROLES))
    dedup_threshold: float = 0.95
    selector: str = "knapsack"
    weights: ImportanceWeights = field(default_factory=ImportanceWeights)
    agent_roles: Mapping[str, str] = field(default_factory=lambda: {a: a for a in AGENTS})

    @classmethod
    def from_mapping(cls, context: Mapping[str, Any], where: str = "[context]") -> LoopSpec:
        """Validate a config's ``[context]`` table (the packing keys are validated by `PackSpec`)."""
        from ltrr.packing.rag import PackSpec, pack_settings

        if not isinstance(context, Mapping):
            raise ConfigError(f"{where} must be a table, got {type(context).__name__}")
        pack = PackSpec.from_mapping({**pack_settings(context), "budget": 0}, where)
        kw: dict[str, Any] = {"selector": pack.selector, "weights": pack.weights}
        if "base_budget" in context:
            kw["base_budget"] = _int_in(where, "base_budget", context["base_budget"], 0)
        if "rounds" in context:
            kw["rounds"] = _int_in(where, "rounds", context["rounds"], 1, MAX_ROUNDS)
        if "max_subquestions" in context:
            kw["max_subquestions"] = _int_in(where, "max_subquestions", context["max_subquestions"], 1)
        if "strategies" in context:
            kw["strategies"] = _strategy_names(context["strategies"], f"{where}.strategies")
        if "dedup_threshold" in context:
            v = context["dedup_threshold"]
            kw["dedup_threshold"] = check_number(v, f"{where}.dedup_threshold", low=0, high=1, low_open=True)
        roles = dict(DEFAULT_ROLES)
        given = context.get("roles", {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"{where}.roles must be a table of roles by name, got {given!r}")
        for name, spec in given.items():
            key = str(name).lower()
            roles[key] = _role(where, key, spec, roles.get(key))
        kw["roles"] = roles
        return cls(**kw).validate()

    def validate(self) -> LoopSpec:
        """Check the settings (also of a spec built in Python); returns ``self``."""
        where = "LoopSpec"
        _int_in(where, "base_budget", self.base_budget, 0)
        _int_in(where, "rounds", self.rounds, 1, MAX_ROUNDS)
        _int_in(where, "max_subquestions", self.max_subquestions, 1)
        _strategy_names(list(self.strategies), f"{where}.strategies")
        check_number(self.dedup_threshold, f"{where}.dedup_threshold", low=0, high=1, low_open=True)
        from ltrr.packing.select import selectors

        selectors.get(self.selector)
        for agent in AGENTS:
            self.role(agent)
        return self

    def role(self, agent: str) -> Role:
        """The role ``agent`` plays; an unknown agent or role is a `ConfigError` naming the choices."""
        if agent not in self.agent_roles:
            raise ConfigError(f"unknown agent {agent!r}; agents: {', '.join(AGENTS)}")
        return role_by_name(self.agent_roles[agent], dict(self.roles))

    def budget(self, agent: str) -> int:
        """``B_i = base_budget + offset_i`` of the role ``agent`` plays."""
        return allocate_budget(self.base_budget, self.role(agent))


def _strategy_names(names: Any, where: str) -> tuple[str, ...]:
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where} must be a non-empty list of strategy names ({', '.join(STRATEGIES)}), got {names!r}")
    for n in names:
        strategies.get(n)
    if len(set(names)) != len(names):
        raise ConfigError(f"{where} names a strategy twice: {list(names)}")
    return tuple(names)


# ---- strategies -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Strategy:
    """How an agent's context is chosen from the memory (see the module docstring).

    ``budgeted``: the role's budget applies; ``scored``: items are chosen by importance and the
    selector, else by the static slice; ``one_round``: the loop runs one round whatever ``T``.
    """

    name: str
    budgeted: bool = True
    scored: bool = True
    one_round: bool = False

    def rounds(self, rounds: int) -> int:
        """The rounds the loop runs under this strategy: 1 if ``one_round``, else ``rounds``."""
        return 1 if self.one_round else int(rounds)

    def choose(self, items: Sequence[MemoryItem], *, role: Role, stage: str, budget: int | None, round: int,
               goal: str, goal_embedding: Sequence[float] | None, spec: LoopSpec) -> list[MemoryItem]:
        """The items the call reads, in memory order."""
        if not self.budgeted or budget is None:
            return list(items)
        if not self.scored:
            return _static_slice(items, role, stage, budget)
        role = replace(role, keywords=tuple(role.keywords) + tuple(sorted(content_words(goal))))
        scores = importance(items, role, stage, round=round, goal_embedding=goal_embedding, weights=spec.weights)
        return select(items, scores.tolist(), int(budget), spec.selector)


def _static_slice(items: Sequence[MemoryItem], role: Role, stage: str, budget: int) -> list[MemoryItem]:
    order = sorted(range(len(items)), key=lambda i: (-role.priority(stage, items[i].kind), -items[i].round, -i))
    chosen, used = [], 0
    for i in order:
        if role.priority(stage, items[i].kind) <= 0 or used + items[i].tokens > budget:
            break
        chosen.append(i)
        used += items[i].tokens
    return [items[i] for i in sorted(chosen)]


strategies: Registry = Registry("context strategy")
strategies.register("full-context", Strategy("full-context", budgeted=False, scored=False))
strategies.register("static", Strategy("static", scored=False))
strategies.register("rcr-oneshot", Strategy("rcr-oneshot", one_round=True))
strategies.register("rcr-iterative", Strategy("rcr-iterative"))
