"""Context routing (RCR-Router, Liu et al., 2025): what each LLM call reads, within a token budget.

- `Memory`, `MemoryItem` (`ltrr.context.memory`): the shared, structured memory (YAML).
- `Role`, `allocate_budget`, `importance`, `select` and the `selectors` ``greedy``,
  ``greedy-skip`` and ``knapsack`` (`ltrr.context.select`).
- `pack_passages`, `evidence_recall` (`ltrr.context.pack`): the RAG prompt packed into a budget.
- `ContextLoop`, `LoopSpec`, `strategies` (`ltrr.context.agents`): the multi-agent QA loop
  (Planner, Searcher, Answerer) under the ``full-context``, ``static``, ``rcr-oneshot`` and
  ``rcr-iterative`` context strategies; `ltrr.context.agents_eval` compares them
  (``ltrr context run``).
"""

from ltrr.context.agents import (
    ContextLoop,
    LoopSpec,
    QuestionResult,
    RoutedSearch,
    Strategy,
    strategies,
)
from ltrr.context.memory import KINDS, Memory, MemoryItem
from ltrr.context.pack import PackResult, evidence_recall, pack_passages
from ltrr.context.select import (
    DEFAULT_ROLES,
    ImportanceWeights,
    Role,
    allocate_budget,
    greedy,
    greedy_skip,
    importance,
    knapsack,
    role_by_name,
    select,
    selectors,
)

__all__ = ["ContextLoop", "LoopSpec", "QuestionResult", "RoutedSearch", "Strategy", "strategies", "KINDS", "Memory",
           "MemoryItem", "PackResult", "evidence_recall", "pack_passages", "DEFAULT_ROLES", "ImportanceWeights", "Role",
           "allocate_budget", "greedy", "greedy_skip", "importance", "knapsack", "role_by_name", "select", "selectors"]
