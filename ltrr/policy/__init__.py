"""The second selection stage: a routing policy that picks one arm per query under a cost budget.

Above the LTR ranker, a small head scores each arm's row (the arm's LTRR features, the ranker's
score, the arm's cost, optionally the LLM's state of the question) with one shared network and a
softmax across the arms of a query. It is trained by GRPO with a Lagrange multiplier on the
average cost budget (or by the exact expected reward, its no-sampling baseline), and deployed
as a deterministic cost-aware argmax calibrated to the budget on held-out training queries.

- `ltrr.policy.objective`: GRPO advantages and loss, the exact loss, the dual update, the
  calibrated rule, the budgeted LP oracle.
- `BudgetPolicy` (`ltrr.policy.estimator`): the scikit-learn estimator over arrays.
- `PolicyRouter` (`ltrr.policy.router`): rows from a run, the LTR router, named arms, one folder.
- `ltrr.policy.evaluate`: cost-utility curves against the baselines.

Torch is imported only when a policy is trained or loaded.
"""

from ltrr._lazy import lazy_getattr

_EXPORTS = {
    "BudgetPolicy": "ltrr.policy.estimator",
    "TRAINERS": "ltrr.policy.estimator",
    "PolicyRouter": "ltrr.policy.router",
    "binomial_margin": "ltrr.policy.objective",
    "budget_oracle": "ltrr.policy.objective",
    "calibrate_tau": "ltrr.policy.objective",
    "best_feasible_tau": "ltrr.policy.objective",
    "cost_aware_argmax": "ltrr.policy.objective",
    "dual_update": "ltrr.policy.objective",
    "exact_loss": "ltrr.policy.objective",
    "grpo_advantages": "ltrr.policy.objective",
    "grpo_loss": "ltrr.policy.objective",
}

__all__ = sorted(_EXPORTS)


# lazy: `ltrr --help` imports ltrr.cli.policy and must not pay for sklearn or torch
__getattr__ = lazy_getattr(__name__, _EXPORTS)
