"""Every plot writes a non-empty PNG that matplotlib reads back, headless and without pyplot."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import DataError
from ltrr.eval import evaluate_splits, make_splits
from ltrr.eval.plots import (
    headroom_axis,
    plot_cost_utility,
    plot_feature_importance,
    plot_headroom,
    plot_per_type,
    plot_utility,
)

ARMS = ["none", "bm25", "dense"]
COSTS = {"none": 0.0, "bm25": 1.0, "dense": 3.0}


def _three_types(rng, none):
    """30 groups of 2 queries of the types who, when, why; ``none(rng)`` draws the closed-book
    arm's utility, then bm25's and dense's are uniform (drawn in that order from ``rng``)."""
    qrows, urows = [], []
    for g in range(30):
        qtype = ["who", "when", "why"][g % 3]
        for j in range(2):
            qid = f"g{g}q{j}"
            qrows.append({"qid": qid, "qtype": qtype, "group": f"g{g}"})
            urows.append({"qid": qid, "none": none(rng), "bm25": rng.random(), "dense": rng.random()})
    return pd.DataFrame(qrows), pd.DataFrame(urows).set_index("qid")


@pytest.fixture(scope="module")
def evaluation():
    rng = np.random.default_rng(3)
    queries, U = _three_types(rng, lambda r: r.integers(0, 2) * 0.5)
    splits = make_splits(queries, ["balanced", "kfold"], n_folds=3, random_state=0)
    preds = {
        s.name: {
            "oracle": U.loc[list(s.test)].idxmax(axis=1),
            "random-scores": pd.DataFrame(
                rng.random((s.n_test, 3)), index=list(s.test), columns=ARMS
            ),
        }
        for s in splits
    }
    return evaluate_splits(
        U,
        splits,
        preds,
        costs=COSTS,
        no_retrieval="none",
        queries=queries,
        noise_floor=0.15,
        n_resamples=100,
    )


def _read_png(path):
    import matplotlib.image as mpimg

    assert path.is_file() and path.stat().st_size > 1000
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] >= 200 and img.shape[1] >= 300 and img.shape[2] in (3, 4)
    # Not a blank canvas: the plot drew something.
    assert img[..., :3].std() > 0.01
    return img


def test_plot_utility(evaluation, tmp_path):
    p = plot_utility(evaluation.table, tmp_path / "utility.png")
    assert p == tmp_path / "utility.png"
    _read_png(p)


def test_plot_headroom_with_noise_floor(evaluation, tmp_path):
    _read_png(plot_headroom(evaluation.table, tmp_path / "headroom.png"))
    _read_png(
        plot_headroom(
            evaluation.table, tmp_path / "headroom-kfold.png", splits=["kfold"], noise_floor=0.3
        )
    )
    with pytest.raises(DataError, match="no results for split"):
        plot_headroom(evaluation.table, tmp_path / "x.png", splits=["missing"])


def test_a_share_of_a_tiny_headroom_is_cut_at_the_axis_edge_and_labelled(evaluation, tmp_path, monkeypatch):
    """A split whose oracle barely beats the best arm gives shares of thousands of percent (the
    demo's cloze split: headroom 0.004, -3350%); the y range stays readable for the other bars,
    the cut bar's value is printed at the edge, and each split's legend gives its headroom."""
    import ltrr.eval.plots as plots

    assert headroom_axis(np.array([np.nan])) == (-5.0, 105.0)
    assert headroom_axis(np.array([-20.0, 35.0])) == (-26.0, 106.0)
    assert headroom_axis(np.array([-3350.0, 250.0])) == (-200.0, 200.0)
    table = evaluation.table.copy()
    tiny = table["split"] == "kfold"
    table.loc[tiny, ["headroom_captured", "headroom_ci_low", "headroom_ci_high"]] = [-33.5, -78.0, -12.4]
    table.loc[tiny, "headroom"] = 0.004
    seen = {}
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: seen.setdefault("fig", fig) and save(fig, path))
    _read_png(plot_headroom(table, tmp_path / "tiny.png"))
    ax = seen["fig"].axes[0]
    assert ax.get_ylim()[0] == -200.0 and 100 < ax.get_ylim()[1] <= 200.0
    cut = [t.get_text() for t in ax.texts]
    assert cut.count("-3350%") == (tiny & table["headroom_captured"].notna()).sum() > 0
    assert any("kfold (headroom 0.004)" == t.get_text() for t in ax.get_legend().get_texts())


