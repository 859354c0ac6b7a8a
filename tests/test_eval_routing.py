"""Routing metrics on hand-made utility matrices with known answers; reports."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from ltrr._errors import ConfigError, DataError
from ltrr.eval import (
    RESULT_COLUMNS,
    best_single_arm,
    bootstrap_ci,
    evaluate_router,
    evaluate_routers,
    evaluate_splits,
    make_splits,
    normalised_gains,
    per_query_outcomes,
    scores_from_long,
    utility_matrix,
)
from ltrr.eval.report import (
    BETTER,
    WORSE,
    headroom_table,
    per_type_table,
    pvalue_table,
    report_markdown,
    table_splits,
    utility_table,
    write_report,
)
from ltrr.labels import normalise_gains

ARMS = ["none", "bm25", "dense"]
COSTS = {"none": 0.0, "bm25": 1.0, "dense": 2.0}


@pytest.fixture
def U() -> pd.DataFrame:
    """6 queries x 3 arms. Means: none 0.25, bm25 0.583 (best single), dense 0.5; oracle 0.833.

    q4 is a tie (all arms equal); q5 has two gold-best arms; q2 is hurt by retrieval.
    """
    rows = {
        "q1": [0.0, 1.0, 0.5],
        "q2": [1.0, 0.0, 0.0],
        "q3": [0.0, 0.5, 1.0],
        "q4": [0.5, 0.5, 0.5],
        "q5": [0.0, 1.0, 1.0],
        "q6": [0.0, 0.5, 0.0],
    }
    return pd.DataFrame.from_dict(rows, orient="index", columns=ARMS).rename_axis("qid")


def _eval(U, out, **kw):
    kw.setdefault("train_U", U)
    kw.setdefault("costs", COSTS)
    kw.setdefault("no_retrieval", "none")
    kw.setdefault("n_resamples", 300)
    return evaluate_router(U, out, **kw).iloc[0]


def test_a_noise_scale_is_a_share_of_the_rows_own_headroom(U):
    """noise_scale (utility units) becomes each row's noise floor against its own headroom (0.25
    here), overriding a given share; without headroom it is NaN, not a division by zero."""
    r = _eval(U, U.idxmax(axis=1), noise_scale=0.05, noise_floor=0.9)
    assert r["noise_floor"] == pytest.approx(0.2)
    assert bool(r["above_noise_floor"])  # captured 100% > 20%
    flat = U.assign(bm25=U["none"], dense=U["none"])
    r = _eval(flat, flat.idxmax(axis=1), noise_scale=0.05)
    assert r["headroom"] == 0 and np.isnan(r["noise_floor"]) and not r["above_noise_floor"]


def test_each_split_gets_its_own_noise_floor():
    """Two splits with different headrooms: the same noise scale is a different share of each,
    and the note names only the split whose headroom it exceeds."""
    from ltrr.eval.report import report_notes

    queries, U = _dataset(40)
    splits = make_splits(queries, ["balanced", "leave-one-type-out"], random_state=0)
    ev = evaluate_splits(U, splits, _predict(queries, U, splits), costs=COSTS, no_retrieval="none",
                         queries=queries, noise_scale=0.2, n_resamples=50)
    first = ev.table.drop_duplicates("split").set_index("split")
    has = first["headroom"] > 1e-12
    assert np.allclose(first.loc[has, "noise_floor"], 0.2 / first.loc[has, "headroom"])
    assert first.loc[~has, "noise_floor"].isna().all() and (~has).sum() == 1  # the split without headroom
    assert ev.meta["noise_scale"] == 0.2
    assert sorted(first.loc[has, "noise_floor"].round(3)) == [0.4, 0.4, 1.2]  # balanced's headroom is 1/6
    notes = [n for n in report_notes(ev) if "noise floor exceeds" in n]
    assert len(notes) == 1 and "on balanced 120%:" in notes[0] and "leave-one-type-out" not in notes[0]


def test_oracle_router_captures_all_headroom(U):
    r = _eval(U, U.idxmax(axis=1), noise_floor=0.1)
    assert r["best_single_arm"] == "bm25"
    assert r["best_single_utility"] == pytest.approx(3.5 / 6)
    assert r["oracle_utility"] == pytest.approx(5 / 6)
    assert r["headroom"] == pytest.approx(0.25)
    assert r["mean_utility"] == pytest.approx(5 / 6)
    assert r["headroom_captured"] == pytest.approx(1.0)
    assert (r["improved"], r["degraded"], r["equal"]) == (2, 0, 4)
    assert r["p_at_1"] == 1.0
    assert r["n_informative"] == 5
    # oracle choices (first max): bm25, none, dense, none, bm25, bm25; retrieval helped on
    # q1, q3, q5, q6 only.
    assert r["necessity_accuracy"] == 1.0
    assert r["retrieval_rate"] == pytest.approx(4 / 6)
    assert r["mean_cost"] == pytest.approx(5 / 6)
    assert r["noise_floor"] == 0.1 and bool(r["above_noise_floor"])
    assert not r["has_scores"] and np.isnan(r["kendall_tau"]) and np.isnan(r["ndcg_at_k"])


def test_best_single_router_captures_nothing(U):
    r = _eval(U, {q: "bm25" for q in U.index})
    assert r["headroom_captured"] == pytest.approx(0.0)
    assert r["p_value"] == 1.0
    assert (r["improved"], r["degraded"], r["equal"]) == (0, 0, 6)
    # Retrieves everywhere; retrieval helped on 4 of the 5 informative queries (q4 ties: not
    # counted, as for P@1; it was counted wrong before, 4 / 6).
    assert r["necessity_accuracy"] == pytest.approx(4 / 5)
    # bm25 is gold-best on q1, q5, q6 of the 5 informative queries.
    assert r["p_at_1"] == pytest.approx(3 / 5)


def test_headroom_is_nan_when_the_oracle_equals_the_best_single_arm(U):
    flat = U.copy()
    flat["bm25"] = flat.max(axis=1)
    r = _eval(flat, flat.idxmax(axis=1))
    assert r["headroom"] == pytest.approx(0.0)
    assert np.isnan(r["headroom_captured"])
    assert not bool(r["above_noise_floor"])


def test_a_worse_router_has_negative_headroom(U):
    r = _eval(U, {q: "none" for q in U.index})
    assert r["headroom_captured"] == pytest.approx((0.25 - 3.5 / 6) / 0.25)
    assert r["retrieval_rate"] == 0.0
    assert r["mean_cost"] == 0.0


def test_ci_and_wilcoxon_match_the_per_query_vectors(U):
    choice = pd.Series(
        {"q1": "dense", "q2": "none", "q3": "dense", "q4": "bm25", "q5": "dense", "q6": "none"}
    )
    r = _eval(U, choice, random_state=9)
    vec = np.array([U.loc[q, a] for q, a in choice.items()])
    ci = bootstrap_ci(vec, random_state=9, n_resamples=300)
    assert (r["mean_utility"], r["ci_low"], r["ci_high"]) == tuple(ci)
    assert r["p_value"] == sps.wilcoxon(vec, U["bm25"].to_numpy()).pvalue
    assert r["ci_low"] <= r["mean_utility"] <= r["ci_high"]
    assert r["headroom_ci_low"] <= r["headroom_captured"] <= r["headroom_ci_high"]


def test_scores_give_ranking_metrics(U):
    perfect = _eval(U, U * 2.0 + 1.0)
    assert perfect["has_scores"]
    assert perfect["kendall_tau"] == pytest.approx(1.0)
    assert perfect["ndcg_at_k"] == pytest.approx(1.0)
    assert perfect["p_at_1"] == 1.0
    rev = -U
    worst = _eval(U, rev, k=3)
    informative = [q for q in U.index if q != "q4"]
    taus = [sps.kendalltau(U.loc[q], rev.loc[q]).statistic for q in informative]
    assert worst["kendall_tau"] == pytest.approx(np.mean(taus))
    assert worst["kendall_tau"] == pytest.approx(-1.0)


def test_best_single_arm_is_chosen_on_train(U):
    train = U.copy()
    train["dense"] += 0.5
    assert best_single_arm(train) == "dense"
    r = _eval(U, {q: "dense" for q in U.index}, train_U=train)
    assert r["best_single_arm"] == "dense"
    assert r["headroom_captured"] == pytest.approx(0.0)


def test_gold_ties_at_the_top_count_as_correct(U):
    out = per_query_outcomes(U, {q: "dense" for q in U.index}, best_arm="bm25", no_retrieval="none")
    assert out.loc["q5", "p_at_1"] == 1.0  # bm25 and dense both score 1.0 on q5
    assert np.isnan(out.loc["q4", "p_at_1"])  # a tie query has no ranking


def test_router_output_errors(U):
    with pytest.raises(
        DataError, match=r"router 'router': no choice for 1 test queries \(first 'q6'\)"
    ):
        _eval(U, {q: "bm25" for q in list(U.index)[:-1]})
    with pytest.raises(DataError, match="chose unknown arm"):
        _eval(U, {q: "splade" for q in U.index})
    with pytest.raises(DataError, match="NaN score for qid 'q1'"):
        _eval(U, U.mask(U.index.to_series().eq("q1").to_numpy()[:, None] & np.ones((6, 3), bool)))
    with pytest.raises(ConfigError, match="no-retrieval arm 'closed'"):
        _eval(U, U.idxmax(axis=1), no_retrieval="closed")
    with pytest.raises(ConfigError, match="arm costs lack arm"):
        _eval(U, U.idxmax(axis=1), costs={"none": 0.0})
    bad = U.copy()
    bad.loc["q2", "bm25"] = np.nan
    with pytest.raises(DataError, match="qid 'q2' has a missing utility"):
        _eval(bad, U.idxmax(axis=1), train_U=U)


def test_evaluate_routers_corrects_across_routers():
    rng = np.random.default_rng(0)
    n = 60
    U = pd.DataFrame(
        {
            "none": rng.integers(0, 2, n) * 0.5,
            "bm25": rng.integers(0, 3, n) / 2,
            "dense": rng.integers(0, 3, n) / 2,
        },
        index=pd.Index([f"q{i}" for i in range(n)], name="qid"),
    )
    routers = {
        "oracle": U.idxmax(axis=1),
        "never": {q: "none" for q in U.index},
        "noisy": pd.Series(rng.choice(ARMS, n), index=U.index),
    }
    res = evaluate_routers(
        routers, U, train_U=U, costs=COSTS, no_retrieval="none", n_resamples=200, split="s"
    )
    assert list(res.columns) == RESULT_COLUMNS
    assert res["router"].tolist() == ["oracle", "never", "noisy"]
    np.testing.assert_allclose(res["p_adjusted"], np.minimum(res["p_value"] * 3, 1.0))
    assert (res["correction"] == "bonferroni").all()
    assert res.set_index("router").loc["oracle", "significant"]
    holm = evaluate_routers(
        routers, U, train_U=U, costs=COSTS, no_retrieval="none", n_resamples=200, correction="holm"
    )
    assert (holm["p_adjusted"] <= res["p_adjusted"] + 1e-15).all()
    with pytest.raises(ConfigError, match="unknown p-value correction 'fdr'"):
        evaluate_routers(routers, U, train_U=U, costs=COSTS, no_retrieval="none", correction="fdr")


def test_utility_matrix_drops_failed_queries_and_gains_match_labels():
    labels = pd.DataFrame(
        {
            "qid": ["q1"] * 3 + ["q2"] * 3 + ["q3"] * 3,
            "arm": ARMS * 3,
            "utility": [0.2, 0.8, 0.5, 1.0, 0.0, 0.0, 0.1, np.nan, 0.3],
            "failed": [False] * 7 + [True, False],
        }
    )
    U = utility_matrix(labels)
    assert U.index.tolist() == ["q1", "q2"] and U.columns.tolist() == ARMS
    g = normalised_gains(U)
    for q in U.index:
        _, ref, _ = normalise_gains(U.loc[q].to_numpy(), U.loc[q, "none"])
        np.testing.assert_allclose(g.loc[q].to_numpy(), ref)
    with pytest.raises(DataError, match="missing column"):
        utility_matrix(labels.drop(columns="utility"))


def test_scores_from_long_pivots_and_rejects_duplicates():
    long = pd.DataFrame(
        {
            "qid": ["q1", "q1", "q2", "q2"],
            "arm": ["a", "b", "a", "b"],
            "score": [0.1, 0.9, 0.8, 0.2],
        }
    )
    wide = scores_from_long(long)
    assert wide.loc["q2"].tolist() == [0.8, 0.2]
    with pytest.raises(DataError, match=r"duplicate \(qid, arm\)"):
        scores_from_long(pd.concat([long, long.iloc[:1]]))


# ---- several splits, pooling, reports ---------------------------------------------------------


def _dataset(n_groups: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    qrows, urows = [], []
    for g in range(n_groups):
        for j in range(2):
            qid = f"g{g}q{j}"
            qtype = ["who", "when", "why"][g % 3]
            qrows.append(
                {"qid": qid, "question": "?", "answers": ["a"], "qtype": qtype, "group": f"g{g}"}
            )
            # bm25 is good for "who", dense for "when", nothing helps "why".
            base = rng.integers(0, 2) * 0.5
            urows.append(
                {
                    "qid": qid,
                    "none": base,
                    "bm25": min(1.0, base + (0.5 if qtype == "who" else 0.0)),
                    "dense": min(1.0, base + (0.5 if qtype == "when" else 0.0)),
                }
            )
    return pd.DataFrame(qrows), pd.DataFrame(urows).set_index("qid")


def _predict(queries, U, splits):
    qtype = queries.set_index("qid")["qtype"]
    rule = {"who": "bm25", "when": "dense", "why": "none"}
    preds = {}
    for s in splits:
        test = list(s.test)
        scores = pd.DataFrame(0.0, index=test, columns=ARMS)
        for q in test:
            scores.loc[q, rule[qtype[q]]] = 1.0
        preds[s.name] = {"type-rule": scores, "always-bm25": {q: "bm25" for q in test}}
    return preds


def test_evaluate_splits_pools_folds_and_breaks_down_by_type():
    queries, U = _dataset()
    splits = make_splits(
        queries, ["balanced", "leave-one-type-out", "kfold"], n_folds=4, random_state=0
    )
    ev = evaluate_splits(
        U,
        splits,
        _predict(queries, U, splits),
        costs=COSTS,
        no_retrieval="none",
        queries=queries,
        noise_floor=0.05,
        n_resamples=200,
    )
    t = ev.table
    assert set(t["split"]) == {s.name for s in splits} | {"kfold"}
    pooled = t[t["pooled"]].set_index("router")
    assert (pooled["n_test"] == len(U)).all()
    assert pooled.loc["type-rule", "headroom_captured"] == pytest.approx(1.0)
    assert pooled.loc["type-rule", "necessity_accuracy"] == pytest.approx(1.0)
    assert len(ev.per_query[ev.per_query["split"] == "kfold"]) == 2 * len(U)
    # Bonferroni over the two routers of each split.
    np.testing.assert_allclose(t["p_adjusted"], np.minimum(2 * t["p_value"], 1.0))
    bt = ev.by_type[(ev.by_type["split"] == "kfold") & (ev.by_type["router"] == "type-rule")]
    assert set(bt["qtype"]) == {"who", "when", "why"}
    assert (bt["mean_utility"] == bt["oracle_utility"]).all()
    assert set(ev.arms["arm"]) == set(ARMS)
    # Folds appear only through their pooled column; types in sorted order.
    assert table_splits(t) == [
        "balanced",
        "leave-one-type-out:when",
        "leave-one-type-out:who",
        "leave-one-type-out:why",
        "kfold",
    ]
    with pytest.raises(DataError, match="no router predictions for split 'balanced'"):
        evaluate_splits(U, splits, {}, costs=COSTS, no_retrieval="none")


def test_a_significant_test_whose_ranks_and_mean_disagree_is_marked_apart():
    """▲ / ▼ say significantly better / worse: only when the Wilcoxon's signed ranks and the mean
    difference take the same side. 30 small gains and 3 large losses reject (p = 0.00027) for
    the router's side while its mean is lower: ◇, not ▼ (and not ▲)."""
    from ltrr.eval.report import SPLIT, _mark

    row = {"significant": True, "mean_utility": 0.4636, "best_single_utility": 0.5455, "direction": 1}
    assert _mark(row) == f" {SPLIT}"
    assert _mark({**row, "direction": -1}) == f" {WORSE}"
    assert _mark({**row, "mean_utility": 0.6}) == f" {BETTER}"
    assert _mark({**row, "mean_utility": 0.6, "direction": -1}) == f" {SPLIT}"
    assert _mark({**row, "significant": False}) == ""
    assert _mark({k: v for k, v in row.items() if k != "direction"}) == f" {WORSE}"  # a table from before


