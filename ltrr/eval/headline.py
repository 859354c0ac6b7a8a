"""The pre-registered headline: choose on the design part, compare once on the test part.

`run_protocol` carries out the protocol of `ltrr.eval.protocol` on a labelled run:

1. partition the queries into design and test parts (by group, seeded), over every query of
   the dataset, then leave out those without complete labels (a failed item), so that a
   failure moves no query between the parts;
2. on the design part, by grouped k-fold cross-validation, choose one router among the
   candidate (ranker, training label) pairs by its pooled mean utility, and the best single arm
   as the arm with the best mean utility on the whole design part;
3. from the chosen router's per-query differences on design, state the power analysis for the
   test part, and write ``preregistration.json`` before any test utility is read;
4. train the chosen router on every design query, route the test queries, and compare it with
   the best single arm: paired Wilcoxon p (no correction: one test), queries improved and
   degraded, the oracle, the raw and (with a replicate) noise-corrected headroom, and the share
   captured with a paired bootstrap CI;
5. report every other candidate on test as secondary, Bonferroni-corrected.

``design_only=True`` stops after step 3. It needs the labels of the design part alone, so the
choice and its power figure can be committed before the test part is labelled at all. The
partition is then made over every query of the dataset (once every query is labelled, the same
partition as the full protocol's), the test part's label rows are dropped unread, and the
preregistration is the one the full protocol writes from the complete labels.

The headline utility is the labels' ``utility`` column: the metric of generated answers.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._checks import check_int
from ltrr._cpu import machine_record
from ltrr._errors import ConfigError, DataError, LtrrError
from ltrr._log import bar, quiet_worker_restarts
from ltrr.data.io import write_text_atomic
from ltrr.eval.protocol import (
    design_test_partition,
    keep_queries,
    noise_corrected_headroom,
    oracle_choice,
    power_analysis,
)
from ltrr.rankers.tags import ranker_defaults

__all__ = ["run_protocol", "captured_share", "protocol_summary", "fit_predict_candidate"]


def captured_share(r, b, o, *, random_state=0, n_resamples: int = 2000) -> dict:
    """(mean r - mean b) / (mean o - mean b) with a paired percentile-bootstrap 95% CI.

    ``o`` is the oracle's per-query utility (raw, or the noise-corrected oracle's).
    """
    from ltrr.eval.outcomes import _headroom_stat
    from ltrr.eval.stats import paired_bootstrap_ci

    ci = paired_bootstrap_ci((np.asarray(r, float), np.asarray(b, float), np.asarray(o, float)),
                             _headroom_stat, random_state=random_state, n_resamples=n_resamples)
    return {"estimate": ci.estimate, "ci_low": ci.low, "ci_high": ci.high}


def _check_label_column(labels: pd.DataFrame, column: str) -> None:
    if column in labels.columns:
        return
    raise DataError(f"training label {column!r} is not a column of the labels table; it has "
                    f"{', '.join(c for c in labels.columns if c.endswith('gain') or c == 'utility')}")


def _inputs_fingerprint(run, labels: pd.DataFrame, replicate: pd.DataFrame | None, **settings) -> str:
    """A hash of what a seed's headline depends on: labels, replicate, features, settings."""
    import hashlib

    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for df in (labels, replicate):
        if df is not None:
            h.update(str(int(pd.util.hash_pandas_object(df.astype(str), index=False).sum())).encode())
    h.update(str(run.fingerprint_of("features")).encode())
    return h.hexdigest()[:16]


def _candidate_router(run, cand: dict):
    """The unfitted router of candidate ``cand`` (an LTRRouter of the run, or a router spec)."""
    if cand["ranker"] is not None:
        return run.make_router("ltrr", cand["ranker"]).set_params(label=cand["label"], features=cand["features"])
    from ltrr.routers import make_router

    return make_router(cand["spec"])


