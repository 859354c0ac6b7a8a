"""The budgeted routing policy: GRPO by hand, the dual update on a bandit, invariances, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.policy import (
    BudgetPolicy,
    budget_oracle,
    calibrate_tau,
    dual_update,
    exact_loss,
    grpo_advantages,
    grpo_loss,
)


def bandit(n=600, seed=0, n_arms=3):
    """Contextual bandit: utilities depend on x differently per arm; costs rise with the arm."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=n)
    slope = np.linspace(0.1, -0.2, n_arms)
    base = np.linspace(0.2, 0.8, n_arms)
    U = base[None, :] + slope[None, :] * x[:, None]
    C = np.linspace(0.0, 1.0, n_arms)
    X = np.stack([np.stack([x, np.full(n, c)], 1) for c in C], axis=1)
    return X, U, C


def test_grpo_advantage_and_loss_by_hand():
    # one query, 3 arms, logits (0, ln 2, 0): pi = (1/4, 1/2, 1/4); group of 4 actions
    logits = torch.tensor([[0.0, float(np.log(2.0)), 0.0]], requires_grad=True)
    actions = torch.tensor([[0, 1, 1, 2]])
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    adv = grpo_advantages(rewards)  # mean 0.5, population std 0.5
    assert torch.allclose(adv, torch.tensor([[1.0, -1.0, -1.0, 1.0]]), atol=1e-5)
    loss = grpo_loss(logits, actions, adv)
    # -(1/4) * [ln(1/4) - ln(1/2) - ln(1/2) + ln(1/4)] = -(1/4) * 2 ln(1/2) = ln(2) / 2
    assert float(loss.detach()) == pytest.approx(np.log(2.0) / 2, abs=1e-6)
    loss.backward()
    # d/dz of -(1/4) sum_g A_g log pi(a_g): -(1/4) sum_g A_g (onehot(a_g) - pi)
    pi = np.array([0.25, 0.5, 0.25])
    expect = -0.25 * (np.array([1, 0, 0]) - np.array([0, 1, 0]) * 2 + np.array([0, 0, 1]) - 0 * pi)
    np.testing.assert_allclose(logits.grad.numpy()[0], expect, atol=1e-6)
    # entropy bonus: H = -(2 * 1/4 ln 1/4 + 1/2 ln 1/2) = 1.5 ln 2
    with_h = grpo_loss(logits, actions, adv, entropy_weight=0.1)
    assert float(with_h.detach()) == pytest.approx(np.log(2.0) / 2 - 0.1 * 1.5 * np.log(2.0), abs=1e-6)
    # equal rewards in a group: zero advantage
    assert torch.all(grpo_advantages(torch.ones(1, 4)) == 0)


def test_exact_loss_and_dual_update_by_hand():
    logits = torch.tensor([[0.0, float(np.log(3.0))]])  # pi = (1/4, 3/4)
    rewards = torch.tensor([[1.0, 0.2]])
    assert float(exact_loss(logits, rewards)) == pytest.approx(-(0.25 + 0.15))
    assert dual_update(0.0, 0.8, 0.5, 0.1) == pytest.approx(0.03)
    assert dual_update(0.01, 0.2, 0.5, 0.1) == 0.0


@pytest.mark.parametrize("trainer", ["exact", "grpo"])
def test_dual_update_reaches_the_lp_optimum_of_a_bandit(trainer):
    """At B = 0.5 the deployed rule of a policy trained with the dual update is within 2% of the
    LP optimum's utility, at the budget (calibrated on the training queries)."""
    X, U, C = bandit()
    oracle = budget_oracle(U, C, 0.5)
    # the bandit's rows are (x, cost): a shared linear scorer cannot make x favour one arm over
    # another, so this needs the hidden layer
    pol = BudgetPolicy(budget=0.5, trainer=trainer, calibration_size=0.0, hidden_size=16,
                       random_state=0).fit(X, U, C)
    a = pol.predict(X)
    assert C[a].mean() <= 0.5 + 1e-9
    assert U[np.arange(len(a)), a].mean() >= 0.98 * oracle["utility"]
    hist = pol.history_
    assert len(hist) == 600 and {"lambda", "mean_cost", "mean_utility"} <= set(hist[0])
    assert max(h["lambda"] for h in hist) > 0  # the budget binds, so the multiplier rose


