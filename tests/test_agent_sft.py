"""The multi-round router on a run: scripted SFT trajectories, one TRL SFT run and the evaluation,
end to end on a tiny random Llama (the policy) and the "test-last-doc" reader (the labels) of
tests/test_pipeline_e2e.py, with two-hop bridge questions in the dataset."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ltrr.agent.sft import SFTSpec, script_for

# The torch device of the policy in the end-to-end tests below: "cpu" everywhere CI runs. On a GPU
# machine, `LTRR_TEST_DEVICE=cuda pytest tests/test_agent_sft.py` runs the same SFT, evaluation,
# GRPO, RFT, export and resume on the GPU path (benchmarks/gpu_check.sh).
AGENT_DEVICE = os.environ.get("LTRR_TEST_DEVICE", "cpu")


def _dataset(root: Path) -> Path:
    """The e2e dataset plus six two-hop questions in the demo's multihop format."""
    from test_pipeline_e2e import _dataset as e2e_dataset

    src = e2e_dataset(root)
    ds = root / "ds-agent"
    if ds.exists():
        return ds
    ds.mkdir()
    corpus = (src / "corpus.jsonl").read_text()
    queries = (src / "queries.jsonl").read_text()
    qrels = []
    for j in range(6):
        corpus += json.dumps({"docid": f"a{j}", "title": f"Valley {j}",
                              "text": f"The quiet valley of glimmer{j} was mapped by Zorbex{j} long ago."}) + "\n"
        corpus += json.dumps({"docid": f"b{j}", "title": f"Zorbex{j}",
                              "text": f"Zorbex{j} opened a museum in {1900 + j}."}) + "\n"
        question = (f'___ opened a museum in what year? (The blank is the name missing from: "The quiet valley '
                    f'of glimmer{j} was mapped by ___ long ago.")')
        queries += json.dumps({"qid": f"mul-a{j}", "question": question, "answers": [str(1900 + j)],
                               "qtype": "multihop", "group": f"mh{j}"}) + "\n"
        qrels += [json.dumps({"qid": f"mul-a{j}", "docid": d, "relevance": 1}) for d in (f"a{j}", f"b{j}")]
    (ds / "corpus.jsonl").write_text(corpus)
    (ds / "queries.jsonl").write_text(queries)
    (ds / "qrels.jsonl").write_text("\n".join(qrels) + "\n")
    return ds


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from _tiny_llm import save_tiny_llm
    from test_pipeline_e2e import _config, _register_reader

    root = tmp_path_factory.mktemp("agent")
    _register_reader()
    tiny = root / "tiny"
    save_tiny_llm(tiny, seed=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LTRR_DATA_DIR", str(root / "data"))
        mp.chdir(root)
        ds = _dataset(root)
        cfg = _config(root, "ag", root / "unused", 7)
        text = cfg.read_text().replace(f'dataset = "{root / "ds"}"', f'dataset = "{ds}"')
        text = text.replace('rankers = ["lambdamart-listwise", "svm-pointwise", "ffn-pairwise"]',
                            'rankers = ["lambdamart-listwise"]')
        assert f'dataset = "{ds}"' in text
        text = text.replace('metric = "f1"\n', 'metric = "f1"\nextra_metrics = ["recall", "contains", "em"]\n')
        cfg.write_text(text + f'[agent]\npolicy = "{tiny}"\nmax_new_tokens = 8\nn_eval = 8\nmetric = "f1"\n'
                              f'device = "{AGENT_DEVICE}"\n'
                              'sft = {max_examples = 10, epochs = 1.0, batch_size = 2, grad_accum = 1, '
                              'max_length = 400, save_steps = 2}\n'
                              'grpo = {steps = 1, prompts_per_step = 2, group_size = 2, micro_batch = 2, '
                              'max_new_tokens = 8, beta = 0.0}\n')
        yield root, cfg, tiny


def test_scripts_and_spec():
    assert script_for("1903", [("bm25", "valley of glimmer3", "First I need the missing name."),
                               ("bm25-top1", "Zorbex3 opened a museum in what year?", "Now the year.")]) == [
        "<think>First I need the missing name. bm25 suits this search.</think>\n<search>bm25: valley of glimmer3</search>",
        "<think>Now the year. bm25-top1 suits this search.</think>\n<search>bm25-top1: Zorbex3 opened a museum "
        "in what year?</search>",
        "<think>The information answers the question.</think>\n<answer>1903</answer>"]
    assert SFTSpec.from_mapping({"epochs": 2}).epochs == 2.0
    from ltrr._errors import ConfigError

    for bad, msg in (({"epochs": 0}, "epochs must be a number > 0, got 0"), ({"lr": 1}, "unknown key(s) ['lr']"),
                     ({"batch_size": 1.5}, "batch_size must be an integer >= 1, got 1.5"),
                     ({"warmup_ratio": 1.0}, "warmup_ratio must be below 1"),
                     ({"arm_choice": "best"}, "arm_choice must be one of label, type, got 'best'")):
        with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            SFTSpec.from_mapping(bad)


def _built(root, cfg) -> None:
    """Index, labels and features of the project (the end-to-end test builds them when it runs first)."""
    from ltrr.cli import main

    if not (root / "ag" / "features").exists():
        for stage in ("index", "label", "features"):
            assert main([stage, str(cfg)]) == 0


@pytest.mark.slow
def test_sft_and_eval_end_to_end(project, capsys):
    from ltrr.agent.rewards import format_reward
    from ltrr.agent.trajectory import load_trajectories
    from ltrr.cli import main

    root, cfg, tiny = project
    for stage in ("index", "label", "features"):
        assert main([stage, str(cfg)]) == 0
    capsys.readouterr()
    assert main(["agent", "sft", str(cfg)]) == 0
    out = capsys.readouterr().out
    policy = root / "ag" / "agent" / "policies" / "sft"
    assert f"policy: {policy}" in out
    # a LoRA policy (the default): the adapter and its base model's reference, no full weights
    assert (policy / "adapter_model.safetensors").exists() and (policy / "base_model.json").exists()
    assert not (policy / "model.safetensors").exists()
    rec = json.loads((policy / "sft.json").read_text())
    assert rec["steps"] >= 1 and rec["loss"] and all(x["loss"] > 0 for x in rec["loss"])
    assert not (policy / "checkpoints").exists()
    # --resume reaches the trainer: a folder that holds no exported run is one clear error
    assert main(["agent", "sft", str(cfg), "--out", str(root / "resumed"), "--resume", str(root / "nowhere")]) == 2
    assert "no exported run to resume" in capsys.readouterr().err
    trajs = load_trajectories(root / "ag" / "agent" / "sft_data" / "sft.jsonl")
    assert trajs and rec["examples"] == len(trajs)
    design_mh = [t for t in trajs if t.qid.startswith("mul-")]
    assert design_mh, "the design part's two-hop questions are scripted"
    for t in trajs:
        assert t.stop_reason == "answered" and format_reward(t.text, t.arms)[0] == 0, t.text
        # the loss mask: model-written ids are labels, prompt and injected ids are -100
        assert [x for x, m in zip(t.ids, t.mask, strict=True) if m] == [x for x in t.labels() if x != -100]
        assert t.mask.count(1) > 0 and t.mask[: t.prompt_tokens] == [0] * t.prompt_tokens
    for t in design_mh:  # one search per hop, each reading its gold document
        j = t.qid.removeprefix("mul-a")
        assert len(t.searches) == 2 and [s.docids for s in t.searches] == [[f"a{j}"], [f"b{j}"]]
    # the evaluation: the SFT policy against the baselines, on test questions only
    assert main(["agent", "eval", str(cfg), "--policy", str(policy), "--questions", "6"]) == 0
    out = capsys.readouterr().out
    assert "| multi-round router |" in out and "| LTRR top-1 |" in out and "| oracle arm |" in out
    doc = json.loads((root / "ag" / "agent" / "eval-sft" / "eval.json").read_text())
    from ltrr.agent.run import partition
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    design, test = partition(Run(load_config(str(cfg))))
    assert doc["n"] == 6 and set(doc["questions"]) <= set(test) and doc["n_multihop"] >= 1
    assert doc["seed"] == load_config(str(cfg)).seed  # what `ltrr agent sweep` seeds its bootstrap with
    assert 0 <= doc["format_valid_rate"] <= 1 and set(doc["agent"]) == {"recall", "contains", "f1", "em"}
    assert {t["n"] for k, t in doc["tests"].items() if k.endswith("| all")} == {6}
    assert not {t.qid for t in trajs} & set(test)  # SFT saw design questions only
    # the same evaluation again comes from the cache
    assert main(["agent", "eval", str(cfg), "--policy", str(policy), "--questions", "6"]) == 0
    again = json.loads((root / "ag" / "agent" / "eval-sft" / "eval.json").read_text())
    assert again["cache"]["misses"] == 0 and again["agent"] == doc["agent"]
    # the snapshot `ltrr status` reads: gone once the eval ends, left stopped by an interrupted one
    from ltrr.progress import describe_progress, read_progress

    snapshot = root / "ag" / "stages" / "agent.progress.json"
    assert not snapshot.exists()
    import ltrr.agent.batching as batching

    real = batching.rollout_many

    def interrupted(jobs, *, batch=1, progress=None):
        real(jobs[:2], batch=batch, progress=progress)
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batching, "rollout_many", interrupted)
        assert main(["agent", "eval", str(cfg), "--policy", str(policy), "--questions", "6"]) == 130  # Ctrl-C
    snap = read_progress(snapshot)
    assert (snap["state"], snap["done"], snap["total"], snap["phase"]) == ("stopped", 2, 6, "agent eval (eval-sft)")
    assert describe_progress(snap)[1].startswith("agent eval (eval-sft) stopped at 2 of 6 items (33%)")
    assert main(["agent", "eval", str(cfg), "--policy", str(policy), "--questions", "6"]) == 0
    assert not snapshot.exists()
    # --leave-out keeps a pool arm out of the prompt: never shown, never called, its own folder
    assert main(["agent", "eval", str(cfg), "--policy", str(policy), "--questions", "2", "--leave-out", "bm25-top1"]) == 0
    gone = root / "ag" / "agent" / "eval-sft-without-bm25-top1"
    assert json.loads((gone / "eval.json").read_text())["left_out_arms"] == ["bm25-top1"]
    left = load_trajectories(gone / "trajectories.jsonl")
    assert left and all("bm25-top1" not in t.prompt and all(s.arm != "bm25-top1" for s in t.searches) for t in left)
    assert doc["left_out_arms"] == []
    # --neutral-ids: every arm under a neutral id, the same ids on a second run (from the cache)
    assert main(["agent", "eval", str(cfg), "--policy", str(policy), "--questions", "2", "--neutral-ids"]) == 0
    hidden = root / "ag" / "agent" / "eval-sft-neutral-ids"
    first = json.loads((hidden / "eval.json").read_text())
    named = load_trajectories(hidden / "trajectories.jsonl")
    assert first["neutral_ids"] and not doc["neutral_ids"]
    for t in named:
        assert t.arms and all(re.fullmatch(r"arm-\d+", a) for a in t.arms)
        assert "- bm25:" not in t.prompt and "- arm-" in t.prompt
    assert main(["agent", "eval", str(cfg), "--policy", str(policy), "--questions", "2", "--neutral-ids"]) == 0
    again = json.loads((hidden / "eval.json").read_text())
    assert again["cache"]["misses"] == 0 and again["cache"]["hits"] > 0
    assert [t.prompt for t in load_trajectories(hidden / "trajectories.jsonl")] == [t.prompt for t in named]


