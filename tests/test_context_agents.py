"""The multi-agent QA loop of context routing: strategies, budgets, memory updates, the CLI.

Unit tests run the loop with a deterministic fake LLM, a fake router and a bag-of-words
embedder (no model download); the slow test runs `ltrr run` then `ltrr context run` on a tiny
dataset with the "test-last-doc" reader of tests/test_pipeline_e2e.py.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ltrr.context.agents as agents_mod
from ltrr._errors import ConfigError, DataError
from ltrr.config import validate
from ltrr.context import ContextLoop, Memory, RoutedSearch
from ltrr.context.agents import STRATEGIES, parse_subquestions
from ltrr.context.agents_eval import compare_strategies, score_answers, summarise, timings_doc
from ltrr.generation.base import Generation, Generator
from ltrr.packing import DEFAULT_ROLES, LoopSpec
from ltrr.packing.strategies import strategies
from ltrr.routers.pipeline import Routed


class FakeLLM(Generator):
    """Plans two sub-questions; answers with the number of documents it was shown."""

    backend = "fake-agents"
    identity = "fake-agents-1"

    def generate(self, prompts, params=None):
        out = []
        for p in prompts:
            text = p if isinstance(p, str) else "\n".join(m["content"] for m in p)
            if "sub-questions" in text:
                q = text.rsplit("Question:", 1)[1].split("\n")[0]
                w = q.split()[-1].strip("?")
                out.append(Generation(text=f"1. Who discovered {w}?\n- Where is {w} located?\nok",
                                      prompt_tokens=len(text.split())))
            else:
                out.append(Generation(text=f"answer{text.count('Document ')}", prompt_tokens=len(text.split()),
                                      completion_tokens=1))
        return out


class FakeRouter:  # a RoutedPipeline stand-in: route(question) -> Routed
    """Sends "who" questions to bm25 (three passages, one shared by every question), others to none."""

    def route(self, question):
        w = question.split()[-1].strip("?").lower()
        arm = "bm25" if question.lower().startswith("who") else "none"
        texts = [f"{w} was born in a small town long ago",
                 f"many painters and writers admired {w} during a long career of several decades spent abroad"]
        rows = [{"qid": "q0", "arm": "bm25", "rank": r, "docid": f"{w}-{r}", "score": -r, "text": t}
                for r, t in enumerate(texts, start=1)]
        rows.append({"qid": "q0", "arm": "bm25", "rank": 3, "docid": "shared", "score": -3.0,
                     "text": "a passage every search returns about capitals and rivers"})
        arms = [arm, "none" if arm == "bm25" else "bm25"]
        return Routed(question, pd.DataFrame(rows), pd.DataFrame({"arm": arms, "score": [1.0, 0.0], "rank": [1, 2]}))


class BowEmbedder:
    """Deterministic bag-of-words vectors (crc32 buckets), the passage and query sides alike."""

    def texts(self, texts):
        out = np.zeros((len(texts), 64))
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, zlib.crc32(w.encode()) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def passages(self, docids, texts):
        return self.texts(texts)


def _loop(strategy, spec=None, **kw):
    return ContextLoop(FakeLLM(), search=RoutedSearch(FakeRouter()), strategy=strategy,
                       spec=(spec or LoopSpec(**kw)).validate(), embedder=BowEmbedder())


@pytest.fixture
def reads(monkeypatch):
    """Every (agent turn, items it read) of the loop, recorded around `Agent.read`."""
    seen = []
    original = agents_mod.Agent.read

    def spy(self, ep, goal):
        chosen, turn = original(self, ep, goal)
        seen.append((turn, list(chosen), list(ep.memory.items)))
        return chosen, turn

    monkeypatch.setattr(agents_mod.Agent, "read", spy)
    return seen


def test_registry_and_every_strategy_runs_with_token_accounting():
    assert strategies.names() == sorted(STRATEGIES)
    for name in STRATEGIES:
        res = _loop(name, rounds=2, base_budget=200).answer("what is the capital of paris?")
        assert res.answer and res.answer.startswith("answer") and res.error is None
        assert res.rounds == (1 if name == "rcr-oneshot" else 2)
        assert res.subquestions == ["Who discovered paris?", "Where is paris located?"]
        assert res.arms == ["bm25", "none"] * res.rounds
        row = res.to_row()
        per_agent = [row[f"prompt_tokens_{a}"] for a in ("planner", "searcher", "answerer")]
        assert all(t > 0 for t in per_agent) and sum(per_agent) == row["prompt_tokens"] == res.prompt_tokens()
        assert row["prompt_tokens"] == sum(t.prompt_tokens for t in res.turns)
        # one call per agent per round; the searcher one per sub-question
        assert [t.agent for t in res.turns] == ["planner", "searcher", "searcher", "answerer"] * res.rounds
        assert json.loads(row["turns"])[0]["agent"] == "planner"


def test_budgeted_strategies_never_exceed_the_budget_and_full_context_reads_everything(reads):
    spec = LoopSpec.from_mapping({"rounds": 3, "base_budget": 24, "roles": {"answerer": {"budget_offset": 0}}})
    budgets = {a: spec.budget(a) for a in ("planner", "searcher", "answerer")}
    assert budgets == {"planner": 0, "searcher": 24, "answerer": 24}
    count = FakeLLM().count_tokens
    for name in ("static", "rcr-oneshot", "rcr-iterative"):
        reads.clear()
        _loop(name, spec).answer("who is the painter leonardo?")
        assert reads
        for turn, chosen, _ in reads:
            assert turn.budget == budgets[turn.agent]
            assert sum(count(it.text) for it in chosen) == sum(it.tokens for it in chosen) == turn.selected_tokens
            assert turn.selected_tokens <= turn.budget
        assert any(len(chosen) < len(memory) for _, chosen, memory in reads)  # the budget did cut
    reads.clear()
    res = _loop("full-context", spec).answer("who is the painter leonardo?")
    for turn, chosen, memory in reads:
        assert turn.budget is None and [it.id for it in chosen] == [it.id for it in memory]
    assert max(t.selected_tokens for t in res.turns) > budgets["answerer"]  # more than any budget allows


def test_static_slice_takes_the_top_kinds_most_recent_first():
    from ltrr.packing import DEFAULT_ROLES, MemoryItem

    items = [MemoryItem(f"m{i}", kind, f"t{i}", round=r, tokens=10)
             for i, (kind, r) in enumerate([("passage", 1), ("fact", 1), ("passage", 2), ("plan", 2), ("passage", 3)])]
    static = strategies.get("static")
    got = static.choose(items, role=DEFAULT_ROLES["searcher"], stage="search", budget=25, round=3, goal="g",
                        goal_embedding=None, spec=LoopSpec())
    assert [it.id for it in got] == ["m2", "m4"]  # passages first (priority 1.0), the newest two fit


def test_a_budget_smaller_than_every_item_gives_recorded_empty_contexts():
    spec = LoopSpec.from_mapping({"base_budget": 0, "roles": {"answerer": {"budget_offset": 0}}})
    res = ContextLoop(FakeLLM(), search=RoutedSearch(FakeRouter()), strategy="rcr-iterative", spec=spec).answer(
        "who is the painter leonardo?")
    assert res.answer == "answer0"  # every call read nothing: the no-retrieval prompt
    assert all(not t.selected for t in res.turns)
    empty = res.empty_turns
    assert empty and all("smaller than every memory item" in t.empty_reason for t in empty)
    row = res.to_row()
    assert row["empty_contexts"] == len(empty) and "budget of 0 tokens" in row["empty_note"]
    assert res.turns[0].empty_reason is None  # the first plan reads an empty memory: nothing to record


def test_unknown_strategy_role_and_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="unknown context strategy 'nope'; choose one of: full-context, "
                                          "rcr-iterative, rcr-oneshot, static"):
        _loop("nope").answer("who is it?")
    with pytest.raises(ConfigError, match="unknown role 'critic'; roles: answerer, planner, searcher"):
        LoopSpec(agent_roles={"planner": "critic", "searcher": "searcher", "answerer": "answerer"}).validate()
    critic = LoopSpec.from_mapping({"roles": {"critic": {"keywords": ["why"], "budget_offset": 64,
                                                         "priorities": {"plan": {"fact": 1.0}}},
                                              "planner": {"budget_offset": 0}}})
    assert critic.roles["critic"].budget_offset == 64 and critic.budget("planner") == 512
    assert critic.roles["planner"].keywords == DEFAULT_ROLES["planner"].keywords  # merged over the default
    with pytest.raises(ConfigError, match=r"\[context\].roles.critic must be a table with keys among"):
        LoopSpec.from_mapping({"roles": {"critic": {"colour": 1}}})
    with pytest.raises(ConfigError, match=r"priorities: stages are plan, search, answer"):
        LoopSpec.from_mapping({"roles": {"critic": {"priorities": {"review": {"fact": 1}}}}})
    base = {"run": {"name": "x"}, "data": {"dataset": "demo"}, "arms": [{"name": "none", "retriever": "none"}]}
    cfg = validate({**base, "generation": {"context_budget": 256}})
    assert cfg.context["rounds"] == 2 and cfg.context["strategies"] == list(STRATEGIES)
    from ltrr.packing import packing_from_config

    assert packing_from_config(cfg.generation, cfg.context).budget == 256  # the loop's keys do not reach PackSpec
    assert LoopSpec.from_mapping(cfg.context).base_budget == 512
    with pytest.raises(ConfigError, match=r"\[context\].rounds must be an integer in \[1, 3\], got 4"):
        validate({**base, "context": {"rounds": 4}})
    with pytest.raises(ConfigError, match="unknown context strategy 'best'"):
        validate({**base, "context": {"strategies": ["static", "best"]}})
    with pytest.raises(ConfigError, match=r"dedup_threshold must be a number in \(0, 1\]"):
        validate({**base, "context": {"dedup_threshold": 1.5}})
    with pytest.raises(ConfigError, match=r"\[context\].selector: unknown selector"):
        validate({**base, "context": {"selector": "best"}})


def test_fact_replacement_across_rounds_is_logged_and_duplicates_dropped():
    res = _loop("full-context", rounds=2).answer("who is the painter leonardo?")
    log = "\n".join(res.memory.log)
    assert "round 2: fact 'Who discovered leonardo?' replaced" in log
    assert "round 2: dropped r2-s0-passage-0 as a near-duplicate of r1-s0-passage-0" in log  # the same search again
    facts = [it for it in res.memory.items if it.kind == "fact"]
    assert sorted(it.key for it in facts) == ["Where is leonardo located?", "Who discovered leonardo?"]
    assert all(it.round == 2 for it in facts)
    passages = [it.text for it in res.memory.items if it.kind == "passage"]
    assert len(passages) == len(set(passages)) == 3
    # the memory round-trips through YAML; malformed YAML is a DataError
    again = Memory.from_yaml(res.memory.to_yaml())
    assert [it.to_dict() for it in again.items] == [it.to_dict() for it in res.memory.items]
    with pytest.raises(DataError, match="memory YAML is malformed"):
        Memory.from_yaml("items: [")


def test_parse_subquestions_is_robust():
    assert parse_subquestions("Sub-questions:\n1) Who wrote it? 2) When?  When was it written?\n\n* who wrote it?",
                              "Q?", 3) == ["Who wrote it?", "When was it written?"]
    assert parse_subquestions("", "What is it?", 2) == ["What is it?"]
    assert parse_subquestions("a b?\nc d?\ne f?", "q", 2) == ["a b?", "c d?"]


@pytest.mark.parametrize("text, want", [
    # initials, "Q-" words and decimals are text, not bullets
    ("U.S. presidents born in Ohio?", "U.S. presidents born in Ohio?"),
    ("J. K. Rowling wrote which book first?", "J. K. Rowling wrote which book first?"),
    ("Q-learning was introduced by whom?", "Q-learning was introduced by whom?"),
    ("3.5 million people live where?", "3.5 million people live where?"),
    ("B.B. King was born where?", "B.B. King was born where?"),
    # bullets are still stripped
    ("a) Who wrote it?", "Who wrote it?"), ("(b) Who wrote it?", "Who wrote it?"),
    ("c. Who wrote it?", "Who wrote it?"), ("Q1: Who wrote it?", "Who wrote it?"),
    ("Q 2) Who wrote it?", "Who wrote it?"), ("Q: Who wrote it?", "Who wrote it?"),
    ("Sub-question 3: Who wrote it?", "Who wrote it?"), ("1.Who wrote it?", "Who wrote it?"),
    ("(4) Who wrote it?", "Who wrote it?"), ("\u2022 Who wrote it?", "Who wrote it?"),
])
def test_parse_subquestions_strips_bullets_not_initials(text, want):
    assert parse_subquestions(text, "fallback?", 3) == [want]


class TimedLLM(FakeLLM):
    """FakeLLM whose every call reports a quarter of a second of generation."""

    identity = "fake-agents-timed"

    def generate(self, prompts, params=None):
        return [Generation(text=g.text, prompt_tokens=g.prompt_tokens, completion_tokens=g.completion_tokens,
                           latency_s=0.25) for g in super().generate(prompts, params)]


def test_generation_seconds_count_cache_hits_at_their_recorded_latency(tmp_path):
    """generation_s charges a replayed call what it cost when it was made, so a strategy that
    follows another on the same question is not favoured (wall time is kept out of the table)."""
    from ltrr.generation.cache import CachedGenerator, GenerationCache

    gen = CachedGenerator(TimedLLM(), GenerationCache(tmp_path / "g.sqlite"))
    q = _questions().head(1)
    per_query = compare_strategies(q, generator=gen, search=RoutedSearch(FakeRouter()),
                                   spec=LoopSpec(rounds=2, base_budget=64), embedder=BowEmbedder(),
                                   strategy_names=["rcr-oneshot", "rcr-iterative"])
    calls = {r.strategy: len(json.loads(r.turns)) for r in per_query.itertuples()}
    g = per_query.set_index("strategy")["generation_s"]
    assert g["closed-book"] == 0.25 and calls["rcr-iterative"] == 2 * calls["rcr-oneshot"] > 0
    # rcr-iterative's round 1 replays rcr-oneshot's calls from the cache, yet is charged for them
    assert gen.hits > 0 and g["rcr-oneshot"] == 0.25 * calls["rcr-oneshot"]
    assert g["rcr-iterative"] == 0.25 * calls["rcr-iterative"]
    table = summarise(score_answers(per_query, {"q1": ["answer3"]}, metric="em")).set_index("strategy")
    assert table.loc["rcr-iterative", "generation_s"] == 2 * table.loc["rcr-oneshot", "generation_s"]


def _questions():
    return pd.DataFrame({"qid": ["q1", "q2", "q3"], "qtype": ["a", "b", "a"],
                         "question": ["who is the painter leonardo?", "where is the river nile?", "who climbed everest?"],
                         "answers": [["answer3"], ["nile"], ["answer5"]]})


def test_compare_strategies_twice_gives_identical_outputs_and_scores():
    q = _questions()
    runs = [compare_strategies(q, generator=FakeLLM(), search=RoutedSearch(FakeRouter()),
                               spec=LoopSpec(rounds=2, base_budget=64), embedder=BowEmbedder()) for _ in range(2)]
    a, b = runs
    pd.testing.assert_frame_equal(a, b)  # the whole table: wall time is not in it
    assert "runtime_s" not in a.columns
    summaries = [summarise(score_answers(r, dict(zip(q["qid"], q["answers"], strict=True)), metric="em"))
                 for r in runs]
    pd.testing.assert_frame_equal(*summaries)
    assert summaries[0].to_csv(index=False) == summaries[1].to_csv(index=False)  # agents.csv, byte for byte
    # wall time comes apart, one row per table row, for agents_timings.json
    again, timings = compare_strategies(q, generator=FakeLLM(), search=RoutedSearch(FakeRouter()),
                                        spec=LoopSpec(rounds=2, base_budget=64), embedder=BowEmbedder(),
                                        return_timings=True)
    pd.testing.assert_frame_equal(again, a)
    assert timings[["qid", "strategy"]].equals(a[["qid", "strategy"]]) and (timings["runtime_s"] >= 0).all()
    doc = timings_doc(timings, total_s=1.5)
    assert [r["strategy"] for r in doc["per_strategy"]] == ["closed-book", *STRATEGIES] and doc["total_s"] == 1.5
    assert all(r["questions"] == 3 for r in doc["per_strategy"]) and len(doc["per_query"]) == len(a)
    assert a["strategy"].tolist() == (["closed-book", *STRATEGIES]) * 3
    assert a.loc[a["strategy"] == "closed-book", "answer"].eq("answer0").all()
    scored = score_answers(runs[0], dict(zip(q["qid"], q["answers"], strict=True)), metric="em")
    assert {"contains", "f1", "em", "utility"} <= set(scored.columns) and "aqs" not in scored.columns
    assert scored["utility"].equals(scored["em"]) and scored["em"].between(0, 1).all()
    table = summarise(scored)
    assert table["strategy"].tolist() == ["closed-book", *STRATEGIES]
    full = table.set_index("strategy").loc["full-context"]
    assert full["token_saving"] == 0.0
    rcr = table.set_index("strategy").loc["rcr-iterative"]
    assert rcr["prompt_tokens"] < full["prompt_tokens"] and 0 < rcr["token_saving"] < 1
    per_agent = table[[f"prompt_tokens_{a}" for a in ("planner", "searcher", "answerer")]].sum(axis=1)
    assert np.allclose(per_agent[table["strategy"] != "closed-book"],
                       table.loc[table["strategy"] != "closed-book", "prompt_tokens"])


def _synthetic(full, rcr, closed):
    rows = []
    for s, vals in (("closed-book", closed), ("full-context", full), ("rcr-iterative", rcr)):
        for i, v in enumerate(vals):
            rows.append({"qid": f"q{i}", "strategy": s, "utility": v, "rounds": 2,
                         "prompt_tokens": 100 if s == "full-context" else 40,
                         **{f"prompt_tokens_{a}": 10 for a in ("planner", "searcher", "answerer")},
                         "empty_contexts": 0, "error": None})
    return pd.DataFrame(rows)


def test_noninferiority_and_the_inconclusive_label():
    rng = np.random.default_rng(0)
    full = rng.uniform(0.6, 1.0, 30)
    t = summarise(_synthetic(full, full - rng.uniform(0, 0.01, 30), np.zeros(30))).set_index("strategy")
    assert t.loc["full-context", "comparison"] == "beats closed-book" and t.loc["full-context", "p_vs_closed_book"] < 0.05
    assert t.loc["rcr-iterative", "comparison"] == "non-inferior" and t.loc["rcr-iterative", "p_noninferior"] < 0.05
    assert t.loc["rcr-iterative", "token_saving"] == pytest.approx(0.6)
    worse = summarise(_synthetic(full, full - 0.3, np.zeros(30))).set_index("strategy")
    assert worse.loc["rcr-iterative", "comparison"] == "not non-inferior"
    # the test rejects for closed-book's side (30 small losses, 3 large gains): not "beats"
    lopsided = np.r_[np.full(30, 0.49), np.full(3, 1.0)]
    split = summarise(_synthetic(lopsided, lopsided, np.r_[np.full(30, 0.5), np.zeros(3)])).set_index("strategy")
    assert split.loc["full-context", "p_vs_closed_book"] < 0.05 and lopsided.mean() > 0.5 * 30 / 33
    assert split.loc["full-context", "comparison"] == "inconclusive"
    same = summarise(_synthetic(full, full, full)).set_index("strategy")  # context does not help
    assert same.loc["full-context", "comparison"] == "inconclusive"
    assert same.loc["rcr-iterative", "comparison"] == "inconclusive"


# ---- end to end --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from test_pipeline_e2e import _dataset, _register_reader

    root = tmp_path_factory.mktemp("agents")
    _register_reader()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LTRR_DATA_DIR", str(root / "data"))
        mp.chdir(root)
        yield root, _dataset(root)


def _config(root: Path, ds: Path, name: str) -> Path:
    """The end-to-end run's config (tests/test_pipeline_e2e.py, dataset ``ds``), one ranker, the
    balanced split, and the loop's base budget."""
    from test_pipeline_e2e import _config as e2e_config

    cfg = e2e_config(root, name, root / "unused", 7)
    text = cfg.read_text().replace('rankers = ["lambdamart-listwise", "svm-pointwise", "ffn-pairwise"]',
                                   'rankers = ["lambdamart-listwise"]')
    text = text.replace('splits = ["balanced", "leave-one-type-out"]\nn_bootstrap = 200',
                        'splits = ["balanced"]\nn_bootstrap = 50')
    assert f'dataset = "{ds}"' in text
    cfg.write_text(text + "[context]\nbase_budget = 96\n")
    return cfg