def test_same_seed_same_decisions_and_save_load(tmp_path):
    X, U, C = bandit(n=200)
    a = BudgetPolicy(budget=0.4, n_steps=50, random_state=3).fit(X, U, C)
    b = BudgetPolicy(budget=0.4, n_steps=50, random_state=3).fit(X, U, C)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    loaded = BudgetPolicy.load(a.save(tmp_path / "p"))
    np.testing.assert_array_equal(loaded.predict(X), a.predict(X))
    np.testing.assert_allclose(loaded.predict_proba(X), a.predict_proba(X))


def test_training_takes_no_vector_math_sqrt(monkeypatch):
    """The head's Adam is fused, so its square root is the CPU's own correctly rounded one, not MKL's
    vector sqrt behind ``Tensor.sqrt`` (not correctly rounded on AMD CPUs, and on Intel ones): a
    ``Tensor.sqrt`` made one ulp off everywhere leaves the policy's probabilities unchanged."""
    import torch

    X, U, C = bandit(n=200)
    before = BudgetPolicy(budget=0.4, n_steps=50, random_state=3).fit(X, U, C).predict_proba(X)
    sqrt = torch.Tensor.sqrt

    def one_ulp_off(self):
        out = sqrt(self)
        return torch.nextafter(out, torch.full_like(out, float("inf"))) if out.is_floating_point() else out

    monkeypatch.setattr(torch.Tensor, "sqrt", one_ulp_off)
    after = BudgetPolicy(budget=0.4, n_steps=50, random_state=3).fit(X, U, C).predict_proba(X)
    np.testing.assert_array_equal(after, before)


def test_fit_leaves_the_callers_global_torch_rng_alone():
    """The head was seeded with torch.manual_seed, resetting the caller's global generator."""
    import torch

    X, U, C = bandit(n=50)
    torch.manual_seed(123)
    expected = (torch.rand(1), torch.rand(1))
    torch.manual_seed(123)
    first = torch.rand(1)
    BudgetPolicy(budget=0.4, n_steps=5, random_state=3).fit(X, U, C)
    assert (first, torch.rand(1)) == expected


@pytest.mark.parametrize("n_arms", [3, 10])
def test_any_number_of_arms_and_their_order_changes_nothing(n_arms):
    X, U, C = bandit(n=200, n_arms=n_arms)
    # hidden layer: with the bandit's (x, cost) rows a linear scorer's logits depend on the cost
    # alone, and the calibrated rule would then be a near-tie among arms
    pol = BudgetPolicy(budget=0.5, trainer="exact", n_steps=60, hidden_size=16, random_state=0).fit(X, U, C)
    p = pol.predict_proba(X)
    assert p.shape == (200, n_arms) and np.allclose(p.sum(axis=1), 1)
    perm = np.random.default_rng(1).permutation(n_arms)
    back = np.argsort(perm)
    np.testing.assert_allclose(pol.predict_proba(X[:, perm])[:, back], p, atol=1e-6)
    np.testing.assert_array_equal(perm[pol.predict(X[:, perm], C[perm])], pol.predict(X))
    # trained on the permuted pool: the same decisions, arm for arm, up to float summation order
    # (PolicyRouter orders the arms by name, so a reordered pool gives identical decisions there)
    pol2 = BudgetPolicy(budget=0.5, trainer="exact", n_steps=60, hidden_size=16,
                        random_state=0).fit(X[:, perm], U[:, perm], C[perm])
    assert np.mean(perm[pol2.predict(X[:, perm], C[perm])] == pol.predict(X)) >= 0.99


