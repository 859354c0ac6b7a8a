"""LoRA policies (ltrr.agent.lora) on a tiny Llama: the spec's adapter settings, an SFT run that
trains only the adapter, the saved folder loading back with the same logits, and bad folders."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from ltrr._errors import ConfigError, NotBuiltError
from ltrr.agent.grpo import GRPOSpec
from ltrr.agent.sft import SFTSpec


def test_adapter_settings_read_and_refuse():
    spec = SFTSpec.from_mapping({})
    assert (spec.adapter, spec.lora_r, spec.lora_alpha, spec.lora_dropout, spec.lora_targets) == \
        ("lora", 8, 32, 0.0, "all-linear")
    assert GRPOSpec.from_mapping({"lora_targets": ["q_proj", "v_proj"]}).lora_targets == "q_proj,v_proj"
    assert SFTSpec.from_mapping({"adapter": "full", "lora_dropout": 0}).adapter == "full"
    for cls in (SFTSpec, GRPOSpec):
        for bad, msg in (({"adapter": "qlora"}, "adapter must be one of lora, full, got 'qlora'"),
                         ({"lora_r": 0}, "lora_r must be an integer >= 1, got 0"),
                         ({"lora_dropout": -0.1}, "lora_dropout must be a number >= 0"),
                         ({"lora_dropout": 1.0}, "lora_dropout must be below 1"),
                         ({"lora_targets": "q_proj, "}, "lora_targets must be"),
                         ({"lora_targets": 3}, "lora_targets must be")):
            with pytest.raises(ConfigError, match=msg):
                cls.from_mapping(bad)


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """A LoRA SFT policy of the tiny model: 4 steps on two trajectories, at a high rate."""
    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.sft import train_sft
    from ltrr.generation import TransformersGenerator

    lm = TransformersLM(TransformersGenerator(str(tiny), n_threads=1))
    before = {k: v.clone() for k, v in lm.hf_model.state_dict().items()}
    ids = lm.encode("user : capital of australia assistant : the answer is canberra")
    trajs = [SimpleNamespace(ids=ids, mask=[0] * 5 + [1] * (len(ids) - 5)),
             SimpleNamespace(ids=ids[:8], mask=[0] * 5 + [1] * 3)]
    spec = SFTSpec(epochs=2.0, learning_rate=5e-2, batch_size=1, grad_accum=1, max_length=64, save_steps=50)
    out = tmp_path_factory.mktemp("sft") / "sft"
    rec = train_sft(trajs, lm, out, spec, seed=3, log=lambda s: None)
    return SimpleNamespace(lm=lm, before=before, out=out, rec=rec, ids=ids)


def test_lora_sft_trains_only_the_adapter_and_loads_back(trained, tiny):
    import torch

    from ltrr.agent.lora import PolicyLM, content_digest, load_policy

    out, rec = trained.out, trained.rec
    assert {p.name for p in out.iterdir()} == {"adapter_model.safetensors", "adapter_config.json",
                                               "base_model.json", "sft.json"}
    assert rec["steps"] == 4 and rec["adapter"]["adapter"] == "lora" and rec["adapter"]["r"] == 8
    assert rec["adapter"]["adapter_bytes"] == (out / "adapter_model.safetensors").stat().st_size
    base = json.loads((out / "base_model.json").read_text())
    assert base["path"] == str(tiny.resolve()) and base["model"] == str(tiny)
    # the base model the process shares is untouched: only the adapter trained
    after = trained.lm.hf_model.state_dict()
    assert all(bool((trained.before[k] == after[k]).all()) for k in trained.before)
    policy = load_policy(out)
    assert isinstance(policy, PolicyLM) and policy.identity.startswith("transformers:sft+lora:")
    merged = policy.hf_model.state_dict()
    moved = {k for k in trained.before if not torch.equal(trained.before[k], merged[k])}
    assert moved and all(k.split(".")[-2] in {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj"} for k in moved), moved
    # merged (evaluation) and unmerged (training) give the same logits, and not the base's
    ids = trained.ids
    peft = policy.trainable_adapter(trainable=False).eval()
    assert torch.allclose(_logits(policy.hf_model, ids), _logits(peft, ids), atol=1e-5)
    assert not torch.allclose(_logits(policy.hf_model, ids), _logits(trained.lm.hf_model, ids), atol=1e-3)
    # a copy elsewhere is the same policy (the digest leaves the path out) and continues as one
    copy = out.parent / "elsewhere" / "sft"
    shutil.copytree(out, copy)
    assert content_digest(load_policy(copy)) == content_digest(policy) != content_digest(trained.lm)
    again = load_policy(copy)
    greedy = SimpleNamespace(max_new_tokens=4, temperature=0.0, top_p=1.0, stop=(), seed=0)
    assert again.continue_(ids[:6], "", greedy).ids == policy.continue_(ids[:6], "", greedy).ids


def test_bad_policy_folders_are_named(trained, tmp_path):
    from ltrr.agent.lora import load_policy

    with pytest.raises(NotBuiltError, match="no policy model"):
        load_policy(tmp_path / "nowhere")
    broken = tmp_path / "no-weights"
    shutil.copytree(trained.out, broken)
    (broken / "adapter_model.safetensors").unlink()
    with pytest.raises(NotBuiltError, match=r"not a LoRA policy folder \(missing adapter_model.safetensors\)"):
        load_policy(broken)
    for name, edit, msg in (("lost", {"path": str(tmp_path / "gone"), "relpath": "../gone", "model": "gone"},
                             "the adapter's base model is missing"),
                            ("other", {"sha256": "0" * 64}, "is not the one the adapter was trained on")):
        folder = tmp_path / name
        shutil.copytree(trained.out, folder)
        ref = json.loads((folder / "base_model.json").read_text())
        (folder / "base_model.json").write_text(json.dumps({**ref, **edit}))
        with pytest.raises(ConfigError, match=msg):
            load_policy(folder)
    (folder / "base_model.json").write_text("{}")
    with pytest.raises(ConfigError, match="must name the base model"):
        load_policy(folder)


def test_activation_checkpointing_is_off_on_cpu_and_does_not_change_the_gradients(tmp_path):
    """`device_args`: the trainers checkpoint activations only off the CPU, where memory is the
    limit; on a tiny LoRA model the adapter's gradients are bit for bit the same either way, so
    the setting is no part of a run's identity (a run checkpointed on one resumes on the other)."""
    import torch
    from _tiny_llm import save_tiny_llm
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, TrainingArguments

    from ltrr.agent.lora import checkpointing_arg, device_args

    cpu, gpu = (SimpleNamespace(generator=SimpleNamespace(device=d)) for d in ("cpu", "cuda"))
    name = checkpointing_arg()  # transformers' current name where it has one, not its deprecated alias
    assert name in TrainingArguments.__dataclass_fields__
    assert name == "activation_checkpointing" or "activation_checkpointing" not in TrainingArguments.__dataclass_fields__
    assert device_args(cpu) == {"use_cpu": True, name: False}
    assert device_args(gpu) == {"use_cpu": False, name: True}
    save_tiny_llm(tmp_path / "tiny", seed=0)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tmp_path / "tiny"),
                           LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    model.train()
    ids = torch.randint(4, 20, (2, 24), generator=torch.Generator().manual_seed(1))

    def grads():
        model(input_ids=ids, labels=ids).loss.backward()
        out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        return out

    # transformers 5 names it activation checkpointing (the gradient_ names are deprecated aliases)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    with_ckpt = grads()
    model.activation_checkpointing_disable()
    without = grads()
    assert with_ckpt and with_ckpt.keys() == without.keys()
    assert all("lora_" in n for n in with_ckpt)
    assert all(torch.equal(with_ckpt[n], without[n]) for n in with_ckpt)


@pytest.mark.slow  # loads the packaged SmolLM2
def test_a_policy_may_be_a_packaged_model_name_other_than_the_labels_generator():
    """`[agent] policy = "smollm2-135m"` (demo-agent-qwen: SmolLM2 routes, Qwen labels): the
    packaged model on the transformers backend; a name that is neither a folder nor packaged is
    one clear error."""
    from ltrr._errors import NotBuiltError
    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.run import policy_lm

    run = SimpleNamespace(config=SimpleNamespace(agent=SimpleNamespace(policy="smollm2-135m", device="cpu")))
    lm = policy_lm(run)
    assert isinstance(lm, TransformersLM) and "SmolLM2-135M-Instruct" in lm.identity
    with pytest.raises(NotBuiltError, match="no-such-policy: no policy model"):
        policy_lm(run, "no-such-policy")
