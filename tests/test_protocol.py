"""The pre-registered design/test protocol: partition, design sample, power, corrected headroom."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from ltrr._errors import ConfigError, DataError
from ltrr.eval.protocol import (
    design_sample,
    design_test_partition,
    noise_corrected_headroom,
    power_analysis,
)


def _queries(n_groups=60, types=("a", "b", "c")):
    rows = []
    for g in range(n_groups):
        for j in range(2):
            rows.append({"qid": f"g{g}q{j}", "qtype": types[g % len(types)], "group": f"g{g}"})
    return pd.DataFrame(rows)


def test_partition_is_grouped_seeded_and_covers_every_type():
    q = _queries()
    p = design_test_partition(q, random_state=3)
    assert p.name == "design-test" and 0.65 <= p.n_train / len(q) <= 0.75
    assert set(p.train).isdisjoint(p.test) and set(p.train) | set(p.test) == set(q["qid"])
    group = q.set_index("qid")["group"]
    assert set(group[list(p.train)]).isdisjoint(set(group[list(p.test)]))
    assert set(q.set_index("qid").loc[list(p.test), "qtype"]) == {"a", "b", "c"}
    assert design_test_partition(q, random_state=3) == p
    assert design_test_partition(q, random_state=4).test != p.test


def test_partition_without_a_type_in_test_is_refused():
    from ltrr.eval.splits import balanced_split

    q = pd.concat([_queries(), pd.DataFrame([{"qid": "rare1", "qtype": "rare", "group": "r"}])], ignore_index=True)
    seed = next(s for s in range(50) if "rare1" not in balanced_split(q, test_size=0.3, random_state=s).test)
    with pytest.raises(DataError, match=rf"seed {seed}.*leaves the test part without query type\(s\) rare"):
        design_test_partition(q, random_state=seed)
    with pytest.raises(ConfigError, match=r"design_size must be a number in \(0, 1\), got 1.0"):
        design_test_partition(q, design_size=1.0)


def test_design_sample_is_stratified_and_only_design():
    q = _queries(90)
    p = design_test_partition(q, random_state=0)
    s = design_sample(q, p, n=30, random_state=1)
    assert len(s) == 30 and set(s) <= set(p.train)
    assert q.set_index("qid").loc[s, "qtype"].value_counts().to_dict() == {"a": 10, "b": 10, "c": 10}
    assert design_sample(q.sample(frac=1, random_state=2), p, n=30, random_state=1) == [x for x in q.sample(frac=1, random_state=2)["qid"] if x in set(s)]
    with pytest.raises(ConfigError, match="sample size must be an integer >= 1, got 0"):
        design_sample(q, p, n=0)


def test_power_analysis_is_the_normal_approximation():
    d = np.random.default_rng(0).normal(0.02, 0.3, size=400)
    r = power_analysis(d, 460)
    want = (norm.ppf(0.975) + norm.ppf(0.8)) * np.std(d, ddof=1) / np.sqrt(460)
    assert r["mde"] == pytest.approx(want) and r["mde_wilcoxon_worst"] > r["mde"]
    with pytest.raises(DataError, match="at least 2"):
        power_analysis(np.array([0.1]), 10)
    with pytest.raises(ConfigError, match="n_test"):
        power_analysis(d, 1)


def test_a_failed_query_moves_no_query_between_design_and_test():
    """The full protocol partitions every query, as the design-only preregistration does, and
    leaves the queries without complete labels out of their part afterwards: a failure in the
    test part moves no design query into it (it moved 6 of 140 before)."""
    from types import SimpleNamespace

    from ltrr.eval.headline import _complete_partition

    queries = pd.DataFrame({"qid": [f"q{i:03d}" for i in range(200)], "qtype": ["a", "b"] * 100})
    said = []
    run = SimpleNamespace(dataset=SimpleNamespace(queries=queries), log=said.append)
    full = design_test_partition(queries, random_state=0)
    failed = {full.test[0], full.train[0]}
    U = pd.DataFrame({"x": 1.0}, index=[q for q in queries["qid"] if q not in failed])
    kept, part, n_test = _complete_partition(run, U, design_size=0.7, seed=0)
    assert n_test == full.n_test  # the planned size, which the preregistration states
    assert part.train == tuple(q for q in full.train if q not in failed)
    assert part.test == tuple(q for q in full.test if q not in failed)
    assert list(kept["qid"]) == list(U.index) and said == [
        "[protocol] left out for incomplete labels (failed items): 1 design and 1 test queries; "
        "the partition is the one over every query"]
    every, same, _ = _complete_partition(run, pd.DataFrame({"x": 1.0}, index=queries["qid"]), design_size=0.7, seed=0)
    assert (same.train, same.test) == (full.train, full.test) and len(said) == 1  # nothing failed: nothing said
    with pytest.raises(DataError, match="no test query has complete labels"):
        _complete_partition(run, U.loc[list(full.train[1:])], design_size=0.7, seed=0)


def test_noise_corrected_headroom_chooses_on_a_and_scores_on_b():
    idx = ["q1", "q2", "q3", "q4"]
    A = pd.DataFrame({"x": [1, 0, 0, 1], "y": [0, 1, 0, 0]}, index=idx, dtype=float)
    B = pd.DataFrame({"x": [1, 1, 0, 0], "y": [0, 0, 1, 1]}, index=idx, dtype=float)
    r = noise_corrected_headroom(A, B, "x")
    # best single x on B: 0.5; raw oracle on B: 1.0; choose on A: x, y, x (tie -> x), x -> B: 1, 0, 0, 0
    assert r["best_single"] == 0.5 and r["oracle_raw"] == 1.0 and r["oracle_corrected"] == 0.25
    assert r["headroom_raw"] == 0.5 and r["headroom_corrected"] == -0.25
    with pytest.raises(DataError, match="not an arm"):
        noise_corrected_headroom(A, B, "z")
    holey = A.copy()
    holey.loc["q1", "y"] = np.nan  # argmax took a NaN for the best arm
    with pytest.raises(DataError, match="1 queries have a missing utility"):
        noise_corrected_headroom(holey, B, "x")
    with pytest.raises(DataError, match="replicate B have a missing utility"):
        noise_corrected_headroom(A, holey, "x")


def test_protocol_candidates_and_bad_router_specs():
    from ltrr._errors import ConfigError
    from ltrr.eval.headline import _candidates

    c = _candidates(["lambdamart-listwise"], ["norm_gain", "likelihood_norm_gain"], None, "paper",
                    ["knn:n_neighbors=50", "maxsim"])
    assert [x["router"] for x in c] == ["ltrr:lambdamart-listwise", "ltrr:lambdamart-listwise[likelihood_norm_gain]",
                                        "knn:n_neighbors=50", "maxsim"]
    assert c[2]["label"] == "utility" and c[2]["ranker"] is None
    assert [x["features"] for x in c[2:]] == ["query_embedding", "raw"]  # what each router reads (its tag)
    with pytest.raises(ConfigError, match="the oracle is no candidate"):
        _candidates([], [], None, "paper", ["oracle"])
    with pytest.raises(ConfigError, match="no candidate router"):
        _candidates([], ["norm_gain"], None, "paper", [])
    with pytest.raises(ConfigError, match="unknown router 'nope'"):
        _candidates([], [], None, "paper", ["nope:a=1"])


def test_growth_in_rounds_moves_no_earlier_query_between_parts():
    q1 = _queries(60).assign(build_round=1)
    before = design_test_partition(q1.drop(columns="build_round"), random_state=5)
    assert design_test_partition(q1, random_state=5) == before  # one round: as it always was
    extra = _queries(120).assign(build_round=2)
    extra = extra[~extra["group"].isin(q1["group"])]  # new groups g60..g119
    joined = pd.DataFrame([{"qid": "late", "qtype": "a", "group": "g0", "build_round": 2},
                           {"qid": "late1", "qtype": "a", "group": "g1", "build_round": 2}])
    grown = pd.concat([q1, extra, joined], ignore_index=True).sample(frac=1, random_state=0)
    p = design_test_partition(grown, random_state=5)
    assert set(p.test) & set(q1["qid"]) == set(before.test)
    assert set(p.train) & set(q1["qid"]) == set(before.train)
    # a later query of an earlier group goes where its group went
    for qid, g in (("late", "g0q0"), ("late1", "g1q0")):
        assert (qid in p.test) == (g in before.test)
    group = grown.set_index("qid")["group"]
    assert set(group[list(p.train)]).isdisjoint(set(group[list(p.test)]))
    assert 0.65 <= p.n_train / len(grown) <= 0.75
    # the design sample comes from the first round only, so growth keeps it
    assert design_sample(grown, p, n=30, random_state=1) == [
        x for x in grown["qid"] if x in set(design_sample(q1, before, n=30, random_state=1))]
