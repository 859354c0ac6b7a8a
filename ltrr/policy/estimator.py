"""BudgetPolicy: a shared per-arm scorer, trained by GRPO (or exactly) under an average cost budget.

The scikit-learn layer works on arrays: ``X`` of shape (n_queries, n_arms, n_features), one row
per arm of each query (the arm's LTRR features, the LTR ranker's score, the arm's cost and, with
the ``lm`` representation, the question's LLM state); utilities ``U`` and costs ``C`` of shape
(n_queries, n_arms). The same small network scores every row and a softmax across the arms of a
query gives ``pi(a | q)``, so one head serves any number of arms in any order. Arms a query
lacks are NaN rows of ``X`` and get probability 0. `ltrr.policy.router.PolicyRouter` builds the
rows from a run and names the arms.

Training and deployment follow `ltrr.policy.objective`: per step, GRPO's group-normalised
policy gradient (``trainer="grpo"``) or the exact expected reward (``trainer="exact"``), then
the dual update of the multiplier; finally the deterministic cost-aware argmax is calibrated on
a held-out calibration part of the training queries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from ltrr._atomic import manifest_last, plain_json, write_arrays_atomic, write_text_atomic
from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.policy.objective import (
    CALIBRATIONS,
    calibrate,
    check_budget,
    check_costs,
    cost_aware_argmax,
    dual_update,
    exact_loss,
    grpo_advantages,
    grpo_loss,
    within_budget,
)

__all__ = ["BudgetPolicy", "CALIBRATIONS", "TRAINERS", "HEAD_FORMAT"]

TRAINERS = ("grpo", "exact")
HEAD_FORMAT = 1


def _check_arrays(X, U=None, C=None, *, need_costs: bool = False):
    """``X`` (and ``U``, ``C``) as float arrays, with ``present`` (n, A): the arms each query has.

    A present arm's row of ``X`` and its utility must be finite: an infinite feature or utility
    would give the exact trainer a NaN head and GRPO an invalid sampling distribution.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3:
        raise DataError(f"X must have shape (n_queries, n_arms, n_features), got {X.shape}")
    present = ~np.isnan(X).all(axis=2)
    rows = X[present]
    if np.isnan(rows).any():
        raise DataError("X has NaN features in a present arm's row; impute them (the LTR feature pipeline does)")
    if not np.isfinite(rows).all():
        raise DataError("X has infinite features in a present arm's row; every feature must be finite")
    if (present.sum(axis=1) == 0).any():
        raise DataError("a query has no arm (every row NaN)")
    out = [X, present]
    if U is not None:
        U = np.asarray(U, dtype=np.float64)
        if U.shape != X.shape[:2]:
            raise DataError(f"utilities have shape {U.shape}; X has {X.shape[:2]} (queries, arms)")
        if np.isnan(U[present]).any():
            raise DataError("some present (query, arm) pairs have no utility label")
        if not np.isfinite(U[present]).all():
            raise DataError("U (the utilities) has infinite values for present (query, arm) pairs; "
                            "every utility must be finite")
        out.append(U)
    if C is None and need_costs:
        raise DataError("BudgetPolicy.fit needs the costs C: (n_arms,) or (n_queries, n_arms)")
    if C is not None:
        out.append(_check_cost_shape(C, X.shape[:2]))
    return out


def _check_cost_shape(C, shape: tuple[int, int]) -> np.ndarray:
    """Costs ``C`` ((A,) or (n, A)) checked as costs and broadcast to ``shape`` (n, A)."""
    c = check_costs(C)
    if c.shape not in (shape, shape[1:]):
        raise DataError(f"C (the costs) has shape {c.shape}; it must be ({shape[1]},) (one cost per arm) "
                        f"or {shape} (queries, arms)")
    return np.broadcast_to(c, shape)


