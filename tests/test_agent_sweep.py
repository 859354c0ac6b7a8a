"""Reading evaluations together (unit tier, no model): `ltrr agent compare`'s paired tests and
`ltrr agent sweep`'s cost-weight trend (`ltrr.agent.sweep`), on evaluation folders written here,
and what each kind of bad input gets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ltrr._errors import DataError
from ltrr.agent.evaluate import compare_evals
from ltrr.agent.sweep import slope, sweep_evals, sweep_markdown
from ltrr.agent.trajectory import Search, Trajectory, save_trajectories

NORMALISER = {"low": 0.5, "high": 3.0}


def _eval(root: Path, name: str, searches, *, alpha=None, metric="recall", normaliser=NORMALISER,
          seed=None) -> Path:
    """An evaluation folder whose question i made ``searches[i]`` valid searches of cost 1 each
    (its outcome 1 when it searched), and, with ``alpha``, the policy folder it names."""
    policy = root / "policies" / name
    policy.mkdir(parents=True)
    if alpha is not None:
        (policy / "grpo.json").write_text(json.dumps({"alpha": alpha}))
    trajs = []
    for i, n in enumerate(searches):
        outcome = float(n > 0)
        trajs.append(Trajectory(qid=f"q{i:02d}", question=f"question {i}",
                                searches=[Search(arm="bm25", query="x", valid=True) for _ in range(n)],
                                rewards={"total": outcome - 0.1 * n, "outcome": outcome, "cost": float(n)}))
    folder = root / f"eval-{name}"
    folder.mkdir()
    save_trajectories(trajs, folder / "trajectories.jsonl")
    mean = float(np.mean([n > 0 for n in searches]))
    doc = {"policy": str(policy), "metric": metric, "normaliser": normaliser, "format_valid_rate": 1.0,
           "agent": {"recall": mean, "contains": mean, "f1": mean / 2, "em": mean / 4}}
    if seed is not None:
        doc["seed"] = seed
    (folder / "eval.json").write_text(json.dumps(doc))
    return folder


def test_slope_is_the_least_squares_slope_of_the_means():
    v = np.array([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    assert slope([0, 1, 2], v) == 0.0
    assert slope([0, 1, 2], v[:1]) == pytest.approx(-1.0)
    assert slope([0.0, 0.2, 0.9], np.tile([2.0, 1.6, 0.2], (4, 1))) == pytest.approx(-2.0)


def test_a_falling_sweep_is_detected_and_rows_come_by_alpha(tmp_path):
    rng = np.random.default_rng(0)
    n = 40
    hi = _eval(tmp_path, "a0.9", rng.integers(0, 2, n), alpha=0.9)  # given first: rows still ascend
    lo = _eval(tmp_path, "a0", rng.integers(1, 4, n), alpha=0.0)
    mid = _eval(tmp_path, "a0.5", rng.integers(0, 3, n), alpha=0.5)
    doc = sweep_evals([hi, lo, mid], n_resamples=500)
    assert doc["alphas"] == [0.0, 0.5, 0.9] and doc["n"] == n
    assert [r["folder"] for r in doc["rows"]] == [str(lo), str(mid), str(hi)]
    for m in ("searches", "cost"):
        t = doc["trends"][m]
        assert t["page"]["p"] < 1e-3 and t["slope"] < 0 and t["slope_low"] <= t["slope"] <= t["slope_high"] < 0
        assert t["falls"]
    assert doc["falls"]
    r = doc["rows"][0]
    assert r["searches"]["low"] <= r["searches"]["mean"] <= r["searches"]["high"]
    assert r["recall"]["mean"] == 1.0 and r["f1"]["mean"] == 0.5  # f1 from the evaluation's own means
    assert sweep_evals([hi, lo, mid], n_resamples=500) == doc  # seeded: the same table twice
    table = sweep_markdown(doc)
    assert "| 0 | 100.0% |" in table and "| searches |" in table and "| cost |" in table
    assert "**falls**" in table


def test_a_flat_sweep_shows_no_trend(tmp_path):
    """Each question's three values are a rotation of (0, 1, 2): the ranks balance exactly."""
    cols = [[(i + k) % 3 for i in range(30)] for k in range(3)]
    folders = [_eval(tmp_path, f"p{k}", c) for k, c in enumerate(cols)]
    doc = sweep_evals(folders, [0.0, 0.5, 1.0], n_resamples=500)
    t = doc["trends"]["cost"]
    assert t["page"]["p"] > 0.3 and t["slope_low"] <= 0 <= t["slope_high"]
    assert not t["falls"] and not doc["falls"] and "**does not fall**" in sweep_markdown(doc)


