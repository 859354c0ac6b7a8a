"""The embedded demo benchmark: size, types, groups, answers verifiably in the corpus."""

from __future__ import annotations

import hashlib
import json
import re

import pandas as pd
import pytest

from ltrr._errors import ConfigError
from ltrr.data.demo import DEMO_TYPES, generate_demo


@pytest.fixture(scope="module")
def demo():
    return generate_demo(seed=13)


def test_size_types_groups(demo):
    q = demo["queries"]
    assert len(q) >= 1000
    assert set(q["qtype"]) == set(DEMO_TYPES)
    assert q["qtype"].value_counts().min() >= 150
    assert q["qid"].is_unique
    # groups keep related queries together: fewer groups than queries, no group spans qtypes
    # except where a FanOutQA question shares its evidence document with a generated one
    assert q["group"].nunique() < len(q)


def test_generated_answers_are_in_their_gold_document(demo):
    q, c, qr = demo["queries"], demo["corpus"], demo["qrels"]
    text = dict(zip(c["docid"], c["title"] + "\n" + c["text"], strict=True))
    gold = qr.groupby("qid")["docid"].apply(list)
    gen = q[q["source"] == "generated"]
    for qid, answers in zip(gen["qid"], gen["answers"], strict=True):
        assert any(a in text[d] for a in answers for d in gold[qid]), qid


def test_noanswer_answers_appear_in_no_document(demo):
    q, c = demo["queries"], demo["corpus"]
    blob = " " + " ".join(re.findall(r"[a-z0-9][a-z0-9'\-]*", " ".join(c["text"]).lower())) + " "
    noa = q[q["qtype"] == "noanswer"]
    assert len(noa) > 0
    assert not set(noa["qid"]) & set(demo["qrels"]["qid"])
    for answers in noa["answers"]:
        for a in answers:
            norm = " ".join(re.findall(r"[a-z0-9][a-z0-9'\-]*", a.lower()))
            assert f" {norm} " not in blob


# seed 13's tables, as every machine builds them: the shipped generations, the labels and the
# headline are keyed on these queries, so a build that differs anywhere is a defect
SEED13_SHA256 = "2246b94a276aa6954ba76ace9eb07940974bd32719f910363c782072b9d0f585"


def _digest(tables: dict) -> str:
    h = hashlib.sha256()
    for name in ("corpus", "queries", "qrels"):
        h.update(json.dumps(tables[name].to_dict("records"), sort_keys=True, default=str).encode())
    return h.hexdigest()


def test_seeded_identically_on_every_machine(demo):
    assert _digest(demo) == SEED13_SHA256


@pytest.mark.slow  # builds the demo again
def test_seed_sensitive(demo):
    other = generate_demo(seed=14)
    assert not other["queries"]["qid"].equals(demo["queries"]["qid"])


def test_keyword_queries_exclude_title_words(demo):
    q, c, qr = demo["queries"], demo["corpus"], demo["qrels"]
    title = dict(zip(c["docid"], c["title"], strict=True))
    gold = dict(zip(qr["qid"], qr["docid"], strict=True))
    kw = q[q["qtype"] == "keyword"]
    for qid, question in zip(kw["qid"], kw["question"], strict=True):
        tw = set(re.findall(r"[a-z0-9][a-z0-9'\-]*", title[gold[qid]].lower()))
        assert not set(question.split()) & tw


def test_multihop_bridge_questions(demo):
    """Two-hop bridge questions: the bridge document A names B; the answer (a year) is in B and
    nowhere in A; the question names neither B nor the answer; both are qrels; a multihop
    question sits in its answer document's group."""
    q, c, qr = demo["queries"], demo["corpus"], demo["qrels"]
    mh = q[q["qtype"] == "multihop"]
    assert len(mh) >= 150  # the corpus gives 180 at seed 13 (the builder asks for 300)
    text = dict(zip(c["docid"], c["text"], strict=True))
    title = dict(zip(c["docid"], c["title"], strict=True))
    gold = qr.groupby("qid")["docid"].apply(list)
    used_by_multihop: list[str] = []
    for qid, question, answers in zip(mh["qid"], mh["question"], mh["answers"], strict=True):
        a = qid.removeprefix("mul-")
        docs = gold[qid]
        assert len(docs) == 2 and a in docs
        (b,) = [d for d in docs if d != a]
        year = answers[0]
        assert re.fullmatch(r"\d{4}", year) and year in text[b] and year not in text[a]
        assert year not in question and "___" in question
        assert not re.search(rf"\b{re.escape(title[b])}\b", question)
        used_by_multihop += [a, b]
    assert len(used_by_multihop) == len(set(used_by_multihop))  # each document serves one question
    # a multihop question sits in its answer document's group, with that document's other queries
    for qid, group in zip(mh["qid"], mh["group"], strict=True):
        b = [d for d in gold[qid] if d != qid.removeprefix("mul-")][0]
        peers = set(qr.loc[qr["docid"] == b, "qid"]) - {qid}
        assert all(q.set_index("qid").loc[p, "group"] == group for p in peers)


@pytest.mark.slow  # builds the demo again
def test_multihop_changes_no_other_query(demo):
    """The other types are exactly those built without multihop, groups included."""
    q = demo["queries"]
    without = generate_demo(seed=13, n_multihop=0)["queries"]
    pd.testing.assert_frame_equal(q[q["qtype"] != "multihop"].reset_index(drop=True), without)


@pytest.mark.slow  # builds the demo again
def test_a_second_round_appends_and_changes_nothing_of_the_first(demo):
    grown = generate_demo(seed=13, grow_per_type=20, grow_noanswer=10)
    q, q1 = grown["queries"], demo["queries"]
    assert "build_round" not in q1.columns
    first = q[q["build_round"] == 1].drop(columns="build_round").reset_index(drop=True)
    pd.testing.assert_frame_equal(first, q1.reset_index(drop=True))
    second = q[q["build_round"] == 2]
    counts = second["qtype"].value_counts().to_dict()
    assert counts == {"keyword": 20, "cloze": 20, "description": 20, "verbose": 20, "noanswer": 10}
    # generated second-round queries use documents no first-round query uses, in groups of their own
    qr = grown["qrels"]
    first_docs = set(qr[qr["qid"].isin(q1["qid"])]["docid"])
    gen2 = second[second["source"] == "generated"]
    assert first_docs.isdisjoint(qr[qr["qid"].isin(gen2["qid"])]["docid"])
    assert set(gen2["group"]).isdisjoint(set(q1["group"]))
    pd.testing.assert_frame_equal(qr[qr["qid"].isin(q1["qid"])].reset_index(drop=True),
                                  demo["qrels"].reset_index(drop=True))


@pytest.mark.parametrize("kwargs", [{"grow_per_type": -1}, {"grow_noanswer": 1.5}, {"grow_per_type": True}])
def test_a_bad_round_size_is_a_config_error_before_any_build(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ConfigError, match=f"{name} must be an integer >= 0"):
        generate_demo(seed=13, **kwargs)
