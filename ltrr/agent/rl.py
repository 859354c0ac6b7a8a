"""The RL stage on a run: GRPO training (`ltrr agent train`) and its equal-compute baseline,
rejection-sampling fine-tuning (`ltrr agent rft`).

Both draw the same training questions from the design part (never a test group): every
``multihop`` design question and as many single-hop ones, a type-stratified seeded sample, so
two-hop questions make half the set as in the SFT scripts. Both sample rollouts from a policy
with `ltrr.agent.grpo.LiveLM` (temperature from ``[agent] grpo``, a seed per sample, no
generation cache) through loops with the GRPO settings (one passage of at most
``max_obs_tokens`` per search; ``max_turns_single`` or ``max_turns_multihop`` searches). In
GRPO each question shows the arms its own way at each step (`ltrr.agent.presentation`, the
``[agent] grpo`` view settings; training question ``i`` at step ``s`` has key ``(1, s, i)``).

Rejection sampling (RFT) spends the RL run's rollouts on the SFT policy: ``group_size`` samples
for each of ``rollouts / group_size`` training questions, scored with the same reward; per
question, the best-rewarded rollout with a valid format and a correct answer is kept (none when
no sample is correct), and the SFT policy is fine-tuned on the kept ones with ``[agent] sft``
settings (TRL `SFTTrainer`, loss on model-written tokens).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

from ltrr._atomic import atomic_path, write_text_atomic
from ltrr._checks import check_int, check_number
from ltrr._errors import DataError

__all__ = ["training_questions", "make_rollouts", "run_grpo", "run_rft"]


def training_questions(run, design: list[str]) -> list[tuple[str, str, str]]:
    """(qid, question, qtype) of the RL training questions (module docstring), sorted by qid;
    a question text shared by several qids is kept once (the first qid)."""
    q = run.dataset.queries.assign(qid=run.dataset.queries["qid"].astype(str)).set_index("qid")
    dq = q.loc[[i for i in sorted(set(design)) if i in q.index]]
    qtype = dq["qtype"].astype(str) if "qtype" in dq else None
    rng = np.random.default_rng([run.config.seed, 16])
    if qtype is None:
        chosen = list(dq.index)
    else:
        chosen = list(dq.index[qtype == "multihop"])
        others = sorted(t for t in qtype.unique() if t != "multihop")
        room = max(len(chosen), 1) if chosen else len(dq)
        per, extra = divmod(room, max(len(others), 1))
        for i, t in enumerate(others):
            ids = np.sort(dq.index[qtype == t].to_numpy())
            chosen += list(rng.permutation(ids)[: per + (1 if i < extra else 0)])
    seen: set[str] = set()
    out = []
    for qid in sorted(map(str, chosen)):
        text = str(dq.loc[qid, "question"])
        if text.strip() and text not in seen:
            seen.add(text)
            out.append((qid, text, str(qtype.loc[qid]) if qtype is not None else "all"))
    if not out:
        raise DataError("no design question to train on")
    return out


def make_rollouts(run, policy, spec, *, alpha: float, out: Path | None, questions=None):
    """The `RouterRollouts` of ``policy`` (a `TransformersLM`) on the run: loops with the GRPO
    settings sampling from a `LiveLM`, the training questions, gold aliases, costs and reward,
    and each question's arm presentation per step (``spec``'s view settings)."""
    from ltrr.agent.grpo import LiveLM, RouterRollouts
    from ltrr.agent.presentation import draw_view, view_settings
    from ltrr.agent.reward_options import REWARDS
    from ltrr.agent.run import gold_answers, labels_table, make_loop, partition

    labels = labels_table(run)
    design, _ = partition(run)
    questions = training_questions(run, design) if questions is None else questions
    live = LiveLM(policy, policy.hf_model)
    common = {"k": spec.k, "max_obs_tokens": spec.max_obs_tokens, "max_new_tokens": spec.max_new_tokens,
              "temperature": spec.temperature}
    # The search budget, which the prompt states ("at most N time(s)"), is GRPO's own here: 2 for a
    # single-hop question and 3 for a multihop one (`GRPOSpec`), while SFT's scripts and the
    # evaluation use ``[agent] max_turns`` (3 in the committed configs) for every question
    # (`ltrr.agent.run.make_loop`). On purpose, for compute: it keeps a GRPO rollout near 1,200
    # tokens (`ltrr.agent.grpo`), and SFT's scripts search a single-hop question once at most, so
    # a budget of 2 cuts nothing they teach. What it costs: a single-hop prompt says "at most 2"
    # in RL and "at most 3" in SFT and evaluation. Making them one would change the prompts, and so
    # the policies and figures, of the committed SFT, GRPO and evaluation runs; it is declared
    # instead. (Router-R1 states no budget in its prompt and trains with max_turns=4, train.sh:78.)
    single = make_loop(run, live, labels, design=design, use_cache=False, max_turns=spec.max_turns_single, **common)
    multi = make_loop(run, live, labels, design=design, use_cache=False, max_turns=spec.max_turns_multihop, **common)
    qtypes = {qid: t for qid, _, t in questions}
    place = {qid: i for i, (qid, _, _) in enumerate(questions)}
    settings = view_settings(spec)

    def views(qid: str, step: int):
        return draw_view(single.arm_names, seed=run.config.seed, key=(1, step, place[qid]), **settings)

    acfg = run.config.agent
    rollouts = RouterRollouts(lambda qid: multi if qtypes[qid] == "multihop" else single,
                              {text: qid for qid, text, _ in questions}, gold_answers(run),
                              run.pool.costs, REWARDS.get(acfg.reward)().rolling_normaliser(spec.window),
                              spec.group_size, alpha=alpha,
                              token_price=acfg.token_price, metric=acfg.metric,
                              correct_threshold=acfg.correct_threshold, seed=run.config.seed, out=out,
                              batch=acfg.rollout_batch, reward=acfg.reward, views=views)
    return rollouts, questions


def _reward_settings(run) -> dict:
    """The reward's settings a GRPO run's resume must share (``[agent]`` metric, reward,
    token_price, correct_threshold), those away from their defaults only: a run checkpointed
    before they were part of the fingerprint, at the defaults, still resumes."""
    from ltrr.agent.section import AgentSection

    acfg, default = run.config.agent, AgentSection.from_mapping({})
    return {k: getattr(acfg, k) for k in ("metric", "reward", "token_price", "correct_threshold")
            if getattr(acfg, k) != getattr(default, k)}


def run_grpo(run, start: str | Path, out: str | Path, *, steps: int | None = None, alpha: float | None = None,
             log: Callable[[str], None] = print, show_progress: bool = False,
             resume_from: str | Path | None = None, time_budget: float | None = None) -> dict:
    """`ltrr agent train`: GRPO from the policy in ``start`` into ``out``; see `ltrr.agent.grpo`.
    ``resume_from``: a run exported by `ltrr.agent.lora.export_run` (a committed checkpoint),
    resumed when ``out`` has no newer checkpoint; one of other inputs is refused (`ConfigError`).
    ``time_budget``: seconds for this leg of training; it ends at a checkpoint, paused (the
    record says ``"paused": True``), when the next step would not fit (`train_grpo`)."""
    from ltrr.agent.grpo import GRPOSpec, train_grpo
    from ltrr.agent.run import policy_lm

    spec = GRPOSpec.from_mapping({**run.config.agent.grpo, **({} if steps is None else {"steps": steps})})
    alpha = run.config.agent.alpha if alpha is None else alpha
    _check_alpha(alpha)
    if time_budget is not None:
        check_number(time_budget, "--time-budget (seconds)", low=0, low_open=True)
    policy = policy_lm(run, start)
    out = Path(out)
    rollouts, questions = make_rollouts(run, policy, spec, alpha=alpha, out=out)
    log(f"[agent train] {len(questions)} design questions ({sum(t == 'multihop' for *_, t in questions)} multihop), "
        f"{spec.steps} steps of {spec.prompts_per_step} x {spec.group_size} rollouts, alpha {alpha}")
    record = train_grpo(policy, rollouts, [text for _, text, _ in questions], out, spec, seed=run.config.seed,
                        log=log, show_progress=show_progress,
                        # the start policy by content is train_grpo's ``policy``
                        fingerprint={"alpha": alpha, **_reward_settings(run)},
                        time_budget=time_budget,
                        records=[] if resume_from is None else [Path(resume_from) / "grpo.json"],
                        resume_from=resume_from)
    plot = out / "training.png"
    committed = None if resume_from is None else Path(resume_from) / "training.png"
    if record.get("kept") and plot.exists():
        pass  # a finished run's plot, kept with its record
    elif record.get("kept") and committed is not None and committed.is_file():
        with atomic_path(plot, suffix=".png") as tmp:  # the finished run's plot, as committed
            tmp.write_bytes(committed.read_bytes())
    elif not record.get("paused"):
        plot_training(record, plot)
    return record


def _check_alpha(alpha: Any) -> None:
    check_number(alpha, "--alpha", low=0, high=1)


def plot_training(record: dict, path: Path) -> Path:
    """Per-step reward, format-valid rate, searches, entropy, within-group reward variance and
    zero-advantage share (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    router = record["router_log"]
    trl = {int(h["step"]): h for h in record["trl_log"] if "step" in h}
    steps = [r["step"] for r in router]
    panels = [("reward (mean)", [r["reward"] for r in router]),
              ("format-valid rate", [r["format_valid"] for r in router]),
              ("searches per question", [r["searches"] for r in router]),
              ("entropy (model tokens)", [trl.get(s, {}).get("entropy", np.nan) for s in steps]),
              ("within-group reward variance", [r["within_group_var"] for r in router]),
              ("zero-advantage share", [r["zero_adv_share"] for r in router])]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3))
    for ax, (title, ys) in zip(axes, panels, strict=True):
        ax.plot(steps, ys, marker=".")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    fig.suptitle(f"GRPO, alpha {record['alpha']}, {record['steps']} steps", fontsize=10)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90)
    plt.close(fig)
    return path


