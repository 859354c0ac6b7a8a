"""LoRA policies of the multi-round router: adapters on a base model, small enough to commit.

A full policy checkpoint of SmolLM2-135M is 540 MB; a LoRA adapter of it is a few MB, so a
finished policy and a GRPO run's newest checkpoint can be committed and survive a new machine.
SFT, GRPO and RFT train a LoRA adapter by default (``adapter = "lora"`` in ``[agent] sft`` and
``[agent] grpo``); ``adapter = "full"`` fine-tunes every weight as before.

A LoRA policy folder holds the adapter in PEFT's format (``adapter_model.safetensors``,
``adapter_config.json``), the run's record (``sft.json``, ``grpo.json``) and ``base_model.json``,
which names the base model the adapter was trained on: the argument that loads it (a packaged
model's name, a Hugging Face folder or ``.gguf`` file), its path, and the sha256 of its weights
(`ltrr.generation.file_sha256`/`folder_sha256`). `PolicyLM` loads such a folder: it finds the
base (the packaged name, else the path relative to the folder, else the absolute path), checks
its digest, and merges the adapter into a copy of the weights; `load_policy` takes an adapter
folder or a full Hugging Face folder, so evaluation reads either.

Training starts a fresh adapter on a full model, and trains a LoRA start policy's own adapter
further (its rank and targets, whatever the spec says): GRPO from the SFT policy continues the
SFT adapter, and TRL keeps a frozen copy of it (adapter ``ref``) as the KL reference when
``beta > 0``; from a full model, the reference is the base with the adapter switched off.

The defaults (rank 8, ``lora_alpha`` 32, no dropout, every linear layer of the blocks: for
SmolLM2/Llama ``q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj``) were chosen on
design questions, not on measurements of the router: (1) capacity: GRPO learns at most about a
bit per rollout from its scalar reward (some hundreds over 40 steps of 16), and the SFT set is 160 scripted
trajectories of one format, so a low rank suffices; Schulman et al., "LoRA Without Regret"
(Thinking Machines, 2025), find rank 1 matches full fine-tuning in policy-gradient RL, and small
ranks match it in SFT until the data outgrow the adapter; (2) placement: the same study finds
attention-only LoRA clearly behind LoRA on every layer (the MLPs hold most of the parameters),
so the adapter goes on all linear layers, not the common q/v or q/k/v/o; (3) size: on
SmolLM2-135M (measured: PEFT 0.21.2, float32 safetensors) rank 8 on all linear layers is 2.44 M
parameters and a 9.8 MB adapter (9,823,216 bytes), rank 16 twice that (19.6 MB), rank 16 on
q/k/v/o 7.4 MB and rank 8 on q/k/v/o 3.7 MB; an exported GRPO checkpoint holds the adapter and
AdamW's two moments, 29.7 MB at rank 8 (``optimizer.pt`` measured at 19,879,375 bytes), small
enough to commit; (4) dropout 0: GRPO's
log-probabilities must be those of the sampling policy, and a resumed run then repeats an
uninterrupted one exactly. Not measured here: the rank's or the placement's effect on the
router's reward. The learning rate: the same study puts LoRA's best rate about 10 times full
fine-tuning's; SFT's (2e-3, ``SFTSpec``) was chosen on held-out design scripts
(``benchmarks/lora_lr.py``); GRPO's (1e-4, ``GRPOSpec``) is ten times the rate set for full
fine-tuning, by that ratio, not chosen on GRPO runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ltrr._errors import ConfigError, MissingDependencyError, NotBuiltError
from ltrr.agent.backends import TransformersLM

__all__ = ["ADAPTERS", "BASE_FILE", "GRPO_STATE", "MARKERS", "SFT_STATE", "PolicyLM", "check_adapter_fields", "checkpointing_arg", "content_digest", "device_args",
           "check_exported", "export_run", "import_checkpoint", "inputs_stamp", "is_adapter_folder",
           "last_checkpoint", "load_policy", "lora_config", "package_versions", "read_stamp", "stamp_differences", "plain_copy", "policy_from_checkpoint", "replace_policy", "save_trained", "trainable_model"]

ADAPTERS = ("lora", "full")
BASE_FILE = "base_model.json"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
# what a GRPO or SFT checkpoint needs to resume (TRL/transformers load each torch file with
# weights_only=True), its completion marker (`MARKERS`) copied last; its training_args.bin (a pickle, never read on resume) and tokenizer stay
# out, and so does ref/, TRL's frozen KL-reference adapter: a copy of the start policy's adapter,
# which TRL makes again from the start policy (the same one: the run's fingerprint checks it)
CHECKPOINT_FILES = ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
                    "rng_state.pth", "trainer_state.json", "router_state.json")
POLICY_FILES = (*ADAPTER_FILES, BASE_FILE, "sft.json", "grpo.json", "rft.json", "training.png")


def check_adapter_fields(spec: Any, where: str) -> None:
    """Raise `ConfigError` unless ``spec``'s adapter settings are usable (numbers are checked by
    `ltrr.agent.sft.spec_from_mapping`)."""
    if spec.adapter not in ADAPTERS:
        raise ConfigError(f"{where}.adapter must be one of {', '.join(ADAPTERS)}, got {spec.adapter!r}")
    t = spec.lora_targets
    names = [s.strip() for s in t.split(",")] if isinstance(t, str) else None
    if not names or not all(names) or any(" " in s for s in names):
        raise ConfigError(f"{where}.lora_targets must be \"all-linear\" or comma-separated module names "
                          f"(\"q_proj,v_proj\"), got {t!r}")
    if spec.lora_dropout >= 1:
        raise ConfigError(f"{where}.lora_dropout must be below 1, got {spec.lora_dropout!r}")


def device_args(lm: TransformersLM) -> dict[str, Any]:
    """The trainers' device settings for ``lm``: ``use_cpu``, and activation (gradient)
    checkpointing only off the CPU. Checkpointing trades a second forward pass for memory; on
    a CPU the memory is not the limit and the gradients are bit for bit the same without it
    (tested), while a LoRA step of SmolLM2-135M on 2 x 900 tokens took 12 s against 14.5 s with
    it (one core, side by side), about a tenth of a GRPO step. On an H100 it stays on, as TRL
    has it: a LoRA step of a SmolLM2-135M-shaped model on 8 x 900 tokens took 0.37 s and 5.0 GiB
    with it against 0.25 s and 19.8 GiB without (``benchmarks/lora_step.py``), and a GPU's
    memory is what limits the micro-batch. Not part of a run's identity. The setting goes under
    transformers' current name, ``activation_checkpointing``, where the installed version has it
    (``gradient_checkpointing``, its deprecated alias, is removed in transformers 6)."""
    cpu = str(lm.generator.device) == "cpu"
    return {"use_cpu": cpu, checkpointing_arg(): not cpu}


def checkpointing_arg() -> str:
    """The name of transformers' training argument that turns activation checkpointing on."""
    from transformers import TrainingArguments

    fields = getattr(TrainingArguments, "__dataclass_fields__", {})
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