@pytest.mark.slow  # the whole `ltrr run`
def test_ltrr_run_runs_the_context_stage_only_when_enabled(project, capsys):
    """`[context] enabled = true` adds the multi-agent loop's stage to `ltrr run` (after train,
    before the headline); without it `ltrr run` runs no loop. The agent stage is registered
    the same way and stays off by default."""
    from ltrr.cli import main
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import RUN_ORDER, stages

    root, ds = project
    cfg = _config(root, ds, "st")
    run = Run(load_config(str(cfg)))
    assert not stages.get("context").is_configured(run) and not stages.get("agent").is_configured(run)
    assert RUN_ORDER.index("train") < RUN_ORDER.index("context") < RUN_ORDER.index("headline")
    cfg.write_text(cfg.read_text().replace("[context]\n", "[context]\nenabled = true\n"))
    assert main(["run", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "Multi-agent context loop" in out and "rcr-iterative" in out
    assert out.index("Multi-agent context loop") < out.index("Headline")
    assert (root / "st" / "context" / "agents.csv").is_file()


@pytest.mark.slow  # end to end
def test_context_run_cli_end_to_end(project, capsys):
    from ltrr.cli import main

    root, ds = project
    cfg = _config(root, ds, "ag")
    assert main(["context", "run", str(cfg)]) == 2  # no features to fit the design part's router on yet
    err = capsys.readouterr().err
    assert "ltrr run" in err and err.count("\n") == 1
    assert not (root / "ag" / "models").exists()
    assert main(["run", str(cfg)]) == 0
    capsys.readouterr()
    # `ltrr run` ran the protocol for its headline; without its preregistration the questions
    # come from the partition `ltrr agent eval` uses (the branch with one is tested below)
    import shutil

    shutil.rmtree(root / "ag" / "protocol")
    assert main(["context", "run", str(cfg), "--questions", "6", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "questions: the test part of the design/test partition (seed 7" in out
    assert "rcr-iterative" in out and "token_saving" in out
    from ltrr.config import load_config
    from ltrr.eval.protocol import design_test_partition
    from ltrr.pipeline import Run

    split = design_test_partition(Run(load_config(str(cfg))).dataset.queries, design_size=0.7, random_state=7)
    per_query = pd.read_parquet(root / "ag" / "context" / "agents_per_query.parquet")
    table = pd.read_csv(root / "ag" / "context" / "agents.csv")
    assert per_query["qid"].nunique() == 6 and sorted(per_query["qid"].unique()) == sorted(split.test)[:6]
    assert sorted(per_query["strategy"].unique()) == sorted(["closed-book", *STRATEGIES])
    assert "runtime_s" not in table.columns and "runtime_s" not in per_query.columns
    timings = json.loads((root / "ag" / "context" / "agents_timings.json").read_text())
    assert {r["strategy"] for r in timings["per_strategy"]} == {"closed-book", *STRATEGIES}
    assert len(timings["per_query"]) == len(per_query) and timings["total_s"] > 0
    for col in ("strategy", "questions", "rounds", "prompt_tokens", "prompt_tokens_planner",
                "prompt_tokens_searcher", "prompt_tokens_answerer", "contains", "f1", "em", "utility",
                "token_saving", "delta_utility", "p_vs_closed_book", "p_noninferior", "comparison"):
        assert col in table.columns, col
    assert "aqs" not in table.columns
    t = table.set_index("strategy")
    assert t.loc["rcr-oneshot", "rounds"] == 1 and t.loc["rcr-iterative", "rounds"] == 2
    assert (t["questions"] == 6).all() and t.loc["full-context", "token_saving"] == 0
    agents = per_query[per_query["strategy"] != "closed-book"]
    assert (agents[[f"prompt_tokens_{a}" for a in ("planner", "searcher", "answerer")]].sum(axis=1)
            == agents["prompt_tokens"]).all()
    assert set("|".join(agents["arms"]).split("|")) <= {"bm25", "bm25-top1", "none"}
    assert main(["context", "run", str(cfg), "--strategies", "static,best"]) == 2
    assert "unknown context strategy 'best'" in capsys.readouterr().err
    # budgets are chosen on design questions: their tables go to a folder of their own
    assert main(["context", "run", str(cfg), "--part", "design", "--questions", "2", "--rounds", "1",
                 "--token-budget", "64", "--strategies", "rcr-iterative"]) == 0
    assert "questions: the design part of the design/test partition (seed 7" in capsys.readouterr().out
    design = pd.read_parquet(root / "ag" / "context" / "design-B64-T1" / "agents_per_query.parquet")
    assert sorted(design["qid"].unique()) == sorted(split.train)[:2]
    with pytest.raises(SystemExit) as exc:
        main(["context", "run", str(cfg), "--part", "train"])
    assert exc.value.code == 2 and "invalid choice: 'train'" in capsys.readouterr().err
    # with the protocol's preregistration, the questions come from its test part

    prereg = root / "ag" / "protocol" / "seed-7" / "preregistration.json"
    prereg.parent.mkdir(parents=True)
    prereg.write_text(json.dumps({"design_size": 0.7, "router": "ltrr:lambdamart-listwise"}))
    assert main(["context", "run", str(cfg), "--questions", "3", "--rounds", "1", "--strategies",
                 "rcr-iterative,full-context"]) == 0
    assert "questions: the protocol's test part (seed 7)" in capsys.readouterr().out
    test = split.test
    got = pd.read_parquet(root / "ag" / "context" / "agents_per_query.parquet")
    assert sorted(got["qid"].unique()) == sorted(test)[:3]
    assert sorted(got["strategy"].unique()) == ["closed-book", "full-context", "rcr-iterative"]


@pytest.mark.slow  # the whole `ltrr run`, then `ltrr context run`
def test_the_searcher_routes_with_a_router_held_out_from_the_test_part(project, capsys):
    """By default `ltrr context run` routes with the router fitted on the protocol's design part
    alone (models/<ranker>-design), fitting it when it is missing, as `ltrr train --part design`
    does, and skipping that fit when its inputs are unchanged. `--router-part all` is the router
    `ltrr train` fits on every query (in-sample for the test questions), one clear error when it
    is not there; the test part is never a training part."""
    import shutil

    from ltrr.cli import main
    from ltrr.config import load_config
    from ltrr.eval.protocol import design_test_partition
    from ltrr.pipeline import Run

    root, ds = project
    cfg = _config(root, ds, "ho")
    assert main(["run", str(cfg)]) == 0
    capsys.readouterr()
    args = ["context", "run", str(cfg), "--questions", "2", "--rounds", "1", "--strategies", "rcr-iterative"]
    model = root / "ho" / "models" / "lambdamart-listwise-design"
    assert not model.exists()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[train] start" in out and "router lambdamart-listwise-design" in out
    assert "questions: the protocol's test part (seed 7)" in out
    run = Run(load_config(str(cfg)))
    design, source = run.protocol_part("design")
    assert source == "the protocol's design part (seed 7)"  # `ltrr run` ran the protocol
    saved = json.loads((model / "router.json").read_text())
    full = json.loads((root / "ho" / "models" / "lambdamart-listwise" / "router.json").read_text())
    n_design = len(design & set(pd.read_parquet(root / "ho" / "labels" / "labels.parquet")["qid"]))
    assert saved["n_train_queries"] == n_design < full["n_train_queries"]
    assert design.isdisjoint(run.protocol_part("test")[0])
    q = run.dataset.queries
    split = design_test_partition(q.reset_index(drop=True), design_size=0.7, random_state=7)  # every query
    complete = set(pd.read_parquet(root / "ho" / "labels" / "labels.parquet")["qid"].astype(str))
    assert design == set(split.train) & complete
    assert main(["train", str(cfg), "--part", "design"]) == 0  # the same fit: skipped
    assert "[train] skipped" in capsys.readouterr().out
    assert main([*args, "--router-part", "design"]) == 0
    out = capsys.readouterr().out
    assert "[train] skipped" in out and "router lambdamart-listwise-design" in out
    with pytest.raises(SystemExit) as exc:
        main(["train", str(cfg), "--part", "test"])
    assert exc.value.code == 2 and "invalid choice: 'test'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([*args, "--router-part", "test"])
    assert exc.value.code == 2 and "invalid choice: 'test'" in capsys.readouterr().err

    # every query's router, on request; one error line when `ltrr train` has not made it
    assert main([*args, "--router-part", "all"]) == 0
    assert "router lambdamart-listwise;" in capsys.readouterr().out
    shutil.rmtree(root / "ho" / "models" / "lambdamart-listwise")
    before = (root / "ho" / "context" / "agents.csv").read_bytes()
    assert main([*args, "--router-part", "all"]) == 2
    err = capsys.readouterr().err
    assert "lambdamart-listwise" in err and "ltrr train" in err and err.count("\n") == 1
    assert (root / "ho" / "context" / "agents.csv").read_bytes() == before

    # context packing routes the same test part: one partition, rebuilt in one place
    # (`Run.protocol_partition`), over every query as the protocol made it, a query with labels
    # for some arms only left out of its part and no other query moved
    from ltrr.context.evaluate import routed_test_order

    test, order, _, _ = routed_test_order(run)
    assert set(test) == run.protocol_part("test")[0] and set(order) == set(test)
    path = root / "ho" / "labels" / "labels.parquet"
    labels = pd.read_parquet(path)
    gone = sorted(test)[0]
    labels.drop(index=labels.index[labels["qid"] == gone][:1]).to_parquet(path)  # one arm's label lost
    test2, _, _, _ = routed_test_order(run)
    design2, test_part2 = run.protocol_part("design")[0], run.protocol_part("test")[0]
    assert gone not in set(test2) | design2 | test_part2
    assert set(test2) == test_part2 == set(test) - {gone} and design2 == design
