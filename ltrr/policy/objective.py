"""The budgeted policy's objectives, dual update, deterministic rule and budgeted oracle.

Notation: a query ``q`` has arms ``a`` with utility ``U[q, a]`` (the labels' raw ``utility``,
every arm labelled) and cost ``C[q, a]`` (the arm's config ``cost``, or its measured token
cost). The policy ``pi(a | q)`` is a softmax over the arms of a query. With a Lagrange
multiplier ``lam`` on the average cost budget ``B`` the reward of an action is::

    r(q, a) = U[q, a] - lam * C[q, a]

GRPO (Shao et al., 2024, DeepSeekMath) samples a group of ``G`` actions per query from ``pi``
and normalises each reward within its group, ``A = (r - mean_G r) / (std_G r + eps)``; the loss
is ``-mean(log pi(a) * A)`` minus an entropy bonus, plus an optional cross-entropy toward the
label-best arm. We take one gradient step per sampled batch, so the PPO-style importance ratio
is 1 and its clipping never binds; with no reference model there is no KL term. TRL's
`GRPOTrainer` trains generative language models from prompts and text rewards and does not apply
to a head over arm rows, so the few lines here are ours (TRL trains the multi-round router).

Because every action is labelled, the expected objective ``sum_a pi(a|q) r(q, a)`` can also be
optimised exactly, with no sampling (`exact_loss`): the baseline GRPO must match.

After each step the multiplier takes a projected dual-ascent step,
``lam <- max(0, lam + eta * (mean cost - B))`` (`dual_update`).

A stochastic policy meets the budget only on average and ``lam`` oscillates; deployment uses a
deterministic cost-aware argmax, ``argmax_a (logit[q, a] - tau * C[q, a])``, with ``tau`` set on
a calibration part by one of the `CALIBRATIONS` rules (`calibrate`). The default, ``"utility"``,
takes of the ``tau`` whose mean cost is within the budget the one with the best mean utility
(`best_feasible_tau`); ``"spend"`` takes the smallest such ``tau``, negative allowed, so it spends
the budget (`calibrate_tau`); ``"nonnegative"`` is ``"spend"`` with ``tau >= 0``.
The same rule on LTR scores, calibrated the same way, is the cost-penalised LTRR baseline.

Mean costs are compared with the budget up to a relative ``1e-9`` (`within_budget`): a budget
exactly at the cheapest arms' mean cost stays feasible after the costs are rescaled.

`budget_oracle` is the upper bound: the linear program ``max sum x U`` subject to one unit of
choice per query and ``mean sum x C <= B`` (scipy's HiGHS), solved on the true labels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ltrr._checks import check_number
from ltrr._errors import ConfigError, DataError

__all__ = [
    "grpo_advantages",
    "grpo_loss",
    "exact_loss",
    "dual_update",
    "cost_aware_argmax",
    "calibrate_tau",
    "best_feasible_tau",
    "budget_oracle",
    "binomial_margin",
    "check_costs",
    "check_budget",
    "within_budget",
    "calibrate",
    "CALIBRATIONS",
]

CALIBRATIONS = ("spend", "nonnegative", "utility")


def within_budget(cost: float, budget: float) -> bool:
    """``cost <= budget`` up to a relative ``1e-9``, so float rounding (costs divided by the top
    cost, a mean over many queries) never makes a budget at the cheapest arms' cost infeasible.

    Examples
    --------
    >>> within_budget(0.3 / 0.7 + 1e-16, 0.3 / 0.7), within_budget(0.31, 0.3)
    (True, False)
    """
    return float(cost) <= float(budget) + 1e-9 * max(abs(float(budget)), 1e-6)


def check_costs(costs: Any, what: str = "cost") -> np.ndarray:
    """Costs as a float array; a negative, non-numeric or non-finite cost is a `ConfigError`."""
    try:
        c = np.asarray(costs, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"every arm's {what} must be a number >= 0, got {costs!r}") from None
    if not np.isfinite(c).all() or (c < 0).any():
        bad = c[~np.isfinite(c) | (c < 0)] if c.ndim else c
        raise ConfigError(f"every arm's {what} must be a finite number >= 0, got {np.ravel(bad)[:3].tolist()}")
    return c


def check_budget(budget: Any, costs: np.ndarray) -> float:
    """The budget as a float in [the mean over queries of the cheapest arm's cost, the most
    expensive arm's cost] (``costs``: arms, or queries x arms)."""
    b, hi = check_number(budget, "the budget", low=0), float(np.max(costs))
    if b > hi:
        raise ConfigError(f"the budget {b} is above the most expensive arm's cost {hi}: every policy "
                          "meets it, so there is nothing to trade; pick B <= the maximum cost")
    lo = float(np.mean(np.min(np.atleast_2d(costs), axis=1)))
    if not within_budget(lo, b):
        raise ConfigError(f"the budget {b:g} is below the cheapest arm's mean cost {lo:g}: no policy meets it")
    return b


def grpo_advantages(rewards, eps: float = 1e-6):
    """Group-normalised advantages of ``rewards`` (n_queries, G): ``(r - mean) / (std + eps)``.

    A group whose rewards are all equal gets zero advantage (nothing to learn from it). ``std``
    is the population standard deviation of the group, as in GRPO.

    Examples
    --------
    >>> import torch
    >>> grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]]))
    tensor([[ 1.0000, -1.0000, -1.0000,  1.0000],
            [ 0.0000,  0.0000,  0.0000,  0.0000]])
    """
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, unbiased=False)
    return (rewards - mean) / (std + eps)