def lora_config(spec: Any) -> Any:
    """PEFT's ``LoraConfig`` of ``spec``'s adapter settings (a causal LM, no bias terms)."""
    LoraConfig, _ = _peft()
    t = spec.lora_targets.strip()
    targets = t if t == "all-linear" else [s.strip() for s in t.split(",")]
    return LoraConfig(r=spec.lora_r, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
                      target_modules=targets, bias="none", task_type="CAUSAL_LM")


def _peft() -> tuple[Any, Any]:
    try:
        from peft import LoraConfig, PeftModel
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(f"LoRA policies need peft: pip install 'ltrr[agent]' ({exc})") from None
    return LoraConfig, PeftModel


def is_adapter_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a LoRA policy (PEFT's ``adapter_config.json``)."""
    return (Path(folder) / "adapter_config.json").is_file()


def plain_copy(model: Any) -> Any:
    """A plain copy of ``model`` on its device: a GGUF file loads de-quantised (float32 weights)
    but stays flagged as quantised, which the Trainer and PEFT refuse; the same weights in a
    plain model of the same config train and save normally. Training a copy also leaves the
    process-wide loaded model (`ltrr.generation.TransformersGenerator` shares it) untouched."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=next(model.parameters()).dtype)
    plain.load_state_dict(model.state_dict(), strict=True)
    return plain.to(model.device)


def _weights_digest(generator: Any) -> str:
    from ltrr.generation.transformers_backend import file_sha256, folder_sha256

    path = generator.weights_path
    return file_sha256(path) if path.is_file() else folder_sha256(path)


def content_digest(lm: TransformersLM) -> str:
    """sha256 of what the policy computes with: the base weights, and the adapter when there is
    one (its device and the folder's path left out, so a copy elsewhere has the same digest)."""
    if isinstance(lm, PolicyLM):
        return lm.digest
    return _weights_digest(lm.generator)


class PolicyLM(TransformersLM):
    """A LoRA policy folder as a token-level `ContinuationLM`: its base model with the adapter
    merged into a copy of the weights, and the base's tokenizer and chat template.

    Parameters
    ----------
    folder : str or Path
        The policy folder (``adapter_model.safetensors``, ``adapter_config.json``,
        ``base_model.json``).
    device : str
        Torch device of the policy.
    dtype : str
        Weight dtype (the adapters are trained in float32).

    Examples
    --------
    >>> lm = PolicyLM("runs/demo-agent/agent/policies/sft")  # doctest: +SKIP
    >>> lm.identity  # doctest: +SKIP
    'transformers:sft+lora:3f2a...:float32:cpu'
    """

    def __init__(self, folder: str | os.PathLike[str], *, device: str = "cpu", dtype: str = "float32"):
        from ltrr.generation.transformers_backend import TransformersGenerator, file_sha256

        self.folder = Path(folder)
        missing = [f for f in (*ADAPTER_FILES, BASE_FILE) if not (self.folder / f).is_file()]
        if missing:
            raise NotBuiltError(f"{self.folder}: not a LoRA policy folder (missing {', '.join(missing)}); "
                                "train one with `ltrr agent sft CONFIG`")
        self.base = _read_base(self.folder)
        self.generator = TransformersGenerator(_find_base(self.folder, self.base), device=device, dtype=dtype)
        found = _weights_digest(self.generator)
        if found != self.base["sha256"]:
            raise ConfigError(f"{self.folder}: the base model found at {self.generator.weights_path} is not the one "
                              f"the adapter was trained on (sha256 {found[:16]}, expected {self.base['sha256'][:16]})")
        h = hashlib.sha256(self.base["sha256"].encode())
        for name in ADAPTER_FILES:
            h.update(f"\0{name}\0{file_sha256(self.folder / name)}".encode())
        self.digest = h.hexdigest()
        self._merged: Any = None

    def __repr__(self) -> str:
        return f"PolicyLM({str(self.folder)!r}, base={self.generator!r})"

    @property
    def identity(self) -> str:
        g = self.generator
        return f"transformers:{self.folder.name}+lora:{self.digest[:16]}:{g.dtype}:{g.device}"

    @property
    def hf_model(self) -> Any:
        """The base with the adapter merged in (loaded once per object)."""
        if self._merged is None:
            self._merged = self.trainable_adapter(trainable=False).merge_and_unload()
            self._merged.eval()
        return self._merged

    def trainable_adapter(self, *, trainable: bool = True) -> Any:
        """A PEFT model: a copy of the base with this folder's adapter (adapter ``default``)."""
        _, PeftModel = _peft()
        return PeftModel.from_pretrained(plain_copy(self.generator.hf_model), str(self.folder),
                                         is_trainable=trainable)

    def _model_and_device(self) -> tuple[Any, Any]:
        return self.hf_model, self.generator.device


def _read_base(folder: Path) -> dict:
    try:
        ref = json.loads((folder / BASE_FILE).read_text())
    except ValueError as exc:
        raise ConfigError(f"{folder / BASE_FILE} is not valid JSON ({exc})") from None
    if not isinstance(ref, dict) or not isinstance(ref.get("sha256"), str) or "path" not in ref:
        raise ConfigError(f"{folder / BASE_FILE} must name the base model (\"model\", \"path\", \"relpath\") "
                          "and its \"sha256\"; it was written by `ltrr agent sft|train|rft`")
    return ref


def _find_base(folder: Path, ref: dict) -> str | None:
    """The model argument of the base in ``ref`` (``base_model.json``): the packaged model it was
    loaded by (None: the default one), else its path relative to ``folder``, else its absolute
    path, else the argument as given (a hub id, read from the local Hugging Face cache)."""
    from ltrr.generation.models import packaged_models

    model = ref.get("model")
    if model is None or model in packaged_models:
        return model
    for cand in ((folder / ref["relpath"]) if ref.get("relpath") else None, Path(ref.get("path") or ""), Path(model)):
        if cand is not None and str(cand) and cand.exists():
            return str(cand)
    if model.count("/") == 1 and not model.startswith((".", "/", "~")):
        return model  # a hub id, found in the local cache or refused by the generator
    raise ConfigError(f"{folder}: the adapter's base model is missing: neither {ref.get('relpath')!r} (relative to "
                      f"the folder) nor {ref.get('path')!r} exists; put the base model (sha256 "
                      f"{ref['sha256'][:16]}) there")


def base_reference(lm: TransformersLM, folder: Path) -> dict:
    """``base_model.json`` of an adapter trained on ``lm`` (a full model or a `PolicyLM`'s base)."""
    from ltrr.generation.models import packaged_models

    g = lm.generator
    arg = None if not g.model else g.model if g.model in packaged_models else str(g.model)
    path = Path(g.weights_path).resolve()
    return {"format": "ltrr-lora-policy/1", "model": arg, "path": str(path),
            "relpath": os.path.relpath(path, Path(folder).resolve()), "sha256": _weights_digest(g),
            "dtype": g.dtype}


def load_policy(folder: str | os.PathLike[str], *, device: str = "cpu") -> TransformersLM:
    """A policy folder as a `TransformersLM`: a LoRA folder (`PolicyLM`) or a full Hugging Face
    folder (``config.json`` and weights)."""
    from ltrr.generation.transformers_backend import TransformersGenerator

    folder = Path(folder)
    if is_adapter_folder(folder):
        return PolicyLM(folder, device=device)
    if not (folder / "config.json").exists():
        raise NotBuiltError(f"{folder}: no policy model (a LoRA adapter with base_model.json, or config.json and "
                            "safetensors weights); train one with `ltrr agent sft CONFIG`")
    return TransformersLM(TransformersGenerator(str(folder), device=device))


def trainable_model(lm: TransformersLM, spec: Any, log: Any = print, stage: str = "agent") -> tuple[Any, Any]:
    """(model, peft_config) to hand a TRL trainer for ``spec.adapter``: a LoRA start policy's own
    adapter, trainable (``adapter = "lora"``) or merged into full weights (``"full"``); for a
    full model, a plain copy and a new adapter's ``LoraConfig`` (or None: every weight trains).
    Always a copy: the loaded model is shared in the process (`plain_copy`)."""
    if isinstance(lm, PolicyLM):
        if spec.adapter == "lora":
            cfg = json.loads((lm.folder / "adapter_config.json").read_text())
            log(f"[{stage}] training the start policy's adapter further (rank {cfg.get('r')}, on "
                f"{_leaf_names(cfg.get('target_modules'))}); the spec's lora_* settings apply to new adapters only")
            return lm.trainable_adapter(), None
        return plain_copy(lm.hf_model), None
    return plain_copy(lm.hf_model), (lora_config(spec) if spec.adapter == "lora" else None)


def save_trained(trainer: Any, folder: Path, lm: TransformersLM) -> dict:
    """Save the trainer's policy into ``folder``: the adapter (adapter ``default`` only) and
    ``base_model.json`` for a LoRA model, else the full weights and the tokenizer. Returns
    the adapter's description for the run's record (empty for a full model)."""
    from peft import PeftModel

    model = trainer.accelerator.unwrap_model(trainer.model)
    if not isinstance(model, PeftModel):
        trainer.save_model(str(folder))
        lm.tokenizer.save_pretrained(str(folder))
        return {}
    model.save_pretrained(str(folder), selected_adapters=["default"], safe_serialization=True)
    (folder / "README.md").unlink(missing_ok=True)  # PEFT's model-card template, naming local paths
    return _with_base(folder, lm)


def _with_base(folder: Path, lm: TransformersLM) -> dict:
    """Write ``base_model.json`` beside the adapter in ``folder``; the adapter's description."""
    ref = lm.base if isinstance(lm, PolicyLM) else base_reference(lm, folder)
    if isinstance(lm, PolicyLM):  # the same base; its path relative to the new folder
        ref = {**ref, "relpath": os.path.relpath(ref["path"], Path(folder).resolve())}
    (folder / BASE_FILE).write_text(json.dumps(ref, indent=1) + "\n")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    return {"adapter": "lora", "r": cfg["r"], "lora_alpha": cfg["lora_alpha"], "lora_dropout": cfg["lora_dropout"],
            "target_modules": _leaf_names(cfg["target_modules"]),
            "adapter_bytes": (folder / "adapter_model.safetensors").stat().st_size}


def _leaf_names(targets: Any) -> Any:
    """The module names an adapter is on (PEFT saves every module's full path once expanded)."""
    return targets if isinstance(targets, str) else sorted({str(t).split(".")[-1] for t in targets or ()})


def policy_from_checkpoint(ckpt: Path, folder: Path, lm: TransformersLM) -> dict:
    """Save the policy of a training checkpoint ``ckpt`` into ``folder``, as `save_trained`
    saves a trainer's (the start policy ``lm`` names the base)."""
    folder.mkdir(parents=True)
    if not (ckpt / "adapter_model.safetensors").is_file():
        for name in ("model.safetensors", "config.json", "generation_config.json"):
            if (ckpt / name).is_file():
                shutil.copy2(ckpt / name, folder / name)
        lm.tokenizer.save_pretrained(str(folder))
        return {}
    for name in ADAPTER_FILES:
        shutil.copy2(ckpt / name, folder / name)
    return _with_base(folder, lm)


# the file ltrr writes into a checkpoint after transformers has written the rest, marking it
# complete: GRPO's (its cost normaliser and per-step log) and SFT's (the step)
GRPO_STATE = "router_state.json"
SFT_STATE = "sft_state.json"
MARKERS = (GRPO_STATE, SFT_STATE)


def last_checkpoint(ckpt: Path, marker: str | tuple[str, ...] = GRPO_STATE) -> Path | None:
    """The newest *complete* checkpoint: ``marker`` (GRPO's ``router_state.json``, SFT's
    ``sft_state.json``, or a tuple of them: any one) is written after everything else of a
    checkpoint, so one killed while saving is passed over."""
    markers = (marker,) if isinstance(marker, str) else tuple(marker)
    found = [p for p in ckpt.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()
             and any((p / m).exists() for m in markers)]
    return max(found, key=_step) if found else None


def _marker(checkpoint: Path) -> str:
    """The completion marker a complete checkpoint holds (`MARKERS`)."""
    return next(m for m in MARKERS if (checkpoint / m).is_file())


def _step(checkpoint: Path) -> int:
    return int(checkpoint.name.split("-")[-1])


VERSIONED = ("ltrr", "trl", "transformers", "peft")


def package_versions() -> dict[str, str | None]:
    """The installed versions of the packages a checkpoint's training depends on (None: absent)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def inputs_stamp(inputs: Mapping[str, Any]) -> dict:
    """``checkpoints/inputs.json`` of a run on ``inputs``: ``key``, the digest of them all (what
    decides whether a checkpoint is this run's; computed as before the other entries existed, so
    committed checkpoints still match), ``fields``, a digest per input (so that a refusal names
    what differs), and ``versions`` (`package_versions`: a mismatch warns, it does not refuse,
    since a patch release should resume)."""
    return {"key": _digest(dict(inputs)), "fields": {k: _digest(v) for k, v in sorted(inputs.items())},
            "versions": package_versions()}


def read_stamp(ckpt: Path) -> dict | None:
    """The ``inputs.json`` of the checkpoints folder ``ckpt`` (None: absent or damaged, which
    vouches for nothing)."""
    try:
        stamp = json.loads((Path(ckpt) / "inputs.json").read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) and isinstance(stamp.get("key"), str) else None


def stamp_differences(old: dict | None, new: dict) -> str:
    """Words naming the inputs in which stamp ``old`` differs from ``new``."""
    if old is None:
        return "it records no inputs (inputs.json missing or damaged)"
    fields = old.get("fields")
    if not isinstance(fields, dict):
        return "its inputs differ; it was written before ltrr recorded them one by one, so which is not known"
    names = sorted(k for k in {*fields, *new["fields"]} if fields.get(k) != new["fields"].get(k))
    return "these inputs differ: " + ", ".join(names)


def check_exported(exported: str | os.PathLike[str], stamp: dict) -> Path | None:
    """The newest complete checkpoint of the exported run ``exported`` (None: it has none, only a
    policy), after checking it was made from this run's inputs (``stamp``, `inputs_stamp`):
    `ConfigError` naming the inputs that differ otherwise. Touches nothing."""
    exported = Path(exported)
    src = last_checkpoint(exported / "checkpoints", MARKERS)  # a GRPO or an SFT run's
    if src is None:
        if not exported.is_dir():
            raise NotBuiltError(f"{exported}: no exported run to resume (see `ltrr agent export`)")
        return None
    theirs = read_stamp(exported / "checkpoints")
    if theirs is None or theirs["key"] != stamp["key"]:
        raise ConfigError(f"--resume {exported}: its {src.name} was trained on other inputs than this run's "
                          f"({stamp_differences(theirs, stamp)}); run with the inputs it was trained on (settings, "
                          "questions or SFT trajectories, seed, alpha, start or base policy), or train afresh without "
                          "--resume")
    return src


def replace_policy(tmp: Path, out: Path, record: str) -> None:
    """Move the policy saved in ``tmp`` into ``out``, the record file ``record`` (``sft.json``,
    ``grpo.json``) last, since it marks a whole policy; files of the other format (full weights
    beside a new adapter, or the reverse) are removed, so a folder holds one policy."""
    out.mkdir(parents=True, exist_ok=True)
    adapter = is_adapter_folder(tmp)
    stale = ("model.safetensors", "config.json", "generation_config.json") if adapter else (*ADAPTER_FILES, BASE_FILE)
    for name in stale:
        if not (tmp / name).exists():
            (out / name).unlink(missing_ok=True)
    for item in sorted(tmp.iterdir(), key=lambda p: p.name == record):
        target = out / item.name
        if target.is_dir():
            shutil.rmtree(target)
        item.replace(target)
    tmp.rmdir()


def export_run(folder: str | os.PathLike[str], dest: str | os.PathLike[str]) -> dict:
    """Copy a policy folder's small files into ``dest`` (a tracked folder): the finished policy
    (adapter, ``base_model.json``, its records and plot) and, for a GRPO or an interrupted SFT
    run, its newest complete checkpoint (adapter, optimiser, scheduler, step, RNG states; GRPO's
    cost normaliser and per-step log; see ``CHECKPOINT_FILES``) with the inputs' fingerprint, so
    `import_checkpoint` resumes it on a fresh clone. Replaces what ``dest`` held; returns what
    was written (paths, bytes), the checkpoint's name and ``kind`` (``"grpo"``, ``"sft"``, None
    without a checkpoint)."""
    src, dest = Path(folder), Path(dest)
    last = last_checkpoint(src / "checkpoints", MARKERS)
    have = [f for f in POLICY_FILES if (src / f).is_file()]
    if last is None and not any(f in have for f in ("sft.json", "grpo.json", "rft.json")):
        raise NotBuiltError(f"{src}: neither a finished policy nor a complete GRPO or SFT checkpoint to export")
    full = (src / "model.safetensors").exists() or (last is not None and not is_adapter_folder(last))
    if full:
        raise ConfigError(f"{src} is a full-weight policy (adapter = \"full\"); only LoRA policies are small "
                          "enough to export")
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for f in have:
        shutil.copy2(src / f, tmp / f)
    if (tmp / BASE_FILE).exists():  # the base's path relative to the new folder
        ref = json.loads((tmp / BASE_FILE).read_text())
        ref["relpath"] = os.path.relpath(ref["path"], dest.resolve())
        (tmp / BASE_FILE).write_text(json.dumps(ref, indent=1) + "\n")
    marker: str | None = None
    if last is not None:
        marker = _marker(last)
        out = tmp / "checkpoints" / last.name
        out.mkdir(parents=True)
        shutil.copy2(src / "checkpoints" / "inputs.json", tmp / "checkpoints" / "inputs.json")
        for f in CHECKPOINT_FILES:
            if f not in MARKERS and (last / f).is_file():
                shutil.copy2(last / f, out / f)
        shutil.copy2(last / marker, out / marker)  # last: a whole checkpoint
    if dest.exists():
        shutil.rmtree(dest)
    tmp.replace(dest)
    files = {str(p.relative_to(dest)): p.stat().st_size for p in sorted(dest.rglob("*")) if p.is_file()}
    return {"dest": str(dest), "checkpoint": last.name if last is not None else None,
            "kind": {GRPO_STATE: "grpo", SFT_STATE: "sft", None: None}[marker], "files": files,
            "bytes": sum(files.values())}


def import_checkpoint(exported: str | os.PathLike[str], out: str | os.PathLike[str], stamp: dict) -> Path | None:
    """Put ``exported``'s GRPO or SFT checkpoint (`export_run`) into ``out/checkpoints`` unless ``out``
    already has a complete checkpoint of the same inputs as new; returns the checkpoint now there
    to resume from, or None when ``exported`` has none. ``stamp`` is this run's `inputs_stamp`:
    an export of other inputs is refused (`check_exported`) before anything is removed, and
    local checkpoints of these inputs are only replaced by a newer export of them."""
    exported, ckpt = Path(exported), Path(out) / "checkpoints"
    src = check_exported(exported, stamp)
    if src is None:
        return None
    here, mine = last_checkpoint(ckpt, MARKERS), read_stamp(ckpt)
    if here is not None and mine is not None and mine["key"] == stamp["key"] and _step(here) >= _step(src):
        return here
    if ckpt.exists():
        shutil.rmtree(ckpt)
    ckpt.mkdir(parents=True)
    shutil.copy2(exported / "checkpoints" / "inputs.json", ckpt / "inputs.json")
    # into a temporary folder, renamed whole: `last_checkpoint` takes a folder holding
    # its marker (router_state.json, sft_state.json) for complete, which copytree may copy
    # before the other files
    part = ckpt / f".{src.name}.partial"
    shutil.copytree(src, part)
    part.rename(ckpt / src.name)
    return ckpt / src.name