def test_reports_mark_significance_and_write_files(tmp_path):
    queries, U = _dataset(60)
    splits = make_splits(queries, ["balanced", "kfold"], n_folds=3, random_state=1)
    preds = _predict(queries, U, splits)
    for s in splits:
        preds[s.name]["never"] = {q: "none" for q in s.test}
    ev = evaluate_splits(
        U,
        splits,
        preds,
        costs=COSTS,
        no_retrieval="none",
        queries=queries,
        noise_floor=0.05,
        n_resamples=200,
    )
    t1 = utility_table(ev.table)
    assert list(t1.columns) == ["balanced", "kfold"]
    assert t1.index.tolist() == [
        "type-rule",
        "always-bm25",
        "never",
        "best single arm (train)",
        "oracle",
    ]
    assert t1.loc["type-rule", "kfold"].endswith(BETTER)
    assert t1.loc["never", "kfold"].endswith(WORSE)
    assert "[" in t1.loc["oracle", "kfold"]
    hr = headroom_table(ev.table)
    assert hr.loc["type-rule", "kfold"].startswith("100%")
    assert hr.loc["noise floor", "balanced"] == "5%"
    assert "raw" in pvalue_table(ev.table).loc["never", "balanced"]
    pt = per_type_table(ev.by_type, "mean_utility", split="kfold")
    assert set(pt.columns) == {"who", "when", "why"}
    md = report_markdown(ev)
    assert "## Downstream utility" in md and "## Per query type" in md
    assert "kfold:0" not in md and "nan" not in md
    paths = write_report(ev, tmp_path / "reports")
    for name in (
        "eval.md",
        "results.csv",
        "results.json",
        "table1.csv",
        "headroom.csv",
        "pvalues.csv",
        "by_type.csv",
        "per_query.parquet",
    ):
        assert paths[name].is_file() and paths[name].stat().st_size > 0
    doc = json.loads(paths["results.json"].read_text())
    assert doc["meta"]["correction"] == "bonferroni"
    assert len(doc["results"]) == len(ev.table)
    assert pd.read_csv(paths["results.csv"]).shape == ev.table.shape
    assert not list((tmp_path / "reports").glob("*.tmp"))


