"""Per-example arm presentations (ltrr.agent.presentation) and the loop that shows them: the
draws repeat for a seed and vary across examples, renamed prompts never name a real arm, a
left-out arm is neither shown nor callable, and a shown name runs the pool arm behind it."""

from __future__ import annotations

import re

import pytest

from ltrr._errors import ConfigError
from ltrr.agent.backends import Continuation, ContinuationLM
from ltrr.agent.loop import AgentLoop
from ltrr.agent.presentation import ArmView, draw_view
from ltrr.agent.rewards import CostNormaliser, format_reward
from ltrr.agent.trajectory import Trajectory, score_trajectories

ARMS = [{"name": "bm25", "retriever": "bm25", "cost": 1.0},
        {"name": "bm25+reg", "retriever": "bm25", "reranker": "reg", "cost": 1.2},
        {"name": "dense+reg", "retriever": "dense", "reranker": "reg", "cost": 2.2},
        {"name": "none", "retriever": "none"}]
NAMES = [a["name"] for a in ARMS]
COSTS = {"bm25": 1.0, "bm25+reg": 1.2, "dense+reg": 2.2, "none": 0.0}
ON = {"shuffle_arms": True, "rename_share": 0.5, "leave_out_share": 0.25}


def mentions(text: str, name: str) -> bool:
    """``name`` as an arm name in ``text``: not inside a longer name (``bm25`` in ``bm25+reg``)."""
    return re.search(rf"(?<![\w+-]){re.escape(name)}(?![\w+-])", text) is not None


class CharLM(ContinuationLM):
    """Writes preset turns; one token per character, so ids and text round-trip exactly."""

    backend = "chars"
    identity = "chars-1"

    def __init__(self, turns):
        self.turns = list(turns)

    @property
    def context_length(self) -> int:
        return 100_000

    def render(self, messages):
        return "".join(f"[{m['role']}] {m['content']}\n" for m in messages) + "[assistant] "

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(map(chr, ids))

    def continue_(self, ids, text, params):
        turn = self.turns.pop(0)
        return Continuation(turn, self.encode(turn), len(turn), "stop")


def _loop(turns, calls):
    def search(arm, query, k):
        calls.append(arm)
        return [(f"{arm}-doc", f"a passage about {query}")]

    strengths = {"bm25": {"keyword": 0.6, "cloze": 0.4}, "bm25+reg": {"keyword": 0.7, "cloze": 0.5}}
    return AgentLoop(CharLM(turns), search, ARMS, strengths=strengths, k=1, max_turns=2)


def _turns(arm):
    return [f"<think>I need evidence.</think>\n<search>{arm}: the question</search>",
            "<think>Done.</think>\n<answer>x</answer>"]


# ---- drawing views --------------------------------------------------------------------------
def test_views_repeat_for_a_seed_and_vary_across_examples():
    draws = [draw_view(NAMES, seed=7, key=(0, i), **ON) for i in range(200)]
    assert draws == [draw_view(NAMES, seed=7, key=(0, i), **ON) for i in range(200)]
    assert draws != [draw_view(NAMES, seed=8, key=(0, i), **ON) for i in range(200)]
    assert len({v.arms for v in draws}) > 10  # the order really varies
    renamed = [v for v in draws if v.renamed]
    assert 60 < len(renamed) < 140 and 25 < sum(bool(v.left_out) for v in draws) < 80
    for v in renamed:  # neutral ids: a permutation of 1..4, none of them a real name
        assert all(re.fullmatch(r"arm-[1-4]", s) for s in v.shown) and len(set(v.shown)) == len(v.shown)
    for v in draws:
        assert v.covers(NAMES) and len(v.left_out) <= 1 and not set(v.left_out) & set(v.arms)
    # every setting off: the plain view; one setting changed leaves the other draws as they were
    assert all(draw_view(NAMES, seed=7, key=(0, i)) == ArmView.plain(NAMES) for i in range(20))
    for i in range(50):
        a = draw_view(NAMES, seed=7, key=(1, 3, i), shuffle_arms=True, rename_share=0.0)
        b = draw_view(NAMES, seed=7, key=(1, 3, i), shuffle_arms=True, rename_share=1.0)
        assert a.arms == b.arms and b.renamed and not a.renamed


