"""`ltrr agent eval`: the multi-round router on the test part, against single-round routing.

The questions are at most ``[agent] n_eval`` test-part questions (the protocol's partition; no
design group): every ``multihop`` one first, up to half of ``n_eval``, then a type-stratified,
seeded sample of the others. Each is rolled out greedily (`AgentLoop`, every continuation
cached, so an interrupted evaluation resumes from the cache) and scored:

- ``recall`` (the run's utility), ``contains``, ``f1`` and ``em`` of the answer, best alias;
- the format reward (valid = 0), searches per question by type, the cost (searches weighted by
  the arms' costs plus injected tokens times ``token_price``) and the total reward, its cost
  term normalised with fixed bounds: the 5th and 95th percentiles of the costs of the scripted
  design-part trajectories (`ltrr.agent.sft`), so a score never depends on what was evaluated
  before it.

Baselines on the same questions, from the labels (each arm's answer to each question): no
retrieval; the best single arm (highest design-part mean utility); LTRR top-1 (the run's
``[train] ranker`` trained on the design part, one round); and the oracle arm. Paired Wilcoxon
tests (`ltrr.eval.stats.paired_wilcoxon`) compare the router's per-question utility with LTRR
top-1 and with the best single arm, on all questions and on ``multihop``.

``holdout`` arms (``[agent] holdout_arms``) are left out of the prompt unless asked for: an
arm the policy never saw in training, described by its config only, tests whether it uses a new
arm. The evaluation then says how often each arm is called. ``leave_out`` arms are left out of
the prompt too (and so cannot be called): with ``holdout``, leaving out the seen arm of the
held-out arm's own family (``dense`` for ``dense+reg``) asks whether the policy finds the family
by the unseen arm's descriptor line once the name it was taught is gone. ``neutral_ids`` shows
every arm under a neutral id (``arm-3``; `ltrr.agent.presentation.draw_view` with ``rename_share
= 1``, question ``i`` of the sorted evaluation qids drawing with key ``(2, i)``, in the pool's
order, so an evaluation repeats exactly): the prompt of a policy trained with ``[agent] sft.
rename_share = 1``, on which only an arm's descriptor line says what it is.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError
from ltrr.data.io import write_text_atomic

__all__ = ["select_questions", "design_normaliser", "evaluate_agent", "compare_evals", "load_evals", "per_question",
           "METRICS"]

METRICS = ("recall", "contains", "f1", "em")  # reported; [agent] metric is the tested one


def select_questions(queries: pd.DataFrame, test: list[str], n: int, seed: int) -> list[str]:
    """At most ``n`` test qids: ``multihop`` first (up to ``n // 2``), then the other types,
    about equally many each; seeded, independent of row order; returned sorted."""
    check_int(n, "[agent] n_eval", low=1, error=DataError)
    q = queries.assign(qid=queries["qid"].astype(str)).set_index("qid").loc[sorted(set(test))]
    rng = np.random.default_rng(seed)
    qtype = q["qtype"].astype(str) if "qtype" in q else pd.Series("all", index=q.index)
    mh = np.sort(q.index[qtype == "multihop"].to_numpy())
    keep = list(rng.permutation(mh)[: n // 2]) if len(mh) else []
    others = [t for t in sorted(qtype.unique()) if t != "multihop"]
    room = n - len(keep)
    if others and room > 0:
        per, extra = divmod(room, len(others))
        for i, t in enumerate(others):
            ids = np.sort(q.index[qtype == t].to_numpy())
            keep += list(rng.permutation(ids)[: per + (1 if i < extra else 0)])
    return sorted(map(str, keep))


def design_normaliser(run, lm, labels: pd.DataFrame, design: list[str]):
    """The fixed cost normaliser of the ``[agent] reward``: 5th/95th percentiles of the scripted
    design trajectories' costs (`ltrr.agent.reward_options.RouterR1Reward.fixed_normaliser` takes
    them of the costs' square roots), cached in ``agent/design_costs.json``, keyed by the settings
    that change them."""
    import hashlib

    from ltrr.agent.reward_options import REWARDS
    from ltrr.agent.rewards import CostNormaliser
    from ltrr.agent.run import agent_dir
    from ltrr.agent.sft import SFTSpec, build_sft_trajectories

    acfg = run.config.agent
    reward = REWARDS.get(acfg.reward)()
    probe = reward.fixed_normaliser([0.0])  # the reward's rule, whatever the costs
    # a rule other than ltrr's default is part of the key (and of the cached document), so bounds
    # cached under another rule are never read back; ltrr's key and document are as they were
    rule = {k: v for k, v in probe.rule.items() if v != CostNormaliser().rule[k]}
    spec = SFTSpec.from_mapping(acfg.sft)
    key = hashlib.sha256(json.dumps({"agent": {k: v for k, v in acfg.items() if k not in ("n_eval", "policy", "grpo")},
                                     "sft_spec": asdict(spec),  # its defaults (ties) shape the scripts too
                                     "arms": run.config.arms, "design": sorted(design), "model": lm.identity,
                                     **({"cost_rule": rule} if rule else {})},
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = agent_dir(run) / "design_costs.json"
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("key") == key:
            return CostNormaliser.from_dict(doc["normaliser"]) if "normaliser" in doc \
                else CostNormaliser.fixed(doc["lo"], doc["hi"])
    trajs = build_sft_trajectories(run, lm, labels, design, spec)
    costs = [t.cost(run.pool.costs, acfg.token_price) for t in trajs]
    norm = reward.fixed_normaliser(costs)
    lo, hi = norm.bounds()
    doc = {"key": key, "lo": lo, "hi": hi, "n": len(costs), **({"normaliser": norm.to_dict()} if rule else {})}
    write_text_atomic(path, json.dumps(doc, indent=1) + "\n")
    return norm


def _ltrr_top1(run, labels: pd.DataFrame, design: list[str], qids: list[str]) -> dict[str, str]:
    """qid -> the arm LTRR ranks first, the ranker trained on the design part."""
    from ltrr.routers.ltr import LTRRouter

    _, raw = run.training_inputs("agent eval")
    have = set(map(str, raw.qids))
    params = run.make_router("ltrr", run.config.train.ranker).get_params()
    tr = [q for q in design if q in have]
    router = LTRRouter(**params).fit(raw.subset(tr), labels[labels["qid"].astype(str).isin(set(tr))])
    scores = router.route_scores(raw.subset([q for q in qids if q in have]))
    best = scores.sort_values(["qid", "score", "arm"], ascending=[True, False, True]).groupby("qid").head(1)
    return dict(zip(best["qid"].astype(str), best["arm"].astype(str), strict=True))


def _label_metric(labels: pd.DataFrame, metric: str) -> pd.DataFrame:
    """qid x arm table of ``metric`` from the labels: their utility when it is the labels' metric,
    else the extra metric's column."""
    own = str(labels["metric"].iloc[0]) if "metric" in labels and len(labels) else None
    col = "utility" if metric == own else metric
    if col not in labels:
        raise DataError(f"the labels have no {metric!r} scores (their metric is {own!r}); add it to "
                        "[labels] extra_metrics and label again")
    lab = labels[~labels["failed"].astype(bool)] if "failed" in labels else labels
    return lab.pivot(index="qid", columns="arm", values=col)


def check_leave_out(run, leave_out: Sequence[str]) -> list[str]:
    """The arms to keep out of an evaluation's prompt, checked: pool arms, not ``[agent]
    holdout_arms`` (``--holdout`` says where those go), and at least one retrieval arm left."""
    pool = run.pool
    arms = list(dict.fromkeys(map(str, leave_out)))
    unknown = [a for a in arms if a not in pool.arm_names]
    if unknown:
        raise ConfigError(f"--leave-out names {unknown}, not arms of the pool {pool.arm_names}")
    held = [a for a in arms if a in run.config.agent.holdout_arms]
    if held:
        raise ConfigError(f"--leave-out names {held}, which [agent] holdout_arms already keeps out "
                          "(--holdout shows them)")
    kept = [a for a in pool.arm_names if a not in arms and a not in run.config.agent.holdout_arms
            and pool.arm(a).retriever is not None]
    if not kept:
        raise ConfigError(f"--leave-out {arms} leaves the prompt no retrieval arm")
    return arms


def _summary(values: dict[str, np.ndarray]) -> dict[str, float]:
    return {m: float(np.mean(v)) for m, v in values.items()}


def evaluate_agent(run, *, policy: str | None = None, n: int | None = None, holdout: bool = False,
                   leave_out: Sequence[str] = (), neutral_ids: bool = False, show_progress: bool = False) -> dict:
    """Roll out the policy on the test questions and compare it with the baselines (module doc).

    ``leave_out`` names pool arms kept out of the prompt (a `ConfigError` for an unknown arm, a
    held-out arm, or all retrieval arms); the results go to a folder of their own
    (``eval-<policy>[-holdout]-without-<arm>...``).
    """
    from tqdm.auto import tqdm

    from ltrr.agent.backends import TransformersLM
    from ltrr.agent.batching import raise_on_model_errors, rollout_many
    from ltrr.agent.prefix_cache import PrefixCache
    from ltrr.agent.rewards import outcome_reward
    from ltrr.agent.run import (
        agent_dir,
        gold_answers,
        labels_table,
        make_loop,
        partition,
        policy_lm,
    )
    from ltrr.agent.trajectory import save_trajectories, score_trajectories
    from ltrr.eval.stats import paired_wilcoxon
    from ltrr.progress import StageProgress, progress_path

    acfg = run.config.agent
    # the LTRR baseline reads the run's feature tables after the rollouts: fail before them, not
    # after an hour of decoding
    run.need("agent eval", run.features_dir / "raw.parquet", "features")
    leave_out = check_leave_out(run, leave_out)
    labels = labels_table(run)
    design, test = partition(run)
    qids = select_questions(run.dataset.queries, test, int(n or acfg.n_eval), run.config.seed)
    queries = run.dataset.queries.assign(qid=run.dataset.queries["qid"].astype(str)).set_index("qid")
    qtype = queries["qtype"].astype(str) if "qtype" in queries else pd.Series("all", index=queries.index)
    gold = gold_answers(run)
    lm = policy_lm(run, policy)
    if isinstance(lm, TransformersLM) and acfg.rollout_batch <= 1:
        lm.prefix_cache = PrefixCache()  # one fixed policy, one system prompt: prefilled once
    held = list(acfg.holdout_arms)
    loop = make_loop(run, lm, labels, design=design, holdout=([] if holdout else held) + leave_out)
    loops = [loop] * len(qids)
    if neutral_ids:
        from ltrr.agent.presentation import draw_view

        loops = [loop.with_view(draw_view(loop.arm_names, seed=run.config.seed, key=(2, i), rename_share=1.0))
                 for i in range(len(qids))]
    normaliser = design_normaliser(run, lm, labels, design)
    name = Path(str(policy or acfg.policy)).name if (policy or acfg.policy) else "base"
    out = agent_dir(run) / (f"eval-{name}{'-holdout' if holdout and held else ''}"
                            + "".join(f"-without-{a}" for a in leave_out) + ("-neutral-ids" if neutral_ids else ""))
    t0 = time.perf_counter()
    # the snapshot `ltrr status` reads from another terminal (`ltrr.progress`); the rollouts resume
    # from the generation cache, where each finished continuation is kept
    snapshot = StageProgress(progress_path(run.stage_record("agent")), fingerprint=out.name,
                             phase=f"agent eval ({out.name})", total=len(qids))
    with tqdm(total=len(qids), disable=not show_progress, desc="rollouts") as bar, snapshot:
        def advance(n: int = 1) -> None:
            bar.update(n)
            snapshot.update(n)

        trajs = rollout_many([(lp, str(queries.loc[q, "question"]), q, None) for lp, q in zip(loops, qids, strict=True)],
                             batch=acfg.rollout_batch, progress=advance)
    raise_on_model_errors(trajs, "agent eval")
    seconds = time.perf_counter() - t0
    score_trajectories(trajs, gold, arm_costs=run.pool.costs, normaliser=normaliser, alpha=acfg.alpha,
                       token_price=acfg.token_price, metric=acfg.metric,
                       correct_threshold=acfg.correct_threshold, reward=acfg.reward)
    agent = {m: np.array([outcome_reward(t.answer, gold[t.qid], m, question=t.question) for t in trajs])
             for m in dict.fromkeys([acfg.metric, *METRICS])}
    valid = np.array([t.rewards["format"] == 0 for t in trajs])
    n_search = np.array([sum(1 for s in t.searches if s.valid) for t in trajs])
    # baselines from the labels
    metric = acfg.metric
    tables = {m: _label_metric(labels, m) for m in dict.fromkeys([metric, *METRICS])}
    U = tables[metric]
    missing = [q for q in qids if q not in U.index]
    if missing:
        raise DataError(f"{len(missing)} evaluation question(s) have no labels (e.g. {missing[:3]}); "
                        f"run `ltrr label {run.config.source}`")
    nr = [a for a in U.columns if run.pool.arm(a).retriever is None]
    design_mean = U.loc[[q for q in design if q in U.index]].mean()
    best_arm = str(design_mean.idxmax())
    top1 = _ltrr_top1(run, labels, design, qids)
    pick = {"no retrieval": {q: nr[0] for q in qids} if nr else None, f"best single arm ({best_arm})":
            {q: best_arm for q in qids}, "LTRR top-1": top1}
    baselines = {}
    for name, chosen in pick.items():
        if chosen is None:
            continue
        baselines[name] = {m: np.array([tables[m].loc[q, chosen[q]] for q in qids], dtype=float) for m in tables}
    baselines["oracle arm"] = {m: np.array([tables[m].loc[q].max() for q in qids], dtype=float) for m in tables}
    is_mh = np.array([qtype.get(q) == "multihop" for q in qids])
    tests = {}
    for name in ("LTRR top-1", f"best single arm ({best_arm})"):
        for part, sel in (("all", np.ones(len(qids), bool)), ("multihop", is_mh)):
            if sel.sum() == 0:
                continue
            a, b = agent[metric][sel], baselines[name][metric][sel]
            w = paired_wilcoxon(a, b)
            tests[f"{name} | {part}"] = {"n": int(sel.sum()), "agent": float(a.mean()), "baseline": float(b.mean()),
                                         "diff": float(a.mean() - b.mean()), "p": w.pvalue, "n_nonzero": w.n_nonzero}
    # searches on the questions whose label-best arm is a retrieval arm (beats no retrieval)
    retrieval_best = np.array([bool(nr) and U.loc[q].drop(nr).max() > U.loc[q, nr[0]] for q in qids])
    types = sorted(set(qtype.get(q) for q in qids))
    by_type = {t: {"n": int(sum(qtype.get(q) == t for q in qids)),
                   "searches": float(np.mean([n_search[i] for i, q in enumerate(qids) if qtype.get(q) == t])),
                   metric: float(np.mean([agent[metric][i] for i, q in enumerate(qids) if qtype.get(q) == t]))}
               for t in types}
    calls = Counter(s.arm for t in trajs for s in t.searches if s.valid)
    doc = {
        "policy": str(policy or acfg.policy or lm.identity), "metric": metric, "n": len(qids), "n_multihop": int(is_mh.sum()),
        "seed": run.config.seed, "seconds": round(seconds, 1),
        "cache": {k: sum(lp.counters[k] for lp in {id(x): x for x in loops}.values()) for k in loop.counters},
        "format_valid_rate": float(valid.mean()),
        "stop_reasons": dict(Counter(t.stop_reason for t in trajs)),
        "agent": _summary(agent), "agent_multihop": _summary({m: v[is_mh] for m, v in agent.items()}) if is_mh.any()
        else None,
        "searches_per_question": float(n_search.mean()), "by_type": by_type,
        "search_rate_where_retrieval_is_best": float((n_search[retrieval_best] > 0).mean())
        if retrieval_best.any() else None,
        "n_retrieval_best": int(retrieval_best.sum()),
        "cost": float(np.mean([t.rewards["cost"] for t in trajs])),
        "reward": float(np.mean([t.rewards["total"] for t in trajs])),
        "normaliser": normaliser.to_dict(), "arm_calls": dict(calls), "holdout_arms": held,
        "prefix_cache": {"hits": lm.prefix_cache.hits, "builds": lm.prefix_cache.builds,
                         "tokens": len(lm.prefix_cache.ids)} if getattr(lm, "prefix_cache", None) else None,
        "holdout_in_prompt": bool(holdout and held), "left_out_arms": leave_out,
        "neutral_ids": bool(neutral_ids),
        "baselines": {k: _summary(v) for k, v in baselines.items()},
        "baselines_multihop": {k: _summary({m: x[is_mh] for m, x in v.items()}) for k, v in baselines.items()}
        if is_mh.any() else None,
        "tests": tests, "questions": qids,
    }
    out.mkdir(parents=True, exist_ok=True)
    save_trajectories(trajs, out / "trajectories.jsonl")
    write_text_atomic(out / "eval.json", json.dumps(doc, indent=1, default=float) + "\n")
    write_text_atomic(out / "eval.md", eval_markdown(doc))
    doc["folder"] = str(out)
    return doc


def eval_markdown(doc: dict) -> str:
    """The evaluation table: the router and each baseline, on all questions and on multihop."""
    metric = doc["metric"]
    cols = list(dict.fromkeys([metric, *METRICS]))
    rows = [("multi-round router", doc["agent"], doc.get("agent_multihop"))]
    rows += [(k, v, (doc.get("baselines_multihop") or {}).get(k)) for k, v in doc["baselines"].items()]
    lines = [f"Test questions: {doc['n']} ({doc['n_multihop']} multihop). Policy: {doc['policy']}. "
             f"Format-valid: {doc['format_valid_rate']:.1%}; searches per question {doc['searches_per_question']:.2f}; "
             f"cost {doc['cost']:.3f}; reward {doc['reward']:.3f}; rollouts {doc['seconds']:.0f}s.", "",
             "| router | " + " | ".join(cols) + f" | {metric}, multihop |", "|---" * (len(cols) + 2) + "|"]
    for name, vals, mh in rows:
        cells = " | ".join(f"{vals[m]:.4f}" for m in cols)
        lines.append(f"| {name} | {cells} | " + (f"{mh[metric]:.4f} |" if mh else "- |"))
    lines += ["", f"| paired test ({metric}) | n | router | baseline | diff | Wilcoxon p |", "|---|---|---|---|---|---|"]
    for k, t in doc["tests"].items():
        lines.append(f"| {k} | {t['n']} | {t['agent']:.4f} | {t['baseline']:.4f} | {t['diff']:+.4f} | {t['p']:.3g} |")
    lines += ["", f"| type | n | searches per question | {metric} |", "|---|---|---|---|"]
    for t, v in doc["by_type"].items():
        lines.append(f"| {t} | {v['n']} | {v['searches']:.2f} | {v[metric]:.4f} |")
    if doc.get("search_rate_where_retrieval_is_best") is not None:
        lines += ["", f"Searches on {doc['search_rate_where_retrieval_is_best']:.1%} of the "
                      f"{doc['n_retrieval_best']} questions whose label-best arm is a retrieval arm. "
                      f"Arm calls: {doc['arm_calls']}. Stops: {doc['stop_reasons']}."]
    return "\n".join(lines) + "\n"


def load_evals(folders) -> tuple[list[dict], list[dict], list[str]]:
    """The `evaluate_agent` folders ``folders``: their ``eval.json`` documents, their rollouts
    (qid -> `Trajectory`) and the questions all of them answered, sorted. Raise `DataError`
    when a folder holds no evaluation, when they scored different metrics or cost normalisers
    (their rewards would not compare), or when they share no question."""
    from ltrr.agent.trajectory import load_trajectories
    from ltrr.data.io import read_saved_meta

    docs, trajs = [], []
    for folder in map(Path, folders):
        if not (folder / "eval.json").exists():
            raise DataError(f"{folder}: no evaluation (eval.json); run `ltrr agent eval` first")
        doc = read_saved_meta(folder / "eval.json", "run `ltrr agent eval` first")
        missing = [k for k in ("metric", "normaliser") if k not in doc]
        if missing:
            raise DataError(f"{folder / 'eval.json'}: not an `ltrr agent eval` document (no {', '.join(missing)})")
        docs.append(doc)
        trajs.append({t.qid: t for t in load_trajectories(folder / "trajectories.jsonl")})
    if len({json.dumps([d["metric"], d["normaliser"]], sort_keys=True) for d in docs}) > 1:
        raise DataError("the evaluations used different metrics or cost normalisers; evaluate them again")
    qids = sorted(set.intersection(*(set(t) for t in trajs))) if trajs else []
    if not qids:
        raise DataError("the evaluations share no question")
    return docs, trajs, qids


def per_question(metric: str) -> dict:
    """Measure name -> a function of one rollout: the total reward, the outcome (named
    ``metric``), the valid searches and the cost."""
    return {"reward": lambda t: t.rewards["total"], metric: lambda t: t.rewards["outcome"],
            "searches": lambda t: sum(1 for s in t.searches if s.valid), "cost": lambda t: t.rewards["cost"]}


def compare_evals(policy: str | Path, baseline: str | Path) -> dict:
    """Paired comparison of two `evaluate_agent` folders on their common questions.

    For the total reward (the evaluation's fixed normaliser), the run's metric (the outcome),
    valid searches and the cost per question: both means, the difference and a two-sided paired Wilcoxon p-value
    (`ltrr.eval.stats.paired_wilcoxon`); the means of ``contains``, ``f1`` and ``em`` come from
    each evaluation. Both must have scored the same metric with the same cost normaliser.
    """
    from ltrr.eval.stats import paired_wilcoxon

    (a_doc, b_doc), trajs, qids = load_evals([policy, baseline])
    rows = {}
    for key, get in per_question(a_doc["metric"]).items():
        a, b = (np.array([get(ts[q]) for q in qids], dtype=float) for ts in trajs)
        w = paired_wilcoxon(a, b)
        rows[key] = {"policy": float(a.mean()), "baseline": float(b.mean()), "diff": float(a.mean() - b.mean()),
                     "p": w.pvalue, "n_nonzero": w.n_nonzero}
    return {"policy": a_doc["policy"], "baseline": b_doc["policy"], "n": len(qids), "rows": rows,
            "format_valid": [a_doc["format_valid_rate"], b_doc["format_valid_rate"]],
            "agent": [a_doc["agent"], b_doc["agent"]]}
