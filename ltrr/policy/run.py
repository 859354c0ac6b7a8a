"""The policy stage of a run: costs, training one policy per budget, the cost-utility evaluation.

`arm_costs` gives each arm's cost: the config's ``cost``, or with ``[policy] cost = "tokens"``
the prompt tokens the arm adds over no retrieval (the labels' measured mean) plus its retrieval
latency, measured here one query at a time and weighted by ``latency_weight`` tokens per second.

`evaluate_policy` trains on the protocol's design part and measures on its test part (the same
seeded partition as `ltrr protocol`), so the policy is judged on queries no choice saw. Its
tables (``eval.json``, ``budgets.md``, ``budgets.csv``) hold no wall-clock time, so the same config
and seed give identical tables; the fits' seconds go to ``timings.json`` beside them.
`train_policy` fits on every labelled query and saves the folder ``ltrr route`` reads. Both leave
out a query with a failed label item (`ltrr.eval.routing.utility_matrix`'s complete cases).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._errors import ConfigError
from ltrr.data.io import write_text_atomic

__all__ = ["arm_costs", "train_policy", "evaluate_policy", "policy_dir", "eval_dir", "stage_policy", "policy_fingerprint",
           "policy_outputs"]

# bumped when the stage's tables change for the same inputs (2: the cost-penalised baseline is
# calibrated by the policy's rule; the timings left eval.json for timings.json; saved_policy)
POLICY_STAGE_VERSION = 2
TIMINGS = "timings.json"  # beside eval.json: the fits' wall-clock seconds, kept out of the tables


def _latency(run, n: int = 10) -> dict[str, float]:
    """Seconds per query of each arm's search, one query at a time, cached in the workdir."""
    path = run.workdir / "policy" / "latency.json"
    key = run.config.fingerprint("retrievers", "rerankers", "arms")
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("key") == key:
            return doc["seconds"]
    pool = run.pool.load(run.index_dir)
    q = run.dataset.queries.head(n)[["qid", "question"]]
    out = {}
    for arm in pool.arm_names:
        if pool.arm(arm).retriever is None:
            out[arm] = 0.0
            continue
        pool.search(q.head(1), arms=[arm])  # warm the models
        t0 = time.perf_counter()
        for i in range(len(q)):
            pool.search(q.iloc[i:i + 1], arms=[arm])
        out[arm] = (time.perf_counter() - t0) / len(q)
    write_text_atomic(path, json.dumps({"key": key, "queries": len(q), "seconds": out}, indent=1) + "\n")
    return out


def arm_costs(run, labels: pd.DataFrame) -> tuple[dict[str, float], dict]:
    """``arm -> cost`` by ``[policy] cost``, and a record of how it was measured."""
    pcfg = run.config.policy
    if pcfg.cost == "config":
        costs = {a.name: float(a.cost) for a in run.pool.arms}
        return costs, {"cost": "config", "costs": costs}
    if pcfg.cost != "tokens":
        raise ConfigError(f"[policy] cost must be 'config' or 'tokens', got {pcfg.cost!r}")
    if "prompt_tokens" not in labels.columns:
        raise ConfigError("[policy] cost = 'tokens' needs the labels' prompt_tokens; relabel with this ltrr")
    tokens = labels.groupby("arm")["prompt_tokens"].mean()
    nr = run.no_retrieval_arms()[0]
    added = (tokens - tokens[nr]).clip(lower=0.0)
    lat = _latency(run)
    costs = {a: float(added.get(a, 0.0) + pcfg.latency_weight * lat[a]) for a in run.pool.arm_names}
    return costs, {"cost": "tokens", "costs": costs, "added_prompt_tokens": added.to_dict(),
                   "latency_seconds": lat, "latency_weight": pcfg.latency_weight}


def _states(run, raw, pcfg):
    """The question states (``lm``), how they were made, and the seconds it took (kept apart: the
    record goes into eval.json and the saved policy, the seconds into the timings)."""
    if pcfg.representation != "lm":
        return None, None, None
    from ltrr.config import backend_settings
    from ltrr.generation import make_generator
    from ltrr.policy.states import question_states

    gcfg = backend_settings(run.config.generation)
    q = run.dataset.queries.set_index(run.dataset.queries["qid"].astype(str))["question"]
    t0 = time.perf_counter()
    states = question_states(make_generator(gcfg), [q[str(i)] for i in raw.qids], pooling=pcfg.pooling,
                             cache_dir=run.workdir / "policy", show_progress=True)  # a bar on a terminal only
    return states, {"generator": gcfg, "pooling": pcfg.pooling}, round(time.perf_counter() - t0, 1)