def test_calibration_rules_on_a_loose_budget(tmp_path):
    """With a loose budget, "spend" spends it (tau < 0); "nonnegative" keeps the head's own argmax;
    "utility" takes the feasible tau with the best calibration utility."""
    X, U, C = bandit(n=300)
    kw = {"budget": 1.0, "trainer": "exact", "n_steps": 60, "hidden_size": 16, "random_state": 0}
    spend = BudgetPolicy(calibration="spend", **kw).fit(X, U, C)
    keep = BudgetPolicy(calibration="nonnegative", **kw).fit(X, U, C)
    best = BudgetPolicy(calibration="utility", **kw).fit(X, U, C)
    assert keep.tau_ == 0.0 and spend.tau_ < 0 and best.tau_ >= spend.tau_
    np.testing.assert_array_equal(keep.predict(X), keep.decision_logits(X).argmax(axis=1))
    assert C[spend.predict(X)].mean() >= C[keep.predict(X)].mean()
    assert C[best.predict(X)].mean() <= 1.0
    loaded = BudgetPolicy.load(best.save(tmp_path / "best"))
    assert loaded.calibration == "utility" and loaded.tau_ == best.tau_
    np.testing.assert_array_equal(loaded.predict(X), best.predict(X))


def test_best_feasible_tau_matches_a_fine_sweep():
    """The breakpoint search finds the best utility any feasible tau reaches (checked on a grid)."""
    from ltrr.policy import best_feasible_tau, cost_aware_argmax

    rng = np.random.default_rng(0)
    s, u = rng.normal(size=(40, 4)), rng.uniform(size=(40, 4))
    c = np.array([0.0, 0.2, 0.5, 1.0])
    rows = np.arange(40)
    for budget in (0.1, 0.4, 0.9):
        tau = best_feasible_tau(s, c, u, budget)
        pick = cost_aware_argmax(s, c, tau)
        assert c[pick].mean() <= budget + 1e-12
        lo = calibrate_tau(s, c, budget)
        grid = [t for t in np.linspace(lo, lo + 40, 4001) if c[cost_aware_argmax(s, c, t)].mean() <= budget]
        best = max(u[rows, cost_aware_argmax(s, c, t)].mean() for t in grid)
        assert u[rows, pick].mean() == pytest.approx(best)
        # few candidates (quantiles of the breakpoints): still feasible, never above the exact best
        rough = cost_aware_argmax(s, c, best_feasible_tau(s, c, u, budget, max_candidates=10))
        assert c[rough].mean() <= budget + 1e-12 and u[rows, rough].mean() <= best + 1e-12


def test_an_arm_a_query_lacks_gets_probability_zero():
    X, U, C = bandit(n=100)
    X[:10, 2] = np.nan
    pol = BudgetPolicy(budget=0.5, trainer="grpo", n_steps=30, random_state=0).fit(X, U, C)
    assert np.all(pol.predict_proba(X)[:10, 2] == 0) and np.all(pol.predict(X)[:10] != 2)


def test_calibrated_rule_and_oracle():
    s = np.array([[0.0, 1.0, 2.0]] * 4)
    c = np.array([0.0, 1.0, 2.0])
    assert calibrate_tau(s, c, budget=2.0) <= 0  # already within budget: no push towards cheap
    tau = calibrate_tau(s, c, budget=1.0)
    assert 0 < tau
    # a floor of 0 (calibration="nonnegative"): a rule within budget keeps its own choice
    assert calibrate_tau(-s, c, budget=2.0) < 0 and calibrate_tau(-s, c, budget=2.0, floor=0.0) == 0.0
    assert calibrate_tau(s, c, budget=1.0, floor=0.0) == pytest.approx(tau)
    o = budget_oracle(np.array([[0.0, 1.0], [0.0, 1.0]]), c[:2], budget=0.5)
    assert o["utility"] == pytest.approx(0.5) and o["cost"] == pytest.approx(0.5)


