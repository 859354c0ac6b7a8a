"""The router's prompt (ltrr.agent.prompt): arm families, descriptor lines, strengths in words."""

from __future__ import annotations

import math

import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.agent.prompt import (
    arm_family,
    build_messages,
    describe_arm,
    describe_strengths,
    system_prompt,
)
from ltrr.retrieval.pool import Arm, default_pool_config


@pytest.mark.parametrize(
    ("arm", "family"),
    [
        (Arm("bm25", "bm25"), "lexical"),
        (Arm("dense", "dense"), "dense"),
        (Arm("bm25+reg", "bm25", reranker="reg"), "reranked lexical"),
        (Arm("dense+stoch", "dense", reranker="stoch"), "reranked dense"),
        (Arm("none", "none"), "none"),
        (Arm("none", None), "none"),
        ({"name": "splade", "retriever": "splade"}, "splade"),
        ({"name": "packed", "retriever": "packed", "pack": {"arms": ["bm25"]}}, "packed"),
    ],
)
def test_arm_family_from_config(arm, family):
    assert arm_family(arm) == family


def test_arm_family_reads_the_pools_retriever_types():
    arm = Arm("wiki+ce", "wiki", reranker="cross-encoder")
    assert arm_family(arm, {"wiki": "dense"}) == "reranked dense"
    assert arm_family(arm) == "reranked wiki"
    with pytest.raises(ConfigError, match="must be an ltrr.retrieval.pool.Arm or a table"):
        arm_family("bm25")


def test_strengths_in_words():
    s = {"keyword": 0.61, "cloze": 0.55, "noanswer": 0.02, "factoid": 0.4}
    assert describe_strengths(s) == "strongest on keyword (0.61) and cloze (0.55) questions; weakest on noanswer (0.02)"
    assert describe_strengths({"a": 0.5, "b": 0.2}) == "strongest on a (0.50) questions; weakest on b (0.20)"
    assert describe_strengths({"a": 0.5, "b": 0.5}) == "the same on every question type (0.50)"
    assert describe_strengths({"a": math.nan, "b": 0.3}) == "measured on b questions only (0.30)"
    assert describe_strengths({"a": math.nan}) == describe_strengths({}) == "no measured strengths"
    # ties are broken by name, so the words never depend on dict order
    assert describe_strengths({"z": 0.5, "a": 0.5, "m": 0.1}) == describe_strengths({"m": 0.1, "a": 0.5, "z": 0.5})
    with pytest.raises(DataError, match="strength of question type 'a' must be a number"):
        describe_strengths({"a": "high"})


def test_descriptor_lines():
    arms = [Arm(**a) for a in default_pool_config()["arms"]]
    by_name = {a.name: a for a in arms}
    assert describe_arm(by_name["bm25+reg"], {"keyword": 0.61, "cloze": 0.55, "noanswer": 0.1}) == (
        "- bm25+reg: lexical retrieval (keyword matching), reranked by reg; cost 1; "
        "strongest on keyword (0.61) and cloze (0.55) questions; weakest on noanswer (0.10).")
    # without measured strengths: the configuration alone
    assert describe_arm(by_name["dense"]) == (
        "- dense: dense retrieval (meaning similarity); cost 1; no measured strengths.")
    assert describe_arm(by_name["none"]) == (
        "- none: no retrieval (answer from what you know); cost 0; no measured strengths.")
    assert describe_arm({"name": "x", "retriever": "bm25", "cost": 2.5}).startswith("- x: lexical retrieval")


def test_system_prompt_and_messages():
    arms = [Arm("bm25", "bm25", cost=1.0), Arm("none", None)]
    text = system_prompt(arms, {"bm25": {"keyword": 0.7, "natural": 0.4}}, max_turns=2)
    for part in ("<think>", "<search>ARM: sub-query</search>", "<information>", "<answer>",
                 "at most 2 time(s)", "- bm25: lexical", "strongest on keyword (0.70) questions",
                 "- none: no retrieval"):
        assert part in text
    assert text.index("- bm25") < text.index("- none")
    msgs = build_messages("  Who painted it? ", arms)
    assert msgs == [{"role": "system", "content": system_prompt(arms)},
                    {"role": "user", "content": "Question: Who painted it?"}]
    merged = build_messages("Who?", arms, system_role=False)
    assert len(merged) == 1 and merged[0]["content"].endswith("\n\nQuestion: Who?")
    with pytest.raises(ConfigError, match="strengths name arm\\(s\\) \\['google'\\]"):
        system_prompt(arms, {"google": {"a": 1.0}})
    with pytest.raises(ConfigError, match="at least one arm"):
        system_prompt([])