def test_config_only_arms_are_drawn_among_the_shown_and_leave_the_other_draws_alone():
    on = {**ON, "config_only_share": 0.25}
    draws = [draw_view(NAMES, seed=7, key=(0, i), **on) for i in range(400)]
    assert draws == [draw_view(NAMES, seed=7, key=(0, i), **on) for i in range(400)]
    described = [v for v in draws if v.config_only]
    assert 60 < len(described) < 140 and all(len(v.config_only) == 1 for v in described)
    assert all(set(v.config_only) <= set(v.arms) for v in described)  # never a left-out arm
    assert {v.config_only[0] for v in described} == set(NAMES)  # any arm may be the one
    for v, w in zip(draws, [draw_view(NAMES, seed=7, key=(0, i), **ON) for i in range(400)], strict=True):
        assert (v.arms, v.shown, v.left_out) == (w.arms, w.shown, w.left_out) and not w.config_only
    every = [draw_view(NAMES, seed=7, key=(0, i), leave_out_share=1.0, config_only_share=1.0) for i in range(20)]
    assert all(len(v.config_only) == 1 and v.config_only[0] in v.arms for v in every)
    with pytest.raises(ConfigError, match="config_only must name shown arms once each"):
        ArmView(("bm25",), left_out=("none",), config_only=("none",))


def test_leave_out_never_empties_the_prompt():
    assert all(len(draw_view(NAMES, seed=1, key=(0, i), leave_out_share=1.0).left_out) == 1 for i in range(30))
    only = draw_view(["bm25"], seed=1, key=(0, 0), leave_out_share=1.0, rename_share=1.0)
    assert only.arms == ("bm25",) and only.left_out == () and only.shown == ("arm-1",)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"rename_share": 1.5}, r"rename_share must be a number in \[0, 1\], got 1.5"),
    ({"leave_out_share": -0.1}, r"leave_out_share must be a number in \[0, 1\]"),
    ({"leave_out_share": True}, r"leave_out_share must be a number in \[0, 1\]"),
    ({"config_only_share": 2}, r"config_only_share must be a number in \[0, 1\], got 2"),
    ({"shuffle_arms": 1}, "shuffle_arms must be true or false, got 1"),
    ({"key": (0, -1)}, "key must be non-negative integers"),
    ({"seed": "7"}, "seed must be an integer"),
])
def test_bad_view_settings_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        draw_view(NAMES, **{"seed": 7, "key": (0, 1), **kwargs})


def test_bad_views_and_neutral_names_are_refused():
    with pytest.raises(ConfigError, match="named like the neutral ids"):
        draw_view(["arm-1", "bm25"], seed=0, key=(0,), rename_share=1.0)
    assert draw_view(["arm-1", "bm25"], seed=0, key=(0,), rename_share=0.0).arms == ("arm-1", "bm25")
    with pytest.raises(ConfigError, match="unique"):
        ArmView(("bm25", "none"), ("arm-1", "arm-1"))
    with pytest.raises(ConfigError, match="2 names for 1 arms"):
        ArmView(("bm25",), ("arm-1", "arm-2"))
    with pytest.raises(ConfigError, match="at least one arm"):
        ArmView(())
    with pytest.raises(ConfigError, match="left out of this example's prompt"):
        ArmView(("bm25",), left_out=("none",)).shown_name("none")


@pytest.mark.parametrize("table", ["sft", "grpo"])
def test_specs_read_and_check_the_view_settings(table):
    from ltrr.agent.grpo import GRPOSpec
    from ltrr.agent.sft import SFTSpec

    cls = SFTSpec if table == "sft" else GRPOSpec
    spec = cls.from_mapping({"shuffle_arms": False, "rename_share": 1, "leave_out_share": 0, "config_only_share": 1})
    assert (spec.shuffle_arms, spec.rename_share, spec.leave_out_share, spec.config_only_share) == (False, 1.0, 0.0, 1.0)
    default = cls.from_mapping({})
    assert (default.shuffle_arms, default.rename_share, default.leave_out_share, default.config_only_share) == (
        True, 0.25, 0.25, 0.75)  # chosen on demo-agent-unseen's design scripts (benchmarks/view_settings.py)
    for bad, match in (({"rename_share": 2}, r"rename_share must be a number in \[0, 1\], got 2"),
                       ({"leave_out_share": "some"}, r"leave_out_share must be a number in \[0, 1\]"),
                       ({"config_only_share": -1}, r"config_only_share must be a number in \[0, 1\]"),
                       ({"shuffle_arms": "yes"}, "shuffle_arms must be true or false, got 'yes'")):
        with pytest.raises(ConfigError, match=rf"\[agent\] {table}\.{match}"):
            cls.from_mapping(bad)


