"""A Router-R1-style multi-round LLM router (Zhang, Feng & You, 2025): the loop and its rewards.

A policy LLM reasons in ``<think>...</think>``, calls an arm of the pool as
``<search>ARM: sub-query</search>``, reads the ``<information>...</information>`` block the loop
injects, and finishes with ``<answer>...</answer>``.

- `ltrr.agent.rewards`: `format_reward`, `outcome_reward`, `trajectory_cost`,
  `CostNormaliser`, `total_reward` (numpy only).

Importing this package loads neither torch, transformers nor pandas: names are imported from
their submodules on first use.
"""

import importlib

_EXPORTS = {
    "FORMAT_RULES": "ltrr.agent.rewards",
    "CostNormaliser": "ltrr.agent.rewards",
    "format_reward": "ltrr.agent.rewards",
    "outcome_reward": "ltrr.agent.rewards",
    "parse_search": "ltrr.agent.rewards",
    "total_reward": "ltrr.agent.rewards",
    "trajectory_cost": "ltrr.agent.rewards",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ltrr.agent' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