def _fit_predict_router(router, label: str, raw, labels_idx: pd.DataFrame, train, test) -> pd.DataFrame:
    """Fit ``router`` on the ``train`` queries' ``label`` and score the arms of ``test``."""
    lab = labels_idx.loc[labels_idx.index.isin(set(train))].reset_index()
    lab = lab[lab[label].notna()]
    router.fit(raw.subset(train), lab)
    return router.route_scores(raw.subset(test)).pivot(index="qid", columns="arm", values="score")


def fit_predict_candidate(run, cand: dict, raw, labels_idx: pd.DataFrame, train, test) -> pd.DataFrame:
    """Fit candidate ``cand`` (the protocol's router choice) on the ``train`` queries; its scores of
    the ``test`` queries as a qid x arm matrix (context packing routes with it)."""
    return _fit_predict_router(_candidate_router(run, cand), cand["label"], raw, labels_idx, train, test)


def _cv_candidate(router, cand: dict, raw, labels_idx: pd.DataFrame, folds) -> tuple[dict, float]:
    """One candidate's predictions on every design fold (a joblib task), and its seconds."""
    from sklearn.base import clone

    t0 = time.perf_counter()
    preds = {}
    for f in folds:
        try:
            preds[f.name] = {cand["router"]: _fit_predict_router(clone(router), cand["label"], raw, labels_idx,
                                                                 f.train, f.test)}
        except LtrrError as exc:
            raise type(exc)(f"protocol: {cand['router']} failed on design fold {f.name}: {exc}") from None
    return preds, time.perf_counter() - t0


def _candidates(rankers, train_labels, feature_sets, default_fs: str, router_specs) -> list[dict]:
    """Every (ranker, label, feature set) triple of LTRRouter, then every other router spec."""
    from ltrr.routers import make_router, parse_router_spec

    out = []
    for rk in rankers:
        for lab in train_labels:
            for fs in feature_sets or [default_fs]:
                tags = [t for t in (lab if lab != "norm_gain" else "", fs if fs != default_fs else "") if t]
                out.append({"router": f"ltrr:{rk}" + (f"[{', '.join(tags)}]" if tags else ""),
                            "ranker": rk, "label": lab, "features": fs, "spec": None})
    for spec in router_specs:
        name, params = parse_router_spec(spec)
        if name in ("ltrr", "oracle"):
            raise ConfigError(f"protocol router {spec!r}: give LTR rankers in `rankers`; the oracle is no candidate")
        router = make_router(spec)  # an unknown router or parameter fails here, before any fitting
        out.append({"router": spec, "ranker": None, "label": params.get("label", "utility"),
                    "features": type(router).reads, "spec": spec})
    if not out:
        raise ConfigError("the protocol has no candidate router: give `rankers` or `routers`")
    return out