def _entropy_and_ce(logp, best, ce_weight: float):
    p = logp.exp()
    entropy = -(p * logp).sum(dim=1).mean()
    ce = -logp.gather(1, best[:, None]).mean() if ce_weight else logp.new_zeros(())
    return entropy, ce


def grpo_loss(logits, actions, advantages, *, entropy_weight: float = 0.0, ce_weight: float = 0.0, best=None):
    """``-mean(log pi(a) * A) - entropy_weight * H(pi) + ce_weight * CE(pi, best)``.

    ``logits`` (n, A) with ``-inf`` for arms a query lacks; ``actions`` (n, G) sampled arm
    indices; ``advantages`` (n, G); ``best`` (n,) the label-best arm (needed if ``ce_weight``).
    """
    import torch

    logp = torch.log_softmax(logits, dim=1)
    logp_safe = torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))
    pg = -(logp.gather(1, actions) * advantages).mean()
    entropy, ce = _entropy_and_ce(logp_safe, best, ce_weight)
    return pg - entropy_weight * entropy + ce_weight * ce


def exact_loss(logits, rewards, *, entropy_weight: float = 0.0, ce_weight: float = 0.0, best=None):
    """``-mean_q sum_a pi(a|q) r(q, a)`` (no sampling) with the same entropy and CE terms.

    ``rewards`` (n, A) is ``U - lam * C``; arms a query lacks have ``-inf`` logits, so zero
    probability, and must have a finite (any) reward.
    """
    import torch

    logp = torch.log_softmax(logits, dim=1)
    logp_safe = torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))
    expected = (logp.exp() * rewards).sum(dim=1).mean()
    entropy, ce = _entropy_and_ce(logp_safe, best, ce_weight)
    return -expected - entropy_weight * entropy + ce_weight * ce


def dual_update(lam: float, mean_cost: float, budget: float, eta: float) -> float:
    """Projected dual ascent: ``max(0, lam + eta * (mean_cost - budget))``.

    Examples
    --------
    >>> dual_update(0.5, mean_cost=1.0, budget=0.5, eta=0.2)
    0.6
    >>> dual_update(0.05, mean_cost=0.0, budget=0.5, eta=0.2)
    0.0
    """
    return max(0.0, float(lam) + float(eta) * (float(mean_cost) - float(budget)))


def cost_aware_argmax(scores: np.ndarray, costs: np.ndarray, tau: float) -> np.ndarray:
    """``argmax_a (scores - tau * costs)`` per row, ties to the earlier arm; NaN scores never win."""
    s = np.asarray(scores, dtype=np.float64) - float(tau) * np.broadcast_to(costs, np.shape(scores))
    s = np.where(np.isnan(s), -np.inf, s)
    return np.argmax(s, axis=1)


