"""Roles, importance scores and the selectors: moved to `ltrr.packing.select`.

Kept so that imports from the old place go on working; the code lives below the routers, in
`ltrr.packing`, and this module only re-exports it (a downward import).
"""

from ltrr.packing.select import (
    DEFAULT_ROLES,
    STAGES,
    ImportanceWeights,
    Role,
    allocate_budget,
    content_words,
    greedy,
    greedy_skip,
    importance,
    knapsack,
    role_by_name,
    select,
    selectors,
)

__all__ = ["DEFAULT_ROLES", "STAGES", "ImportanceWeights", "Role", "allocate_budget",
           "content_words", "greedy", "greedy_skip", "importance", "knapsack", "role_by_name",
           "select", "selectors"]