@pytest.mark.parametrize("kwargs, costs, match", [
    ({"budget": -0.1}, None, "the budget must be a number >= 0"),
    ({"budget": 1.5}, None, "above the most expensive arm's cost 1.0"),
    ({"budget": "half"}, None, "the budget must be a number"),
    ({"budget": 0.5}, [0.0, -1.0, 1.0], "must be a finite number >= 0"),
    ({"budget": 0.5}, [0.0, "cheap", 1.0], "must be a number >= 0"),
    ({"budget": 0.5, "trainer": "ppo"}, None, "trainer must be 'grpo' or 'exact'"),
    ({"budget": 0.5, "group_size": 0}, None, "group_size must be an integer >= 1"),
    ({"budget": 0.5, "calibration_size": 1.0}, None, r"calibration_size must be a number in \[0, 1\)"),
    ({"budget": 0.5, "calibration": "max"}, None,
     "calibration must be 'spend' or 'nonnegative' or 'utility', got 'max'"),
])
def test_bad_budgets_costs_and_parameters(kwargs, costs, match):
    X, U, C = bandit(n=20)
    with pytest.raises(ConfigError, match=match):
        BudgetPolicy(n_steps=2, **kwargs).fit(X, U, C if costs is None else costs)


def test_bad_data():
    X, U, C = bandit(n=20)
    with pytest.raises(DataError, match="every training query is a tie"):
        BudgetPolicy(n_steps=2).fit(X, np.ones_like(U), C)
    with pytest.raises(DataError, match=r"shape \(n_queries, n_arms, n_features\)"):
        BudgetPolicy(n_steps=2).fit(X[:, :, 0], U, C)
    with pytest.raises(DataError, match="utilities have shape"):
        BudgetPolicy(n_steps=2).fit(X, U[:, :2], C)
    pol = BudgetPolicy(n_steps=2).fit(X, U, C)
    with pytest.raises(DataError, match="the policy was trained on 2"):
        pol.predict(np.concatenate([X, X], axis=2))
    with pytest.raises(NotBuiltError, match="no saved policy head"):
        BudgetPolicy.load("/nonexistent")


def test_docstring_examples_run():
    """The Examples sections of the policy's modules run as written (pytest collects no doctests)."""
    import doctest

    import ltrr.policy.estimator
    import ltrr.policy.objective

    for mod in (ltrr.policy.objective, ltrr.policy.estimator):
        res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


@pytest.mark.parametrize("trainer", ["exact", "grpo"])
def test_infinite_features_or_utilities_are_refused(trainer):
    """An inf utility gave the exact trainer a NaN head (always arm 0) and GRPO a torch error."""
    X, U, C = bandit(n=50)
    U2 = U.copy()
    U2[0, 1] = np.inf
    with pytest.raises(DataError, match=r"U \(the utilities\) has infinite values"):
        BudgetPolicy(budget=0.5, trainer=trainer, n_steps=3).fit(X, U2, C)
    X2 = X.copy()
    X2[0, 0, 0] = -np.inf
    with pytest.raises(DataError, match="X has infinite features"):
        BudgetPolicy(budget=0.5, trainer=trainer, n_steps=3).fit(X2, U, C)
    pol = BudgetPolicy(budget=0.5, trainer=trainer, n_steps=3).fit(X, U, C)
    with pytest.raises(DataError, match="X has infinite features"):
        pol.predict(X2)
    # an absent arm (a NaN row) is still fine
    X3 = X.copy()
    X3[0, 2] = np.nan
    assert pol.predict(X3)[0] != 2


@pytest.mark.parametrize("costs", [(0.3, 0.5, 0.7), (0.1, 0.7, 1.3), (0.7, 1.8, 2.9)])
def test_a_budget_at_the_cheapest_arms_cost_is_feasible(costs):
    """Costs are divided by the top cost inside; rounding must not make B = min cost infeasible."""
    X, U, _ = bandit(n=200)
    C = np.array(costs)
    pol = BudgetPolicy(budget=costs[0], trainer="exact", n_steps=10, calibration_size=0.0,
                       random_state=0).fit(X, U, C)
    assert (pol.predict(X) == 0).all()