def calibrate_tau(scores: np.ndarray, costs: np.ndarray, budget: float, *, iters: int = 100,
                  floor: float | None = None) -> float:
    """The smallest ``tau`` (not below ``floor``) whose `cost_aware_argmax` has mean cost ``<= budget``.

    The chosen arm's cost is non-increasing in ``tau`` for every query, so the mean cost is too,
    and bisection finds the threshold. With ``floor=None``, ``tau`` may be negative: a rule whose
    scores already choose cheap arms is pushed towards dearer ones until it spends the budget,
    so the rule uses the scores' ranking of the arms and the budget sets the trade-off. With
    ``floor=0`` the rule never rewards cost, like the Lagrange multiplier it stands for
    (``lambda >= 0``): where the scores' own choice is within the budget, it is kept. The search
    bound is where the cheapest (or dearest) arm wins every query: the score range over the
    smallest cost gap.

    Examples
    --------
    >>> s = np.array([[0.0, 1.0], [0.0, 3.0]]); c = np.array([0.0, 1.0])
    >>> round(calibrate_tau(s, c, budget=0.5), 6)  # query 1 turns cheap at tau = 1
    1.0
    >>> round(calibrate_tau(-s, c, budget=0.5), 6)  # both prefer the free arm; query 0 is pushed up
    -3.0
    >>> calibrate_tau(-s, c, budget=0.5, floor=0.0)  # ... unless cost may not be rewarded
    0.0
    """
    costs = np.broadcast_to(np.asarray(costs, dtype=np.float64), np.shape(scores))

    def mean_cost(t: float) -> float:
        pick = cost_aware_argmax(scores, costs, t)
        return float(costs[np.arange(len(pick)), pick].mean())

    def meets(t: float) -> bool:
        return within_budget(mean_cost(t), budget)

    finite = np.asarray(scores, dtype=np.float64)[np.isfinite(scores)]
    span = float(finite.max() - finite.min()) if finite.size else 1.0
    gaps = np.diff(np.unique(costs))
    bound = (span + 1.0) / (float(gaps.min()) if gaps.size else 1.0) * 2.0
    if not meets(bound):
        raise DataError(f"no threshold meets the budget {budget:g}: the cheapest arms cost "
                        f"{mean_cost(bound):.4g} on average")
    lo, hi = (-bound if floor is None else float(floor)), bound
    if meets(lo):
        return lo
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def best_feasible_tau(scores: np.ndarray, costs: np.ndarray, utilities: np.ndarray, budget: float, *,
                      max_candidates: int = 20000) -> float:
    """The ``tau`` whose `cost_aware_argmax` has the best mean utility at mean cost ``<= budget``.

    Every ``tau`` from `calibrate_tau` (the smallest that meets the budget) upwards meets it, and
    the rule only changes where two arms of a query swap places, at ``tau = (s_i - s_j) / (c_i -
    c_j)``. So each interval between those breakpoints is tried once (at its midpoint, and the
    smallest feasible ``tau`` itself); a tie in utility goes to the larger ``tau`` (the cheaper
    rule). Unlike spending the budget, this keeps a loose budget unspent where the labelled
    queries say the dearer arms do not pay. The search is exact up to ``max_candidates``
    breakpoints (about 950 calibration queries of 7 arms; demo-signal's have about 215); above
    that, evenly spaced quantiles of them are tried, which keeps a large calibration set to
    seconds.

    Examples
    --------
    >>> s = np.array([[0.0, 1.0], [0.0, 3.0]]); c = np.array([0.0, 1.0])
    >>> u = np.array([[0.0, 1.0], [1.0, 0.0]])  # query 1's dear arm is worse: keep it cheap
    >>> best_feasible_tau(s, c, u, budget=1.0) > 3.0
    True
    """
    scores = np.asarray(scores, dtype=np.float64)
    costs = np.broadcast_to(np.asarray(costs, dtype=np.float64), scores.shape)
    utilities = np.asarray(utilities, dtype=np.float64)
    lo = calibrate_tau(scores, costs, budget)
    with np.errstate(divide="ignore", invalid="ignore"):  # an absent arm's -inf score gives no breakpoint
        ds = scores[:, :, None] - scores[:, None, :]
        dc = costs[:, :, None] - costs[:, None, :]
        bp = np.where(np.abs(dc) > 1e-12, ds / dc, np.nan)
    bp = np.unique(bp[np.isfinite(bp) & (bp > lo)])
    if bp.size > max_candidates:
        bp = np.unique(np.quantile(bp, np.linspace(0.0, 1.0, max_candidates)))
    cands = np.concatenate([[lo], (np.concatenate([[lo], bp[:-1]]) + bp) / 2 if bp.size else [], bp[-1:] + 1.0])
    rows = np.arange(len(scores))
    best_tau, best_u = lo, -np.inf
    for t in cands:
        pick = cost_aware_argmax(scores, costs, t)
        u = float(np.nanmean(utilities[rows, pick]))
        if u >= best_u - 1e-12:
            best_tau, best_u = float(t), max(u, best_u)
    return best_tau