def run_protocol(
    run,
    *,
    design_size: float = 0.7,
    seed: int | None = None,
    rankers: Sequence[str] = ("lambdamart-listwise",),
    train_labels: Sequence[str] = ("norm_gain",),
    feature_sets: Sequence[str] | None = None,
    n_folds: int = 5,
    routers: Sequence[str] = (),
    replicate: pd.DataFrame | None = None,
    out_dir: str | Path | None = None,
    n_resamples: int = 2000,
    n_jobs: int = 1,
    force: bool = False,
    design_only: bool = False,
) -> dict:
    """Carry out the protocol on ``run`` (a `ltrr.pipeline.Run` with labels and features).

    Parameters
    ----------
    design_size : float
        Share of the queries in the design part.
    seed : int, optional
        Partition, folds and bootstrap seed (default: the run's seed).
    rankers, train_labels, feature_sets
        The candidates: every (ranker, training label column, feature set) triple; the feature
        sets default to the config's.
    routers : sequence of str
        More candidates that are not LTRRouters, as router specs (`ltrr.routers.make_router`),
        e.g. ``"knn:n_neighbors=50"``; each is trained on its ``label`` (default ``utility``).
    replicate : DataFrame, optional
        Labels of an independent replicate (same queries and arms, another equivalent prompt)
        for the noise-corrected headroom.
    n_jobs : int
        Candidates cross-validated in parallel processes (joblib); the result does not depend
        on it.
    force : bool
        Redo a seed whose ``headline.json`` was made from the same inputs (labels, replicate,
        features and protocol settings); without it that headline is returned as it is.
    out_dir : path, optional
        Where ``preregistration.json`` and ``headline.json`` go (default
        ``<workdir>/protocol/seed-<seed>``).
    design_only : bool
        Choose and pre-register from the design part's labels only, read no test label, and
        return ``{"preregistration": ...}`` (module docstring). Every design query must be
        labelled without a failed item.

    Returns
    -------
    dict
        The preregistration and the headline (see the module docstring).
    """
    from ltrr.eval import evaluate_splits
    from ltrr.eval.routing import utility_matrix
    from ltrr.eval.splits import Split

    check_int(n_jobs, "n_jobs", low=1)
    seed = run.config.seed if seed is None else int(seed)
    labels, raw = run.training_inputs("protocol")
    out_dir = Path(out_dir) if out_dir else run.workdir / "protocol" / f"seed-{seed}"
    if design_only:
        queries = run.dataset.queries.reset_index(drop=True)
        part = design_test_partition(queries, design_size=design_size, random_state=seed)
        labels = labels[labels["qid"].isin(set(part.train))]  # the test part's rows, unread
        U = utility_matrix(labels)
        missing = sorted(set(part.train) - set(U.index))
        if missing:
            raise DataError(f"protocol, design part only: {len(missing)} of the {part.n_train} design queries have no "
                            f"complete labels (e.g. {missing[0]!r}); label the design part first")
        prereg = _preregister(run, U, labels, raw, queries, part, out_dir, design_size=design_size, seed=seed,
                              rankers=rankers, train_labels=train_labels, feature_sets=feature_sets,
                              n_folds=n_folds, routers=routers, n_jobs=n_jobs)[0]
        return {"preregistration": prereg}
    inputs = _inputs_fingerprint(run, labels, replicate, design_size=design_size, seed=seed, rankers=list(rankers),
                                 ranker_defaults={r: ranker_defaults(r) for r in rankers},
                                 train_labels=list(train_labels), n_folds=n_folds, routers=list(routers),
                                 feature_sets=list(feature_sets or []), n_resamples=n_resamples,
                                 # the candidates are built with [train] params (run.make_router)
                                 **({"train_params": dict(run.config.train.params)} if run.config.train.params
                                    else {}))
    done = out_dir / "headline.json"
    if not force and done.is_file():
        old = json.loads(done.read_text())
        if old.get("inputs") == inputs:
            run.log(f"[protocol] seed {seed}: skipped, inputs unchanged ({done})")
            return old
    U = utility_matrix(labels)
    nr = run.no_retrieval_arms()[0]
    queries, part, n_test_planned = _complete_partition(run, U, design_size=design_size, seed=seed)
    U_b = None
    if replicate is not None:  # checked before any file is written
        U_b = utility_matrix(replicate).reindex(index=list(part.test), columns=U.columns)
        n_missing = int(U_b.isna().to_numpy().sum())
        if n_missing:
            source = run.config.source.removeprefix("packaged:")  # what `ltrr label` takes
            source = shlex.quote(source) if source and not source.startswith("<") else "CONFIG"
            raise DataError(f"protocol: the replicate labels miss {n_missing} of the {U_b.size} (test query, arm) "
                            f"pairs (failed or never labelled, e.g. by `ltrr label --cache-only`); run "
                            f"`ltrr label {source}` to generate them")
    prereg, unfitted, lab_idx = _preregister(
        run, U, labels, raw, queries, part, out_dir, design_size=design_size, seed=seed, rankers=rankers,
        train_labels=train_labels, feature_sets=feature_sets, n_folds=n_folds, routers=routers, n_jobs=n_jobs,
        n_test=n_test_planned)
    cv_rows, router, best, power = prereg["candidates"], prereg["router"], prereg["best_single_arm"], prereg["power"]
    from joblib import Parallel, delayed
    from sklearn.base import clone

    # ---- the test part, once -----------------------------------------------------------------
    test = list(part.test)
    split = Split(name="design-test", family="design-test", train=part.train, test=part.test)
    with quiet_worker_restarts():
        jobs = Parallel(n_jobs=n_jobs, return_as="generator")(
            delayed(_fit_predict_router)(clone(unfitted[c["router"]]), c["label"], raw, lab_idx, part.train, test)
            for c in cv_rows)
        test_preds = list(bar(jobs, total=len(cv_rows), desc="protocol test fits", unit="candidate"))
    preds = {c["router"]: p for c, p in zip(cv_rows, test_preds, strict=True)}
    head = evaluate_splits(U, [split], {split.name: {router: preds[router]}},
                           costs=run.pool.costs, no_retrieval=nr, queries=queries,
                           n_resamples=n_resamples, random_state=seed)
    second = evaluate_splits(U, [split], {split.name: preds}, costs=run.pool.costs, no_retrieval=nr,
                             queries=queries, n_resamples=n_resamples, random_state=seed, correction="bonferroni")
    row = head.table.iloc[0]
    outcomes = head.per_query[head.per_query["router"] == router].set_index("qid").loc[test]
    r, b = outcomes["utility"].to_numpy(float), outcomes["best_single_utility"].to_numpy(float)
    o_raw = outcomes["oracle_utility"].to_numpy(float)
    result = {
        "router": router, "best_single_arm": best, "n_test": len(test),
        "router_utility": float(r.mean()), "best_single_utility": float(b.mean()),
        "oracle_utility": float(o_raw.mean()), "headroom_raw": float(o_raw.mean() - b.mean()),
        "captured_raw": captured_share(r, b, o_raw, random_state=seed, n_resamples=n_resamples),
        "p_value": float(row["p_value"]), "improved": int(row["improved"]),
        "degraded": int(row["degraded"]), "equal": int(row["equal"]),
        "power": power, "mean_gain": float((r - b).mean()),
        "router_cost": float(row["mean_cost"]), "best_single_cost": float(run.pool.costs[best]),
    }
    if len(test) < n_test_planned:  # failed items: said here, after the read, never in the preregistration
        result["n_test_left_out"] = n_test_planned - len(test)
    if U_b is not None:
        nc = noise_corrected_headroom(U.loc[test], U_b, best)
        # the corrected oracle of each query: the arm best on the main labels, scored on the replicate
        pick = oracle_choice(U.loc[test].to_numpy(float), list(U.columns), best)
        o_corr = U_b.to_numpy(float)[np.arange(len(test)), pick]
        b_rep = U_b[best].to_numpy(float)
        r_rep = U_b.to_numpy(float)[np.arange(len(test)), [list(U.columns).index(a) for a in outcomes["chosen"]]]
        result["noise_corrected"] = {**nc, "captured": captured_share(r_rep, b_rep, o_corr, random_state=seed,
                                                                      n_resamples=n_resamples)}
    secondary = second.table[["router", "mean_utility", "headroom_captured", "p_value", "p_adjusted",
                              "improved", "degraded"]].to_dict(orient="records")
    doc = {"preregistration": prereg, "headline": result, "secondary": secondary, "inputs": inputs}
    write_text_atomic(out_dir / "headline.json", json.dumps(doc, indent=2, default=float) + "\n")
    return doc