def test_no_headroom_and_a_noise_floor_above_it_are_said_in_words(tmp_path):
    """A split where closed-book is best on every query: words in the tables, notes and JSON,
    never ``nan``; a noise floor above 100% gets its explanation."""
    from ltrr.eval.report import headroom_table, report_notes, write_report

    queries, U = _dataset(30)
    U["bm25"] = U["dense"] = U["none"]  # every arm ties: closed-book is as good as retrieval
    splits = make_splits(queries, ["balanced"], random_state=0)
    ev = evaluate_splits(U, splits, _predict(queries, U, splits), costs=COSTS, no_retrieval="none",
                         queries=queries, noise_floor=2.0, n_resamples=50)
    ev.meta["warnings"] = ["ltrr:svm-pointwise: liblinear did not converge in 1000 iterations on split balanced"]
    hr = headroom_table(ev.table, no_retrieval="none")
    assert hr.loc["type-rule", "balanced"] == "no headroom"
    assert "no headroom on this split: every arm ties or" in hr.loc["oracle headroom (utility)", "balanced"]
    notes = report_notes(ev)
    assert any(n.startswith("no headroom on this split") for n in notes)
    assert any("noise floor exceeds the headroom on balanced 200%" in n for n in notes)
    assert "warning: ltrr:svm-pointwise: liblinear did not converge in 1000 iterations on split balanced" in notes
    paths = write_report(ev, tmp_path)
    md = paths["eval.md"].read_text()
    assert "nan" not in md.lower() and "## Notes" in md
    csv = pd.read_csv(paths["headroom.csv"], index_col=0, keep_default_na=False)
    assert csv.loc["type-rule", "balanced"] == "no headroom"


