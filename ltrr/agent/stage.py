"""The multi-round router as a stage of a run: its SFT policy, then its evaluation.

`ltrr agent sft` and the agent stage of `ltrr run` (``[agent] enabled = true``) train the policy
through `sft_policy`; the stage keeps a finished policy of the same settings and seed instead of
training it again.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ltrr.agent.run import agent_dir, labels_table, partition, policy_lm
from ltrr.agent.sft import SFTSpec, build_sft_trajectories, train_sft
from ltrr.agent.trajectory import save_trajectories
from ltrr.data.io import write_text_atomic

__all__ = ["sft_policy"]


def sft_policy(run, out: str | Path | None = None, *, force: bool = True, log=print,
               show_progress: bool = False, resume_from: str | Path | None = None) -> tuple[Path, dict]:
    """Script the design-part trajectories and fine-tune the policy on them (`ltrr agent sft`).

    Parameters
    ----------
    run : ltrr.pipeline.Run
        The run; its ``[agent] sft`` table gives the settings, its seed the training seed.
    out : path, optional
        The policy folder (default ``<workdir>/agent/policies/sft``).
    force : bool, default=True
        Train even when ``out`` holds a finished policy of the same settings and seed
        (``sft.json``); with False such a policy is kept and training skipped, as the agent stage
        of `ltrr run` does.
    log : callable
        Progress lines.
    show_progress : bool
        Show the trainer's progress bar.
    resume_from : path, optional
        An interrupted SFT run exported by ``ltrr agent export`` (another machine's): its
        newest complete checkpoint is resumed, after checking it was made from these inputs
        (`ltrr.agent.sft.train_sft`).

    Returns
    -------
    (Path, dict)
        The policy folder and its training record (``sft.json``).
    """
    spec = SFTSpec.from_mapping(run.config.agent.sft)
    folder = Path(out or agent_dir(run) / "policies" / "sft")
    done = folder / "sft.json"
    inputs = _sft_inputs(run)
    if not force and done.is_file():
        record = json.loads(done.read_text())
        # a record written before a field existed holds that field's default (`SFTSpec`)
        kept = {**json.loads(json.dumps(asdict(SFTSpec()))), **(record.get("spec") or {})}
        same_inputs = record.get("inputs", inputs) == inputs  # a record from before they were kept: as before
        if kept == json.loads(json.dumps(asdict(spec))) and record.get("seed") == run.config.seed and same_inputs:
            log(f"[agent sft] skipped: {folder} holds the SFT policy of these settings and seed")
            return folder, record
    labels = labels_table(run)
    design, _ = partition(run)
    lm = policy_lm(run, "")
    trajs = build_sft_trajectories(run, lm, labels, design, spec)
    data = save_trajectories(trajs, agent_dir(run) / "sft_data" / f"{folder.name}.jsonl")  # one file per policy
    n_search = sum(1 for t in trajs if t.searches)
    log(f"[agent sft] {len(trajs)} scripted design trajectories ({n_search} search, "
        f"{sum(len(t.searches) == 2 for t in trajs)} two-hop) -> {data}")
    record = train_sft(trajs, lm, folder, spec, seed=run.config.seed, log=log, show_progress=show_progress,
                       resume_from=resume_from)
    record["inputs"] = inputs
    write_text_atomic(done, json.dumps(record, indent=1) + "\n")
    return folder, record


def _sft_inputs(run) -> dict:
    """What the scripted trajectories are made of besides ``[agent] sft`` and the seed: the
    labels (their stage's fingerprint), the base model (``[generation]``), the partition and the
    loop's settings (held-out arms, k, the observation budget, the reward)."""
    acfg = {k: v for k, v in run.config.agent.to_dict().items()
            if k not in ("enabled", "policy", "sft", "grpo", "n_eval", "sweep")}
    return json.loads(json.dumps({"labels": run.fingerprint_of("label"), "generation": run.config.generation.to_dict(),
                                  "design_size": run.config.protocol.design_size, "agent": acfg}, default=str))