def _complete_partition(run, U: pd.DataFrame, *, design_size: float, seed: int):
    """(the queries with complete labels, their design/test partition, the size of the test part
    over every query).

    The partition is made over every query of the dataset, as the design-only preregistration
    makes it, and the queries without complete labels (a failed item) are then left out of
    their part: a failure moves no query between the parts, so the test part stays the one the
    preregistration promised, minus the failed queries (the log says how many of each part).
    The preregistration states the planned test size, which no test item's outcome can move;
    the headline says how many test queries were left out (``n_test_left_out``)."""
    every = run.dataset.queries.reset_index(drop=True)
    full = design_test_partition(every, design_size=design_size, random_state=seed)
    complete = set(map(str, U.index))
    part = keep_queries(full, complete)
    if part.n_train + part.n_test < full.n_train + full.n_test:
        run.log(f"[protocol] left out for incomplete labels (failed items): {full.n_train - part.n_train} design "
                f"and {full.n_test - part.n_test} test queries; the partition is the one over every query")
    if not part.n_train or not part.n_test:
        raise DataError(f"protocol: no {'design' if not part.n_train else 'test'} query has complete labels; "
                        "label them first (ltrr label)")
    return every[every["qid"].astype(str).isin(complete)].reset_index(drop=True), part, full.n_test