def calibrate(rule: str, scores: np.ndarray, costs: np.ndarray, utilities: np.ndarray, budget: float) -> float:
    """The threshold ``tau`` of `cost_aware_argmax` by one of the `CALIBRATIONS` rules.

    ``"utility"``: `best_feasible_tau`; ``"spend"``: `calibrate_tau`; ``"nonnegative"``:
    `calibrate_tau` with ``floor=0``. The policy's head (`ltrr.policy.BudgetPolicy`) and the
    cost-penalised LTRR baseline (`ltrr.policy.evaluate.evaluate_budgets`) both call it, so the two
    are compared under the same rule.

    Examples
    --------
    >>> s = np.array([[0.0, 1.0], [0.0, 3.0]]); c = np.array([0.0, 1.0]); u = np.array([[0.0, 1.0], [1.0, 0.0]])
    >>> calibrate("spend", s, c, u, budget=1.0) < 0 < calibrate("utility", s, c, u, budget=1.0)
    True
    """
    if rule not in CALIBRATIONS:
        raise ConfigError(f"calibration must be {' or '.join(repr(c) for c in CALIBRATIONS)}, got {rule!r}")
    if rule == "utility":
        return best_feasible_tau(scores, costs, utilities, budget)
    return calibrate_tau(scores, costs, budget, floor=0.0 if rule == "nonnegative" else None)


def budget_oracle(U: np.ndarray, C: np.ndarray, budget: float) -> dict:
    """The best mean utility any (randomised) assignment reaches at mean cost ``<= budget``.

    The LP relaxation of the multiple-choice knapsack: ``x[q, a] >= 0``, ``sum_a x[q, a] = 1``,
    ``mean_q sum_a x[q, a] C[q, a] <= budget``; maximise ``mean_q sum_a x[q, a] U[q, a]``. At
    most one query gets a split choice, so it is also the integer optimum up to one query's
    utility. Returns ``{"utility", "cost", "x"}``.
    """
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, vstack

    U = np.asarray(U, dtype=np.float64)
    C = np.broadcast_to(np.asarray(C, dtype=np.float64), U.shape)
    n, a = U.shape
    ok = np.isfinite(U).reshape(-1)
    rows = np.repeat(np.arange(n), a)
    eq = csr_matrix((np.ones(n * a), (rows, np.arange(n * a))), shape=(n, n * a))
    ub = csr_matrix(C.reshape(1, -1) / n)
    res = linprog(-np.where(ok, U.reshape(-1), 0.0) / n, A_ub=vstack([ub]), b_ub=[budget], A_eq=eq,
                  b_eq=np.ones(n), bounds=[(0, None) if k else (0, 0) for k in ok], method="highs")
    if res.status != 0:
        raise DataError(f"the budgeted oracle's linear program failed: {res.message}")
    x = res.x.reshape(n, a)
    return {"utility": float((x * np.where(np.isfinite(U), U, 0.0)).sum() / n),
            "cost": float((x * C).sum() / n), "x": x}


def binomial_margin(costs_chosen: np.ndarray, max_cost: float, z: float = 1.96) -> float:
    """The 95% margin of a mean cost, read as ``max_cost`` times a binomial proportion.

    A mean of per-query costs in ``[0, max_cost]`` has variance at most that of
    ``max_cost * Bernoulli(p)`` with the same mean, so ``z * max_cost * sqrt(p (1 - p) / n)``
    with ``p = mean / max_cost`` bounds its 95% margin.
    """
    c = np.asarray(costs_chosen, dtype=np.float64)
    if max_cost <= 0 or not len(c):
        return 0.0
    p = min(1.0, max(0.0, float(c.mean()) / max_cost))
    return float(z * max_cost * math.sqrt(p * (1 - p) / len(c)))