# ---- the loop under a view --------------------------------------------------------------------
def test_a_renamed_prompt_never_names_a_real_arm_and_shown_names_run_their_arm():
    view = ArmView(("dense+reg", "none", "bm25+reg", "bm25"), ("arm-2", "arm-4", "arm-1", "arm-3"))
    calls: list[str] = []
    t = _loop(_turns("arm-1"), calls).with_view(view).rollout("Which river is longest?", qid="q1")
    assert calls == ["bm25+reg"] and t.stop_reason == "answered"
    assert [s.arm for s in t.searches] == ["bm25+reg"] and t.searches[0].valid
    assert t.arms == ["arm-2", "arm-4", "arm-1", "arm-3"]
    assert t.shown_arms == {"arm-2": "dense+reg", "arm-4": "none", "arm-1": "bm25+reg", "arm-3": "bm25"}
    everything = t.prompt + t.text
    assert not [n for n in NAMES if mentions(everything, n)], everything
    lines = [line for line in t.prompt.splitlines() if line.startswith("- arm-")]
    assert [line.split(":")[0] for line in lines] == ["- arm-2", "- arm-4", "- arm-1", "- arm-3"]  # the view's order
    # the descriptor is the arm's own: family, reranker, cost and strengths under the new name
    assert lines[2] == ("- arm-1: lexical retrieval (keyword matching), reranked by reg; cost 1.2; strongest on "
                        "keyword (0.70) questions; weakest on cloze (0.50).")
    # a real name is not callable under a renamed view; the cost is the pool arm's
    calls.clear()
    bad = _loop(_turns("bm25+reg"), calls).with_view(view).rollout("Which river is longest?")
    assert calls == [] and bad.searches[0].reason == "unknown_arm"
    assert format_reward(t.text, t.arms)[0] == 0 and format_reward(bad.text, bad.arms)[0] == -1
    score_trajectories([t], [["x"]], arm_costs=COSTS, normaliser=CostNormaliser.fixed(0, 5), alpha=0.5)
    assert t.rewards["cost"] == 1.2
    assert Trajectory.from_dict(t.to_dict()) == t


def test_a_shown_name_in_another_case_runs_its_arm_and_a_real_name_stays_unknown():
    """Names resolve ignoring case (`ltrr.agent.rewards.resolve_arm`) among the names the prompt
    shows, then map to the pool arm; a real name under a renamed view is unknown in any case, and
    gets Router-R1's <information>None</information> block."""
    view = ArmView(("dense+reg", "none", "bm25+reg", "bm25"), ("arm-2", "arm-4", "arm-1", "arm-3"))
    calls: list[str] = []
    t = _loop(_turns("ARM-1"), calls).with_view(view).rollout("Which river is longest?")
    assert calls == ["bm25+reg"] and [(s.arm, s.valid) for s in t.searches] == [("bm25+reg", True)]
    assert format_reward(t.text, t.arms) == (0.0, [])
    bad = _loop(_turns("BM25+REG"), calls).with_view(view).rollout("Which river is longest?")
    assert calls == ["bm25+reg"] and bad.searches[0].reason == "unknown_arm"
    assert [x.text for x in bad.turns if x.role == "injected"] == ["\n\n<information>\nNone\n</information>\n\n"]
    assert format_reward(bad.text, bad.arms)[1] == ["search_unknown_arm"]


def test_a_left_out_arm_is_not_shown_and_calling_it_is_rejected():
    view = ArmView(("none", "bm25"), left_out=("dense+reg", "bm25+reg"))
    calls: list[str] = []
    t = _loop(_turns("dense+reg"), calls).with_view(view).rollout("q?")
    assert calls == [] and t.searches[0].reason == "unknown_arm" and not t.searches[0].valid
    assert not mentions(t.prompt, "dense+reg") and not mentions(t.prompt, "bm25+reg") and mentions(t.prompt, "bm25")
    assert t.arms == ["none", "bm25"] and t.shown_arms == {}
    assert t.prompt.index("- none:") < t.prompt.index("- bm25:")  # the view's order
    ok = _loop(_turns("bm25"), calls).with_view(view).rollout("q?")
    assert calls == ["bm25"] and ok.searches[0].valid


