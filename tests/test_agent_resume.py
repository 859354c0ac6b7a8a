"""Resuming agent training: SFT passes over a checkpoint killed while it was written, an
interrupted SFT run is exported and resumed on a new machine, ``--resume``
checks the inputs before it removes anything and refuses an export of other inputs, package
versions are recorded and warned about, and a GRPO run resumed after its first pass over the
questions draws the batches of an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ltrr._errors import ConfigError

ARMS = [{"name": "bm25", "retriever": "bm25", "k": 1, "cost": 1.0}, {"name": "none", "retriever": "none"}]
COSTS = {"bm25": 1.0, "none": 0.0}
QUESTIONS = {"capital ?": "q1", "capital canberra ?": "q2", "canberra ?": "q3", "capital capital ?": "q4"}
GOLD = {"q1": ["canberra"], "q2": ["canberra"], "q3": ["plan"], "q4": ["bm25:"]}


def _search(arm, query, k):
    return [("d1", "capital Doc")][:k]


@pytest.fixture(scope="module")
def bigram_dir(tmp_path_factory):
    from _tiny_llm import save_bigram_llm

    folder = tmp_path_factory.mktemp("bigram-resume")
    save_bigram_llm(folder, logit=1.0)
    return folder


def _rollouts(folder, out=None):
    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.grpo import LiveLM, RouterRollouts
    from ltrr.agent.loop import AgentLoop
    from ltrr.agent.lora import is_adapter_folder, load_policy
    from ltrr.agent.rewards import CostNormaliser
    from ltrr.generation import TransformersGenerator

    policy = load_policy(folder) if is_adapter_folder(folder) else \
        TransformersLM(TransformersGenerator(str(folder), n_threads=1))
    live = LiveLM(policy, policy.hf_model)
    loop = AgentLoop(live, _search, ARMS, k=1, max_turns=2, max_new_tokens=12, max_obs_tokens=16, temperature=1.0)
    return policy, RouterRollouts(lambda qid: loop, QUESTIONS, GOLD, COSTS, CostNormaliser(window=64), 2,
                                  alpha=0.2, seed=7, out=out)


def _trajectories(policy):
    texts = ["capital", "capital canberra", "canberra", "plan capital", "capital plan canberra", "bm25: capital"]
    out = []
    for t in texts:
        ids = policy.encode(f"user : {t} assistant : <think> plan </think> <search> bm25: {t} </search>")
        out.append(SimpleNamespace(ids=ids, mask=[0] * 4 + [1] * (len(ids) - 4)))
    return out


def _whole_and_killed_at_8(trajs, policy, whole_dir, out, monkeypatch):
    """An uninterrupted SFT run into ``whole_dir`` (its record, and the spec), and the same run
    into ``out`` killed after checkpoint-8's adapter is written but before its trainer state."""
    import transformers

    from ltrr.agent.sft import SFTSpec, train_sft

    spec = SFTSpec(epochs=2.0, batch_size=1, grad_accum=1, learning_rate=1e-2, max_length=64, save_steps=2,
                   warmup_ratio=0.0)
    whole = train_sft(trajs, policy, whole_dir, spec, seed=3, log=lambda s: None)
    save_model = transformers.Trainer.save_model

    def killed(self, output_dir=None, _internal_call=False):
        save_model(self, output_dir, _internal_call)
        if _internal_call and self.state.global_step == 8:
            raise RuntimeError("killed while writing checkpoint-8")

    monkeypatch.setattr(transformers.Trainer, "save_model", killed)
    with pytest.raises(RuntimeError, match="killed while writing checkpoint-8"):
        train_sft(trajs, policy, out, spec, seed=3, log=lambda s: None)
    monkeypatch.setattr(transformers.Trainer, "save_model", save_model)
    return whole, spec


