"""The ``[policy]`` config table: the budgeted routing policy (`ltrr policy train|eval`).

``budget`` and ``fractions`` are shares of the most expensive arm's cost; `ltrr policy train
--cost-budget` takes cost units. ``ltrr run`` runs the policy stage when the config has a
``[policy]`` table: ``enabled`` is then true unless set (`ltrr.config.validate` decides it).

A leaf module: it imports only the standard library, `ltrr._errors` and `ltrr._sections`, so
`ltrr.config` may assemble it although the policy sits above the config (see ``[importlinter]``
in setup.cfg).
"""

from __future__ import annotations

from ltrr._sections import Section, section, setting

__all__ = ["PolicySection"]

TOP_COST_SHARE = "share of the top arm cost"


@section("policy")
class PolicySection(Section):
    """The ``[policy]`` table.

    Examples
    --------
    >>> PolicySection.from_mapping({"budget": 0.25}).budget
    0.25
    """

    enabled: bool = setting(bool, None, help="run the policy stage (default: whether the config has a [policy] "
                                             "table)")
    budget: float = setting(float, 0.5, help="the budget of the policy `ltrr run` saves", unit=TOP_COST_SHARE)
    fractions: list = setting(list, [0.25, 0.5, 0.75], help="the budgets of `policy eval`", unit=TOP_COST_SHARE)
    representation: str = setting(str, "features", help='the question state: "features" or "lm"')
    trainers: list = setting(list, ["grpo", "exact"], help="policy trainers; the first is the one `ltrr run` saves")
    cost: str = setting(str, "config", help='"config": the arms\' cost; "tokens": measured prompt tokens + latency')
    latency_weight: float = setting(float, 1000.0, help="weight of retrieval latency (cost = \"tokens\")",
                                    unit="tokens per second")
    pooling: str = setting(str, "last", help='question state of the lm representation: "last" or "mean"')
    n_folds: int = setting(int, 5, help="cross-fitted LTR scores of the training queries")
    params: dict = setting(dict, {}, help="more BudgetPolicy parameters (n_steps, group_size, ...)")
