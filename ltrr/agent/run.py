"""The multi-round router on a run: its partition, the arms' strengths, the model, the loop.

Everything here reads a `ltrr.pipeline.Run` (its config's ``[agent]`` table, its pool, its
labels) and builds what `ltrr.agent.sft` and `ltrr.agent.evaluate` need:

- `partition`: the protocol's design/test partition of the run's queries (`ltrr protocol`'s,
  by group, seeded), so SFT and RL only ever see design groups;
- `strengths`: each arm's mean utility per query type on the design part, for the prompt;
- `policy_lm`: the policy model, a trained policy folder or the run's generator model;
- `make_loop`: an `AgentLoop` over the run's built pool, every continuation cached in the run's
  generation cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ltrr._errors import ConfigError, NotBuiltError

__all__ = ["partition", "strengths", "policy_lm", "make_loop", "gold_answers", "agent_dir"]


def agent_dir(run) -> Path:
    """``<workdir>/agent``: SFT data, policies and evaluations of the run."""
    return run.workdir / "agent"


def partition(run) -> tuple[list[str], list[str]]:
    """(design qids, test qids): `ltrr.eval.protocol.design_test_partition` of the run's queries,
    the queries without complete labels (a failed item) left out of their part, as the protocol
    leaves them (`ltrr.eval.protocol.keep_queries`): their NaN utility failed the evaluation after
    its rollouts, and could script an SFT trajectory to the wrong arm."""
    from ltrr.eval.protocol import design_test_partition, keep_queries
    from ltrr.eval.routing import utility_matrix

    part = design_test_partition(run.dataset.queries.reset_index(drop=True),
                                 design_size=run.config.protocol.design_size, random_state=run.config.seed)
    labels = labels_table(run) if (run.labels_dir / "labels.parquet").exists() else None
    if labels is not None:
        part = keep_queries(part, utility_matrix(labels).index)
    return [str(q) for q in part.train], [str(q) for q in part.test]


def labels_table(run) -> pd.DataFrame:
    path = run.labels_dir / "labels.parquet"
    if not path.exists():
        raise NotBuiltError(f"the agent needs the run's labels ({path}); run `ltrr label {run.config.source}` first")
    return pd.read_parquet(path)


def strengths(run, labels: pd.DataFrame, design: list[str]) -> dict[str, dict[str, float]]:
    """Arm -> (query type -> mean utility on the design part), failed items left out."""
    q = run.dataset.queries.assign(qid=run.dataset.queries["qid"].astype(str)).set_index("qid")
    lab = labels[labels["qid"].astype(str).isin(set(design))]
    if "failed" in lab:
        lab = lab[~lab["failed"].astype(bool)]
    lab = lab.assign(qtype=lab["qid"].astype(str).map(q["qtype"]) if "qtype" in q else "all")
    table = lab.groupby(["arm", "qtype"])["utility"].mean()
    out: dict[str, dict[str, float]] = {}
    for (arm, qtype), value in table.items():
        out.setdefault(str(arm), {})[str(qtype)] = round(float(value), 3)
    return out


def gold_answers(run) -> dict[str, list[str]]:
    """Qid (as a string) -> the reference answers of that query in the run's dataset."""
    q = run.dataset.queries
    return {str(i): [str(a) for a in ans] for i, ans in zip(q["qid"], q["answers"], strict=True)}


def policy_lm(run, policy: str | Path | None = None):
    """The policy model: a policy folder (SFT or RL: a LoRA adapter on its base model, or a full
    Hugging Face folder; `ltrr.agent.lora.load_policy`), a packaged model's name
    (`ltrr.generation.models.packaged_models`, on the transformers backend: a policy other than
    the labels' generator, e.g. SmolLM2 routing for Qwen's labels), else the run's generator
    model, as a token-level `ltrr.agent.backends.ContinuationLM` where it can be one."""
    from ltrr.agent.backends import make_continuation_lm
    from ltrr.agent.lora import load_policy
    from ltrr.config import backend_settings
    from ltrr.generation.models import packaged_models

    policy = policy or run.config.agent.policy
    device = run.config.agent.device
    if policy and str(policy) in packaged_models and not Path(policy).exists():
        return make_continuation_lm({"backend": "transformers", "model": str(policy), "device": device})
    if policy:
        return load_policy(Path(policy), device=device)
    gcfg = backend_settings(run.config.generation)
    if gcfg.get("backend", "transformers") == "transformers":
        gcfg["device"] = device
    return make_continuation_lm(gcfg)


def make_loop(run, lm, labels: pd.DataFrame | None = None, *, design: list[str] | None = None,
              use_cache: bool = True, holdout: list[str] | None = None, **overrides: Any):
    """An `AgentLoop` over the run's built pool with ``[agent]`` settings (``overrides`` win), the
    arms' design-part strengths in the prompt, and the ``holdout`` arms left out."""
    from ltrr.agent.loop import AgentLoop
    from ltrr.generation.cache import GenerationCache

    acfg = run.config.agent
    pool = run.pool.load(run.index_dir)
    holdout = list(acfg.holdout_arms if holdout is None else holdout)
    unknown = sorted(set(holdout) - set(pool.arm_names))
    if unknown:
        raise ConfigError(f"[agent] holdout_arms names {unknown}, not arms of the pool {pool.arm_names}")
    arms = [a for a in pool.arms if a.name not in holdout]
    power = strengths(run, labels, design) if labels is not None and design is not None else None
    if power is not None:  # a held-out arm is unseen: in the prompt (`agent eval --holdout`) by its config alone
        power = {a: v for a, v in power.items() if a not in set(holdout) | set(acfg.holdout_arms)}
    settings = {"k": acfg.k, "max_turns": acfg.max_turns, "max_new_tokens": acfg.max_new_tokens,
                "max_obs_tokens": acfg.max_obs_tokens, "seed": run.config.seed}
    unknown = sorted(set(overrides) - set(settings) - {"temperature", "top_p", "cache", "max_total_tokens"})
    if unknown:
        raise ConfigError(f"make_loop: unknown setting(s) {unknown}")
    settings.update(overrides)
    cache = settings.pop("cache", None)
    if cache is None and use_cache and run.config.generation.use_cache:
        cache = GenerationCache(run.cache_path)
    return AgentLoop.from_pool(lm, pool, arms=arms, strengths=power, cache=cache, **settings)
