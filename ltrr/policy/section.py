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

__all__ = ["PolicySection", "REPRESENTATIONS", "TRAINERS", "COSTS", "POOLINGS"]

TOP_COST_SHARE = "share of the top arm cost"

# The fixed words of the table, checked on load. Their users sit above the config and keep the
# same tuples (`ltrr.policy.router.REPRESENTATIONS`, `ltrr.policy.estimator.TRAINERS`,
# `ltrr.policy.states.POOLINGS`; ``cost`` in `ltrr.policy.run.arm_costs`);
# tests/test_config_ranges.py checks that they agree.
REPRESENTATIONS = ("features", "lm")
TRAINERS = ("grpo", "exact")
COSTS = ("config", "tokens")
POOLINGS = ("last", "mean")


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
    # a share of the top arm's cost: `ltrr.policy.objective.check_budget` refuses a budget below 0
    # or above that cost, and `policy eval` finds no affordable arm below 0
    budget: float = setting(float, 0.5, help="the budget of the policy `ltrr run` saves", unit=TOP_COST_SHARE,
                            low=0, high=1)
    fractions: list = setting(list, [0.25, 0.5, 0.75], help="the budgets of `policy eval`", unit=TOP_COST_SHARE,
                              items=(int, float), low=0, high=1)
    representation: str = setting(str, "features", help='the question state: "features" or "lm"',
                                  choices=REPRESENTATIONS)
    trainers: list = setting(list, ["grpo", "exact"], help="policy trainers; the first is the one `ltrr run` saves",
                             items=str, choices=TRAINERS, min_items=1)
    cost: str = setting(str, "config", help='"config": the arms\' cost; "tokens": measured prompt tokens + latency',
                        choices=COSTS)
    # a negative weight made negative arm costs, refused by `ltrr.policy.objective.check_costs`
    latency_weight: float = setting(float, 1000.0, help="weight of retrieval latency (cost = \"tokens\")",
                                    unit="tokens per second", low=0)
    pooling: str = setting(str, "last", help='question state of the lm representation: "last" or "mean"',
                           choices=POOLINGS)
    # `PolicyRouter.fit` cross-fits the LTR scores with GroupKFold, two folds or more
    n_folds: int = setting(int, 5, help="cross-fitted LTR scores of the training queries", low=2)
    params: dict = setting(dict, {}, help="more BudgetPolicy parameters (n_steps, group_size, ...)")
