"""Context routing (RCR-Router, Liu et al., 2025): what each LLM call reads, within a token budget.

- `Memory`, `MemoryItem` (`ltrr.context.memory`): the shared, structured memory (YAML).
- `Role`, `allocate_budget`, `importance` and the `selectors` ``greedy``, ``greedy-skip`` and
  ``knapsack``; `select` itself is imported from `ltrr.packing.select`.
- `pack_passages`, `evidence_recall` (`ltrr.packing.pack`): the RAG prompt packed into a budget.
- `ContextLoop` (`ltrr.context.agents`), `LoopSpec` (its settings; the `strategies` registry is in
  `ltrr.packing.strategies`): the multi-agent QA loop
  (Planner, Searcher, Answerer) under the ``full-context``, ``static``, ``rcr-oneshot`` and
  ``rcr-iterative`` context strategies; `ltrr.context.agents_eval` compares them
  (``ltrr context run``).

Roles, importance, the selectors, packing and the loop's spec live below the routers in
`ltrr.packing` (the pool and the routers pack too); this package keeps the memory, the agent
loop and its evaluation above them, and re-exports the packing names it always offered. The old
modules `ltrr.context.pack`, `.select`, `.rag` and `.strategies` re-export them as well.
"""

from ltrr._lazy import lazy_getattr

_EXPORTS = {
    "ContextLoop": "ltrr.context.agents",
    "LoopSpec": "ltrr.packing.strategies",
    "QuestionResult": "ltrr.context.agents",
    "RoutedSearch": "ltrr.context.agents",
    "Strategy": "ltrr.context.agents",
    "KINDS": "ltrr.packing.items",
    "Memory": "ltrr.context.memory",
    "MemoryItem": "ltrr.packing.items",
    "PackResult": "ltrr.packing.pack",
    "PackSpec": "ltrr.packing.rag",
    "evidence_recall": "ltrr.packing.pack",
    "pack_passages": "ltrr.packing.pack",
    "DEFAULT_ROLES": "ltrr.packing.select",
    "ImportanceWeights": "ltrr.packing.select",
    "Role": "ltrr.packing.select",
    "allocate_budget": "ltrr.packing.select",
    "greedy": "ltrr.packing.select",
    "greedy_skip": "ltrr.packing.select",
    "importance": "ltrr.packing.select",
    "knapsack": "ltrr.packing.select",
    "role_by_name": "ltrr.packing.select",
    "selectors": "ltrr.packing.select",
}

__all__ = sorted(_EXPORTS)


# lazy: `ltrr --help` imports ltrr.cli.context and must not pay for pandas or numpy.
# `select` and `strategies` are not here: they share their submodules' names, which a lazy
# package attribute cannot tell apart (import them from ltrr.packing.select / .strategies)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