def test_convergence_warnings_become_report_lines_and_others_pass_through():
    import warnings

    from ltrr.rankers import rankers
    from ltrr.rankers.checks import make_ranking_data
    from ltrr.rankers.convergence import convergence_notes as _convergence_notes
    from ltrr.rankers.convergence import (
        recorded_convergence_warnings as _recorded_convergence_warnings,
    )
    from ltrr.routers.ltr import LTRRouter

    X, y, qid = make_ranking_data(n_queries=30, random_state=0)
    router = LTRRouter(ranker="svmrank-pairwise")
    router.ranker_ = rankers.get("svmrank-pairwise")(max_iter=1, random_state=0)
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        with _recorded_convergence_warnings() as caught:
            router.ranker_.fit(X, y, qid=qid)
            warnings.warn("something else", UserWarning, stacklevel=1)
    assert _convergence_notes(caught, router) == ["liblinear did not converge in 1 iterations"]
    assert [str(w.message) for w in outer] == ["something else"]  # not swallowed


def test_the_noise_source_is_said_in_words():
    from ltrr.pipeline.evaluate import noise_source_text

    assert noise_source_text("every arm under short_answer_b@1") == (
        "every arm answered again under a reworded prompt, short_answer_b@1")
    assert noise_source_text("bm25") == "the bm25 arm's passages in another order"
    assert noise_source_text("") == ""