def _preregister(run, U, labels, raw, queries, part, out_dir, *, design_size, seed, rankers, train_labels,
                 feature_sets, n_folds, routers, n_jobs, n_test=None) -> tuple[dict, dict, pd.DataFrame]:
    """Steps 2-3 of the protocol on the design part: cross-validate the candidates, choose, state
    the power analysis and write ``preregistration.json`` (and, beside it, ``timings.json`` and
    ``environment.json``). Only design queries' labels are read. Returns (the preregistration, the unfitted candidate routers by
    name, the labels indexed by qid)."""
    from ltrr.eval import evaluate_splits, make_splits
    from ltrr.eval.routing import best_single_arm
    from ltrr.eval.splits import _queries

    nr = run.no_retrieval_arms()[0]
    lab_idx = labels.set_index("qid")
    candidates = _candidates(rankers, train_labels, feature_sets, run.config.features.set, routers)
    for cand in candidates:
        _check_label_column(labels, cand["label"])
    design_q = queries[queries["qid"].isin(set(part.train))].reset_index(drop=True)
    U_design = U.loc[list(part.train)]
    # checked here, not left to `grouped_kfold`, whose message names the evaluation's key
    n_groups = _queries(design_q)["group"].nunique()
    if isinstance(n_folds, (int, np.integer)) and n_groups < n_folds:
        raise DataError(f"protocol: {n_folds}-fold CV of the design part needs at least n_folds={n_folds} groups, "
                        f"its queries have {n_groups}; lower [protocol] n_folds")
    folds = make_splits(design_q, ["kfold"], n_folds=n_folds, random_state=seed)
    t0 = time.perf_counter()
    cv_rows, cv_preds, cv_seconds = [], {}, {}
    # candidates in parallel processes (n_jobs = 1 runs them here, one by one): each fit is
    # seeded, so the result does not depend on n_jobs
    from joblib import Parallel, delayed

    unfitted = {cand["router"]: _candidate_router(run, cand) for cand in candidates}
    with quiet_worker_restarts():
        jobs = Parallel(n_jobs=n_jobs, return_as="generator")(  # in order, one bar step per candidate
            delayed(_cv_candidate)(unfitted[c["router"]], c, raw, lab_idx, folds) for c in candidates)
        fitted = list(bar(jobs, total=len(candidates), desc="protocol CV", unit="candidate"))
    for cand, (preds, seconds) in zip(candidates, fitted, strict=True):
        name = cand["router"]
        ev = evaluate_splits(U_design, folds, preds, costs=run.pool.costs, no_retrieval=nr,
                             n_resamples=200, random_state=seed)
        row = ev.table[ev.table["pooled"]].iloc[0]
        pq = ev.per_query[(ev.per_query["split"] == "kfold") & (ev.per_query["router"] == name)]
        cv_preds[name] = pq
        cv_rows.append({"router": name, "ranker": cand["ranker"], "label": cand["label"],
                        "features": cand["features"], "spec": cand["spec"],
                        "cv_mean_utility": float(row["mean_utility"]),
                        "cv_best_single": float(row["best_single_utility"]),
                        "cv_headroom_captured": float(row["headroom_captured"])})
        cv_seconds[name] = round(seconds, 1)
    chosen = max(cv_rows, key=lambda r: r["cv_mean_utility"])
    pq = cv_preds[chosen["router"]]
    best = best_single_arm(U_design)
    n_test = part.n_test if n_test is None else n_test  # the planned size: no test item's failure moves it
    power = power_analysis((pq["utility"] - pq["best_single_utility"]).to_numpy(), n_test)
    prereg = {"seed": seed, "design_size": design_size, "n_design": part.n_train, "n_test": n_test,
              "router": chosen["router"], "ranker": chosen["ranker"], "label": chosen["label"],
              "features": chosen["features"], "best_single_arm": best,
              "candidates": cv_rows, "power": power, "n_folds": n_folds}
    write_text_atomic(out_dir / "preregistration.json", json.dumps(prereg, indent=2, default=float) + "\n")
    # wall-clock times go beside the results, never in them: the same config and seed give
    # byte-identical preregistration.json and headline.json
    write_text_atomic(out_dir / "timings.json", json.dumps(
        {"design_seconds": round(time.perf_counter() - t0, 1), "cv_seconds": cv_seconds}, indent=2) + "\n")
    # likewise the machine: the CPU, kernels and library versions that computed them
    write_text_atomic(out_dir / "environment.json", json.dumps(machine_record(), indent=2) + "\n")
    return prereg, unfitted, lab_idx