def test_a_config_only_arm_gets_the_held_out_arms_line_and_is_still_called():
    """The config-only arm's line is the one `make_loop` gives an arm held out of training (its
    strengths dropped), under the shown name; the other arms keep theirs; calling it works."""
    from ltrr.agent.prompt import describe_arm

    view = ArmView(("none", "bm25+reg", "bm25", "dense+reg"), config_only=("bm25+reg",))
    calls: list[str] = []
    t = _loop(_turns("bm25+reg"), calls).with_view(view).rollout("Which river is longest?")
    assert calls == ["bm25+reg"] and t.searches[0].valid and t.stop_reason == "answered"
    lines = {line.split(":")[0][2:]: line for line in t.prompt.splitlines() if line.startswith("- ")}
    held = AgentLoop(CharLM(_turns("bm25")[1:]), lambda *a: [], ARMS, strengths={"bm25": {"keyword": 0.6, "cloze": 0.4}}, k=1,
                     max_turns=2).rollout("Which river is longest?")  # bm25+reg held out: strengths unknown
    held_line = next(line for line in held.prompt.splitlines() if line.startswith("- bm25+reg:"))
    assert lines["bm25+reg"] == held_line == describe_arm(ARMS[1]) == (
        "- bm25+reg: lexical retrieval (keyword matching), reranked by reg; cost 1.2; no measured strengths.")
    assert "strongest on keyword (0.60)" in lines["bm25"]
    renamed = ArmView(("bm25+reg", "bm25", "none", "dense+reg"), ("arm-4", "arm-1", "arm-2", "arm-3"),
                      config_only=("bm25+reg",))
    r = _loop(_turns("arm-4"), calls).with_view(renamed).rollout("q?")
    assert calls[-1] == "bm25+reg" and r.searches[0].valid
    assert describe_arm(ARMS[1], name="arm-4") in r.prompt.splitlines()
    assert "strongest on keyword (0.60)" in next(x for x in r.prompt.splitlines() if x.startswith("- arm-1:"))


def test_the_plain_view_is_todays_prompt_and_a_foreign_view_is_refused():
    plain = _loop(_turns("bm25"), []).rollout("q?")
    viewed = _loop(_turns("bm25"), []).with_view(ArmView.plain(NAMES)).rollout("q?")
    assert viewed.ids == plain.ids and viewed.arms == plain.arms == NAMES
    with pytest.raises(ConfigError, match="the loop's arms are"):
        _loop([], []).with_view(ArmView(("bm25", "none")))
    with pytest.raises(ConfigError, match="must be an ltrr.agent.presentation.ArmView"):
        _loop([], []).with_view({"arms": ["bm25"]})


# ---- GRPO: a view per question and step ---------------------------------------------------------
def test_grpo_samples_of_a_group_share_their_questions_view_of_the_step(tmp_path):
    from types import SimpleNamespace

    from _tiny_llm import save_bigram_llm

    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.grpo import LiveLM, RouterRollouts
    from ltrr.agent.rewards import CostNormaliser
    from ltrr.generation import TransformersGenerator

    save_bigram_llm(tmp_path, logit=5.0)  # greedy-like: it searches "bm25:" and answers
    policy = TransformersLM(TransformersGenerator(str(tmp_path), n_threads=1))
    arms = [{"name": "bm25", "retriever": "bm25", "cost": 1.0}, {"name": "none", "retriever": "none"}]
    loop = AgentLoop(LiveLM(policy), lambda arm, q, k: [("d1", "capital Doc")], arms, k=1, max_turns=1,
                     max_new_tokens=12, max_obs_tokens=16, temperature=1.0)
    place = {"q1": 0, "q2": 1}
    drawn = []

    def views(qid, step):
        drawn.append((qid, step))
        return draw_view(["bm25", "none"], seed=3, key=(1, step, place[qid]), shuffle_arms=True, rename_share=0.5)

    roll = RouterRollouts(lambda qid: loop, {"capital ?": "q1", "capital canberra ?": "q2"},
                          {"q1": ["canberra"], "q2": ["canberra"]}, {"bm25": 1.0, "none": 0.0},
                          CostNormaliser(window=64), 2, seed=7, views=views)
    seen = []
    for step in range(4):
        trainer = SimpleNamespace(model=policy.generator.hf_model, state=SimpleNamespace(global_step=step),
                                  accelerator=SimpleNamespace(unwrap_model=lambda m: m))
        roll(["capital ?"] * 2 + ["capital canberra ?"] * 2, trainer)
        roll.reward([None] * 4, [None] * 4, [0, 1, 2, 3])
        for b in (0, 2):
            group = roll.batch[b:b + 2]
            view = views(group[0].qid, step)
            assert all(t.arms == list(view.shown_names) and t.prompt == group[0].prompt for t in group)
            for t in group:  # the policy writes "bm25:": valid, and costed as bm25, only where shown so
                valid = [s.arm for s in t.searches if s.valid]
                assert valid == (["bm25"] if "bm25" in t.arms else [])
                assert t.rewards["cost"] == (1.0 if valid else 0.0)
            seen.append(tuple(t.arms))
    assert len(set(seen)) > 1  # questions and steps see the arms differently
    assert ("q1", 3) in drawn and ("q2", 0) in drawn
