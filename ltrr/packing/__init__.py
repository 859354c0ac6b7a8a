"""Context packing: a step from results to results, below the routers.

Packing reads the passages a pool returned for a question (``qid, arm, rank, docid, text``) and
keeps the subset that fits a token budget, chosen by importance (RCR-Router, Liu et al., 2025).
It imports only the ground floor (`ltrr._errors`, `ltrr._registry`, `ltrr.data.schema`, and
`ltrr.embed` lazily, for question vectors); the pool, the routers, the server and the agent
loop (`ltrr.context`) import it from above.

- `MemoryItem`, `KINDS` (`ltrr.packing.items`): what a context is packed from.
- `Role`, `DEFAULT_ROLES`, `ImportanceWeights`, `importance`, `allocate_budget` and the
  `selectors` ``greedy``, ``greedy-skip``, ``knapsack``, ``knapsack-marginal`` and
  ``greedy-density`` (`ltrr.packing.select`).
- `pack_passages`, `evidence_recall`, `PackResult` (`ltrr.packing.pack`): one query's passages
  packed into a budget.
- `PackSpec`, `pack_query`, `pack_results`, `packing_from_config` (`ltrr.packing.rag`): the
  ``[context]`` table's packing settings, and packing a routed question or a packed arm.
- `LoopSpec`, `Strategy`, `strategies` (`ltrr.packing.strategies`): the ``[context]`` table's
  settings of the multi-agent loop and how each strategy packs an agent's context; the loop
  itself is `ltrr.context.ContextLoop`.
"""

from ltrr._lazy import lazy_getattr

_EXPORTS = {
    "KINDS": "ltrr.packing.items",
    "MemoryItem": "ltrr.packing.items",
    "PackResult": "ltrr.packing.pack",
    "evidence_recall": "ltrr.packing.pack",
    "pack_passages": "ltrr.packing.pack",
    "PackSpec": "ltrr.packing.rag",
    "pack_query": "ltrr.packing.rag",
    "pack_results": "ltrr.packing.rag",
    "pack_settings": "ltrr.packing.rag",
    "pack_spec": "ltrr.packing.rag",
    "packing_from_config": "ltrr.packing.rag",
    "question_embeddings": "ltrr.packing.rag",
    "DEFAULT_ROLES": "ltrr.packing.select",
    "ImportanceWeights": "ltrr.packing.select",
    "Role": "ltrr.packing.select",
    "allocate_budget": "ltrr.packing.select",
    "content_words": "ltrr.packing.select",
    "greedy": "ltrr.packing.select",
    "greedy_density": "ltrr.packing.select",
    "greedy_skip": "ltrr.packing.select",
    "importance": "ltrr.packing.select",
    "knapsack": "ltrr.packing.select",
    "knapsack_marginal": "ltrr.packing.select",
    "marginal": "ltrr.packing.select",
    "role_by_name": "ltrr.packing.select",
    "selectors": "ltrr.packing.select",
    "LoopSpec": "ltrr.packing.strategies",
    "Strategy": "ltrr.packing.strategies",
}

__all__ = sorted(_EXPORTS)


# lazy: the config and `ltrr --help` must not pay for pandas or numpy. `select` and
# `strategies` are not here: they share their submodules' names, which a lazy package
# attribute cannot tell apart (import them from ltrr.packing.select / .strategies)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