@pytest.mark.slow
def test_bad_agent_input_is_one_line(project, capsys, monkeypatch):
    from ltrr.cli import main

    root, cfg, tiny = project
    _built(root, cfg)
    capsys.readouterr()
    base = cfg.read_text()
    assert main(["agent", "eval", str(cfg), "--policy", str(root / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no policy model" in err[0]
    cfg.write_text(base.replace("[agent]\n", '[agent]\nholdout_arms = ["dense"]\n'))
    assert main(["agent", "eval", str(cfg)]) == 2
    assert "holdout_arms names ['dense'], not arms of the pool" in capsys.readouterr().err
    cfg.write_text(base)
    # --leave-out: an unknown arm, or every retrieval arm, is one line before any rollout
    assert main(["agent", "eval", str(cfg), "--leave-out", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--leave-out names ['nope'], not arms of the pool" in err[0]
    assert main(["agent", "eval", str(cfg), "--leave-out", "bm25", "--leave-out", "bm25-top1"]) == 2
    assert "leaves the prompt no retrieval arm" in capsys.readouterr().err
    # a held-out arm is out of the prompt, so the SFT scripts never call it either
    from ltrr.agent.run import labels_table, partition, policy_lm
    from ltrr.agent.sft import SFTSpec as Spec
    from ltrr.agent.sft import build_sft_trajectories
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    cfg.write_text(base.replace("[agent]\n", '[agent]\nholdout_arms = ["bm25-top1"]\n'))
    run = Run(load_config(str(cfg)))
    trajs = build_sft_trajectories(run, policy_lm(run, ""), labels_table(run), partition(run)[0],
                                   Spec.from_mapping(run.config.agent["sft"]))
    assert trajs and all(s.arm == "bm25" for t in trajs for s in t.searches) and any(t.searches for t in trajs)
    assert all("bm25-top1" not in t.prompt for t in trajs)
    # `agent eval --holdout` puts it in the prompt as an unseen arm: by its config, no strengths
    from ltrr.agent.run import make_loop

    unseen = make_loop(run, policy_lm(run, ""), labels_table(run), design=partition(run)[0], holdout=[])
    assert "bm25-top1" in unseen.arm_names
    assert "bm25" in unseen.strengths and "bm25-top1" not in unseen.strengths
    cfg.write_text(base.replace("max_examples = 10", "max_examples = 0"))
    assert main(["agent", "sft", str(cfg)]) == 2
    assert "max_examples must be an integer >= 1, got 0" in capsys.readouterr().err
    cfg.write_text(base)
    # the LTRR baseline's feature tables missing: the evaluation stops before any rollout, not
    # after them (it once decoded for an hour, then failed)
    raw = Run(load_config(str(cfg))).features_dir / "raw.parquet"
    moved = raw.with_name("raw.parquet.away")
    raw.rename(moved)
    import ltrr.agent.batching

    def no_rollouts(*a, **k):
        raise AssertionError("rolled out before checking its inputs")

    monkeypatch.setattr(ltrr.agent.batching, "rollout_many", no_rollouts)
    try:
        assert main(["agent", "eval", str(cfg), "--questions", "2"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "needs features/ag/raw.parquet, the output of stage features" in err[0]
    finally:
        moved.rename(raw)


@pytest.mark.slow
def test_sft_scripts_call_the_best_shown_arm_by_its_shown_name(project):
    """Each SFT example shows the arms its own way (ltrr.agent.presentation): the draws repeat,
    a renamed example never names a real arm, a left-out arm is never shown nor called, and the
    script calls the arm the plain script calls, or, when that one is left out, another."""
    import re

    from ltrr.agent.rewards import format_reward
    from ltrr.agent.run import labels_table, partition, policy_lm
    from ltrr.agent.sft import build_sft_trajectories
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    root, cfg, tiny = project
    _built(root, cfg)
    run = Run(load_config(str(cfg)))
    lm, labels, design = policy_lm(run, ""), labels_table(run), partition(run)[0]

    def build(shuffle, rename, leave, config_only=0):
        spec = SFTSpec.from_mapping({**run.config.agent["sft"], "max_examples": 24, "shuffle_arms": shuffle,
                                     "rename_share": rename, "leave_out_share": leave,
                                     "config_only_share": config_only})
        return build_sft_trajectories(run, lm, labels, design, spec)

    real = ["bm25", "bm25-top1", "none"]
    plain = {t.qid: t for t in build(False, 0, 0)}
    assert all(t.arms == real and not t.shown_arms for t in plain.values())
    every = build(True, 1, 1, 1)  # one shown arm of each example described by its config alone
    assert [t.ids for t in every] == [t.ids for t in build(True, 1, 1, 1)]  # the seed repeats the views
    assert len({tuple(t.shown_arms[s] for s in t.arms) for t in every}) > 1  # the order varies
    compared = called_plain = 0
    for t in every:
        (plain_line,) = [x for x in t.prompt.splitlines() if x.startswith("- arm-") and "no measured strengths" in x]
        called_plain += f"<search>{plain_line[2:].split(':')[0]}: " in t.text
        assert format_reward(t.text, t.arms)[0] == 0 and t.stop_reason == "answered"
        named = [n for n in real if re.search(rf"(?<![\w+-]){re.escape(n)}(?![\w+-])", t.prompt + t.text)]
        assert not named, (named, t.prompt + t.text)
        assert len(t.arms) == 2 and all(re.fullmatch(r"arm-[1-3]", s) for s in t.arms)
        (left_out,) = set(real) - set(t.shown_arms.values())
        back = {a: s for s, a in t.shown_arms.items()}
        for s in t.searches:
            assert s.valid and s.arm != left_out and f"<search>{back[s.arm]}: " in t.text
        if t.qid in plain:
            before = [s.arm for s in plain[t.qid].searches]
            if left_out not in before:
                assert [s.arm for s in t.searches] == before
            else:  # the best arm shown instead: the other retrieval arm, or no search when it is worse
                compared += 1
                assert [s.arm for s in t.searches] != before and (t.searches or len(before) == 1)
    assert compared > 0 and any(len(t.searches) == 2 for t in every)  # two-hop scripts too
    assert called_plain > 0  # a script calls the arm described by its config alone where it is best


def test_type_scripts_call_each_types_design_best_arm(project):
    """``arm_choice = "type"``: the label decides whether a single-hop question searches, the
    question's type which arm (the best design-part mean of the type, the cheaper on ties); a hop
    takes an arm that finds its document at rank 1, first in the ``multihop`` type's order. The
    labels are set so that one question's own best arm is not its type's."""
    from ltrr.agent.run import labels_table, partition
    from ltrr.agent.sft import script_plans
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.routers.reference import utility_frame

    root, cfg, tiny = project
    _built(root, cfg)
    run = Run(load_config(str(cfg)))
    labels, design = labels_table(run).copy(), partition(run)[0]
    arms, retrieval = ["bm25", "bm25-top1", "none"], ["bm25", "bm25-top1"]
    q = run.dataset.queries.set_index("qid")["qtype"].astype(str)
    in_design = labels["qid"].isin(design)
    single_types = sorted(set(q[labels.loc[in_design, "qid"]]) - {"multihop"})
    t = next(t for t in single_types if (q[sorted(set(design))] == t).sum() >= 3)
    of_t = sorted(qid for qid in set(design) if q.get(qid) == t)
    odd = of_t[0]  # bm25-top1 is its own best arm; bm25 is the type's, by far
    for qid in of_t:
        for arm, u in (("bm25", 0.5 if qid == odd else 1.0), ("bm25-top1", 0.9 if qid == odd else 0.0), ("none", 0.0)):
            labels.loc[(labels["qid"] == qid) & (labels["arm"] == arm), "utility"] = u
    # on multihop the dearer bm25 leads the type's order; both arms find every hop at rank 1 (the
    # same retriever), and the label scripts take the cheapest finder, bm25-top1
    mh = labels["qid"].map(q).eq("multihop") & in_design
    labels.loc[mh, "utility"] = labels.loc[mh, "arm"].map({"bm25": 1.0, "bm25-top1": 0.0, "none": 0.0})
    plain = {"shuffle_arms": False, "rename_share": 0, "leave_out_share": 0, "config_only_share": 0}

    def plans(choice):
        spec = SFTSpec.from_mapping({**run.config.agent["sft"], "max_examples": 40, **plain, "arm_choice": choice})
        return {qid: plan for qid, _, plan in script_plans(run, labels, design, spec, arms)}

    by_label, by_type = plans("label"), plans("type")
    assert by_label.keys() == by_type.keys() and odd in by_type
    assert [a for a, _, _ in by_label[odd]] == ["bm25-top1"] and [a for a, _, _ in by_type[odd]] == ["bm25"]
    U = utility_frame(labels)
    des = U.index[U.index.isin(design)]
    means = U.loc[des, retrieval].groupby(q.reindex(des).to_numpy()).mean()
    costs = run.pool.load(run.index_dir).costs
    best = {t: max(retrieval, key=lambda a, r=row: (float(r[a]), -costs[a])) for t, row in means.iterrows()}
    single = [qid for qid in by_type if q[qid] != "multihop"]
    for qid in single:  # the same questions search, each with its type's arm
        assert bool(by_type[qid]) == bool(by_label[qid])
        assert all(arm == best[q[qid]] for arm, _, _ in by_type[qid])
    mh_order = sorted(retrieval, key=lambda a: (-float(means.loc["multihop", a]), costs[a], a))
    hops = 0
    for qid, plan in by_type.items():
        if q[qid] == "multihop":  # the same hops and sub-queries
            assert [s for _, s, _ in plan] == [s for _, s, _ in by_label[qid]]
            # the label scripts' arm (the cheapest finder) finds the hop too, so the type's pick is
            # it or an arm before it in the multihop order
            for (arm, _, _), (cheapest, _, _) in zip(plan, by_label[qid], strict=True):
                assert mh_order.index(arm) <= mh_order.index(cheapest)
                assert (arm, cheapest) == ("bm25", "bm25-top1")
                hops += 1
    assert hops > 0 and mh_order[0] == "bm25"


@pytest.mark.slow
def test_grpo_and_rft_commands(project, capsys):
    """`ltrr agent train` (one GRPO step) and `ltrr agent rft` from the tiny policy, and their bad input."""
    from ltrr.cli import main

    root, cfg, tiny = project
    _built(root, cfg)
    capsys.readouterr()
    out_dir = root / "ag" / "agent" / "policies" / "grpo-test"
    assert main(["agent", "train", str(cfg), "--from", str(tiny), "--alpha", "0.5", "--out", str(out_dir)]) == 0
    assert f"policy: {out_dir} (1 steps, 4 rollouts" in capsys.readouterr().out
    rec = json.loads((out_dir / "grpo.json").read_text())
    assert rec["alpha"] == 0.5 and len(rec["router_log"]) == 1 and (out_dir / "training.png").exists()
    from ltrr.agent.run import partition
    from ltrr.agent.trajectory import load_trajectories
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    design, test = partition(Run(load_config(str(cfg))))
    trained = load_trajectories(out_dir / "rollouts" / "step-000001.jsonl")
    assert len(trained) == 4 and {t.qid for t in trained} <= set(design)  # RL never sees a test group
    rft = root / "ag" / "agent" / "policies" / "rft-test"
    code = main(["agent", "rft", str(cfg), "--from", str(tiny), "--rollouts", "4", "--out", str(rft)])
    # a random tiny policy answers nothing right: rejection sampling keeps nothing, and says so
    assert code == 2 and "rejection sampling kept no correct rollout" in capsys.readouterr().err
    assert not (rft / "rft.json").exists()
    # its samples resume for the same start policy only: another one (a retrained SFT) samples afresh
    samples = rft.with_name(rft.name + "-samples.jsonl")
    assert samples.exists() and json.loads(samples.with_suffix(".json").read_text())["seed"] == 7
    first = samples.read_bytes()
    assert main(["agent", "rft", str(cfg), "--from", str(tiny), "--rollouts", "4", "--out", str(rft)]) == 2
    assert "another start policy" not in capsys.readouterr().out and samples.read_bytes() == first
    record = json.loads(samples.with_suffix(".json").read_text())
    samples.with_suffix(".json").write_text(json.dumps({**record, "policy": "an older policy's digest"}))
    assert main(["agent", "rft", str(cfg), "--from", str(tiny), "--rollouts", "4", "--out", str(rft)]) == 2
    assert "holds samples of another start policy or settings: sampling afresh" in capsys.readouterr().out
    assert json.loads(samples.with_suffix(".json").read_text()) == record
    assert main(["agent", "progress", str(out_dir)]) == 0
    assert "| 1 |" in capsys.readouterr().out
    assert main(["agent", "progress", str(root / "nowhere")]) == 2
    assert "no GRPO run" in capsys.readouterr().err
    # export (what is committed) and resume in another folder, as a fresh clone does
    committed = root / "repo" / "grpo-test"
    assert main(["agent", "export", str(out_dir), str(committed)]) == 0
    assert f"exported: {committed}" in capsys.readouterr().out and (committed / "grpo.json").exists()
    clone = root / "clone" / "grpo-test"
    assert main(["agent", "train", str(cfg), "--from", str(tiny), "--alpha", "0.5", "--out", str(clone),
                 "--resume", str(committed)]) == 0
    # a finished run trains nothing more, and its record and plot stay the committed bytes, so
    # exporting it again changes no committed file
    assert "(finished: 1 steps, 4 rollouts; nothing trained, its record kept)" in capsys.readouterr().out
    assert (clone / "grpo.json").read_bytes() == (committed / "grpo.json").read_bytes() \
        == (out_dir / "grpo.json").read_bytes()
    assert (clone / "training.png").read_bytes() == (committed / "training.png").read_bytes()
    assert (clone / "adapter_model.safetensors").read_bytes() == (out_dir / "adapter_model.safetensors").read_bytes()
    before = {p.relative_to(committed): p.read_bytes() for p in committed.rglob("*") if p.is_file()}
    assert main(["agent", "export", str(clone), str(committed)]) == 0
    capsys.readouterr()
    assert {p.relative_to(committed): p.read_bytes() for p in committed.rglob("*") if p.is_file()} == before
    # --time-budget: a two-step run whose budget no step fits pauses after step 1 at a complete
    # checkpoint, writes no policy, and the same command (no budget now) finishes it
    legs = root / "ag" / "agent" / "policies" / "grpo-legs"
    argv = ["agent", "train", str(cfg), "--from", str(tiny), "--alpha", "0.5", "--steps", "2", "--out", str(legs)]
    assert main([*argv, "--time-budget", "0.001"]) == 0
    text = capsys.readouterr().out
    assert f"paused: {legs} at step 1 of 2" in text and "ltrr agent export" in text
    assert not (legs / "grpo.json").exists() and not (legs / "adapter_model.safetensors").exists()
    assert [p.name for p in sorted((legs / "checkpoints").glob("checkpoint-*"))] == ["checkpoint-1"]
    assert main(argv) == 0
    assert f"policy: {legs} (2 steps" in capsys.readouterr().out
    done = json.loads((legs / "grpo.json").read_text())
    assert done["resumed"] and done["steps"] == 2 and [r["step"] for r in done["router_log"]] == [1, 2]
    kept = (legs / "grpo.json").read_bytes()
    assert main(argv) == 0  # run again when finished: nothing is trained or rewritten
    assert "nothing trained, its record kept" in capsys.readouterr().out and (legs / "grpo.json").read_bytes() == kept
    assert main(["agent", "export", str(root / "nowhere"), str(root / "x")]) == 2
    assert "neither a finished policy nor a complete GRPO or SFT checkpoint" in capsys.readouterr().err
    for argv, msg in ((["--alpha", "1.5"], "--alpha must be a number in [0, 1]"),
                      (["--from", str(root / "nowhere")], "no policy model"),
                      (["--steps", "0"], "steps must be an integer >= 1, got 0"),
                      (["--time-budget", "0"], "--time-budget (seconds) must be a number > 0, got 0.0")):
        assert main(["agent", "train", str(cfg), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err


def test_a_damaged_checkpoint_stamp_starts_afresh_instead_of_crashing(tmp_path):
    """inputs.json was written in place: a truncated one made the next resume a JSONDecodeError."""
    from ltrr.agent.sft import claim_checkpoints

    ckpt = tmp_path / "checkpoints"
    (ckpt / "checkpoint-3").mkdir(parents=True)
    (ckpt / "inputs.json").write_text('{"key": "ab')  # cut short
    said = []
    claim_checkpoints(ckpt, {"seed": 1}, said.append)
    assert said == [f"[agent sft] the checkpoints in {ckpt} are of other inputs; starting afresh"]
    assert not (ckpt / "checkpoint-3").exists() and json.loads((ckpt / "inputs.json").read_text())["key"]
    (ckpt / "checkpoint-4").mkdir()
    claim_checkpoints(ckpt, {"seed": 1}, said.append)  # the same inputs: kept, nothing said
    assert len(said) == 1 and (ckpt / "checkpoint-4").is_dir()
