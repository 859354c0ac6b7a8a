"""Context routing (RCR-Router, Liu et al., 2025): what each LLM call reads, within a token budget.

- `Memory`, `MemoryItem` (`ltrr.context.memory`): the shared, structured memory (YAML).
- `Role`, `allocate_budget`, `importance` and the `selectors` ``greedy``, ``greedy-skip`` and
  ``knapsack``; `select` itself is imported from `ltrr.context.select`.
- `pack_passages`, `evidence_recall` (`ltrr.context.pack`): the RAG prompt packed into a budget.
- `ContextLoop`, `LoopSpec` (`ltrr.context.agents`; the `strategies` registry is in
  `ltrr.context.strategies`): the multi-agent QA loop
  (Planner, Searcher, Answerer) under the ``full-context``, ``static``, ``rcr-oneshot`` and
  ``rcr-iterative`` context strategies; `ltrr.context.agents_eval` compares them
  (``ltrr context run``).
"""

import importlib

_EXPORTS = {
    "ContextLoop": "ltrr.context.agents",
    "LoopSpec": "ltrr.context.agents",
    "QuestionResult": "ltrr.context.agents",
    "RoutedSearch": "ltrr.context.agents",
    "Strategy": "ltrr.context.agents",
    "KINDS": "ltrr.context.memory",
    "Memory": "ltrr.context.memory",
    "MemoryItem": "ltrr.context.memory",
    "PackResult": "ltrr.context.pack",
    "evidence_recall": "ltrr.context.pack",
    "pack_passages": "ltrr.context.pack",
    "DEFAULT_ROLES": "ltrr.context.select",
    "ImportanceWeights": "ltrr.context.select",
    "Role": "ltrr.context.select",
    "allocate_budget": "ltrr.context.select",
    "greedy": "ltrr.context.select",
    "greedy_skip": "ltrr.context.select",
    "importance": "ltrr.context.select",
    "knapsack": "ltrr.context.select",
    "role_by_name": "ltrr.context.select",
    "selectors": "ltrr.context.select",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # lazy: `ltrr --help` imports ltrr.context.commands and must not pay for pandas or numpy.
    # `select` and `strategies` are not here: they share their submodules' names, which a lazy
    # package attribute cannot tell apart (import them from ltrr.context.select / .strategies)
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ltrr.context' has no attribute {name!r}")
