"""Strategies and settings of the agent loop (`LoopSpec`): moved to `ltrr.packing.strategies`.

Kept so that imports from the old place go on working; the code lives below the routers, in
`ltrr.packing`, and this module only re-exports it (a downward import).
"""

from ltrr.packing.strategies import (
    AGENTS,
    MAX_ROUNDS,
    STRATEGIES,
    LoopSpec,
    Strategy,
    strategies,
)

__all__ = ["AGENTS", "MAX_ROUNDS", "STRATEGIES", "LoopSpec", "Strategy", "strategies"]