def test_plot_per_type(evaluation, tmp_path):
    _read_png(plot_per_type(evaluation.by_type, tmp_path / "types.png", split="kfold"))
    _read_png(
        plot_per_type(evaluation.by_type, tmp_path / "types-h.png", value="headroom_captured")
    )
    with pytest.raises(DataError, match="no column 'recall'"):
        plot_per_type(evaluation.by_type, tmp_path / "x.png", value="recall")


def test_plot_feature_importance(tmp_path):
    imp = {f"feature_{i}": float(i) for i in range(30)}
    _read_png(plot_feature_importance(imp, tmp_path / "imp.png", top=10))
    with pytest.raises(DataError, match="no feature importances"):
        plot_feature_importance({}, tmp_path / "x.png")


def test_plot_cost_utility(evaluation, tmp_path):
    _read_png(plot_cost_utility(evaluation.table, evaluation.arms, tmp_path / "cost.png"))
    _read_png(
        plot_cost_utility(evaluation.table, evaluation.arms, tmp_path / "cost-k.png", split="kfold")
    )


def test_plots_run_headless_without_pyplot(tmp_path):
    # A GUI backend and no display: drawing must still work, and neither importing ltrr.eval
    # nor plotting may load pyplot (which would switch a notebook's backend).
    code = textwrap.dedent(f"""
        import sys
        import ltrr.eval
        assert "matplotlib" not in sys.modules, "ltrr.eval imported matplotlib eagerly"
        from ltrr.eval.plots import plot_feature_importance
        p = plot_feature_importance({{"a": 1.0, "b": 2.0}}, r"{tmp_path / "h.png"}")
        assert p.stat().st_size > 0
        assert "matplotlib.pyplot" not in sys.modules
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MPLBACKEND"] = "TkAgg"
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def _types_evaluation(names):
    queries, U = _three_types(np.random.default_rng(5), lambda r: r.random())
    splits = make_splits(queries, names, n_folds=3, random_state=0)
    preds = {s.name: {"oracle": U.loc[list(s.test)].idxmax(axis=1)} for s in splits}
    return evaluate_splits(U, splits, preds, costs=COSTS, no_retrieval="none", queries=queries,
                           n_resamples=50)


def test_the_per_type_plot_defaults_to_the_first_table_split_of_several_types(tmp_path, monkeypatch):
    """It took the first row of by_type: a k-fold fold (in no table) or a one-type
    leave-one-type-out split. Now the first split of the tables' order with more than one type
    (the pooled k-fold row), named in the title; by_type files without the family column too."""
    import ltrr.eval.plots as plots

    ev = _types_evaluation(["leave-one-type-out", "kfold"])
    assert ev.by_type["split"].iloc[0] == "leave-one-type-out:when"  # what the old default drew
    seen = {}
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: seen.setdefault("fig", fig) and save(fig, path))
    _read_png(plot_per_type(ev.by_type, tmp_path / "types.png"))
    assert seen["fig"].axes[0].get_title() == "Mean utility per query type (split kfold, 60 test queries)"
    from ltrr.eval.plots import type_split

    assert type_split(ev.by_type) == type_split(ev.by_type, ev.table) == "kfold"
    assert type_split(ev.by_type.drop(columns="family")) == "kfold"
    only_folds = _types_evaluation(["kfold"])
    assert only_folds.by_type["split"].iloc[0] == "kfold:0"
    assert type_split(only_folds.by_type) == "kfold"
    one_type = ev.by_type[ev.by_type["split"] == "leave-one-type-out:who"]
    assert type_split(one_type) == "leave-one-type-out:who"  # nothing better: still a plot


def test_the_per_type_headroom_plot_is_in_percent_and_na_below_the_minimum(tmp_path, monkeypatch):
    import ltrr.eval.plots as plots

    ev = _types_evaluation(["kfold"])
    bt = ev.by_type.copy()
    bt.loc[bt["qtype"] == "why", "n_headroom"] = 1
    seen = {}
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: seen.setdefault("fig", fig) and save(fig, path))
    _read_png(plot_per_type(bt, tmp_path / "types-h.png", value="headroom_captured", split="kfold"))
    texts = [t.get_text() for t in seen["fig"].axes[0].texts]
    assert texts.count("n/a") == 1 and all(t == "n/a" or t.endswith("%") for t in texts)
    assert "100%" in texts  # the oracle