# ---- the report's fixes: necessity on untied queries, per-type counts, m, CI n/a, arms -------


def test_necessity_accuracy_is_over_the_untied_queries_like_p_at_1():
    """8 of 10 queries tie (every arm 0.5): retrieving cannot help there, so they say nothing
    about necessity. Over all queries a router that never retrieves scored 0.8 and one that
    always retrieves 0.2, the reverse of what they did on the two queries where it mattered."""
    U = pd.DataFrame({"none": [0.5] * 8 + [0.0, 0.0], "bm25": [0.5] * 8 + [1.0, 1.0]},
                     index=pd.Index([f"q{i}" for i in range(10)], name="qid"))
    never = _eval(U, {q: "none" for q in U.index}, train_U=U, costs=None)
    always = _eval(U, {q: "bm25" for q in U.index}, train_U=U, costs=None)
    assert never["n_informative"] == 2
    assert never["necessity_accuracy"] == 0.0 and never["p_at_1"] == 0.0
    assert always["necessity_accuracy"] == 1.0 and always["p_at_1"] == 1.0
    flat = U.assign(bm25=U["none"])  # no informative query: no accuracy, not a made-up one
    assert np.isnan(_eval(flat, {q: "bm25" for q in U.index}, train_U=flat, costs=None)["necessity_accuracy"])