@pytest.mark.slow
def test_sft_resumes_from_the_newest_complete_checkpoint_past_one_killed_while_written(bigram_dir, tmp_path,
                                                                                      monkeypatch):
    """transformers writes a checkpoint in place and ``resume_from_checkpoint=True`` took the
    newest folder, complete or not: a kill after checkpoint-8's adapter but before its trainer
    state made every later resume a FileNotFoundError. The resume now takes checkpoint-6 and ends
    as an uninterrupted run."""
    import torch
    from safetensors.torch import load_file

    from ltrr.agent.sft import train_sft

    policy, _ = _rollouts(bigram_dir)
    trajs = _trajectories(policy)
    out = tmp_path / "crash"
    whole, spec = _whole_and_killed_at_8(trajs, policy, tmp_path / "whole", out, monkeypatch)
    assert (out / "checkpoints" / "checkpoint-8").is_dir()
    assert not (out / "checkpoints" / "checkpoint-8" / "trainer_state.json").exists()
    lines: list[str] = []
    rec = train_sft(trajs, policy, out, spec, seed=3, log=lines.append)
    assert rec["resumed"] and any(s.endswith("checkpoint-6") and "resuming from" in s for s in lines)
    assert rec["steps"] == whole["steps"] == 12 and rec["loss"] == whole["loss"]
    a, b = load_file(out / "adapter_model.safetensors"), load_file(tmp_path / "whole" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_an_interrupted_sft_run_is_exported_and_resumed_on_a_new_machine(bigram_dir, tmp_path, monkeypatch,
                                                                         capsys):
    """`ltrr agent export` of an interrupted SFT run said "neither a finished policy nor a complete
    GRPO checkpoint to export", and its inputs named the model by path and device: the demo's
    56-minute SFT could not be carried to another machine. Killed while writing checkpoint-8, the
    run is exported (checkpoint-6), its folder deleted, and resumed from the export with the
    model at another path: it ends as an uninterrupted run; an export of other inputs is refused
    naming them, before anything is written."""
    import shutil
    from dataclasses import replace

    import torch
    from safetensors.torch import load_file

    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.sft import train_sft
    from ltrr.cli import main
    from ltrr.generation import TransformersGenerator

    policy, _ = _rollouts(bigram_dir)
    trajs = _trajectories(policy)
    run_a = tmp_path / "machine-a" / "sft"
    whole, spec = _whole_and_killed_at_8(trajs, policy, tmp_path / "whole", run_a, monkeypatch)
    committed = tmp_path / "clone" / "data" / "policies" / "sft"
    assert main(["agent", "export", str(run_a), str(committed)]) == 0
    said = capsys.readouterr().out
    assert "checkpoint checkpoint-6" in said and f"ltrr agent sft CONFIG --resume {committed}" in said
    assert sorted(p.name for p in (committed / "checkpoints" / "checkpoint-6").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors", "optimizer.pt", "rng_state.pth", "scheduler.pt",
        "sft_state.json", "trainer_state.json"]
    shutil.rmtree(tmp_path / "machine-a")  # runs/ does not survive a new machine
    # the new machine: the same model under another folder name
    model_b = tmp_path / "machine-b" / "models" / "bigram-copy"
    shutil.copytree(bigram_dir, model_b)
    policy_b = TransformersLM(TransformersGenerator(str(model_b), n_threads=1))
    assert policy_b.identity != policy.identity
    run_b = tmp_path / "machine-b" / "sft"
    # an export of other inputs is refused naming them, and nothing is written
    for seed, other, named in ((4, spec, "seed"), (3, replace(spec, learning_rate=2e-2), "spec")):
        with pytest.raises(ConfigError, match=rf"checkpoint-6 was trained on other inputs .*these inputs differ: "
                                              rf"{named}\)"):
            train_sft(trajs, policy_b, run_b, other, seed=seed, log=lambda s: None, resume_from=committed)
        assert not run_b.exists()
    lines: list[str] = []
    rec = train_sft(trajs, policy_b, run_b, spec, seed=3, log=lines.append, resume_from=committed)
    assert any(s.endswith("checkpoint-6") and "resuming from" in s for s in lines), lines
    assert rec["resumed"] and rec["steps"] == whole["steps"] == 12 and rec["loss"] == whole["loss"]
    a, b = load_file(run_b / "adapter_model.safetensors"), load_file(tmp_path / "whole" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _checkpoint(ckpt: Path, step: int, inputs: dict | None, versions: dict | None = None) -> Path:
    """A fake complete GRPO checkpoint of ``inputs`` (None: the stamp left as it is)."""
    from ltrr.agent.lora import inputs_stamp

    folder = ckpt / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "router_state.json").write_text("{}\n")
    if inputs is not None:
        stamp = inputs_stamp(inputs)
        if versions is not None:
            stamp["versions"] = versions
        (ckpt / "inputs.json").write_text(json.dumps(stamp) + "\n")
    return folder


def _names(ckpt: Path) -> list[str]:
    return sorted(p.name for p in ckpt.glob("checkpoint-*"))


def test_a_resume_of_other_inputs_is_refused_naming_them_and_keeps_the_local_progress(tmp_path):
    """--resume of an export of another alpha used to wipe this run's own checkpoints (the import
    ran before the inputs were compared), then discard the import and start at step 0."""
    from ltrr.agent.sft import claim_checkpoints

    mine = {"spec": {"steps": 4}, "seed": 7, "policy": "p1", "prompts": ["a"], "alpha": 0.5}
    out = tmp_path / "B"
    _checkpoint(out / "checkpoints", 1, mine)
    exported = tmp_path / "committed"
    _checkpoint(exported / "checkpoints", 2, {**mine, "alpha": 0.2})
    said: list[str] = []
    with pytest.raises(ConfigError, match=r"checkpoint-2 was trained on other inputs .*these inputs differ: alpha\)"):
        claim_checkpoints(out / "checkpoints", mine, said.append, "agent train", exported=exported)
    assert _names(out / "checkpoints") == ["checkpoint-1"] and said == []
    # another start policy is named the same way
    with pytest.raises(ConfigError, match=r"these inputs differ: alpha, policy\)"):
        claim_checkpoints(out / "checkpoints", {**mine, "policy": "p2"}, said.append, "agent train",
                          exported=exported)
    assert _names(out / "checkpoints") == ["checkpoint-1"]


def test_a_stale_local_checkpoint_of_other_inputs_does_not_hide_a_valid_export(tmp_path):
    """A local checkpoint of another config at a higher step was taken for this run's and
    wiped, and the run started over though --resume named a good checkpoint."""
    from ltrr.agent.sft import claim_checkpoints

    mine = {"seed": 7, "alpha": 0.2}
    out = tmp_path / "D"
    _checkpoint(out / "checkpoints", 3, {**mine, "alpha": 0.5})
    exported = tmp_path / "committed"
    _checkpoint(exported / "checkpoints", 2, mine)
    said: list[str] = []
    got = claim_checkpoints(out / "checkpoints", mine, said.append, "agent train", exported=exported)
    assert got == out / "checkpoints" / "checkpoint-2" and _names(out / "checkpoints") == ["checkpoint-2"]
    assert said[0].endswith("are of other inputs; starting afresh") and "resuming" in said[1]
    # a newer local checkpoint of these inputs is kept over an older export of them
    _checkpoint(out / "checkpoints", 5, None)
    assert claim_checkpoints(out / "checkpoints", mine, said.append, "agent train",
                             exported=exported) == out / "checkpoints" / "checkpoint-5"
    assert _names(out / "checkpoints") == ["checkpoint-2", "checkpoint-5"]
    # local checkpoints of other inputs found without --resume: a fresh start, as documented
    claim_checkpoints(out / "checkpoints", {**mine, "seed": 8}, said.append, "agent train")
    assert _names(out / "checkpoints") == [] and said[-1].endswith("starting afresh")


def test_the_stamp_records_versions_and_a_mismatch_warns_once_and_resumes(tmp_path):
    from ltrr.agent.lora import inputs_stamp, package_versions
    from ltrr.agent.sft import claim_checkpoints

    mine = {"seed": 7}
    stamp = inputs_stamp(mine)
    assert set(stamp["versions"]) == {"ltrr", "trl", "transformers", "peft"}
    assert stamp["versions"] == package_versions() and stamp["versions"]["trl"]
    # the key is computed as before fields and versions were recorded: committed checkpoints match
    import hashlib

    assert stamp["key"] == hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()[:16]
    ckpt = tmp_path / "checkpoints"
    _checkpoint(ckpt, 1, mine, versions={**stamp["versions"], "trl": "0.0.1"})
    said: list[str] = []
    claim_checkpoints(ckpt, mine, said.append)
    assert _names(ckpt) == ["checkpoint-1"] and len(said) == 1
    assert f"trl 0.0.1 now {stamp['versions']['trl']}" in said[0] and said[0].endswith("resuming them anyway")
    claim_checkpoints(ckpt, mine, said.append)  # recorded now: said once
    assert len(said) == 1


def test_an_old_stamp_without_fields_is_refused_with_a_message_that_says_so(tmp_path):
    from ltrr.agent.lora import check_exported

    exported = tmp_path / "old"
    _checkpoint(exported / "checkpoints", 2, None)
    (exported / "checkpoints" / "inputs.json").write_text('{"key": "0123456789abcdef"}\n')
    from ltrr.agent.lora import inputs_stamp

    with pytest.raises(ConfigError, match="written before ltrr recorded them one by one"):
        check_exported(exported, inputs_stamp({"seed": 1}))


@pytest.mark.slow
def test_a_grpo_resume_after_the_first_pass_draws_the_batches_of_an_uninterrupted_run(bigram_dir, tmp_path):
    """TRL's sampler reshuffles with one generator seeded once, without set_epoch: a resumed run
    repeated the first pass's order in the second (q1 twice, q4 never). 6 steps, 2 per pass,
    crashed after checkpoint-3 (in the second pass) and resumed."""
    import torch
    from safetensors.torch import load_file

    from ltrr.agent.grpo import GRPOSpec, train_grpo
    from ltrr.agent.sft import SFTSpec, train_sft

    policy, _ = _rollouts(bigram_dir)
    ids = policy.encode("user : capital assistant : <think> plan </think> <search> bm25: capital </search>")
    start = tmp_path / "sft"
    train_sft([SimpleNamespace(ids=ids, mask=[0] * 4 + [1] * (len(ids) - 4))], policy, start,
              SFTSpec(epochs=1.0, batch_size=1, grad_accum=1, learning_rate=1e-2, max_length=64), seed=1,
              log=lambda s: None)
    spec = GRPOSpec(steps=6, prompts_per_step=2, group_size=2, micro_batch=2, learning_rate=1e-3, beta=0.05,
                    max_new_tokens=12, save_steps=1)

    def train(out, crash_after=None):
        policy, roll = _rollouts(start, out=out)
        if crash_after is not None:
            class Crashing(type(roll)):
                def __call__(self, prompts, trainer):
                    if trainer.state.global_step >= crash_after:
                        raise RuntimeError(f"crash at step {trainer.state.global_step}")
                    return super().__call__(prompts, trainer)

            roll.__class__ = Crashing
        return train_grpo(policy, roll, list(QUESTIONS), out, spec, seed=7, log=lambda s: None)

    whole = train(tmp_path / "whole")
    with pytest.raises(RuntimeError, match="crash at step 3"):
        train(tmp_path / "crash", crash_after=3)
    resumed = train(tmp_path / "crash")
    assert resumed["resumed"] and resumed["router_log"] == whole["router_log"]

    def questions(out, step):
        rows = (out / "rollouts" / f"step-{step:06d}.jsonl").read_text().splitlines()
        return [json.loads(r)["qid"] for r in rows][::2]

    for step in range(1, 7):
        assert questions(tmp_path / "crash", step) == questions(tmp_path / "whole", step), step
    for first in (1, 3, 5):  # each pass covers every question once
        assert sorted(questions(tmp_path / "whole", first) + questions(tmp_path / "whole", first + 1)) == \
            sorted(QUESTIONS.values())
    a, b = load_file(tmp_path / "crash" / "adapter_model.safetensors"), \
        load_file(tmp_path / "whole" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_epoch_sampler_is_trls_uninterrupted_order_by_pass():
    """Pass e of `EpochSampler` is the e-th order of TRL's sampler left to run, set in any order."""
    from trl.trainer.utils import RepeatSampler

    from ltrr.agent.grpo import EpochSampler

    data = list(range(7))
    trl = RepeatSampler(data, mini_repeat_count=2, batch_size=3, seed=5)
    passes = [list(trl) for _ in range(4)]
    ours = EpochSampler(RepeatSampler(data, mini_repeat_count=2, batch_size=3, seed=5))
    for e in (3, 0, 2, 1, 3):
        ours.set_epoch(e)
        assert list(ours) == passes[e]
    assert len(ours) == len(trl)