def run_rft(run, start: str | Path, out: str | Path, *, rollouts: int, log: Callable[[str], None] = print,
            show_progress: bool = False) -> dict:
    """`ltrr agent rft`: rejection-sampling fine-tuning of the policy in ``start`` with
    ``rollouts`` samples (module docstring); the policy goes to ``out``."""
    from dataclasses import asdict

    from tqdm.auto import tqdm

    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.batching import raise_on_model_errors, rollout_many
    from ltrr.agent.grpo import GRPOSpec, sample_seed
    from ltrr.agent.lora import content_digest
    from ltrr.agent.prefix_cache import PrefixCache
    from ltrr.agent.run import policy_lm
    from ltrr.agent.sft import SFTSpec, train_sft
    from ltrr.agent.trajectory import load_trajectories, save_trajectories

    spec = GRPOSpec.from_mapping(run.config.agent.grpo)
    check_int(rollouts, "--rollouts", low=spec.group_size, note=" (the group size)", error=DataError)
    policy = policy_lm(run, start)
    out = Path(out)
    roll, questions = make_rollouts(run, policy, spec, alpha=run.config.agent.alpha, out=None)
    live = roll.loop_for(questions[0][0]).lm if questions else None
    if isinstance(live, TransformersLM) and roll.rollout_batch <= 1:
        # the sampled policy stays fixed: each question's prompt is prefilled once for its samples
        live.prefix_cache = PrefixCache()
    order = np.random.default_rng([run.config.seed, 17]).permutation(len(questions))
    n_q = rollouts // spec.group_size
    picked = [questions[i] for i in np.resize(order, n_q)]  # cycles when rollouts exceed one pass
    samples_path = out.with_name(out.name + "-samples.jsonl")
    # the samples resume only for the same start policy (by its content), seed and sampling; a
    # retrained start policy's run samples afresh (it fine-tuned on the old policy's samples)
    made_by = {"policy": content_digest(policy), "seed": run.config.seed, "grpo": asdict(spec),
               "alpha": run.config.agent.alpha, "questions": [q for q, _, _ in picked]}
    record_path = samples_path.with_suffix(".json")
    done = []
    if samples_path.exists():
        try:
            same = json.loads(record_path.read_text()) == json.loads(json.dumps(made_by, default=str))
        except (OSError, ValueError):
            same = False
        if same:
            done = load_trajectories(samples_path)  # resume the sampling
        else:
            log(f"[agent rft] {samples_path} holds samples of another start policy or settings: sampling afresh")
            samples_path.unlink()
    write_text_atomic(record_path, json.dumps(made_by, indent=1, default=str) + "\n")
    kept = []
    g = spec.group_size
    chunk = max(1, roll.rollout_batch // g)  # questions sampled together (one batch of rollouts)
    with tqdm(total=len(picked) * g, desc="rft samples", disable=not show_progress) as bar:
        bar.update(min(len(done), len(picked) * g))
        for first in range(len(done) // g, len(picked), chunk):
            # seeds from "steps" 10**6 + j: never a GRPO step's
            jobs = [(roll.loop_for(qid), text, qid, sample_seed(run.config.seed, 10**6 + j, i))
                    for j, (qid, text, _) in enumerate(picked[first:first + chunk], first) for i in range(g)]
            group = rollout_many(jobs, batch=roll.rollout_batch, progress=bar.update)
            raise_on_model_errors(group, "rejection sampling")  # the samples so far are kept
            done += group
            save_trajectories(done, samples_path)
    groups = [done[j * g:(j + 1) * g] for j in range(len(picked))]
    for group in groups:
        roll.batch = group
        rewards = roll.reward([t.question for t in group], [None] * len(group), list(range(len(group))))
        scored = [cast(dict, t.rewards) for t in group]  # roll.reward has set every one
        good = [(r, -s["cost"], i) for i, (r, s) in enumerate(zip(rewards, scored, strict=True))
                if s["format"] == 0 and s["outcome"] >= roll.correct_threshold]
        if good:
            kept.append(group[max(good)[2]])
    log(f"[agent rft] {len(groups) * spec.group_size} samples of {len(groups)} questions; kept {len(kept)} "
        f"correct ones (format-valid {np.mean([cast(dict, t.rewards)['format'] == 0 for grp in groups for t in grp]):.2f})")
    if not kept:
        raise DataError("rejection sampling kept no correct rollout; nothing to fine-tune on")
    sft = SFTSpec.from_mapping(run.config.agent.sft)
    record = train_sft(kept, policy, out, sft, seed=run.config.seed, log=log, show_progress=show_progress)
    record.update({"rft_samples": len(groups) * spec.group_size, "rft_kept": len(kept), "rft_questions": len(groups)})
    write_text_atomic(out / "rft.json", json.dumps({k: v for k, v in record.items() if k != "loss"}, indent=1) + "\n")
    return record


def checkpoint_record(folder: str | Path) -> dict:
    """The per-step logs of a GRPO run so far, from its newest complete checkpoint (a run in
    pieces has no ``grpo.json`` until its last step): the same keys `plot_training` reads."""
    from ltrr._errors import NotBuiltError
    from ltrr.agent.lora import last_checkpoint

    folder = Path(folder)
    done = folder / "grpo.json"
    if done.exists():
        return json.loads(done.read_text())
    last = last_checkpoint(folder / "checkpoints")
    if last is None:
        raise NotBuiltError(f"{folder}: no GRPO run (grpo.json or a complete checkpoint); see `ltrr agent train`")
    state = json.loads((last / "trainer_state.json").read_text())
    router = json.loads((last / "router_state.json").read_text())
    return {"spec": router.get("spec", {}), "alpha": router.get("alpha"), "steps": int(state["global_step"]),
            "trl_log": [{k: v for k, v in h.items() if isinstance(v, (int, float))}
                        for h in state["log_history"] if "reward" in h],
            "router_log": router["history"], "checkpoint": str(last)}


def progress_table(record: dict) -> str:
    """Markdown: one row per step of `checkpoint_record` (reward, format-valid rate, outcome,
    cost, searches, within-group reward variance, zero-advantage share, entropy)."""
    trl = {int(h["step"]): h for h in record["trl_log"] if "step" in h}
    lines = ["| step | reward | format-valid | outcome | cost | searches | within-group var | zero-adv share "
             "| entropy |", "|---|---|---|---|---|---|---|---|---|"]
    for r in record["router_log"]:
        ent = trl.get(int(r["step"]), {}).get("entropy", float("nan"))
        lines.append(f"| {r['step']} | {r['reward']:.3f} | {r['format_valid']:.3f} | {r['outcome']:.3f} | "
                     f"{r['cost']:.3f} | {r['searches']:.2f} | {r['within_group_var']:.4f} | "
                     f"{r['zero_adv_share']:.2f} | {ent:.3f} |")
    return "\n".join(lines)