def test_an_infeasible_budget_is_refused_before_training_in_cost_units():
    X, U, _ = bandit(n=100)
    C = np.array([0.3, 0.5, 0.7])
    with pytest.raises(ConfigError, match="the budget 0.29 is below the cheapest arm's mean cost 0.3"):
        BudgetPolicy(budget=0.29, n_steps=2).fit(X, U, C)
    # per-query costs: the calibration queries' cheapest arms are dearer than the budget (the
    # training queries' are free), found before any step is taken, in the user's units
    Cq = np.broadcast_to(C, U.shape).copy()
    pol = BudgetPolicy(budget=0.2, n_steps=1, random_state=0, calibration_size=0.5)
    cal = np.isin(np.arange(100), np.random.default_rng(0).permutation(100)[:50])  # fit's split, seed 0
    Cq[~cal, 0] = 0.0
    with pytest.raises(DataError, match=r"the budget 0.2 is below the mean cost of the cheapest arms of the "
                                        r"calibration queries \(0.3\)"):
        pol.fit(X, U, Cq)
    assert not hasattr(pol, "history_")


def test_costs_and_seed_are_checked_in_fit(tmp_path):
    X, U, C = bandit(n=40)
    with pytest.raises(DataError, match="BudgetPolicy.fit needs the costs C"):
        BudgetPolicy(n_steps=2).fit(X, U, None)
    with pytest.raises(DataError, match=r"C \(the costs\) has shape \(2,\); it must be \(3,\)"):
        BudgetPolicy(n_steps=2).fit(X, U, C[:2])
    with pytest.raises(ConfigError, match="random_state must be an integer >= 0"):
        BudgetPolicy(n_steps=2, random_state=None).fit(X, U, C)
    with pytest.raises(ConfigError, match="random_state must be an integer >= 0"):
        BudgetPolicy(n_steps=2, random_state=-1).fit(X, U, C)
    # a numpy integer seed (a sweep grid's) fits, saves as a plain int and loads
    pol = BudgetPolicy(budget=0.4, n_steps=3, random_state=np.int64(3)).fit(X, U, C)
    same = BudgetPolicy(budget=0.4, n_steps=3, random_state=3).fit(X, U, C)
    np.testing.assert_array_equal(pol.predict(X), same.predict(X))
    loaded = BudgetPolicy.load(pol.save(tmp_path / "p"))
    assert loaded.random_state == 3 and type(loaded.random_state) is int
    with pytest.raises(DataError, match=r"C \(the costs\) has shape \(2,\)"):
        pol.predict(X, C=C[:2])