def _types_eval(**kw):
    queries, U = _dataset(40)
    splits = make_splits(queries, ["leave-one-type-out", "kfold"], n_folds=4, random_state=0)
    return evaluate_splits(U, splits, _predict(queries, U, splits), costs=COSTS, no_retrieval="none",
                           queries=queries, n_resamples=100, **kw)


def test_per_type_headroom_is_in_percent_with_its_queries_and_na_below_the_minimum():
    """The per-type headroom table printed shares (0.313, -17.000) beside the main table's
    percentages, with no count: a cell could rest on one query. Now: percent, each split's
    row of test queries (with headroom), and n/a under MIN_TYPE_HEADROOM queries with headroom."""
    ev = _types_eval()
    md = report_markdown(ev)
    part = md[md.index("## Per query type: headroom captured"):]
    assert "| kfold | test queries (with headroom) | 26 (26) | 28 (0) | 26 (0) |" in part
    assert "| kfold | type-rule | 100% | n/a | n/a |" in part
    assert "1.000" not in part and "fewer than 5 of them" in part
    from ltrr.eval.report import MIN_TYPE_HEADROOM, per_type_headroom_table

    bt = ev.by_type.set_index(["split", "router", "qtype"])
    # kfold: "when" queries all have headroom (dense beats the best arm bm25), the others none
    assert bt.loc[("kfold", "type-rule", "when"), ["n", "n_headroom"]].tolist() == [26, 26]
    assert bt.loc[("kfold", "type-rule", "who"), ["n", "n_headroom"]].tolist() == [28, 0]
    t = per_type_headroom_table(ev.by_type, ["leave-one-type-out:when", "kfold"])
    assert t.loc[("kfold", "test queries (with headroom)")].tolist() == ["26 (26)", "28 (0)", "26 (0)"]
    assert t.loc[("kfold", "type-rule")].tolist() == ["100%", "n/a", "n/a"]
    assert t.loc[("kfold", "always-bm25"), "when"] == "0%"
    # one query with headroom: a share of -1700% printed as a number before, n/a now
    few = ev.by_type.copy()
    sel = (few["split"] == "kfold") & (few["qtype"] == "when")
    few.loc[sel, "n_headroom"] = MIN_TYPE_HEADROOM - 1
    few.loc[sel & (few["router"] == "always-bm25"), "headroom_captured"] = -17.0
    t = per_type_headroom_table(few, ["kfold"])
    assert t.loc[("kfold", "always-bm25"), "when"] == "n/a"
    assert t.loc[("kfold", "test queries (with headroom)"), "when"] == "26 (4)"