def _router(run, budget: float, costs: dict, trainer: str, lm: dict | None, seed: int | None = None):
    from ltrr.policy.router import PolicyRouter

    pcfg = run.config.policy
    seed = run.config.seed if seed is None else seed
    ltr = run.make_router("ltrr", run.config.train.ranker).get_params()
    return PolicyRouter(budget, costs=costs, representation=pcfg.representation, trainer=trainer,
                        ltr=ltr, policy_params=pcfg.params, n_folds=pcfg.n_folds,
                        lm=lm, random_state=seed)


def _set_policy(run, **changes) -> None:
    # the run goes on with these [policy] settings (its later stages and fingerprints see them):
    # a config is frozen, so the run's is replaced by one with a new [policy] section
    run.config = dataclasses.replace(run.config, policy=dataclasses.replace(run.config.policy, **changes))


def policy_dir(run, budget: float, representation: str, trainer: str) -> Path:
    """``<workdir>/policies/<representation>-<trainer>-B<budget>``: where `train_policy` saves.

    The budget is written with ``:g`` (``B2.5``, ``B10``).
    """
    return run.workdir / "policies" / f"{representation}-{trainer}-B{budget:g}"


def train_policy(run, budget: float | None = None, *, representation: str | None = None,
                 trainer: str | None = None) -> Path:
    """Fit one policy (budget in cost units; default ``[policy] budget`` x the top cost) on every
    labelled query and save it; returns its folder."""
    if representation:
        _set_policy(run, representation=representation)
    pcfg = run.config.policy
    trainer = trainer or pcfg.trainers[0]
    labels, raw = run.training_inputs("policy")
    costs, record = arm_costs(run, labels)
    if budget is None:
        budget = pcfg.budget * max(costs.values())
    groups = run.dataset.queries.set_index(run.dataset.queries["qid"].astype(str))["group"] \
        if "group" in run.dataset.queries else None
    states, lm, states_seconds = _states(run, raw, pcfg)
    t0 = time.perf_counter()
    pol = _router(run, budget, costs, trainer, lm).fit(raw, labels, groups=groups, question_states=states)
    seconds = time.perf_counter() - t0
    _log_incomplete(run, pol.n_incomplete_queries_, "training")
    out = pol.save(policy_dir(run, budget, pcfg.representation, trainer))
    write_text_atomic(out / "training.json", json.dumps({"seconds": round(seconds, 2), "costs": record,
                                                         "queries": pol.n_train_queries_,
                                                         "incomplete_queries_left_out": pol.n_incomplete_queries_,
                                                         "lm": lm, "lm_states_seconds": states_seconds},
                                                        indent=1) + "\n")
    run.log(f"[policy] trained {pcfg.representation}/{trainer} at budget {budget:g} on "
            f"{pol.n_train_queries_} queries in {seconds:.1f}s -> {out}")
    return out


def _log_incomplete(run, n: int, where: str) -> None:
    if n:
        run.log(f"[policy] left {n} quer{'y' if n == 1 else 'ies'} with a failed or missing label item out of "
                f"{where} (complete cases only, as the protocol)")


