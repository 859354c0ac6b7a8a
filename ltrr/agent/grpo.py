"""GRPO training of the multi-round router with TRL (Router-R1's RL stage, on GRPO).

TRL's `GRPOTrainer` owns the optimisation (group-normalised advantages, the clipped surrogate,
the optional KL to the SFT policy, checkpoints); ltrr owns the rollouts and the reward:

- `RouterRollouts` is the trainer's ``rollout_func``. TRL hands it the step's prompts already
  repeated ``num_generations`` times, in consecutive blocks of G (each block one question), and
  takes back one completion per prompt. Each completion is one `AgentLoop` rollout *sampled
  from the live policy* (``trainer.model``, temperature 1, a seed per sample drawn from the
  run's seed, the step and the position; no generation cache: a cached generator would give
  every sample of a group the same text, hence a zero advantage, and would sample from stale
  weights). It returns the prompt ids, the completion ids and ``env_mask`` (1 where the model
  wrote the token, 0 where the loop injected it: ``<information>`` blocks and the final-answer
  instruction); TRL multiplies ``env_mask`` into the loss mask, so injected tokens carry no
  loss and no gradient.
- `RouterRollouts.reward` is the one reward function: Router-R1's hierarchy (a bad format
  scores -1 and nothing else counts; otherwise ``(1 - alpha) * outcome``, plus ``alpha *
  cost_reward`` only for a correct answer; `ltrr.agent.rewards.total_reward`) in one function,
  because TRL sums reward functions and the gate cannot be split. The cost reward uses a
  rolling normaliser (5th-95th percentiles of the recent costs; under ``[agent] reward =
  "router-r1"``, of their square roots, Router-R1's rule: `ltrr.agent.rewards.CostNormaliser`),
  checkpointed with the model.
  It logs, per step, the format-valid rate, outcome, cost, cost reward and searches per
  question; TRL logs the reward, its standard deviation, the entropy and
  ``frac_reward_zero_std`` (the share of groups whose rewards are all equal: zero advantage).

Router-R1's own settings (ulab-uiuc/Router-R1 at 801a240) beside ours, for the record: PPO
with GAE, actor learning rate 1e-6, KL 0.001, an entropy bonus of 0.001
(``verl/trainer/config/ppo_trainer.yaml:35``, ``entropy_coeff``), 4 turns, temperature 1, 225
steps of batch 64 on Qwen2.5-3B. Ours differ because of compute, not by choice of method: GRPO
needs no value model (half the memory and compute of PPO on 2 CPU cores); a 135M policy and a
few dozen steps of 4 x 4 rollouts call for a larger learning rate than a 3B model over 225 x 64;
the turns are capped at 2 (single-hop) and 3 (``multihop``) searches, with one passage of at
most 128 tokens per search, so that a rollout stays near 1,200 tokens (SFT and evaluation state
``[agent] max_turns`` for every question; `ltrr.agent.rl.make_rollouts` says why the budgets
differ). There is no entropy bonus: ``GRPOConfig.entropy_coef`` is left at TRL's default, 0,
as in GRPO as published (DeepSeekMath), which has no entropy term. It is not a `GRPOSpec`
field because the spec is the committed runs' fingerprint (checkpoints and ``grpo.json`` are
matched on it): a new field would refuse to resume or keep them. Not measured here; TRL logs
the policy's entropy every step, so a collapse would show in the step log.

Devices: ``[agent] device`` puts the policy on a torch device ("cpu" by default: TRL's
``use_cpu``; "cuda" on a GPU) for SFT, GRPO, RFT and evaluation alike, and ``[agent]
rollout_batch`` decodes that many rollouts together (`ltrr.agent.batching`); the config
``demo-agent-gpu`` is the larger run of one GPU (64 rollouts per step, rollouts batched).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ltrr._atomic import write_text_atomic
from ltrr._errors import ConfigError, DataError
from ltrr.agent import lora
from ltrr.agent.backends import TransformersLM
from ltrr.agent.batching import raise_on_model_errors, rollout_many

__all__ = ["EpochSampler", "GRPOSpec", "LiveLM", "RouterRollouts", "train_grpo", "resume_state", "sample_seed"]


@dataclass(frozen=True)
class GRPOSpec:
    """GRPO settings (``[agent] grpo``).

    Attributes
    ----------
    steps : int
        Optimiser steps (each on ``prompts_per_step * group_size`` rollouts).
    prompts_per_step, group_size : int
        Questions per step, and rollouts per question (the GRPO group, TRL's ``num_generations``).
    micro_batch : int
        Rollouts per forward/backward pass (the step accumulates over the rest).
    learning_rate : float
        AdamW's rate (constant after a short warm-up). The default, 1e-4, is for the LoRA
        adapter: ten times the 1e-5 set earlier for full fine-tuning, the ratio Schulman et al.
        ("LoRA Without Regret", 2025) find for policy-gradient RL; on this router's SFT, LoRA's
        best rate measured was 20 times full fine-tuning's (``SFTSpec.learning_rate``). Not
        chosen on GRPO runs here (each is CPU-hours).
    beta : float
        KL weight to the SFT policy (TRL reloads it from the policy folder); 0 drops it.
    temperature : float
        Sampling temperature of the rollouts (and of TRL's log-probabilities).
    epsilon : float
        The surrogate's clipping range.
    shuffle_arms, rename_share, leave_out_share, config_only_share
        How each question's prompt shows the arms at each step (`ltrr.agent.presentation`: a
        shuffled order, neutral ids on a share of the questions, one arm left out on a share,
        one arm described by its configuration alone on a share);
        as in `ltrr.agent.sft.SFTSpec`, with its defaults (chosen on SFT scripts, so that RL
        sees the arms as SFT did; not measured on GRPO rollouts).
    max_turns_single, max_turns_multihop : int
        Searches before the final answer turn, for single-hop and ``multihop`` questions (the
        prompt states them; SFT and evaluation state ``[agent] max_turns`` for every question,
        see `ltrr.agent.rl.make_rollouts`).
    k, max_obs_tokens, max_new_tokens : int
        Passages per search, tokens per ``<information>`` block, tokens per model turn.
    window : int
        Recent costs kept by the rolling cost normaliser.
    save_steps : int
        Optimiser steps between checkpoints.
    adapter, lora_r, lora_alpha, lora_dropout, lora_targets
        As in `ltrr.agent.sft.SFTSpec`: a LoRA start policy's adapter is trained further; on a
        full start model a new adapter is trained (``"lora"``, the default) or every weight.
    """

    steps: int = 40
    prompts_per_step: int = 4
    group_size: int = 4
    micro_batch: int = 2
    learning_rate: float = 1e-4
    beta: float = 0.001
    temperature: float = 1.0
    epsilon: float = 0.2
    shuffle_arms: bool = True
    rename_share: float = 0.25
    leave_out_share: float = 0.25
    config_only_share: float = 0.75
    _SHARES = ("rename_share", "leave_out_share", "config_only_share")  # in [0, 1] (sft.spec_from_mapping)
    max_turns_single: int = 2
    max_turns_multihop: int = 3
    k: int = 1
    max_obs_tokens: int = 128
    max_new_tokens: int = 96
    window: int = 1000
    save_steps: int = 1
    adapter: str = "lora"
    lora_r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: str = "all-linear"

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str = "[agent] grpo") -> GRPOSpec:
        """Validate a config table into a `GRPOSpec` (`ltrr.agent.sft.spec_from_mapping`'s checks).

        ``lora_targets`` may be a list of module names. Beyond the per-key checks, the adapter
        settings must be usable, ``group_size`` at least 2, and ``micro_batch`` must divide
        ``prompts_per_step * group_size``.

        Raises
        ------
        ConfigError
            Naming the key (``where``-prefixed) that is unknown or out of range.
        """
        from ltrr.agent.lora import check_adapter_fields
        from ltrr.agent.sft import _joined_targets, spec_from_mapping

        spec = spec_from_mapping(cls, _joined_targets(dict(d)), where, nonneg=("beta", "lora_dropout"),
                                 text=("adapter", "lora_targets"))
        check_adapter_fields(spec, where)
        if spec.group_size < 2:
            raise ConfigError(f"{where}.group_size must be at least 2 (a group of one has no advantage)")
        if (spec.prompts_per_step * spec.group_size) % spec.micro_batch:
            raise ConfigError(f"{where}.micro_batch ({spec.micro_batch}) must divide prompts_per_step * "
                              f"group_size ({spec.prompts_per_step * spec.group_size})")
        return spec

    @property
    def rollouts_per_step(self) -> int:
        """Rollouts per optimiser step: ``prompts_per_step * group_size``."""
        return self.prompts_per_step * self.group_size


def sample_seed(seed: int, step: int, position: int) -> int:
    """The sampling seed of the rollout at ``position`` of optimiser step ``step``: distinct
    per sample, and the same after a resume (it depends on the step, not on a running RNG)."""
    return int(np.random.SeedSequence([int(seed), int(step), int(position)]).generate_state(1)[0])


class LiveLM(TransformersLM):
    """A `TransformersLM` whose continuations are sampled from another model object (the one
    under training), with the base's tokenizer and chat template.

    Parameters
    ----------
    base : TransformersLM
        Supplies the tokenizer, chat template and identity.
    model : torch.nn.Module, optional
        The model to sample from; set or replace it with ``live.model = ...`` (each GRPO step
        sets the trainer's current model).
    """

    def __init__(self, base: TransformersLM, model: Any = None):
        self.generator = base.generator
        self.model = model

    def _model_and_device(self) -> tuple[Any, Any]:
        if self.model is None:
            raise ConfigError("LiveLM has no model to sample from; set .model first")
        return self.model, None


class RouterRollouts:
    """TRL ``rollout_func`` and reward function over `AgentLoop` rollouts; see the module.

    Parameters
    ----------
    loop_for : callable
        ``loop_for(qid) -> AgentLoop`` (all sharing one `LiveLM`, with no cache and a positive
        temperature).
    questions : mapping of str to str
        Prompt text (the question) -> qid. Each question text must belong to one qid.
    gold : mapping of str to list of str
        qid -> gold aliases.
    arm_costs : mapping
        Arm -> cost (``Pool.costs``).
    normaliser : CostNormaliser
        A rolling (training-mode) normaliser.
    group_size : int
        TRL's ``num_generations``.
    alpha, token_price, metric, correct_threshold, reward
        The reward's settings (`ltrr.agent.trajectory.score_trajectories`).
    seed : int
        The run's seed (`sample_seed`).
    out : Path, optional
        Where each step's rollouts are written (``rollouts/step-NNNNNN.jsonl``).
    batch : int
        Rollouts decoded together (`ltrr.agent.batching.rollout_many`; 1 = one at a time).
    views : callable, optional
        ``views(qid, step) -> ArmView``: how question ``qid``'s prompt shows the arms at
        optimiser step ``step`` (`ltrr.agent.presentation`); the samples of a group share it.
        None shows the loops' arms plainly. Rewards and costs are those of the pool arms.
    """

    def __init__(self, loop_for: Callable[[str], Any], questions: Mapping[str, str], gold: Mapping[str, Sequence[str]],
                 arm_costs: Mapping[str, float], normaliser: Any, group_size: int, *, alpha: float = 0.0,
                 token_price: float = 0.0, metric: str = "recall", correct_threshold: float = 1.0, seed: int = 0,
                 out: Path | None = None, batch: int = 1, reward: str = "ltrr",
                 views: Callable[[str, int], Any] | None = None):
        self.loop_for = loop_for
        self.rollout_batch = batch
        self.questions = dict(questions)
        self.gold = gold
        self.arm_costs = dict(arm_costs)
        self.normaliser = normaliser
        self.group_size = int(group_size)
        self.alpha = alpha
        self.token_price = token_price
        self.metric = metric
        self.correct_threshold = correct_threshold
        self.reward_name = reward
        self.views = views
        self.seed = int(seed)
        self.out = None if out is None else Path(out)
        self.batch: list = []
        self.history: list[dict] = []
        self.__name__ = "router_reward"  # TRL names reward functions by __name__

    def prompt_digest(self) -> str:
        """A digest of what the training prompts show besides the question: each loop's arms,
        their measured strengths (from the run's labels), retriever types and turn budget. A
        checkpoint records it, so a resume whose labels or pool changed is refused instead of
        training on another prompt mid-run (the inputs key of `claim_checkpoints` does not
        cover the labels)."""
        import hashlib

        loops = {id(loop): loop for loop in (self.loop_for(q) for q in sorted(self.questions.values()))}
        parts = sorted(json.dumps({"arms": [getattr(a, "name", a) for a in loop.arms], "strengths": loop.strengths,
                                   "types": loop.retriever_types, "max_turns": loop.max_turns},
                                  sort_keys=True, default=str) for loop in loops.values())
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def _qid(self, prompt: Any) -> str:
        if not isinstance(prompt, str):
            raise DataError(f"the GRPO dataset's prompts must be question strings, got {type(prompt).__name__}")
        if prompt not in self.questions:
            raise DataError(f"prompt not among the training questions: {prompt[:80]!r}")
        return self.questions[prompt]

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        g = self.group_size
        if len(prompts) % g:
            raise DataError(f"rollout_func got {len(prompts)} prompts, not a multiple of the group size {g}")
        qids = [self._qid(p) for p in prompts]
        for b in range(0, len(qids), g):
            if len(set(qids[b:b + g])) != 1:
                raise DataError(f"GRPO group {b // g} mixes questions {sorted(set(qids[b:b + g]))}; TRL must hand "
                                "each question's samples in one consecutive block")
        model = trainer.accelerator.unwrap_model(trainer.model)
        step = int(trainer.state.global_step)
        self.batch = []
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": None, "env_mask": [],
                               "rollout_index": []}
        jobs = []
        for i, (prompt, qid) in enumerate(zip(prompts, qids, strict=True)):
            loop = self.loop_for(qid)
            if self.views is not None:
                loop = loop.with_view(self.views(qid, step))
            loop.lm.model = model
            jobs.append((loop, prompt, qid, sample_seed(self.seed, step, i)))
        eos = jobs[0][0].lm.tokenizer.eos_token_id if jobs else None
        trajs = rollout_many(jobs, batch=self.rollout_batch)
        raise_on_model_errors(trajs, f"GRPO step {step + 1}")
        for i, traj in enumerate(trajs):
            n = traj.prompt_tokens
            completion, mask = list(traj.ids[n:]), list(traj.mask[n:])
            if not completion:  # an empty question or a failed first call: one masked token
                completion, mask = [int(eos if eos is not None else 0)], [0]
            out["prompt_ids"].append(list(traj.ids[:n]))
            out["completion_ids"].append(completion)
            out["env_mask"].append(mask)
            out["rollout_index"].append(i)
            self.batch.append(traj)
        return out

    def reward(self, prompts: list, completions: list, rollout_index: list, log_metric: Callable | None = None,
               trainer_state: Any = None, **_: Any) -> list[float]:
        """The hierarchical reward of each rollout of the current batch (see the module)."""
        from ltrr.agent.trajectory import save_trajectories, score_trajectories

        trajs = [self.batch[int(i)] for i in rollout_index]
        totals = score_trajectories(trajs, self.gold, arm_costs=self.arm_costs, normaliser=self.normaliser,
                                    alpha=self.alpha, token_price=self.token_price, metric=self.metric,
                                    correct_threshold=self.correct_threshold, reward=self.reward_name)
        g = self.group_size
        groups = np.asarray(totals, dtype=float).reshape(-1, g)
        row = {"step": int(getattr(trainer_state, "global_step", -1)) + 1,
               "format_valid": float(np.mean([t.rewards["format"] == 0 for t in trajs])),
               "outcome": float(np.mean([t.rewards["outcome"] for t in trajs])),
               "cost": float(np.mean([t.rewards["cost"] for t in trajs])),
               "cost_reward": float(np.mean([t.rewards["cost_reward"] for t in trajs])),
               "searches": float(np.mean([len(t.searches) for t in trajs])),
               "reward": float(np.mean(totals)),
               "within_group_var": float(groups.var(axis=1).mean()),
               "zero_adv_share": float(np.mean(np.ptp(groups, axis=1) == 0))}
        if log_metric is not None:
            for k in ("format_valid", "outcome", "cost", "cost_reward", "searches", "within_group_var"):
                log_metric(f"router/{k}", row[k])
        self.history.append(row)
        if self.out is not None:
            save_trajectories(trajs, self.out / "rollouts" / f"step-{row['step']:06d}.jsonl")
        return [float(x) for x in totals]


def _trainer_classes() -> tuple[Any, Any, Any, Any]:
    try:
        from transformers import PrinterCallback, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from ltrr._errors import MissingDependencyError

        raise MissingDependencyError(f"GRPO training needs TRL 1.16: pip install 'ltrr[rl]' ({exc})") from None
    return GRPOConfig, GRPOTrainer, TrainerCallback, PrinterCallback


class EpochSampler:
    """TRL's ``RepeatSampler`` with the order of each pass a function of (seed, pass).

    TRL's sampler shuffles with one generator, seeded once, that moves on at each pass, and has
    no ``set_epoch``: a resumed run builds a new sampler, so a pass after the first repeated the
    first pass's order and a resume in mid-pass skipped the wrong batches. This one reseeds the
    generator at each pass and draws the permutations of the passes before it (cheap: one
    ``randperm`` of the questions each), so pass ``e`` (set by the trainer through
    `set_epoch`) is the ``e``-th order of TRL's uninterrupted sampler, the same with or without
    a resume.
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Set the pass (0 for the first) whose order the next iteration yields."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        import torch

        s = self.sampler
        if s.shuffle and s.seed is not None:
            s.generator.manual_seed(s.seed)
            for _ in range(self.epoch):  # the passes before this one
                torch.randperm(s.num_samples, generator=s.generator)
        return iter(s)


def _per_epoch(trainer_class: type) -> type:
    """``trainer_class`` (TRL's GRPOTrainer) with `EpochSampler` as its training sampler."""

    class Trainer(trainer_class):
        def _get_train_sampler(self, dataset=None):
            return EpochSampler(super()._get_train_sampler(dataset))

    return Trainer


def resume_state(last: Path, rollouts: RouterRollouts, prompt: str, log: Callable[[str], None]) -> None:
    """Restore ``rollouts``' cost window and per-step log from checkpoint ``last``; refuse it
    (`ConfigError`) when it was trained on another prompt (``prompt``: `RouterRollouts.prompt_digest`).
    A checkpoint written before the digest was recorded is resumed with a log line saying so."""
    saved = json.loads((last / "router_state.json").read_text())
    was = saved.get("prompt")
    if was is None:
        log(f"[agent train] {last} does not record its prompt's arm descriptors (written before they were "
            "checked); resuming without that check")
    elif was != prompt:
        raise ConfigError(f"the checkpoint {last} was trained on other arm descriptors in the prompt (the run's "
                          "labels or pool changed since); resuming would change the prompt mid-run: train into a "
                          "new folder, or restore the labels it was trained with")
    restored = type(rollouts.normaliser).from_dict(saved["normaliser"])
    rule = getattr(rollouts.normaliser, "rule", None)
    if rule is not None and restored.rule != rule:
        # a checkpoint written before the rule was part of the normaliser's record (or under
        # another [agent] reward): the window holds raw costs, so it is scored under this run's rule
        log(f"[agent train] {last} kept its cost window under the rule {restored.rule}; scoring it with "
            f"this run's rule {rule}")
        restored = type(restored)(restored.window, lo_percentile=restored.lo_percentile,
                                  hi_percentile=restored.hi_percentile, **rule).update(restored.history_)
    rollouts.normaliser = restored
    rollouts.history = list(saved["history"])
    log(f"[agent train] resuming from {last}")


def finished_record(paths: Sequence[Path], spec: GRPOSpec, rollouts: RouterRollouts, seed: int,
                    steps: int) -> str | None:
    """The text of the first ``grpo.json`` in ``paths`` that records this finished run: the same
    spec, cost weight, seed and step count, and the per-step log its checkpoint restored into
    ``rollouts``; None when none does (a record of another run is never taken for this one's)."""
    for path in paths:
        if not path.is_file():
            continue
        text = path.read_text()
        try:
            rec = json.loads(text)
        except ValueError:
            continue
        if (isinstance(rec, dict) and rec.get("spec") == asdict(spec) and rec.get("alpha") == rollouts.alpha
                and rec.get("seed") == seed and rec.get("steps") == steps
                and rec.get("router_log") == rollouts.history):
            return text
    return None


def train_grpo(policy: TransformersLM, rollouts: RouterRollouts, prompts: Sequence[str], out: str | Path,
               spec: GRPOSpec, *, seed: int = 0, log: Callable[[str], None] = print, show_progress: bool = False,
               fingerprint: Mapping[str, Any] | None = None, time_budget: float | None = None,
               records: Sequence[str | Path] = (), resume_from: str | Path | None = None) -> dict:
    """Train ``policy`` with TRL's `GRPOTrainer` on ``prompts`` (question texts) and save it to
    ``out`` (a LoRA adapter and ``base_model.json``, or safetensors weights and the tokenizer;
    then ``grpo.json`` with the per-step log).

    ``policy`` is a `TransformersLM`: a LoRA policy (`ltrr.agent.lora.PolicyLM`), whose adapter
    is trained further against a frozen copy of itself (the KL reference when ``spec.beta >
    0``), or a full model, on which a new adapter is trained (``spec.adapter = "lora"``; the
    reference is the model with the adapter off) or every weight (``"full"``: the folder must
    be a saved one, since TRL reloads the reference from it). Checkpoints go to
    ``out/checkpoints`` every ``spec.save_steps`` steps (TRL's: the adapter or weights,
    optimiser, scheduler, step and RNG states; with them the rolling cost window and the
    per-step log); a call finds the last one and resumes it.

    ``time_budget`` (seconds from the start of this leg, None for no limit) ends the leg early,
    at a checkpoint: after each step, when the longest step so far would no longer fit, the
    step is saved and training stops (at least one step runs). Such a leg writes no policy; its
    record says ``"paused": True``, and the same call resumes it. A run on a laptop, or in a
    session of fixed length, thus goes in pieces without a kill in the middle of a step.

    A run already finished (its last checkpoint at ``spec.steps``) trains nothing: its policy is
    that checkpoint's, and its record is kept byte for byte when ``out/grpo.json`` or one of
    ``records`` (the exported run's ``grpo.json``) is this run's (`finished_record`), so that
    resuming a finished run on a new machine changes no committed file; the returned record
    then says ``"kept": True``.

    ``resume_from``: a run exported by `ltrr.agent.lora.export_run`, resumed unless ``out``
    holds a newer checkpoint of the same inputs; one trained on other inputs is refused
    (`ConfigError` naming them) before any local checkpoint is touched (`claim_checkpoints`).

    Each pass over ``prompts`` draws its order from ``(seed, pass)`` alone (`EpochSampler`), so
    a run resumed in any pass draws the batches of an uninterrupted one.
    """
    import os

    from datasets import Dataset

    GRPOConfig, GRPOTrainer, TrainerCallback, PrinterCallback = _trainer_classes()
    from ltrr.agent.sft import claim_checkpoints

    out = Path(out)
    if not prompts:
        raise DataError("GRPO needs at least one training question")
    if rollouts.group_size != spec.group_size:
        raise ConfigError(f"the rollouts' group size {rollouts.group_size} is not the spec's {spec.group_size}")
    if spec.adapter == "full" and (isinstance(policy, lora.PolicyLM) or getattr(policy.hf_model, "hf_quantizer", None)):
        raise ConfigError("GRPO with adapter = \"full\" trains a full, unquantised policy folder (TRL reloads "
                          "the KL reference from it); start from a full SFT policy, or train a LoRA adapter")
    model, peft_config = lora.trainable_model(policy, spec, log, stage="agent train")
    tokenizer = policy.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    ckpt = out / "checkpoints"
    # the policy by content, not path or device: a run resumes from a copy of its checkpoint elsewhere
    claim_checkpoints(ckpt, {"spec": asdict(spec), "seed": seed, "policy": lora.content_digest(policy),
                             "prompts": list(prompts), **dict(fingerprint or {})}, log, stage="agent train",
                      exported=resume_from)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    n = spec.rollouts_per_step
    # no entropy_coef: TRL's default 0 (Router-R1's 0.001 is declared in the module docstring)
    args = GRPOConfig(output_dir=str(ckpt), max_steps=spec.steps, learning_rate=spec.learning_rate,
                      per_device_train_batch_size=spec.micro_batch, gradient_accumulation_steps=n // spec.micro_batch,
                      generation_batch_size=n, num_generations=spec.group_size, beta=spec.beta,
                      temperature=spec.temperature, epsilon=spec.epsilon, num_iterations=1,
                      warmup_steps=1 if spec.steps > 4 else 0, lr_scheduler_type="constant_with_warmup",
                      logging_steps=1, save_steps=spec.save_steps, save_total_limit=2, save_only_model=False,
                      **lora.device_args(policy), seed=seed, data_seed=seed, report_to=[], bf16=False, fp16=False,
                      disable_tqdm=not show_progress, dataloader_num_workers=0, log_completions=False,
                      max_completion_length=policy.context_length, remove_unused_columns=False)

    class _Checkpointed(TrainerCallback):  # type: ignore[misc,valid-type]  # imported at call time
        """Saves the cost window and the per-step log with each checkpoint, and logs a line."""

        def on_save(self, args, state, control, **kw):
            folder = ckpt / f"checkpoint-{state.global_step}"
            if folder.exists():  # atomically: its presence marks a complete checkpoint (a kill may come any time)
                write_text_atomic(folder / "router_state.json", json.dumps(
                    {"normaliser": rollouts.normaliser.to_dict(), "history": rollouts.history,
                     "alpha": rollouts.alpha, "spec": asdict(spec), "prompt": prompt}) + "\n")

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                log(f"[agent train] step {state.global_step}/{state.max_steps} reward {logs['reward']:.3f} "
                    f"format {logs.get('router/format_valid', float('nan')):.2f} "
                    f"searches {logs.get('router/searches', float('nan')):.2f} "
                    f"zero-adv {logs.get('frac_reward_zero_std', float('nan')):.2f}")

    class _Deadline(TrainerCallback):  # type: ignore[misc,valid-type]  # imported at call time
        """Stops at a checkpoint when the next step, as long as the longest so far, would end
        after ``time_budget``."""

        def __init__(self, budget: float) -> None:
            self.budget = budget
            self.mark, self.longest = time.perf_counter(), 0.0

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            self.longest, self.mark = max(self.longest, now - self.mark), now
            if state.global_step < state.max_steps and now - t0 + self.longest > self.budget:
                control.should_save = control.should_training_stop = True
            return control

    prompt = rollouts.prompt_digest()
    last = lora.last_checkpoint(ckpt)
    if last is not None:
        resume_state(last, rollouts, prompt, log)
    from transformers import TrainerState, set_seed

    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    t0 = time.perf_counter()
    state = TrainerState.load_from_json(str(last / "trainer_state.json")) if last is not None else None
    adapter: dict | None
    if last is not None and state is not None and state.global_step >= spec.steps:
        # a finished run: transformers resuming at max_steps in mid-epoch takes one step more, so
        # the policy is the last checkpoint's
        adapter = lora.policy_from_checkpoint(last, tmp, policy)
        kept = finished_record([out / "grpo.json", *map(Path, records)], spec, rollouts, seed, state.global_step)
        if kept is not None:
            (tmp / "grpo.json").write_text(kept)
            lora.replace_policy(tmp, out, "grpo.json")
            log(f"[agent train] {out}: finished at step {state.global_step} of {spec.steps}; nothing to train, "
                "and its record is kept")
            return {**json.loads(kept), "kept": True}
    else:
        set_seed(seed)  # a new adapter's initial weights come from the seed (the Trainer seeds only after wrapping)
        trainer = _per_epoch(GRPOTrainer)(model=model, reward_funcs=[rollouts.reward], args=args,
                              train_dataset=Dataset.from_dict({"prompt": list(prompts)}), processing_class=tokenizer,
                              rollout_func=rollouts, callbacks=[_Checkpointed()], peft_config=peft_config)
        trainer.remove_callback(PrinterCallback)
        if time_budget is not None:
            trainer.add_callback(_Deadline(time_budget))
        trainer.train(resume_from_checkpoint=str(last) if last is not None else None)
        state = trainer.state
        adapter = None if state.global_step < spec.steps else lora.save_trained(trainer, tmp, policy)
    seconds = time.perf_counter() - t0
    steps_log = [{k: v for k, v in h.items() if isinstance(v, (int, float))} for h in state.log_history if "reward" in h]
    record = {"spec": asdict(spec), "adapter": adapter or {"adapter": "full"}, "alpha": rollouts.alpha, "steps": state.global_step,
              "rollouts": state.global_step * n, "seconds_this_leg": round(seconds, 1),
              "resumed": last is not None, "base_policy": policy.identity, "seed": seed,
              "trl_log": steps_log, "router_log": rollouts.history}
    if state.global_step < spec.steps:  # a leg ended by time_budget: its checkpoint is the run's state
        log(f"[agent train] paused at step {state.global_step}/{spec.steps} ({seconds:.0f}s this leg); "
            "the same command resumes it")
        return {**record, "paused": True, "adapter": None}
    (tmp / "grpo.json").write_text(json.dumps(record, indent=1) + "\n")
    lora.replace_policy(tmp, out, "grpo.json")
    return record