def test_pooled_arms_mark_the_best_single_arm_every_fold_chose_and_give_the_share():
    """arms.csv's pooled rows said best_single False for every arm, so the cost-utility plot
    ringed none; now True where every fold chose the arm, with each arm's share of the folds."""
    ev = _types_eval()
    pooled = ev.arms[ev.arms["split"] == "kfold"].set_index("arm")
    folds = ev.arms[ev.arms["split"].str.startswith("kfold:")]
    assert set(folds.loc[folds["best_single"], "arm"]) == {"bm25"}  # every fold chose bm25
    assert pooled["best_single"].to_dict() == {"none": False, "bm25": True, "dense": False}
    assert pooled["best_single_share"].to_dict() == {"none": 0.0, "bm25": 1.0, "dense": 0.0}
    one = ev.arms[ev.arms["split"] == "leave-one-type-out:who"].set_index("arm")
    assert one["best_single_share"].to_dict() == {"none": 0.0, "bm25": 0.0, "dense": 1.0}
    # folds that disagree: no arm ringed, the shares say how they split
    U = pd.DataFrame({"none": [0.0] * 4, "bm25": [1.0, 1.0, 0.0, 0.0], "dense": [0.0, 0.0, 1.0, 1.0]},
                     index=pd.Index(["a", "b", "c", "d"], name="qid"))
    from ltrr.eval.splits import Split

    splits = [Split("kfold:0", "kfold", ("a", "b"), ("c", "d")), Split("kfold:1", "kfold", ("c", "d"), ("a", "b"))]
    preds = {s.name: {"never": {q: "none" for q in s.test}} for s in splits}
    arms = evaluate_splits(U, splits, preds, costs=COSTS, no_retrieval="none", n_resamples=20).arms
    pooled = arms[arms["split"] == "kfold"].set_index("arm")
    assert not pooled["best_single"].any()
    assert pooled["best_single_share"].to_dict() == {"none": 0.0, "bm25": 0.5, "dense": 0.5}