def evaluate_policy(run, *, representation: str | None = None, fractions=None, trainers=None,
                    on: str = "test", seed: int | None = None, inner_seed: int | None = None,
                    params: dict | None = None, saved_policy: Path | None = None) -> dict:
    """Train on the design part, measure on the test part: the per-budget table, curve and plots.

    ``on="design"`` never reads the test part: the design part is partitioned again (same rule,
    seed ``inner_seed``, by default ``seed``) and the policy is measured on that inner held-out
    part, which is where policy settings are chosen before the test part is read once.
    ``seed`` (default: the run's) seeds the partition, the ranker's folds and the head, as
    ``ltrr protocol --seed`` does; results of another seed go to their own folder.
    ``params`` are `BudgetPolicy` parameters over ``[policy] params`` (a design study's variants).
    ``saved_policy`` (the stage's policy folder, trained on every labelled query) is recorded
    in eval.json. The fits' wall-clock seconds are written to ``timings.json``, not the tables.
    """
    from ltrr.eval.protocol import design_test_partition, keep_queries
    from ltrr.eval.routing import utility_matrix
    from ltrr.policy.evaluate import budgets_markdown, evaluate_budgets, frame, plot_curves
    from ltrr.routers.reference import utility_frame

    if representation:
        _set_policy(run, representation=representation)
    if params:
        _set_policy(run, params={**run.config.policy.params, **params})
    pcfg = run.config.policy
    seed = run.config.seed if seed is None else int(seed)
    inner_seed = seed if inner_seed is None else int(inner_seed)
    fractions = list(fractions or pcfg.fractions)
    trainers = list(trainers or pcfg.trainers)
    labels, raw = run.training_inputs("policy")
    queries = run.dataset.queries[run.dataset.queries["qid"].astype(str).isin(set(map(str, raw.qids)))]
    part = design_test_partition(queries.reset_index(drop=True), design_size=run.config.protocol.design_size,
                                 random_state=seed)
    if on not in ("test", "design"):
        raise ConfigError(f"policy eval: on must be 'test' or 'design', got {on!r}")
    if on == "design":
        queries = queries[queries["qid"].astype(str).isin(set(map(str, part.train)))]
        part = design_test_partition(queries.reset_index(drop=True), design_size=run.config.protocol.design_size,
                                     random_state=inner_seed)
        raw = raw.subset([str(q) for q in queries["qid"]])
        labels = labels[labels["qid"].astype(str).isin(set(queries["qid"].astype(str)))]
    # A query with a failed item has no utility of that arm: left out of its part, as the
    # protocol leaves it (its NaN made every mean and test NaN; in training, an error).
    n_part = len(part.train) + len(part.test)
    part = keep_queries(part, utility_matrix(labels).index)
    _log_incomplete(run, n_part - len(part.train) - len(part.test), "the evaluation")
    # Token costs are measured on the training queries only: the evaluated part is not read.
    costs, record = arm_costs(run, labels[labels["qid"].astype(str).isin(set(part.train))])
    train_q, test_q = list(part.train), list(part.test)
    groups = queries.set_index(queries["qid"].astype(str))["group"] if "group" in queries else None
    states, lm, states_seconds = _states(run, raw, pcfg)
    pos = {q: i for i, q in enumerate(map(str, raw.qids))}
    st_tr = states[[pos[q] for q in raw.subset(train_q).qids]] if states is not None else None
    st_te = states[[pos[q] for q in raw.subset(test_q).qids]] if states is not None else None
    raw_tr, raw_te = raw.subset(train_q), raw.subset(test_q)
    lab_tr = labels[labels["qid"].astype(str).isin(set(train_q))]
    arms = sorted(map(str, raw.arms))
    U = utility_frame(labels).reindex(columns=arms)
    test_ids = [str(q) for q in raw_te.qids]
    histories, fitted, timings = {}, {}, {"first_fit_seconds": None, "fits": [], "lm_states_seconds": states_seconds}

    def make_policy(budget, trainer):
        t0 = time.perf_counter()
        if "base" not in fitted:
            fitted["base"] = _router(run, budget, costs, trainer, lm, seed).fit(
                raw_tr, lab_tr, groups=groups, question_states=st_tr)
            pol = fitted["base"]
            timings["first_fit_seconds"] = round(time.perf_counter() - t0, 2)  # the ranker, its folds, a head
        else:
            pol = fitted["base"].with_budget(budget, trainer)
            # wall-clock time goes to timings.json only: the tables stay identical across runs
            timings["fits"].append({"budget": float(budget), "trainer": trainer,
                                    "seconds": round(time.perf_counter() - t0, 2)})
        histories[(budget, trainer)] = pol.head_.history_
        chosen = pol.choose(raw_te, question_states=st_te)
        return np.array([arms.index(chosen[q]) for q in test_ids])

    # the first policy fit also fits the ranker whose cross-fitted scores the baselines use
    make_policy(fractions[0] * max(costs.values()), trainers[0])
    base = fitted["base"]
    ltr_train = base.train_ltr_
    s = base.ltr_.route_scores(raw_te).pivot(index="qid", columns="arm", values="score")
    ltr_test = s.loc[test_ids, arms].to_numpy(float)
    train_ids = [str(q) for q in base.train_qids_]
    doc = evaluate_budgets(make_policy, U.loc[train_ids].to_numpy(float), U.loc[test_ids].to_numpy(float),
                           np.array([costs[a] for a in arms]), ltr_train, ltr_test, arms, run.no_retrieval_arms()[0],
                           fractions, trainers, calibration=base.head_.calibration)
    doc.update(costs_record=record, representation=pcfg.representation, seed=seed, lm=lm, on=on,
               params=pcfg.params)
    if on == "design":
        doc["inner_seed"] = inner_seed
    if saved_policy is not None:
        doc["saved_policy"] = str(saved_policy)
    out = eval_dir(run, pcfg, on, None if seed == run.config.seed else seed)
    out.mkdir(parents=True, exist_ok=True)
    mid = fractions[len(fractions) // 2] * max(costs.values())
    hist = histories.get((mid, trainers[0]))
    doc["plots"] = [str(p) for p in plot_curves(doc, hist, out, trainers)]
    doc["history_mid_budget"] = hist
    write_text_atomic(out / "eval.json", json.dumps(doc, indent=1, default=float) + "\n")
    write_text_atomic(out / "budgets.md", budgets_markdown(doc, trainers))
    write_text_atomic(out / "budgets.csv", frame(doc).to_csv(index=False))
    write_text_atomic(out / TIMINGS, json.dumps(timings, indent=1) + "\n")
    return doc


def eval_dir(run, pcfg: Mapping, on: str = "test", seed: int | None = None) -> Path:
    """``policy/eval-REPRESENTATION[-tokens][-design][-seedN]`` of the run's workdir (``-tokens``:
    ``[policy] cost = "tokens"``; N: a seed other than the run's), so no evaluation overwrites
    another's tables."""
    return run.workdir / "policy" / (f"eval-{pcfg['representation']}" + ("-tokens" if pcfg["cost"] == "tokens" else "")
                                     + ("-design" if on == "design" else "") + (f"-seed{seed}" if seed is not None else ""))


def policy_fingerprint(run) -> str:
    """The fingerprint of the policy stage's inputs: ``[policy]``, ``[train]``, ``[protocol]``, the
    labels, the features and the seed."""
    import hashlib

    return hashlib.sha256(json.dumps({"policy": run.config.policy.to_dict(), "train": run.config.train.to_dict(),
                                      "protocol": run.config.protocol.to_dict(), "label": run.fingerprint_of("label"),
                                      "features": run.fingerprint_of("features"), "seed": run.config.seed,
                                      "version": POLICY_STAGE_VERSION},
                                     sort_keys=True, default=str).encode()).hexdigest()[:16]


def policy_outputs(run) -> list[Path]:
    """What the policy stage leaves: the evaluation's ``eval.json`` and the files of the saved
    policy that ``ltrr route`` and ``ltrr serve`` read (its folder as the stage's record names
    it, so a standalone ``ltrr policy eval`` rewriting eval.json changes nothing here).

    A deleted policy folder, or a record that names none, makes the stage run again."""
    out = eval_dir(run, run.config.policy) / "eval.json"
    try:
        saved = json.loads(run.stage_record("policy").read_text()).get("policy")
    except (OSError, ValueError):
        saved = None
    if not saved:  # no policy on record: a path that never exists, so the stage is not fresh
        return [out, out.parent / "saved_policy (not recorded by the policy stage)"]
    # by name under this workdir: the record may have been written from another working directory
    folder = run.workdir / "policies" / Path(saved).name
    files = [folder / "policy.json", folder / "head" / "head.json", folder / "head" / "head.safetensors",
             folder / "ltr" / "router.json"]
    if run.config.policy.representation == "lm":
        files.append(folder / "lm_pca.safetensors")
    return [out, *files]


def stage_policy(run, *, force: bool = False) -> dict | None:
    """`ltrr run`'s policy stage (when ``[policy]`` is enabled): the policy at ``[policy] budget``
    trained on every labelled query, then the evaluation over budgets (its eval.json names the
    saved policy). Skipped when unchanged and every output (`policy_outputs`) is there."""
    pcfg = run.config.policy
    if not pcfg.enabled:
        return None
    fp = policy_fingerprint(run)
    out = eval_dir(run, pcfg) / "eval.json"
    if not force and run.is_fresh("policy", fp, policy_outputs(run)):
        run.log(f"[policy] skipped: inputs unchanged, evaluation in {out.parent}")
        return json.loads(out.read_text())
    t0 = time.perf_counter()
    run.log(f"[policy] start: {pcfg.representation} policies ({', '.join(pcfg.trainers)}) at budgets "
            f"{', '.join(f'{f:.0%}' for f in pcfg.fractions)} of the top cost; train on the design part, "
            "measure on the test part")
    run.stage_record("policy").unlink(missing_ok=True)  # an older record never vouches for what is written below
    folder = train_policy(run)
    doc = evaluate_policy(run, saved_policy=folder)
    run.record("policy", fp, time.perf_counter() - t0, policy=str(folder))
    run.log(f"[policy] done in {time.perf_counter() - t0:.1f}s -> {out.parent}")
    return doc
