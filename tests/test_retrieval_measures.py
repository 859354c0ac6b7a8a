"""ir_measures tables of ltrr's runs: agreement with pytrec_eval and with a hand count of hits."""

from __future__ import annotations

import pandas as pd
import pytest
from _irtiny import config_text, write_dataset

from ltrr._errors import ConfigError, DataError
from ltrr.config import load_config
from ltrr.data.io import load_dataset
from ltrr.data.trec import read_trec_run, write_trec_run
from ltrr.eval.retrieval import (
    expand_measures,
    measure_tables,
    parse_measures,
    per_query_measures,
    routed_results,
    summary_table,
)
from ltrr.retrieval import Pool


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("irm")
    ds = load_dataset(write_dataset(root / "ds"))
    (root / "c.toml").write_text(config_text(root / "ds", root / "run"))
    pool = Pool.from_run_config(load_config(root / "c.toml"))
    pool.build(ds.corpus, root / "idx")
    return ds, pool.load(root / "idx").search(ds.queries), root


def test_pytrec_eval_agrees_with_ir_measures_on_ltrr_runs(runs):
    import pytrec_eval

    ds, results, root = runs
    names = ["nDCG@10", "R@5", "R@1", "RR", "P@1"]
    trec = {"nDCG@10": "ndcg_cut_10", "R@5": "recall_5", "R@1": "recall_1", "RR": "recip_rank", "P@1": "P_1"}
    per = per_query_measures(results, ds.qrels, names, queries=ds.queries, arms=["bm25", "bm25+stoch", "dense", "none"])
    qrels = {}
    for q, d, r in zip(ds.qrels["qid"], ds.qrels["docid"], ds.qrels["relevance"], strict=True):
        qrels.setdefault(q, {})[d] = int(r)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.1,5", "recip_rank", "P.1"})
    for arm in ("bm25", "bm25+stoch", "dense"):
        # through the written TREC file, as a user would run trec_eval on it
        run_df = read_trec_run(write_trec_run(results[results["arm"] == arm], root / f"{arm}.trec"))
        run = {}
        for q, d, s in zip(run_df["qid"], run_df["docid"], run_df["score"], strict=True):
            run.setdefault(q, {})[d] = float(s)
        ref = evaluator.evaluate(run)
        mine = per[per["arm"] == arm].set_index("qid")
        assert len(mine) == 60  # the 6 unanswerable queries have no qrels and are left out
        for qid, row in mine.iterrows():
            for n in names:
                assert row[n] == pytest.approx(ref.get(qid, {}).get(trec[n], 0.0), abs=1e-12), (arm, qid, n)
    assert (per.loc[per["arm"] == "none", names] == 0).all().all()  # no passages: 0, as trec_eval -c


def test_recall_agrees_with_a_hand_count_of_hits(runs):
    ds, results, _ = runs
    tables = measure_tables(results, ds.queries, ds.qrels, ["R@5", "R@1", "Success@5"])
    gold = dict(zip(ds.qrels["qid"], ds.qrels["docid"], strict=True))
    judged = ds.queries[ds.queries["qid"].isin(gold)]
    for k in (5, 1):
        top = results[results["rank"] <= k]
        hit = {(q, a) for q, a, d in zip(top["qid"], top["arm"], top["docid"], strict=True) if gold.get(q) == d}
        for arm in ("bm25", "bm25+stoch", "dense"):
            for qtype, g in judged.groupby("qtype"):
                share = sum((q, arm) in hit for q in g["qid"]) / len(g)
                assert tables[f"R@{k}"].loc[qtype, arm] == pytest.approx(share, abs=1e-15)
            assert tables[f"R@{k}"].loc["all", arm] == pytest.approx(sum((q, arm) in hit for q in judged["qid"]) / len(judged))
    # one relevant document per query: recall is success
    pd.testing.assert_frame_equal(tables["R@5"], tables["Success@5"])
    assert "noanswer" not in tables["R@5"].index


def test_routed_run_is_the_chosen_arms_rows(runs):
    ds, results, _ = runs
    qids = ds.queries["qid"].tolist()
    choice = pd.Series(["bm25" if i % 2 else "none" for i in range(len(qids))], index=qids)
    routed = routed_results(results, choice, name="routed")
    assert set(routed["routed_arm"]) == {"bm25"} and set(routed["arm"]) == {"routed"}
    assert set(routed["qid"]) == {q for i, q in enumerate(qids) if i % 2}
    table = summary_table(pd.concat([results, routed]), ds.queries, ds.qrels, ["RR"], arms=["bm25", "routed"])
    per = per_query_measures(results, ds.qrels, ["RR"], queries=ds.queries, arms=["bm25"]).set_index("qid")["RR"]
    odd = [q for i, q in enumerate(qids) if i % 2 and q in per.index]
    assert table.loc["routed", "RR"] == pytest.approx(per[odd].sum() / len(per))


def test_measure_names_and_errors(runs):
    ds, results, _ = runs
    assert expand_measures(None, [5, 1]) == ["nDCG@10", "R@1", "R@5", "RR", "P@1"]
    assert expand_measures(["R@{k}", "AP"], [3]) == ["R@3", "AP"]
    assert [str(m) for m in parse_measures(["nDCG@10", "RR"])] == ["nDCG@10", "RR"]
    with pytest.raises(ConfigError, match=r"unknown retrieval measure 'nDCG@ten'"):
        parse_measures(["nDCG@ten"])
    # a misspelt parameter (judged_only) was a KeyError traceback in the table's column names
    with pytest.raises(ConfigError, match=r"unknown retrieval measure 'nDCG\(judged=True\)@10'"):
        parse_measures(["nDCG(judged=True)@10"])
    # one measure under two spellings is one column, not a column twice
    assert [str(m) for m in parse_measures(["P@1", "P(rel=1)@1", "RR"])] == ["P@1", "RR"]
    assert list(per_query_measures(results, ds.qrels, ["P@1", "P(rel=1)@1"], queries=ds.queries).columns) == \
        ["qid", "arm", "P@1"]
    # ir_measures sums a count over queries; ltrr's tables are means, so a count is refused
    for count in ("NumRet", "NumRel", "NumQ"):
        with pytest.raises(ConfigError, match=f"retrieval measure '{count}' is a count that ir_measures sums"):
            parse_measures([count])
    with pytest.raises(DataError, match=r"none of the 1 qids of the qrels"):
        per_query_measures(results, pd.DataFrame({"qid": ["x"], "docid": ["d"], "relevance": [1]}), ["RR"],
                           queries=ds.queries)