class BudgetPolicy(BaseEstimator):
    """Per-query choice of one arm under an average cost budget (see the module docstring).

    Parameters
    ----------
    budget : float
        Average cost budget ``B`` per query, in the costs' units.
    trainer : {"grpo", "exact"}
        Sampled GRPO groups, or the exact expected reward (every action is labelled).
    group_size : int
        GRPO group size ``G`` (actions sampled per query per step).
    n_steps : int
        Gradient steps (each over every training query).
    learning_rate : float
        Adam's step size for the head.
    dual_lr : float
        ``eta`` of the dual update, in utility per unit of cost normalised by the maximum cost.
    entropy_weight : float, optional
        Entropy bonus. Default 0.05 for ``exact`` and 1.0 for ``grpo``: GRPO's advantages are
        normalised to unit spread within each group, so its policy-gradient term is about 1/std
        of the rewards larger than the exact objective's, and the same bonus must scale with it.
        Below that GRPO's policy collapses onto one arm, its groups then hold a single action,
        their advantages are all 0 and it never recovers (measured on the synthetic bandit of
        the tests: at B = 25% of the top cost, GRPO with 0.05 ended on the free arm for every
        query, 48% of the LP optimum).
    ce_weight : float
        Cross-entropy toward each query's label-best arm.
    hidden_size : int
        Hidden units of the shared scorer; 0 (the default) is a linear scorer. Chosen on the
        design part of demo-signal (an inner 70/30 split of its 1,072 design queries, budget 50%):
        a 16-unit tanh layer reached a mean training utility of 0.45 and 0.26 on the held-out
        queries (exact trainer), the linear scorer 0.33 and 0.34, so the hidden layer overfits
        the few hundred training queries the head sees.
    average : bool
        Average the head's weights over the second half of training (Polyak): under the
        oscillation of the multiplier the averaged iterate is steadier than the last.
    calibration_size : float
        Share of the training queries (by group) held out to calibrate the deterministic rule.
    calibration : {"spend", "nonnegative", "utility"}
        How the deterministic rule's threshold ``tau`` is set on the calibration queries.
        ``"spend"``: the smallest ``tau`` that meets ``B`` (`calibrate_tau`); it may be negative,
        pushing the rule towards dearer arms until it spends the budget. ``"nonnegative"``: the
        same with ``tau >= 0``, like the multiplier it stands for. ``"utility"``: of the ``tau``
        that meet ``B``, the one with the best mean utility on the calibration queries
        (`best_feasible_tau`), so a loose budget is spent only where the labels say it pays.
        ``"utility"`` is the default, chosen on the design part of demo-signal's partition seed 14
        (five inner splits, `benchmarks/policy_design_study.py`): ``"spend"`` overspent at 75%
        (1.75 against B = 1.65) and ``"nonnegative"`` left GRPO's 25% budget unspent (cost 0.002,
        utility 0.15); ``"utility"`` held every budget with the best mean utility of the two
        that did (0.323 against 0.297).
    random_state : int
        Seeds the head's initialisation, the sampling and the calibration split: an integer >= 0
        (a numpy integer is taken as its value). ``None`` is refused, unlike scikit-learn's usual
        meaning: the same data and seed must give the same policy.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3, 2)); X[:, :, 1] = [0.0, 0.5, 1.0]   # feature 1: the cost
    >>> U = (X[:, :, 0] > 0).astype(float); C = np.array([0.0, 0.5, 1.0])
    >>> pol = BudgetPolicy(budget=0.5, trainer="exact", n_steps=200, random_state=0).fit(X, U, C)
    >>> float(C[pol.predict(X)].mean()) <= 0.55
    True
    """

    def __init__(self, budget: float = 0.5, *, trainer: str = "grpo", group_size: int = 8, n_steps: int = 600,
                 learning_rate: float = 0.05, dual_lr: float = 0.02, entropy_weight: float | None = None,
                 ce_weight: float = 0.0, hidden_size: int = 0, average: bool = True,
                 calibration_size: float = 0.2, calibration: str = "utility", random_state: int = 0):
        self.budget = budget
        self.trainer = trainer
        self.group_size = group_size
        self.n_steps = n_steps
        self.learning_rate = learning_rate
        self.dual_lr = dual_lr
        self.entropy_weight = entropy_weight
        self.ce_weight = ce_weight
        self.hidden_size = hidden_size
        self.average = average
        self.calibration_size = calibration_size
        self.calibration = calibration
        self.random_state = random_state

    def _check_params(self) -> None:
        def bad(name, allowed):
            return ConfigError(f"BudgetPolicy: {name} must be {allowed}, got {getattr(self, name)!r}")

        if self.trainer not in TRAINERS:
            raise bad("trainer", " or ".join(repr(t) for t in TRAINERS))
        for name in ("group_size", "n_steps"):
            check_int(getattr(self, name), f"BudgetPolicy: {name}", low=1)
        check_int(self.hidden_size, "BudgetPolicy: hidden_size", low=0)
        for name in ("learning_rate", "dual_lr"):
            check_number(getattr(self, name), f"BudgetPolicy: {name}", low=0, low_open=True)
        for name in ("entropy_weight", "ce_weight"):
            if not (name == "entropy_weight" and self.entropy_weight is None):
                check_number(getattr(self, name), f"BudgetPolicy: {name}", low=0)
        check_number(self.calibration_size, "BudgetPolicy: calibration_size", low=0, high=1, high_open=True)
        if self.calibration not in CALIBRATIONS:
            raise bad("calibration", " or ".join(repr(c) for c in CALIBRATIONS))
        # a seed, not sklearn's None or a Generator: the same data and seed give the same policy
        check_int(self.random_state, "BudgetPolicy: random_state", low=0, note=" (the policy is always seeded)")

    # ---- the network ------------------------------------------------------------------------
    def _make_head(self, n_features: int):
        import torch

        with torch.random.fork_rng(devices=[]):  # seeded here, the caller's global RNG untouched
            torch.manual_seed(int(self.random_state))  # checked by fit; int() takes numpy integers
            if self.hidden_size:
                return torch.nn.Sequential(torch.nn.Linear(n_features, self.hidden_size), torch.nn.Tanh(),
                                           torch.nn.Linear(self.hidden_size, 1))
            return torch.nn.Sequential(torch.nn.Linear(n_features, 1))

    def _logits(self, X: np.ndarray, present: np.ndarray):
        import torch

        Z = (np.nan_to_num(X) - self.x_mean_) / self.x_scale_
        out = self.head_(torch.as_tensor(Z, dtype=torch.float32)).squeeze(-1)
        return torch.where(torch.as_tensor(present), out, torch.full_like(out, -torch.inf))

    # ---- fitting ------------------------------------------------------------------------------
    def fit(self, X, U, C, *, groups=None) -> BudgetPolicy:
        """Train the head on ``X`` (n, A, d), utilities ``U`` (n, A) and costs ``C`` ((n, A) or (A,)).

        ``groups`` (n,) keeps related queries on one side of the calibration split.
        """
        import torch

        self._check_params()
        X, present, U, C = _check_arrays(X, U, C, need_costs=True)
        budget = check_budget(self.budget, C)
        seed = int(self.random_state)
        Um = np.where(present, U, -np.inf)
        if (np.nanmax(Um, axis=1) == np.where(present, U, np.inf).min(axis=1)).all():
            raise DataError("every training query is a tie (all its arms have the same utility): "
                            "there is nothing to learn about which arm to choose")
        n = len(X)
        rng = np.random.default_rng(seed)
        cal = np.zeros(n, dtype=bool)
        if self.calibration_size:
            keys = np.asarray(groups if groups is not None else np.arange(n))
            uniq = np.unique(keys)
            pick = rng.permutation(len(uniq))[: max(1, round(self.calibration_size * len(uniq)))]
            cal = np.isin(keys, uniq[pick])
            if cal.all():
                raise DataError("the calibration part took every training query; lower calibration_size")
        tr = ~cal
        part = cal if cal.any() else tr
        # feasible on the calibration queries, checked before training (in the user's cost units)
        cheapest = float(np.mean(np.where(present, C, np.inf)[part].min(axis=1)))
        if not within_budget(cheapest, budget):
            raise DataError(f"the budget {budget:g} is below the mean cost of the cheapest arms of the calibration "
                            f"queries ({cheapest:g}): no rule meets it; raise the budget")
        rows = X[tr][present[tr]]
        self.x_mean_ = rows.mean(axis=0)
        scale = rows.std(axis=0)
        self.x_scale_ = np.where(scale > 1e-12, scale, 1.0)
        self.c_max_ = float(C.max()) if C.max() > 0 else 1.0
        self.costs_ = C[0].copy() if (C == C[0]).all() else C.mean(axis=0)
        self.head_ = self._make_head(X.shape[2])
        # fused: the square root with the CPU's own correctly rounded instruction, the same bits on
        # AMD and Intel CPUs (the default Adam's MKL sqrt is not; ltrr.rankers.torch_train)
        opt = torch.optim.Adam(self.head_.parameters(), lr=float(self.learning_rate), fused=True)
        gen = torch.Generator().manual_seed(seed)
        Ut = torch.as_tensor(np.where(present, U, 0.0)[tr], dtype=torch.float32)
        Ct = torch.as_tensor(C[tr] / self.c_max_, dtype=torch.float32)
        best = torch.as_tensor(np.argmax(Um[tr], axis=1))
        Xtr, Ptr = X[tr], present[tr]
        b_norm = budget / self.c_max_
        ent = self.entropy_weight if self.entropy_weight is not None else (1.0 if self.trainer == "grpo" else 0.05)
        lam, history = 0.0, []
        # Polyak averaging of the head over the second half of training: the averaged primal
        # iterate, not the last one, is what converges under primal-dual oscillation.
        avg_from = int(self.n_steps) // 2 if self.average else int(self.n_steps)
        avg, n_avg = None, 0
        for step in range(int(self.n_steps)):
            logits = self._logits(Xtr, Ptr)
            if self.trainer == "grpo":
                with torch.no_grad():
                    acts = torch.multinomial(torch.softmax(logits, 1), int(self.group_size), replacement=True,
                                             generator=gen)
                    u, c = Ut.gather(1, acts), Ct.gather(1, acts)
                    adv = grpo_advantages(u - lam * c)
                loss = grpo_loss(logits, acts, adv, entropy_weight=ent,
                                 ce_weight=self.ce_weight, best=best)
                mean_u, mean_c = float(u.mean()), float(c.mean())
            else:
                loss = exact_loss(logits, Ut - lam * Ct, entropy_weight=ent,
                                  ce_weight=self.ce_weight, best=best)
                with torch.no_grad():
                    p = torch.softmax(logits, 1)
                    mean_u, mean_c = float((p * Ut).sum(1).mean()), float((p * Ct).sum(1).mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append({"step": step, "lambda": lam, "mean_cost": mean_c * self.c_max_,
                            "mean_utility": mean_u, "loss": float(loss.detach())})
            lam = dual_update(lam, mean_c, b_norm, self.dual_lr)
            if step >= avg_from:
                state = {k: v.detach().clone() for k, v in self.head_.state_dict().items()}
                n_avg += 1
                avg = state if avg is None else {k: avg[k] + (state[k] - avg[k]) / n_avg for k in avg}
        if avg is not None:
            self.head_.load_state_dict(avg)
        self.lambda_ = lam
        self.history_ = history
        # the deterministic rule: cost-aware argmax, calibrated on held-out training queries
        with torch.no_grad():
            logits = self._logits(X[part], present[part]).numpy().astype(np.float64)
        self.tau_ = calibrate(self.calibration, logits, C[part] / self.c_max_,
                              np.where(present, U, np.nan)[part], b_norm)
        self.n_calibration_ = int(cal.sum())
        self.n_features_in_ = X.shape[2]
        return self

    # ---- prediction ---------------------------------------------------------------------------
    def _check_fitted(self, X):
        if not hasattr(self, "head_"):
            raise NotFittedError("BudgetPolicy is not fitted; call fit(X, U, C) or BudgetPolicy.load(folder)")
        X, present = _check_arrays(X)
        if X.shape[2] != self.n_features_in_:
            raise DataError(f"X has {X.shape[2]} features per arm; the policy was trained on {self.n_features_in_}")
        return X, present

    def decision_logits(self, X) -> np.ndarray:
        """The head's logits (n, A); ``-inf`` for arms a query lacks."""
        import torch

        X, present = self._check_fitted(X)
        with torch.no_grad():
            return self._logits(X, present).numpy().astype(np.float64)

    def predict_proba(self, X) -> np.ndarray:
        """The stochastic policy ``pi(a | q)``: (n, A), rows sum to 1."""
        z = self.decision_logits(X)
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X, C=None) -> np.ndarray:
        """The deployed deterministic choice (arm indices): ``argmax(logit - tau * C / c_max)``.

        ``C`` defaults to the training costs of each arm position.
        """
        z = self.decision_logits(X)
        costs = np.broadcast_to(self.costs_, z.shape) if C is None else _check_cost_shape(C, z.shape)
        return cost_aware_argmax(z, costs / self.c_max_, self.tau_)

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """``head.safetensors`` (weights and scaling) and ``head.json`` (parameters, tau, lambda)."""
        if not hasattr(self, "head_"):
            raise NotFittedError("BudgetPolicy is not fitted")
        # the metadata in plain JSON before any file is touched: a value JSON cannot hold (a
        # numpy seed is converted) fails here, not after the weights replaced the old ones
        meta = plain_json({"format": HEAD_FORMAT, "params": self.get_params(), "tau": self.tau_,
                           "lambda": self.lambda_, "c_max": self.c_max_, "n_features_in": self.n_features_in_,
                           "n_calibration": self.n_calibration_, "history": self.history_}, "BudgetPolicy")
        text = json.dumps(meta, indent=1)
        arrays = {f"head.{k}": v.detach().numpy().copy() for k, v in self.head_.state_dict().items()}
        arrays.update(x_mean=np.asarray(self.x_mean_, np.float64), x_scale=np.asarray(self.x_scale_, np.float64),
                      costs=np.asarray(self.costs_, np.float64))
        with manifest_last(path, "head.json") as path:
            write_arrays_atomic(path / "head.safetensors", arrays)
            write_text_atomic(path / "head.json", text)
        return path

    @classmethod
    def load(cls, path: str | Path) -> BudgetPolicy:
        """Load a head saved by `save`.

        Raises
        ------
        NotBuiltError
            ``path`` holds no ``head.json`` or ``head.safetensors``.
        DataError
            One message naming ``path`` for a damaged folder: a missing or ill-typed entry of
            ``head.json``, a parameter this class does not take or out of its range, a damaged
            ``head.safetensors`` or one that does not fit ``head.json``.
        """
        import torch
        from safetensors.numpy import load_file

        from ltrr.data.io import read_saved_meta, saved_model_errors

        path = Path(path)
        if not (path / "head.safetensors").is_file():
            raise NotBuiltError(f"{path}: no saved policy head (head.json and head.safetensors)")
        meta: dict[str, Any] = read_saved_meta(path / "head.json", "no saved policy head (head.json and head.safetensors)")
        if meta.get("format") != HEAD_FORMAT:
            raise DataError(f"{path}: policy head in format {meta.get('format')!r}; this ltrr reads {HEAD_FORMAT}")
        with saved_model_errors(path, "policy head"):
            pol = cls(**meta["params"])
            try:
                pol._check_params()
            except ConfigError as exc:
                raise DataError(f"{path}: head.json's parameters do not fit BudgetPolicy: {exc}") from None
            n_features = check_int(meta["n_features_in"], f"{path}: head.json's n_features_in", low=1,
                                   error=DataError)
            arrays = load_file(str(path / "head.safetensors"))
            pol.x_mean_, pol.x_scale_, pol.costs_ = arrays["x_mean"], arrays["x_scale"], arrays["costs"]
            if pol.x_mean_.shape != (n_features,) or pol.x_scale_.shape != (n_features,):
                # checked before the network of that size is made
                raise DataError(f"{path}: head.safetensors' scaling has shape {pol.x_mean_.shape}, not the "
                                f"({n_features},) of head.json's n_features_in; the folder is damaged")
            pol.n_features_in_ = n_features
            pol.head_ = pol._make_head(pol.n_features_in_)
            pol.head_.load_state_dict({k[5:]: torch.as_tensor(v) for k, v in arrays.items() if k.startswith("head.")})
            pol.tau_, pol.lambda_, pol.c_max_ = float(meta["tau"]), float(meta["lambda"]), float(meta["c_max"])
            pol.n_calibration_, pol.history_ = int(meta["n_calibration"]), list(meta["history"])
        return pol
