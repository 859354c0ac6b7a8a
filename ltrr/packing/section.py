"""The ``[context]`` config table: context packing (`PackSpec`) and the multi-agent loop (`LoopSpec`).

This section checks the table's keys and types; `ltrr.config.validate` then has the table's
values checked by their owners, `ltrr.packing.rag.pack_spec` and
`ltrr.packing.strategies.LoopSpec.from_mapping` (ranges, selector and strategy names, roles). A
leaf module: it imports only the standard library, `ltrr._errors` and `ltrr._sections` (see
``[importlinter]`` in setup.cfg).
"""

from __future__ import annotations

from ltrr._sections import Section, section, setting

__all__ = ["ContextSection"]


@section("context")
class ContextSection(Section):
    """The ``[context]`` table.

    Examples
    --------
    >>> ContextSection.from_mapping({"top_m": 3}).top_m
    3
    """

    enabled: bool = setting(bool, False, help="`ltrr run` also runs the multi-agent loop's stage (`ltrr context "
                                              "run`: every strategy on the protocol's test part); off unless asked")
    top_m: int = setting(int, 2, help="arms whose passages are candidates, in routed order")
    depth: int = setting(int, 5, help="passages read per arm")
    selector: str = setting(str, "knapsack", help="greedy, greedy-skip, greedy-density, knapsack, knapsack-marginal")
    prior: float = setting(float, 0.3, help="weight of the routed order, prior / (arm rank * passage rank)")
    weights: dict = setting(dict, {}, help="importance weights: keyword, stage, recency, similarity, decay")
    base_budget: int = setting(int, 512, help="B in B_i = B + offset_i, each agent's token budget", unit="tokens")
    rounds: int = setting(int, 2, help="rounds of planner -> searcher -> answerer (1 to 3)")
    max_subquestions: int = setting(int, 3, help="the planner's sub-questions per round")
    strategies: list = setting(list, ["full-context", "static", "rcr-oneshot", "rcr-iterative"],
                               help="strategies `ltrr context run` compares")
    roles: dict = setting(dict, {}, help="name -> {keywords, priorities, budget_offset}, over the default roles")
    dedup_threshold: float = setting(float, 0.95, help="embedding cosine at which a new memory item is a duplicate",
                                     unit="cosine similarity")