def test_sweep_bad_input_is_named(tmp_path):
    a, b, c = (_eval(tmp_path, f"x{k}", [1, 2, 0], alpha=k / 2) for k in range(3))
    cases = [(([a, b], None), "at least three alphas"),
             (([a, b, c], [0.0, 0.0, 1.0]), "its own alpha"),
             (([a, b, c], [0.0, 1.0]), "2 alphas for 3 evaluations"),
             (([a, b, tmp_path / "nowhere"], None), "no evaluation"),
             (([a, b, _eval(tmp_path, "f1", [1, 2, 0], alpha=0.7, metric="f1")], None), "different metrics"),
             (([a, b, _eval(tmp_path, "nz", [1, 2, 0], alpha=0.8, normaliser={"low": 0, "high": 1})], None),
              "cost normalisers"),
             (([a, b, _eval(tmp_path, "noalpha", [1, 2, 0])], None), "give the alphas with --alphas"),
             (([a, b, _eval(tmp_path, "other", [1, 1, 1, 1, 1][3:], alpha=0.9)], None), None)]
    for (folders, alphas), msg in cases:
        if msg is None:  # a folder of other questions: the common ones are read (q00, q01)
            assert sweep_evals(folders, alphas, n_resamples=50)["n"] == 2
            continue
        with pytest.raises(DataError, match=msg):
            sweep_evals(folders, alphas)


def test_the_bootstrap_seed_is_the_run_seed_the_evaluations_recorded(tmp_path, capsys):
    from ltrr.cli import main

    rng = np.random.default_rng(1)
    searches = [rng.integers(0, 4, 30) for _ in range(3)]
    old = [_eval(tmp_path / "old", f"p{k}", s, alpha=k / 2) for k, s in enumerate(searches)]
    new = [_eval(tmp_path / "new", f"p{k}", s, alpha=k / 2, seed=7) for k, s in enumerate(searches)]
    assert sweep_evals(old, n_resamples=200)["seed"] == 0  # recorded none: 0, as before seeds were recorded
    doc = sweep_evals(new, n_resamples=200)
    same = sweep_evals(old, seed=7, n_resamples=200)  # the same values under --seed 7
    assert doc["seed"] == 7 and doc["trends"] == same["trends"]
    assert [r["cost"] for r in doc["rows"]] == [r["cost"] for r in same["rows"]]
    assert doc["rows"][1]["cost"] != sweep_evals(new, seed=8, n_resamples=200)["rows"][1]["cost"]  # the seed is used
    assert "resamples, seed 7)" in sweep_markdown(doc)
    mixed = [*new[:2], _eval(tmp_path / "mixed", "p2", searches[2], alpha=1.0, seed=8)]
    with pytest.raises(DataError, match=r"different run seeds \[7, 8\]; give the bootstrap's seed"):
        sweep_evals(mixed)
    assert sweep_evals(mixed, seed=3, n_resamples=50)["seed"] == 3
    assert main(["agent", "sweep", *map(str, mixed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different run seeds" in err[0]
    assert main(["agent", "sweep", *map(str, new), "--seed", "-1"]) == 2
    assert "--seed must be an integer >= 0, got -1" in capsys.readouterr().err


def test_sweep_and_compare_commands(tmp_path, capsys):
    from ltrr.cli import main

    folders = [str(_eval(tmp_path, f"a{k}", [3 - k] * 5 + [1] * 5, alpha=k / 4)) for k in range(3)]
    out_json = tmp_path / "sweep.json"
    assert main(["agent", "sweep", *folders, "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "Cost-weight sweep: 3 policies on 10 common test questions" in text
    assert json.loads(out_json.read_text())["alphas"] == [0.0, 0.25, 0.5]
    assert main(["agent", "sweep", *folders, "--alphas", "0,x,1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--alphas must be comma-separated numbers" in err[0]
    assert main(["agent", "sweep", *folders[:2]]) == 2
    assert "at least three alphas" in capsys.readouterr().err
    # compare: reward, outcome, searches and cost, paired
    doc = compare_evals(folders[0], folders[2])
    assert set(doc["rows"]) == {"reward", "recall", "searches", "cost"}
    assert doc["rows"]["cost"]["diff"] == pytest.approx(1.0) and doc["n"] == 10
    assert main(["agent", "compare", folders[0], folders[2]]) == 0
    assert "| cost | 2.0000 | 1.0000 | +1.0000 |" in capsys.readouterr().out


def test_examples_run_as_written():
    import doctest

    import ltrr.agent.sweep

    res = doctest.testmod(ltrr.agent.sweep)
    assert res.attempted > 0 and res.failed == 0