def test_a_save_that_cannot_finish_touches_no_file(tmp_path):
    X, U, C = bandit(n=40)
    pol = BudgetPolicy(budget=0.4, n_steps=3).fit(X, U, C)
    folder = pol.save(tmp_path / "p")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    pol.ce_weight = object()  # set after fit: a value JSON cannot hold
    with pytest.raises(ConfigError, match="cannot be saved as JSON"):
        pol.save(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    with pytest.raises(ConfigError, match="cannot be saved as JSON"):
        pol.save(tmp_path / "new")
    assert not (tmp_path / "new").exists()


def _fake_policies(n_test, pick):
    def make_policy(budget, trainer):
        return np.full(n_test, pick)
    return make_policy


def test_the_cost_penalised_baseline_uses_the_policys_calibration_rule():
    """The baseline was calibrated by "spend" (mu < 0, over the budget) while the policy used
    "utility": the comparison favoured the policy. Both use one rule now, and the baseline
    reports whether it held the budget; the table holds no wall-clock time."""
    from ltrr.policy.evaluate import budgets_markdown, evaluate_budgets
    from ltrr.policy.objective import best_feasible_tau

    rng = np.random.default_rng(0)
    n, costs = 300, np.array([0.0, 1.0, 2.0])
    U = rng.uniform(size=(2 * n, 3)) * np.array([0.5, 1.0, 0.9])
    S = U + rng.normal(scale=0.3, size=U.shape) - 0.4 * costs  # the scores prefer cheap arms
    args = (U[:n], U[n:], costs, S[:n], S[n:], ["a", "b", "none"][::-1], "none", [0.25, 0.75], ["grpo"])
    doc = evaluate_budgets(_fake_policies(n, 1), *args)
    for r in doc["budgets"]:
        pen = r["ltrr_cost_penalised"]
        assert pen["mu"] == best_feasible_tau(S[:n], costs, U[:n], r["budget"])
        assert pen["calibration"] == "utility" and isinstance(pen["within_budget"], bool)
        assert pen["cost"] <= r["budget"] + pen["cost_margin"] and pen["within_budget"]
    spend = evaluate_budgets(_fake_policies(n, 1), *args, calibration="spend")
    loose = spend["budgets"][1]["ltrr_cost_penalised"]
    assert loose["mu"] == calibrate_tau(S[:n], costs, 1.5) and loose["mu"] < 0
    text = budgets_markdown(doc, ["grpo"])
    assert "train s" not in text and "seconds" not in str(doc)
    assert budgets_markdown(doc, ["grpo"]) == text  # same inputs, the same table


@pytest.fixture(scope="module")
def saved_head(tmp_path_factory):
    X, U, C = bandit(n=60)
    return BudgetPolicy(budget=0.4, n_steps=5, random_state=0).fit(X, U, C).save(tmp_path_factory.mktemp("h") / "p")


def _damaged_copy(saved, tmp_path, damage_json=None, tensors=None):
    import json
    import shutil

    folder = Path(shutil.copytree(saved, tmp_path / "p"))
    if damage_json is not None:
        meta = json.loads((folder / "head.json").read_text())
        damage_json(meta)
        (folder / "head.json").write_text(json.dumps(meta))
    if tensors is not None:
        (folder / "head.safetensors").write_bytes(tensors)
    return folder


@pytest.mark.parametrize(("damage", "match"), [
    (lambda m: m.pop("params"), r"not a readable policy head \(no entry 'params'\)"),
    (lambda m: m.pop("tau"), r"no entry 'tau'"),
    (lambda m: m.update(params=[1]), "a value or parameter does not fit"),
    (lambda m: m["params"].update(evil=1), r"unexpected keyword argument 'evil'"),
    (lambda m: m["params"].update(trainer="sgd"), r"head\.json's parameters do not fit BudgetPolicy: .*trainer"),
    (lambda m: m.update(tau="x"), r"a value is wrong: could not convert string to float: 'x'"),
    (lambda m: m.update(n_calibration=[1]), r"a value or parameter does not fit"),
    (lambda m: m.update(n_features_in="2"), r"n_features_in must be an integer >= 1, got '2'"),
    (lambda m: m.update(n_features_in=10**12), r"scaling has shape \(2,\), not the \(1000000000000,\)"),
])
def test_a_damaged_head_json_is_one_data_error_naming_the_folder(saved_head, tmp_path, damage, match):
    """``cls(**meta["params"])`` and key lookups raised KeyError, TypeError or ValueError."""
    folder = _damaged_copy(saved_head, tmp_path, damage_json=damage)
    with pytest.raises(DataError, match=rf"^{folder}: .*{match}"):
        BudgetPolicy.load(folder)


def test_a_damaged_head_safetensors_is_one_data_error_naming_the_folder(saved_head, tmp_path):
    from safetensors.numpy import load_file, save

    folder = _damaged_copy(saved_head, tmp_path, tensors=b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(DataError, match=rf"^{folder}: not a readable policy head \(SafetensorError"):
        BudgetPolicy.load(folder)
    arrays = load_file(str(saved_head / "head.safetensors"))
    del arrays["costs"]
    folder = _damaged_copy(saved_head, tmp_path / "b", tensors=save(arrays))
    with pytest.raises(DataError, match=rf"^{folder}: .*no entry 'costs'"):
        BudgetPolicy.load(folder)
    arrays = load_file(str(saved_head / "head.safetensors"))
    arrays["head.0.weight"] = np.ones((1, 5), dtype=np.float32)  # another network's weights
    folder = _damaged_copy(saved_head, tmp_path / "c", tensors=save(arrays))
    with pytest.raises(DataError, match=rf"^{folder}: .*RuntimeError: .*size mismatch"):
        BudgetPolicy.load(folder)