def test_the_legend_states_the_correction_family_size_m_and_the_holm_option():
    ev = _types_eval()
    md = report_markdown(ev)
    assert "Bonferroni correction over the m = 2 routers of each split, baselines included" in md
    assert '`[eval] correction = "holm"`' in md
    holm = report_markdown(_types_eval(correction="holm"))
    assert "Holm's step-down correction over the m = 2 routers of each split" in holm
    from ltrr.eval.report import correction_text

    t = ev.table.copy()
    t.loc[(t["split"] == "kfold") & (t["router"] == "always-bm25"), "p_value"] = np.nan  # a test not run
    assert "m = 1 to 2 routers" in correction_text(t, "bonferroni")


def test_a_missing_headroom_ci_says_so_and_the_queries_with_headroom_are_counted():
    """format_ci printed the bare estimate when the bootstrap gave no interval (more than half of
    its resamples without headroom), as if it had none to give; now 'CI n/a', and the headroom
    table counts the test queries with headroom."""
    from ltrr.eval.report import format_ci

    assert format_ci(0.3, float("nan"), float("nan"), percent=True) == "30% (CI n/a)"
    assert format_ci(0.3, float("nan"), float("nan")) == "0.300 (CI n/a)"
    assert format_ci(float("nan"), float("nan"), float("nan")) == "n/a"
    ev = _types_eval()
    t = ev.table.copy()
    sel = (t["split"] == "kfold") & (t["router"] == "type-rule")
    t.loc[sel, ["headroom_ci_low", "headroom_ci_high"]] = np.nan
    hr = headroom_table(t)
    assert hr.loc["type-rule", "kfold"] == "100% (CI n/a)"
    assert hr.loc["test queries with headroom"].tolist() == ["26 of 26", "28 of 28", "0 of 26", "26 of 80"]
    assert hr.loc["noise floor", "kfold"] == "n/a"  # a scale, not an estimate with a CI
    first = ev.table.drop_duplicates("split").set_index("split")
    assert first["n_headroom"].to_dict()["kfold"] == 26
    assert "CI n/a where more than half of the bootstrap resamples" in report_markdown(ev)
    old = headroom_table(t.drop(columns="n_headroom"))  # a results.csv from before the column
    assert "test queries with headroom" not in old.index


def test_a_router_whose_scores_always_tie_and_routers_that_choose_alike_are_said():
    """A train-free router whose feature is constant within every query (VarSim on one passage
    per arm) chooses by the tie-break alone; two routers with the same choices are one router.
    Both are found from what they predicted and said under the tables; a router that ties on one
    split only, or gives choices, is not listed."""
    from ltrr.eval.report import report_notes
    from ltrr.eval.routing import same_choice_groups, tie_only_routers

    queries, U = _dataset(30)
    splits = make_splits(queries, ["balanced", "leave-one-type-out"], random_state=0)
    preds = _predict(queries, U, splits)
    first = next(iter(preds))
    for name, p in preds.items():
        flat = pd.DataFrame(0.0, index=p["type-rule"].index, columns=ARMS).assign(none=-np.inf)
        p["varsim"] = flat
        p["copy"] = p["type-rule"] * 2.0  # other scores, the same choices
        # ties on the first split only: not listed
        p["sometimes"] = flat if name == first else p["type-rule"]
    assert tie_only_routers(preds) == ["varsim"]
    ev = evaluate_splits(U, splits, preds, costs=COSTS, no_retrieval="none", queries=queries, n_resamples=50)
    assert ev.meta["tie_only"] == ["varsim"]
    assert ev.meta["same_choices"] == [["type-rule", "copy"]]
    assert same_choice_groups(ev.per_query) == [["type-rule", "copy"], ["always-bm25", "varsim"]]
    notes = report_notes(ev)
    tie = [n for n in notes if n.startswith("varsim scores every arm")]
    assert len(tie) == 1 and "(bm25 on every query)" in tie[0]
    assert "type-rule and copy choose the same arm on every test query of every split: their rows are one router's." in notes
    assert not any(n.startswith(("sometimes", "always-bm25")) for n in notes)
