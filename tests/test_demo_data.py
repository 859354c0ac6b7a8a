"""The embedded demo benchmark: size, types, groups, answers verifiably in the corpus."""

from __future__ import annotations

import re

import pytest

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
    gold = dict(zip(qr["qid"], qr["docid"], strict=True))
    gen = q[q["source"] == "generated"]
    for qid, answers in zip(gen["qid"], gen["answers"], strict=True):
        doc = text[gold[qid]]
        assert any(a in doc for a in answers), qid


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


def test_seeded_and_seed_sensitive(demo):
    again = generate_demo(seed=13)
    assert again["queries"].equals(demo["queries"])
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