def _captured_text(cap: dict) -> str:
    if not np.isfinite(float(cap["estimate"])):
        return "captured n/a (no headroom: the best single arm is best on every test query)"
    return f"captured {100 * cap['estimate']:.1f}% [{100 * cap['ci_low']:.1f}%, {100 * cap['ci_high']:.1f}%]"


def preregistration_text(pre: dict) -> str:
    """One line: the pre-registered choice, the best single arm and the test part's power."""
    return (f"Pre-registered (seed {pre['seed']}, design {pre['n_design']} / test {pre['n_test']} queries): "
            f"router {pre['router']}, best single arm {pre['best_single_arm']}; the test part can detect a mean "
            f"gain of {pre['power']['mde']:.4f} (alpha 0.05, power 0.8; {pre['power']['mde_wilcoxon_worst']:.4f} "
            "at the Wilcoxon test's worst efficiency).")


def protocol_summary(docs: Sequence[dict]) -> str:
    """The headline of the first seed, then the mean and sd over every partition seed."""
    h, pre = docs[0]["headline"], docs[0]["preregistration"]
    lines = [
        preregistration_text(pre),
        f"Test: router {h['router_utility']:.4f} vs best single {h['best_single_utility']:.4f} "
        f"(gain {h['mean_gain']:+.4f}), oracle {h['oracle_utility']:.4f}, raw headroom {h['headroom_raw']:.4f}; "
        f"{_captured_text(h['captured_raw'])}; "
        f"Wilcoxon p = {h['p_value']:.3g}; improved {h['improved']}, degraded {h['degraded']}, equal {h['equal']}.",
    ]
    if h.get("n_test_left_out"):
        lines.append(f"Left out: {h['n_test_left_out']} of the {pre['n_test']} pre-registered test queries, for failed "
                     "items (incomplete labels); the figures above are over the other "
                     f"{pre['n_test'] - h['n_test_left_out']}.")
    if "router_cost" in h:
        lines.append(f"Cost: the router's arms {h['router_cost']:.2f} per query against {h['best_single_cost']:.2f} "
                     f"for {pre['best_single_arm']} (config cost units).")
    if "noise_corrected" in h:
        nc = h["noise_corrected"]
        lines.append(f"Noise-corrected headroom {nc['headroom_corrected']:.4f} (raw on the replicate "
                     f"{nc['headroom_raw']:.4f}); {_captured_text(nc['captured'])}.")
    if len(docs) > 1:
        gains = np.array([d["headline"]["mean_gain"] for d in docs])
        caps = np.array([d["headline"]["captured_raw"]["estimate"] for d in docs], dtype=float)
        caps = caps[np.isfinite(caps)]
        cap_txt = (f"captured {100 * caps.mean():.1f}% (sd {100 * caps.std(ddof=1):.1f}%)" if len(caps) > 1
                   else "captured n/a (no headroom on most partitions)")
        lines.append(f"Over {len(docs)} partition seeds: gain {gains.mean():+.4f} (sd {gains.std(ddof=1):.4f}), "
                     f"{cap_txt}.")
    return "\n".join(lines)
