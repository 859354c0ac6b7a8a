"""GRPO training of the multi-round router (ltrr.agent.grpo) on tiny models: the rollout function's
contract with TRL, the masked loss, two steps end to end, and a kill and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.agent.grpo import GRPOSpec, LiveLM, RouterRollouts, sample_seed

ARMS = [{"name": "bm25", "retriever": "bm25", "k": 1, "cost": 1.0}, {"name": "none", "retriever": "none"}]
COSTS = {"bm25": 1.0, "none": 0.0}
QUESTIONS = {"capital ?": "q1", "capital canberra ?": "q2"}
GOLD = {"q1": ["canberra"], "q2": ["canberra"]}


def _search(arm, query, k):
    return [("d1", "capital Doc")][:k]


@pytest.fixture(scope="module")
def bigram_dir(tmp_path_factory):
    from _tiny_llm import save_bigram_llm

    folder = tmp_path_factory.mktemp("bigram-soft")
    save_bigram_llm(folder, logit=1.0)  # sampled at temperature 1, about half its rollouts stray
    return folder


def _rollouts(folder, out=None, group_size=4, batch=1):
    """A policy (a model folder, or a LoRA policy folder) and its rollout function."""
    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.loop import AgentLoop
    from ltrr.agent.lora import is_adapter_folder, load_policy
    from ltrr.agent.rewards import CostNormaliser
    from ltrr.generation import TransformersGenerator

    policy = load_policy(folder) if is_adapter_folder(folder) else \
        TransformersLM(TransformersGenerator(str(folder), n_threads=1))
    live = LiveLM(policy, policy.hf_model)
    loop = AgentLoop(live, _search, ARMS, k=1, max_turns=2, max_new_tokens=12, max_obs_tokens=16, temperature=1.0)
    return policy, RouterRollouts(lambda qid: loop, QUESTIONS, GOLD, COSTS, CostNormaliser(window=64), group_size,
                                  alpha=0.2, seed=7, out=out, batch=batch)


def _trainer_stub(model, step=0):
    return SimpleNamespace(model=model, state=SimpleNamespace(global_step=step),
                           accelerator=SimpleNamespace(unwrap_model=lambda m: m))


def test_spec_reads_and_refuses():
    spec = GRPOSpec.from_mapping({"steps": 3, "learning_rate": 1, "beta": 0})
    assert (spec.steps, spec.learning_rate, spec.beta, spec.rollouts_per_step) == (3, 1.0, 0.0, 16)
    for bad, msg in (({"steps": 0}, "steps must be an integer >= 1, got 0"), ({"lr": 1}, r"unknown key\(s\) \['lr'\]"),
                     ({"beta": -0.1}, "beta must be a number >= 0"), ({"group_size": 1}, "at least 2"),
                     ({"micro_batch": 3}, "must divide"), ({"group_size": True}, "group_size must be an integer >= 1, got True")):
        with pytest.raises(ConfigError, match=msg):
            GRPOSpec.from_mapping(bad)


def test_sample_seeds_differ_per_sample_and_repeat_per_step():
    seeds = {sample_seed(0, s, i) for s in range(5) for i in range(16)}
    assert len(seeds) == 80 and sample_seed(0, 3, 2) == sample_seed(0, 3, 2) != sample_seed(1, 3, 2)


def test_rollout_func_returns_one_exact_completion_per_prompt_in_blocks(bigram_dir, tmp_path):
    policy, roll = _rollouts(bigram_dir, out=tmp_path)
    prompts = ["capital ?"] * 4 + ["capital canberra ?"] * 4  # as TRL hands them: repeated, in blocks of G
    out = roll(prompts, _trainer_stub(policy.generator.hf_model, step=2))
    assert out["logprobs"] is None
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["env_mask"]) == 8
    assert [t.qid for t in roll.batch] == ["q1"] * 4 + ["q2"] * 4  # each block of G shares one qid
    for p, c, m, t in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"], roll.batch, strict=True):
        assert p + c == t.ids and [0] * len(p) + m == t.mask and len(c) == len(m)
        assert 0 in m or not t.searches  # injected <information> ids are masked out
    assert len({tuple(c) for c in out["completion_ids"][:4]}) > 1, "samples of a group must differ"
    again = roll(prompts, _trainer_stub(policy.generator.hf_model, step=2))
    assert again["completion_ids"] == out["completion_ids"]  # seeds come from the step: a resume repeats them
    rewards = roll.reward(prompts, [None] * 8, out["rollout_index"], trainer_state=SimpleNamespace(global_step=2))
    assert rewards == [t.rewards["total"] for t in roll.batch] and all(-1 <= r <= 1 for r in rewards)
    assert roll.history[-1]["step"] == 3 and 0 <= roll.history[-1]["zero_adv_share"] <= 1
    assert (tmp_path / "rollouts" / "step-000003.jsonl").exists()
    with pytest.raises(DataError, match="mixes questions"):
        roll(["capital ?"] * 3 + ["capital canberra ?"] * 5, _trainer_stub(policy.generator.hf_model))
    with pytest.raises(DataError, match="not a multiple of the group size"):
        roll(["capital ?"] * 3, _trainer_stub(policy.generator.hf_model))
    with pytest.raises(DataError, match="not among the training questions"):
        roll(["elsewhere ?"] * 4, _trainer_stub(policy.generator.hf_model))


def test_batched_rollout_func_keeps_blocks_masks_and_seeds(bigram_dir):
    """The GPU path (`[agent] rollout_batch` > 1): the same blocks, exact masks and per-step
    seeds, its turns decoded together (its samples come from per-row generators, so they are
    not the one-at-a-time path's samples)."""
    policy, roll = _rollouts(bigram_dir, batch=8)
    prompts = ["capital ?"] * 4 + ["capital canberra ?"] * 4
    out = roll(prompts, _trainer_stub(policy.generator.hf_model, step=2))
    assert [t.qid for t in roll.batch] == ["q1"] * 4 + ["q2"] * 4
    for p, c, m, t in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"], roll.batch, strict=True):
        assert p + c == t.ids and [0] * len(p) + m == t.mask
    assert len({tuple(c) for c in out["completion_ids"][:4]}) > 1, "samples of a group must differ"
    assert roll(prompts, _trainer_stub(policy.generator.hf_model, step=2))["completion_ids"] == out["completion_ids"]
    roll.rollout_batch = 3  # another batch composition: the same samples
    assert roll(prompts, _trainer_stub(policy.generator.hf_model, step=2))["completion_ids"] == out["completion_ids"]


def test_masked_positions_get_exactly_zero_loss_gradient(bigram_dir, tmp_path):
    """TRL's GRPO loss, through `env_mask` (TRL's tool_mask): zero gradient at every injected
    position, nonzero at every model-written one."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.lora import device_args
    from ltrr.generation import TransformersGenerator

    policy = TransformersLM(TransformersGenerator(str(bigram_dir), n_threads=1))
    model = policy.generator.hf_model
    # the device arguments ltrr's trainers take (CPU, activation checkpointing off, under its current name)
    args = GRPOConfig(output_dir=str(tmp_path / "o"), **device_args(policy), report_to=[], per_device_train_batch_size=2,
                      num_generations=2, beta=0.0, bf16=False)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **k: [0.0] * len(completions)], args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["capital ?"] * 2}),
                          processing_class=policy.tokenizer, rollout_func=lambda p, t: {})
    prompt = torch.tensor([[2, 20, 22, 14], [2, 20, 22, 14]])
    completion = torch.tensor([[4, 12, 5, 6, 13, 14, 7, 8, 16, 9, 10, 15, 11],
                               [4, 12, 5, 10, 15, 11, 1, 1, 1, 1, 1, 1, 1]])
    env = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1],
                        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    cmask = torch.tensor([[1] * 13, [1] * 6 + [0] * 7])
    captured = {}

    def keep(module, inp, out):
        out.retain_grad()
        captured["hidden"] = out

    # TRL fuses the output head with the log-softmax (no logits tensor), so the gradient is read at
    # the final norm's output: position t's state feeds only the head's prediction of token t + 1
    handle = model.model.norm.register_forward_hook(keep)
    inputs = {"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": completion,
              "completion_mask": cmask, "tool_mask": env, "advantages": torch.tensor([1.0, -0.5]),
              "num_items_in_batch": (cmask * env).sum()}
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop otherwise
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    handle.remove()
    # the state at position P + j - 1 predicts completion token j
    grad = captured["hidden"].grad[:, prompt.shape[1] - 1: prompt.shape[1] - 1 + completion.shape[1]]
    per_position = grad.abs().sum(-1)
    live = (cmask * env).bool()
    assert torch.all(per_position[~live] == 0), per_position
    assert torch.all(per_position[live] > 0), per_position


@pytest.mark.slow
def test_two_grpo_steps_end_to_end(bigram_dir, tmp_path):
    from ltrr.agent.grpo import train_grpo

    policy, roll = _rollouts(bigram_dir, out=tmp_path / "pol")
    spec = GRPOSpec(steps=2, prompts_per_step=2, group_size=4, micro_batch=4, learning_rate=1e-2, beta=0.0,
                    max_new_tokens=12, save_steps=1, adapter="full")  # the LoRA default: the kill-and-resume test
    before = {k: v.clone() for k, v in policy.generator.hf_model.state_dict().items()}
    rec = train_grpo(policy, roll, list(QUESTIONS), tmp_path / "pol", spec, seed=7, log=lambda s: None)
    assert rec["steps"] == 2 and rec["rollouts"] == 16 and len(rec["router_log"]) == 2
    assert [r["step"] for r in rec["router_log"]] == [1, 2]
    for key in ("reward", "frac_reward_zero_std", "entropy", "router/format_valid", "router/searches"):
        assert all(key in h for h in rec["trl_log"]), key
    assert any(r["within_group_var"] > 0 for r in rec["router_log"]), "the soft bigram model's groups must vary"
    from safetensors.torch import load_file

    saved = tmp_path / "pol"
    assert (saved / "model.safetensors").exists() and (saved / "grpo.json").exists()
    assert rec["adapter"] == {"adapter": "full"} and not (saved / "adapter_config.json").exists()
    after = load_file(saved / "model.safetensors")
    assert any(not bool((before[k] == after[k]).all()) for k in after), "two steps must move the weights"
    shared = policy.generator.hf_model.state_dict()  # a copy trained: the process's loaded model is untouched
    assert all(bool((before[k] == shared[k]).all()) for k in before)
    from ltrr.agent.lora import export_run

    with pytest.raises(ConfigError, match="full-weight policy"):  # 540 MB for SmolLM2: not committed
        export_run(saved, tmp_path / "exported")
    assert len(list((saved / "rollouts").glob("step-*.jsonl"))) == 2
    from ltrr.agent.rl import plot_training

    assert plot_training(rec, tmp_path / "t.png").stat().st_size > 0


_TRAIN_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from test_agent_grpo import _rollouts
from ltrr.agent.grpo import GRPOSpec, train_grpo
policy, roll = _rollouts(Path({folder!r}), out=Path({out!r}), group_size=2)
import time
loop = roll.loop_for("q1")
fast = loop.search
loop.search = lambda arm, query, k: (time.sleep(0.3), fast(arm, query, k))[1]  # slow steps: a kill lands mid-run
spec = GRPOSpec(steps=4, prompts_per_step=2, group_size=2, micro_batch=2, learning_rate=1e-3, beta=0.05,
                max_new_tokens=12, save_steps=1)
train_grpo(policy, roll, ["capital ?", "capital canberra ?"], Path({out!r}), spec, seed=7, log=print)
"""


@pytest.fixture(scope="module")
def bigram_sft(bigram_dir, tmp_path_factory):
    """A LoRA SFT policy of the soft bigram model (one step on one search turn)."""
    from types import SimpleNamespace

    from ltrr.agent.sft import SFTSpec, train_sft

    policy, _ = _rollouts(bigram_dir)
    ids = policy.encode("user : capital assistant : <think> plan </think> <search> bm25: capital </search>")
    out = tmp_path_factory.mktemp("bigram-sft") / "sft"
    train_sft([SimpleNamespace(ids=ids, mask=[0] * 4 + [1] * (len(ids) - 4))], policy, out,
              SFTSpec(epochs=1.0, batch_size=1, grad_accum=1, learning_rate=1e-2, max_length=64), seed=1,
              log=lambda s: None)
    return out


@pytest.mark.slow
def test_kill_and_resume_continue_the_step_count_and_optimiser(bigram_sft, tmp_path):
    """GRPO from a LoRA SFT policy (its adapter trains further; TRL's frozen copy of it, ``ref``,
    is the KL reference), killed after a checkpoint, exported as it is committed (`ltrr agent
    export`) and resumed in a new folder, as on a fresh clone: the step count and AdamW's state
    go on, and the final adapter and optimiser state are an uninterrupted run's."""
    import torch
    from safetensors.torch import load_file

    from ltrr.agent.grpo import train_grpo
    from ltrr.agent.lora import export_run

    out = tmp_path / "pol"
    script = _TRAIN_SCRIPT.format(tests=str(Path(__file__).parent), folder=str(bigram_sft), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "LTRR_PROGRESS": "0"})
    marker = out / "checkpoints" / "checkpoint-2" / "router_state.json"
    deadline = time.time() + 120
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert marker.exists(), "the run died before its second checkpoint"
    assert not (out / "grpo.json").exists()
    killed_at = max(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("checkpoint-*")
                    if (p / "router_state.json").exists())
    assert 2 <= killed_at < 4
    saved = json.loads((out / "checkpoints" / f"checkpoint-{killed_at}" / "router_state.json").read_text())
    assert len(saved["prompt"]) == 16  # the prompt's digest, checked on resume
    from ltrr.agent.rl import checkpoint_record, progress_table

    so_far = checkpoint_record(out)  # what `ltrr agent progress` shows of a run in pieces
    assert so_far["steps"] == killed_at and [r["step"] for r in so_far["router_log"]] == list(range(1, killed_at + 1))
    assert progress_table(so_far).count("\n") == killed_at + 1
    # what is committed: the adapter, optimiser, scheduler, step, RNG states and normaliser; no pickle
    committed = tmp_path / "repo" / "grpo"
    doc = export_run(out, committed)
    ck = f"checkpoints/checkpoint-{killed_at}"
    # (not TRL's frozen reference adapter ref/: a copy of the start policy's, which TRL makes again)
    assert (out / ck / "ref" / "adapter_model.safetensors").exists()
    assert set(doc["files"]) == {"checkpoints/inputs.json"} | {
        f"{ck}/{n}" for n in ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
                              "rng_state.pth", "trainer_state.json", "router_state.json")}
    fresh = tmp_path / "clone" / "pol"
    spec = GRPOSpec(steps=4, prompts_per_step=2, group_size=2, micro_batch=2, learning_rate=1e-3, beta=0.05,
                    max_new_tokens=12, save_steps=1)
    policy, roll = _rollouts(bigram_sft, out=fresh, group_size=2)
    lines: list[str] = []
    rec = train_grpo(policy, roll, ["capital ?", "capital canberra ?"], fresh, spec, seed=7, log=lines.append,
                     resume_from=committed)
    assert f"[agent train] {committed}: resuming {fresh / ck}" in lines
    assert rec["resumed"] and any("resuming from" in s and f"checkpoint-{killed_at}" in s for s in lines)
    assert rec["steps"] == 4 and rec["adapter"]["adapter"] == "lora"
    assert [r["step"] for r in rec["router_log"]] == [1, 2, 3, 4]  # the killed leg's steps, then the rest
    assert [h["step"] for h in rec["trl_log"]] == [1, 2, 3, 4] and all("kl" in h for h in rec["trl_log"])
    opt = torch.load(fresh / "checkpoints" / "checkpoint-4" / "optimizer.pt", weights_only=True)
    assert {float(s["step"]) for s in opt["state"].values()} == {4.0}  # AdamW's count went on, not from zero
    assert json.loads((fresh / "checkpoints" / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    # the same run uninterrupted ends with the same adapter and optimiser state
    policy, roll = _rollouts(bigram_sft, out=tmp_path / "whole", group_size=2)
    whole = train_grpo(policy, roll, ["capital ?", "capital canberra ?"], tmp_path / "whole", spec, seed=7,
                       log=lambda s: None)
    assert not whole["resumed"] and whole["router_log"] == rec["router_log"]
    a, b = load_file(fresh / "adapter_model.safetensors"), load_file(tmp_path / "whole" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(bigram_sft / "adapter_model.safetensors")  # the SFT adapter trained further
    assert start.keys() == a.keys() and any(not torch.equal(a[k], start[k]) for k in a)
    ref = torch.load(tmp_path / "whole" / "checkpoints" / "checkpoint-4" / "optimizer.pt", weights_only=True)
    for i, st in opt["state"].items():
        assert torch.equal(st["exp_avg"], ref["state"][i]["exp_avg"])
        assert torch.equal(st["exp_avg_sq"], ref["state"][i]["exp_avg_sq"])


def test_a_checkpoint_of_another_prompt_is_refused_and_an_old_one_resumed(tmp_path):
    """`resume_state`: a checkpoint records the digest of its prompt's arm descriptors (arms,
    measured strengths, types, turn budget); the same digest resumes, another one (labels
    changed since) is a `ConfigError` with the normaliser untouched, and a checkpoint that
    predates the digest resumes with a line saying it was not checked."""
    from ltrr.agent.grpo import resume_state
    from ltrr.agent.rewards import CostNormaliser

    def rollouts(strength):
        loop = SimpleNamespace(arms=["bm25", "none"], strengths={"bm25": {"cloze": strength}},
                               retriever_types={"bm25": "bm25"}, max_turns=2)
        return RouterRollouts(lambda qid: loop, {"capital ?": "q1"}, {"q1": ["canberra"]}, {"bm25": 1.0, "none": 0.0},
                              CostNormaliser(window=4), 2)

    same, other = rollouts(0.5), rollouts(0.6)
    assert same.prompt_digest() == rollouts(0.5).prompt_digest() != other.prompt_digest()
    saved = CostNormaliser(window=4)
    saved.update([3.0, 5.0])
    last = tmp_path / "checkpoint-2"
    last.mkdir()
    state = {"normaliser": saved.to_dict(), "history": [{"step": 1}, {"step": 2}], "prompt": same.prompt_digest()}
    (last / "router_state.json").write_text(json.dumps(state))
    lines: list[str] = []
    with pytest.raises(ConfigError, match="other arm descriptors"):
        resume_state(last, other, other.prompt_digest(), lines.append)
    assert other.history == [] and other.normaliser.to_dict() == CostNormaliser(window=4).to_dict()
    resume_state(last, same, same.prompt_digest(), lines.append)
    assert same.history == state["history"] and same.normaliser.to_dict() == saved.to_dict()
    del state["prompt"]
    (last / "router_state.json").write_text(json.dumps(state))
    resume_state(last, other, other.prompt_digest(), lines.append)
    assert other.history == state["history"] and "without that check" in lines[-2] and "resuming from" in lines[-1]


def test_a_finished_runs_record_is_kept_only_when_it_is_this_runs(tmp_path):
    """`finished_record`: the first ``grpo.json`` of the same spec, cost weight, seed, step count
    and per-step log is taken byte for byte; a missing, unreadable or other run's record is not."""
    from dataclasses import asdict

    from ltrr.agent.grpo import finished_record

    spec = GRPOSpec(steps=2, prompts_per_step=2, group_size=2, micro_batch=2)
    history = [{"step": 1, "reward": 0.25}, {"step": 2, "reward": 0.5}]
    roll = SimpleNamespace(alpha=0.5, history=history)
    rec = {"spec": asdict(spec), "alpha": 0.5, "seed": 7, "steps": 2, "router_log": history, "seconds_this_leg": 9.0}
    good = tmp_path / "good.json"
    good.write_text(json.dumps(rec, indent=1) + "\n")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert finished_record([tmp_path / "missing.json", broken, good], spec, roll, 7, 2) == good.read_text()
    others = [{"seed": 8}, {"alpha": 0.9}, {"steps": 1}, {"router_log": history[:1]},
              {"spec": {**asdict(spec), "steps": 3}}]
    for i, change in enumerate(others):
        other = tmp_path / f"other{i}.json"
        other.write_text(json.dumps({**rec, **change}))
        assert finished_record([other], spec, roll, 7, 2) is None, change
    assert finished_record([], spec, roll, 7, 2) is None


@pytest.mark.parametrize(("reward", "metric", "rule"), [
    ("ltrr", "recall", {"transform": "identity", "no_spread": None, "window_updates": "batch"}),
    ("router-r1", "em", {"transform": "sqrt", "no_spread": 0.5, "window_updates": "each"}),
])
def test_make_rollouts_scores_costs_with_the_named_rewards_normaliser(monkeypatch, reward, metric, rule):
    """``[agent] reward = "router-r1"`` trains with Router-R1's cost normaliser (main_ppo.py:41-72:
    square roots, 0.5 without spread, one cost at a time); "ltrr" keeps ours."""
    import ltrr.agent.run as agent_run
    from ltrr.agent.rl import make_rollouts

    loop = SimpleNamespace(arm_names=["bm25", "none"])
    monkeypatch.setattr(agent_run, "labels_table", lambda run: None)
    monkeypatch.setattr(agent_run, "partition", lambda run: (["q1"], []))
    monkeypatch.setattr(agent_run, "make_loop", lambda *a, **k: loop)
    monkeypatch.setattr(agent_run, "gold_answers", lambda run: GOLD)
    acfg = SimpleNamespace(reward=reward, metric=metric, token_price=0.0, correct_threshold=1.0, rollout_batch=1)
    run = SimpleNamespace(config=SimpleNamespace(seed=0, agent=acfg), pool=SimpleNamespace(costs=COSTS))
    rollouts, _ = make_rollouts(run, SimpleNamespace(generator=None, hf_model=None), GRPOSpec(window=50), alpha=0.2,
                                out=None, questions=[("q1", "capital ?", "cloze")])
    assert rollouts.normaliser.rule == rule and rollouts.normaliser.window == 50
    assert rollouts.normaliser.mode == "rolling" and rollouts.reward_name == reward


def test_a_checkpoint_of_an_older_cost_rule_is_resumed_under_this_runs_rule(tmp_path):
    """A GRPO checkpoint whose normaliser predates the rule's options (a router-r1 run trained with
    ltrr's normaliser) keeps its window of raw costs and is scored under the configured rule."""
    from ltrr.agent.grpo import resume_state
    from ltrr.agent.rewards import CostNormaliser

    loop = SimpleNamespace(arms=["bm25", "none"], strengths=None, retriever_types={}, max_turns=2)
    rollouts = RouterRollouts(lambda qid: loop, {"capital ?": "q1"}, {"q1": ["canberra"]}, COSTS,
                              CostNormaliser.router_r1(window=4), 2, reward="router-r1")
    last = tmp_path / "checkpoint-1"
    last.mkdir()
    old = CostNormaliser(window=4).update([1.0, 9.0])
    (last / "router_state.json").write_text(json.dumps({"normaliser": old.to_dict(), "history": [{"step": 1}],
                                                        "prompt": rollouts.prompt_digest()}))
    lines: list[str] = []
    resume_state(last, rollouts, rollouts.prompt_digest(), lines.append)
    assert rollouts.normaliser.rule == CostNormaliser.router_r1().rule and list(rollouts.normaliser.history_) == [1.0, 9.0]
    assert rollouts.normaliser.bounds() == pytest.approx((1.1, 2.9))  # percentiles of the square roots
    assert "scoring it with this run's rule" in lines[0] and "resuming from" in lines[-1]
