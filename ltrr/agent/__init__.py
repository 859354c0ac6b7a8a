"""A Router-R1-style multi-round LLM router (Zhang, Feng & You, 2025): the loop and its rewards.

A policy LLM reasons in ``<think>...</think>``, calls an arm of the pool as
``<search>ARM: sub-query</search>``, reads the ``<information>...</information>`` block the loop
injects, and finishes with ``<answer>...</answer>``.

- `ltrr.agent.rewards`: `format_reward`, `outcome_reward`, `trajectory_cost`, `total_reward`,
  `resolve_arm` (numpy only); `ltrr.agent.costs`: `CostNormaliser`, the cost term's scale.
- `ltrr.agent.reward_options`: the named rewards of ``[agent] reward`` (`REWARDS`:
  ``ltrr``, ``router-r1``), `agent_reward`, and Router-R1's released rules
  (`router_r1_format`, `router_r1_total`, `squad_f1`, `squad_em`).
- `ltrr.agent.prompt`: the system prompt and one descriptor line per arm (`build_messages`,
  `describe_arm`).
- `ltrr.agent.presentation`: how one training example shows the arms (`ArmView`, `draw_view`:
  shuffled, renamed to neutral ids, one left out), so the policy learns to read descriptors.
- `ltrr.agent.backends`: models that continue a partial assistant turn: `TransformersLM` and
  `LlamaCppLM` (token level, exact ids), `OpenAICompletionsLM` (text level,
  ``/v1/completions``); `make_continuation_lm` builds one from a ``[generator]`` config table.
- `ltrr.agent.loop`: `AgentLoop` (the rollout; `pool_search` adapts a `Pool`).
- `ltrr.agent.trajectory`: `Trajectory` (ids and mask for SFT and GRPO), JSONL
  `save_trajectories` / `load_trajectories`, `score_trajectories`.

Importing this package loads neither torch, transformers nor pandas: names are imported from
their submodules on first use.
"""

from ltrr._lazy import lazy_getattr

_EXPORTS = {
    "ContinuationLM": "ltrr.agent.backends",
    "Continuation": "ltrr.agent.backends",
    "LlamaCppLM": "ltrr.agent.backends",
    "OpenAICompletionsLM": "ltrr.agent.backends",
    "TransformersLM": "ltrr.agent.backends",
    "continuation_lms": "ltrr.agent.backends",
    "make_continuation_lm": "ltrr.agent.backends",
    "AgentLoop": "ltrr.agent.loop",
    "pool_search": "ltrr.agent.loop",
    "ArmView": "ltrr.agent.presentation",
    "draw_view": "ltrr.agent.presentation",
    "build_messages": "ltrr.agent.prompt",
    "describe_arm": "ltrr.agent.prompt",
    "system_prompt": "ltrr.agent.prompt",
    "REWARDS": "ltrr.agent.reward_options",
    "ROUTER_R1_FORMAT_RULES": "ltrr.agent.reward_options",
    "agent_reward": "ltrr.agent.reward_options",
    "router_r1_format": "ltrr.agent.reward_options",
    "router_r1_total": "ltrr.agent.reward_options",
    "squad_em": "ltrr.agent.reward_options",
    "squad_f1": "ltrr.agent.reward_options",
    "FORMAT_RULES": "ltrr.agent.rewards",
    "CostNormaliser": "ltrr.agent.costs",
    "format_reward": "ltrr.agent.rewards",
    "outcome_reward": "ltrr.agent.rewards",
    "parse_search": "ltrr.agent.rewards",
    "resolve_arm": "ltrr.agent.rewards",
    "total_reward": "ltrr.agent.rewards",
    "trajectory_cost": "ltrr.agent.rewards",
    "STOP_REASONS": "ltrr.agent.trajectory",
    "Search": "ltrr.agent.trajectory",
    "Trajectory": "ltrr.agent.trajectory",
    "Turn": "ltrr.agent.trajectory",
    "load_trajectories": "ltrr.agent.trajectory",
    "save_trajectories": "ltrr.agent.trajectory",
    "score_trajectories": "ltrr.agent.trajectory",
}

__all__ = sorted(_EXPORTS)


# lazy: the loop's backends import torch or httpx, and pool_search pandas, only when used
__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
