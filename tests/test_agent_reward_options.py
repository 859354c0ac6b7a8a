"""``[agent] reward``: the named rewards, and Router-R1's released rules written as test cases.

Each case below was read from Router-R1's reward code (ulab-uiuc/Router-R1, commit 801a240):
``format_reward`` in ``verl/trainer/main_ppo.py``; ``normalize_answer``, ``f1_score``,
``em_check``, ``extract_solution`` and ``compute_score_em`` (train state) in
``verl/utils/reward_score/qa_em.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from test_agent_rewards import ARMS, VALID, _s  # the arms and trajectories both reward tests use

from ltrr._errors import ConfigError
from ltrr.agent.reward_options import (
    REWARDS,
    ROUTER_R1_FORMAT_RULES,
    RouterR1Reward,
    agent_reward,
    normalize_answer,
    router_r1_format,
    router_r1_total,
    squad_em,
    squad_f1,
)
from ltrr.agent.rewards import (
    CostNormaliser,
    format_reward,
    parse_search,
    resolve_arm,
    total_reward,
)
from ltrr.agent.trajectory import score_trajectories
from ltrr.config import validate

# (id, text, the rules it breaks: [] for a valid text). Every rule of ROUTER_R1_FORMAT_RULES
# appears at least once, each with a valid neighbour.
FORMAT_CASES = [
    # valid
    ("valid_with_search", VALID, []),
    ("valid_without_search", "<think>easy</think><answer>Paris</answer>", []),
    ("valid_surrounding_whitespace", " \n<think>a</think><answer>A</answer>\n\n", []),
    ("valid_arm_case_insensitive", _s("BM25: capital of Australia"), []),
    ("valid_four_dots_is_no_placeholder", "<think>....</think><answer>A</answer>", []),
    # `completion.count("<t>") != completion.count("</t>")`: balance is by count, not order
    ("valid_count_balanced_out_of_order", "<think>a</think></information><information><answer>A</answer>", []),
    # `if len(tag_enclose_matches) == 0`
    ("no_tag_block", "Canberra", ["no_tag_block"]),
    ("no_tag_block_unclosed", "<think>a<answer>A", ["no_tag_block"]),
    ("unbalanced_tags", "<think>a</think><think>b<answer>A</answer>", ["unbalanced_tags"]),
    # `if content == "..." or content == ""` (content stripped)
    ("placeholder_think_dots", "<think>...</think><answer>A</answer>", ["placeholder_think"]),
    ("placeholder_think_spaced_dots", "<think> ... </think><answer>A</answer>", ["placeholder_think"]),
    ("placeholder_think_empty", "<think> \n </think><answer>A</answer>", ["placeholder_think"]),
    # a matched block whose content holds any of the eight tags
    ("nested_tags", "<think>a<answer>A</answer></think><answer>A</answer>", ["nested_tags"]),
    ("nested_search_also_unmatched",
     "<think>a<search>bm25: q</search></think><information>x</information><think>b</think><answer>A</answer>",
     ["nested_tags", "search_information_mismatch"]),
    # `answer_enclose_count != 1 or think_enclose_count == 0 or route != info`
    ("answer_count_two", "<think>a</think><answer>A</answer><think>b</think><answer>B</answer>", ["answer_count"]),
    ("answer_count_zero", "<think>a</think>", ["answer_count", "bad_end"]),
    ("no_think", "<answer>A</answer>", ["no_think", "bad_start"]),
    ("search_information_mismatch", "<think>a</think><search>bm25: q</search><think>b</think><answer>A</answer>",
     ["search_information_mismatch"]),
    # `completion.strip()` must start with "<think>" and end with its last "</answer>"
    ("bad_start", "Sure. <think>a</think><answer>A</answer>", ["bad_start"]),
    ("bad_end", "<think>a</think><answer>A</answer> Done.", ["bad_end"]),
    # `if content.count(":") == 1: ... else: query_format_punish = True`
    ("search_colons_none", _s("capital of Australia"), ["search_colons"]),
    ("search_colons_two", _s("bm25: film: The Matrix"), ["search_colons"]),
    # `content.split(":")[-1].strip() == ''`
    ("search_empty_query", _s("dense:   "), ["search_empty_query"]),
    # `"llm-name" in content.lower() or "your-query" in content.lower()`
    ("search_placeholder_query", _s("bm25: your-query"), ["search_placeholder"]),
    ("search_placeholder_arm", _s("LLM-Name: capital"), ["search_placeholder", "search_unknown_arm"]),
    # `content.split(":")[0].strip().lower() in content.split(":")[-1].strip().lower()`
    ("search_arm_in_query", _s("dense: dense retrieval of capitals"), ["search_arm_in_query"]),
    ("search_arm_in_query_case", _s("bm25: BM25 capital"), ["search_arm_in_query"]),
    ("search_empty_arm_is_in_every_query", _s(": capital"), ["search_arm_in_query", "search_unknown_arm"]),
    # `if not is_valid_llm_name(content.split(":")[0])`
    ("search_unknown_arm", _s("google: capital"), ["search_unknown_arm"]),
]


@pytest.mark.parametrize(("text", "broken"), [c[1:] for c in FORMAT_CASES], ids=[c[0] for c in FORMAT_CASES])
def test_router_r1_format_rules(text, broken):
    score, reasons = router_r1_format(text, ARMS)
    assert reasons == broken
    assert score == (-1.0 if broken else 0.0)


def test_the_table_covers_every_rule():
    covered = {r for _, _, broken in FORMAT_CASES for r in broken}
    assert covered == set(ROUTER_R1_FORMAT_RULES)


# the three disagreements: ours accepts what theirs punishes
@pytest.mark.parametrize("text", [
    "<think>...</think><answer>A</answer>",
    _s("bm25: film: The Matrix"),
    _s("dense: dense retrieval of capitals"),
])
def test_ltrr_format_accepts_what_router_r1_punishes(text):
    assert format_reward(text, ARMS) == (0.0, [])
    assert router_r1_format(text, ARMS)[0] == -1.0


@pytest.mark.parametrize(("raw", "normal"), [
    ("  The  Eiffel-Tower, Paris! ", "eiffeltower paris"),  # lowercase, punctuation, article, spaces
    ("An apple a day", "apple day"),
    ("theatre", "theatre"),  # an article only as a whole word
    ("", ""),
])
def test_squad_normalisation(raw, normal):
    assert normalize_answer(raw) == normal


# (answer, aliases, F1, EM)
OUTCOME_CASES = [
    ("Canberra", ["Canberra"], 1.0, 1.0),
    ("The Canberra.", ["canberra"], 1.0, 1.0),
    ("the city of Canberra", ["Canberra"], 0.5, 0.0),  # precision 1/3, recall 1
    ("Sydney", ["Canberra", "Sydney NSW"], 2 / 3, 0.0),  # the best alias counts
    ("Melbourne", ["Canberra"], 0.0, 0.0),
    ("yes", ["yes"], 1.0, 1.0),
    ("yes", ["no"], 0.0, 0.0),
    ("yes indeed", ["yes"], 0.0, 0.0),  # gold is yes/no and differs: 0, not 2/3
    ("no", ["no way"], 0.0, 0.0),  # the answer is yes/no and differs: 0
    ("the", ["Canberra"], 0.0, 0.0),  # nothing left after normalisation
]


@pytest.mark.parametrize(("answer", "aliases", "f1", "em"), OUTCOME_CASES)
def test_squad_f1_and_em(answer, aliases, f1, em):
    assert squad_f1(answer, aliases) == pytest.approx(f1)
    assert squad_em(answer, aliases) == em
    text = f"<think>a</think><answer>{answer}</answer>"
    assert RouterR1Reward().outcome(text, aliases, "f1") == pytest.approx(f1)
    assert RouterR1Reward().outcome(text, aliases, "em") == em


def test_the_outcome_reads_the_last_answer_block():
    r = RouterR1Reward()
    assert r.outcome("<answer>Rome</answer><answer> Paris </answer>", ["Paris"], "em") == 1.0
    assert r.outcome("<think>a</think>", ["Paris"], "f1") == 0.0


# (format, score, cost reward, alpha, total): `compute_score_em`, state "train"
TOTAL_CASES = [
    pytest.param(-1.0, 1.0, 1.0, 0.5, -1.0, id="bad_format_correct"),
    pytest.param(-1.0, 0.0, 1.0, 0.5, -1.0, id="bad_format_wrong"),
    pytest.param(0.0, 0.0, 1.0, 0.5, 0.0, id="wrong_cost_not_counted"),
    pytest.param(0.0, 1.0, 0.4, 0.5, 0.7, id="correct_cost_counted"),
    pytest.param(0.0, 0.5, 0.4, 0.5, 0.45, id="partial_f1_cost_counted"),
    pytest.param(0.0, 0.5, 1.0, 0.0, 0.5, id="alpha_0_outcome_only"),
    pytest.param(0.0, 0.5, 0.3, 1.0, 0.3, id="alpha_1_cost_only"),
    pytest.param(0.0, 1.0, 0.0, 0.2, 0.8, id="correct_dearest"),
]


@pytest.mark.parametrize(("fmt", "score", "cost", "alpha", "total"), TOTAL_CASES)
def test_router_r1_total(fmt, score, cost, alpha, total):
    assert router_r1_total(fmt, score, cost, alpha) == pytest.approx(total)


def test_partial_answers_differ_from_ltrr():
    # theirs counts the cost for any F1 above 0; ours only for a correct answer
    assert router_r1_total(0.0, 0.5, 0.4, 0.5) == pytest.approx(0.45)
    assert total_reward(0.0, 0.5, 0.4, 0.5) == pytest.approx(0.25)


# (text, aliases, metric, total) with cost reward 0.4 and alpha 0.5: format, outcome and total together
SCORE_CASES = [
    pytest.param(VALID, ["Canberra"], "f1", 0.7, id="f1_correct"),
    pytest.param(VALID, ["Canberra city"], "f1", 2 / 3 * 0.5 + 0.2, id="f1_partial"),
    pytest.param(VALID, ["Sydney"], "f1", 0.0, id="f1_wrong"),
    pytest.param(VALID, ["canberra."], "em", 0.7, id="em_hit"),
    pytest.param(VALID, ["Canberra city"], "em", 0.0, id="em_miss_partial_f1"),
    pytest.param(VALID.replace("Found it.", "..."), ["Canberra"], "f1", -1.0, id="placeholder_think"),
    pytest.param(VALID.replace("capital of", "bm25 capital of"), ["Canberra"], "em", -1.0, id="arm_in_query"),
]


@pytest.mark.parametrize(("text", "aliases", "metric", "total"), SCORE_CASES)
def test_router_r1_score(text, aliases, metric, total):
    parts = RouterR1Reward().score(text, ARMS, None, aliases, cost_reward=0.4, alpha=0.5, metric=metric)
    assert parts["total"] == pytest.approx(total)
    assert parts["format"] == (-1.0 if total < 0 else 0.0)


@dataclass
class _Traj:
    text: str
    answer: str | None
    qid: str = "q1"
    question: str = "Capital of Australia?"
    arms: list = field(default_factory=lambda: list(ARMS))
    rewards: dict | None = None

    def cost(self, arm_costs, token_price):
        return 1.0


def test_score_trajectories_uses_the_named_reward():
    partial = "<think>a</think><answer>Canberra city</answer>"
    ours, theirs = _Traj(partial, "Canberra city"), _Traj(partial, "Canberra city")
    norm = CostNormaliser.fixed(0.0, 2.0)  # cost 1.0 -> cost reward 0.5
    score_trajectories([ours], [["Canberra"]], arm_costs={}, normaliser=norm, alpha=0.5, metric="f1")
    score_trajectories([theirs], [["Canberra"]], arm_costs={}, normaliser=norm, alpha=0.5, metric="f1",
                       reward="router-r1")
    assert ours.rewards["reward"] == "ltrr" and theirs.rewards["reward"] == "router-r1"
    assert ours.rewards["total"] == pytest.approx(0.5 * 2 / 3)
    assert theirs.rewards["total"] == pytest.approx(0.5 * 2 / 3 + 0.5 * 0.5)
    assert set(theirs.rewards) == set(ours.rewards)


BASE = {"run": {"name": "x"}, "data": {"dataset": "demo"}, "arms": [{"name": "none"}]}


def _agent(**agent):
    return validate({**BASE, "agent": agent}).agent


def test_the_config_key_defaults_to_ltrr():
    assert _agent()["reward"] == "ltrr"
    assert agent_reward(_agent()).name == "ltrr"
    assert agent_reward(_agent(reward="router-r1", metric="em")).name == "router-r1"
    assert REWARDS.names() == ["ltrr", "router-r1"]


def test_a_bad_reward_name_is_refused():
    with pytest.raises(ConfigError, match="unknown agent reward 'r1'; choose one of: ltrr, router-r1"):
        agent_reward(_agent(reward="r1"))
    with pytest.raises(ConfigError, match="unknown agent reward 'r1'"):
        score_trajectories([], [], arm_costs={}, normaliser=CostNormaliser.fixed(0.0, 1.0), reward="r1")
    with pytest.raises(ConfigError, match=r"config key \[agent\]\.reward must be str, got int 1"):
        _agent(reward=1)


def test_router_r1_needs_f1_or_em():
    with pytest.raises(ConfigError, match='scores with metric "f1" or "em".*got metric = \'recall\''):
        agent_reward(_agent(reward="router-r1"))
    # their released train.sh:79 sets reward_metric="em"; f1 is only their RewardManager's default
    with pytest.raises(ConfigError, match='set \\[agent\\] metric = "em" \\(their train.sh\\) or "f1"'):
        agent_reward(_agent(reward="router-r1", metric="contains"))
    with pytest.raises(ConfigError, match=r"alpha must be a number in \[0, 1\]"):
        router_r1_total(0.0, 1.0, 1.0, alpha=1.5)


@pytest.mark.parametrize("arm", ["bm25", "BM25", "Bm25", "bM25", "DENSE", "google", "bm2", "Bm25+REG"])
@pytest.mark.parametrize("arms", [ARMS, ["bm25", "BM25", "dense"], ["bm25", "bM25", "dense"]])
def test_both_format_rules_and_the_loop_agree_on_every_arm_name(arm, arms):
    """The loop runs a search by `parse_search`; each format rule must call the same names
    unknown, so a call that ran is never punished as unknown, nor one that did not run accepted."""
    runs = parse_search(f"{arm}: capital", arms)[2] is None
    text = _s(f"{arm}: capital")
    assert ("search_unknown_arm" not in format_reward(text, arms)[1]) == runs
    assert ("search_unknown_arm" not in router_r1_format(text, arms)[1]) == runs
    assert runs == (resolve_arm(arm, arms) is not None)


def test_each_reward_builds_its_cost_normalisers():
    ours, theirs = REWARDS.get("ltrr")(), REWARDS.get("router-r1")()
    assert ours.rolling_normaliser(64).rule == CostNormaliser().rule and ours.rolling_normaliser(64).window == 64
    assert theirs.rolling_normaliser(1000).rule == {"transform": "sqrt", "no_spread": 0.5, "window_updates": "each"}
    design = [0.0, 1.0, 4.0, 9.0, 16.0]
    assert ours.fixed_normaliser(design).bounds() == pytest.approx((0.2, 14.6))
    frozen = theirs.fixed_normaliser(design)  # percentiles of the square roots
    assert frozen.mode == "fixed" and frozen.bounds() == pytest.approx((0.2, 3.8))
    assert frozen.cost_reward(4.0) == pytest.approx(1 - 1.8 / 3.6)
    assert theirs.fixed_normaliser([2.0, 2.0]).cost_reward(5.0) == 0.5  # no spread: Router-R1's 0.5
    assert ours.fixed_normaliser([2.0, 2.0]).cost_reward(5.0) == 0.0  # ltrr's step rule
    with pytest.raises(ConfigError, match="window must be an integer >= 1, got 0"):
        ours.rolling_normaliser(0)
    with pytest.raises(ConfigError, match="window must be an integer >= 1, got 0"):
        theirs.rolling_normaliser(0)


def test_the_evaluation_normaliser_follows_the_reward_and_is_cached_per_rule(tmp_path, monkeypatch):
    """`ltrr.agent.evaluate.design_normaliser`: fixed bounds from the design scripts' costs, of their
    square roots under reward = "router-r1"; each rule caches its own bounds, and ltrr's cache
    document keeps its old form (no rule in it)."""
    import json
    from types import SimpleNamespace

    import ltrr.agent.run as agent_run
    import ltrr.agent.sft as sft
    from ltrr.agent.evaluate import design_normaliser

    built = []

    def scripts(run, lm, labels, design, spec):
        built.append(run.config.agent.reward)
        return [SimpleNamespace(cost=lambda costs, price, c=c: c) for c in (0.0, 1.0, 4.0, 9.0, 16.0)]

    monkeypatch.setattr(agent_run, "agent_dir", lambda run: tmp_path)
    monkeypatch.setattr(sft, "build_sft_trajectories", scripts)

    class Agent(dict):
        __getattr__ = dict.__getitem__

    def run(reward):
        agent = Agent(reward=reward, metric="em", sft={}, token_price=0.0)
        return SimpleNamespace(config=SimpleNamespace(agent=agent, arms=[]), pool=SimpleNamespace(costs={}))

    lm = SimpleNamespace(identity="m")
    ours = design_normaliser(run("ltrr"), lm, None, ["q1"])
    assert ours.bounds() == pytest.approx((0.2, 14.6)) and ours.rule == CostNormaliser().rule
    assert set(json.loads((tmp_path / "design_costs.json").read_text())) == {"key", "lo", "hi", "n"}
    theirs = design_normaliser(run("router-r1"), lm, None, ["q1"])
    assert theirs.bounds() == pytest.approx((0.2, 3.8)) and theirs.rule["transform"] == "sqrt"
    again = design_normaliser(run("router-r1"), lm, None, ["q1"])  # read back from the cache
    assert built == ["ltrr", "router-r1"] and again.to_dict() == theirs.to_dict()
    assert design_normaliser(run("ltrr"), lm, None, ["q1"]).to_dict() == ours.to_dict()
    assert built == ["ltrr", "router-r1", "ltrr"]  # the cache holds one document: the other rule's is rebuilt
