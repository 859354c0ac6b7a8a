"""The eval stage over a `RunContext`: every router trained on each split's train queries and
compared on its test queries, one split per parallel process.

Each fit is seeded and a torch ranker trains on one thread whatever ``n_jobs`` is
(`ltrr.rankers.torch_base.torch_threads`) on features whose PCA runs on one BLAS thread
(`ltrr._cpu.one_blas_thread`), so the tables do not depend on ``[eval] n_jobs``;
``tests/test_pipeline_e2e.py`` checks that they are identical for 1 and 2 processes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from ltrr._checks import check_int
from ltrr._errors import DataError, LtrrError
from ltrr._log import bar, quiet_worker_restarts
from ltrr.pipeline._common import input_fingerprint
from ltrr.pipeline.context import RunContext
from ltrr.rankers.tags import ranker_defaults, ranker_tags

__all__ = ["eval_stage", "eval_fingerprint", "fit_router", "TRAIN_FREE", "DEFAULT_RANKERS"]

#: The LTR rankers of the eval stage when ``[train] rankers`` is empty.
DEFAULT_RANKERS = (
    "lambdamart-listwise", "xgboost-listwise", "xgboost-pairwise", "xgboost-pointwise",
    "svm-pointwise", "svmrank-pairwise", "ffn-pointwise", "ffn-pairwise", "listnet-listwise",
)
#: The routers that need no training (the pre-retrieval baselines).
TRAIN_FREE = ("overallsim", "avgsim", "maxsim", "varsim", "moran")
#: the eval stage's plots under ``reports/plots``, by the key of the stage's output
PLOTS = {"plot_utility": "utility.png", "plot_headroom": "headroom.png", "plot_per_type": "per_type.png",
         "plot_importance": "feature_importance.png", "plot_cost": "cost_utility.png"}


def fit_router(router, raw, labels: pd.DataFrame, *, texts, stage: str, ranker: str, where: str = "") -> list[str]:
    """Fit the LTR ``router`` on ``raw`` and ``labels``; returns the convergence notes of its fit.

    Raises
    ------
    LtrrError
        Of the ranker's own type, as ``stage <stage>: router '<ranker>' failed to train<where>``.
    """
    from ltrr.rankers.convergence import convergence_notes, recorded_convergence_warnings

    try:
        with recorded_convergence_warnings() as notes:
            router.fit(raw, labels, texts=texts)
    except LtrrError as exc:
        raise type(exc)(f"stage {stage}: router {ranker!r} failed to train{where}: {exc}") from None
    return convergence_notes(notes, router)


def _fit_split(routers: list[tuple[str, Any]], split_name: str, train_raw, train_labels, test_raw, texts,
               importance: str | None) -> list[tuple[str, pd.DataFrame, list[str], dict[str, float]]]:
    """One split's job: each LTR router fitted on its train queries, with its test scores as a
    qid x arm matrix, its notes, and (for the ranker named by ``importance``) its feature
    importances. Runs in a worker process when ``[eval] n_jobs`` > 1: one job per split, so each
    split's tables travel to a worker once, not once per ranker (measured in session 23)."""
    out = []
    for ranker, router in routers:
        notes = fit_router(router, train_raw, train_labels, texts=texts, stage="eval", ranker=ranker,
                           where=f" on split {split_name!r}")
        out.append((ranker, _wide(router.route_scores(test_raw, texts=texts)), notes,
                    router.feature_importance() if ranker == importance else {}))
    return out


def _rankers(run: RunContext) -> list[str]:
    """The rankers the eval stage fits: ``[train] rankers``, else `DEFAULT_RANKERS`."""
    return list(run.config.train.rankers or DEFAULT_RANKERS)


def noise_source_text(arm: str) -> str:
    """What the labels' noise floor measured, in words, from its summary's ``arm`` field: a
    replicate (``every arm under TEMPLATE``) or one arm's passages in another order."""
    if not arm:
        return ""
    if arm.startswith("every arm under "):
        return f"every arm answered again under a reworded prompt, {arm.removeprefix('every arm under ')}"
    return f"the {arm} arm's passages in another order"


#: what eval.md says of its splits: they are drawn from every labelled query, so a design chosen
#: on them is chosen on the protocol's test part too
SCOPE = ("These splits draw their training and test queries from every labelled query, the protocol's "
         "test part included (the paper's splits): read them to explore, and choose no design on them. "
         "A design is chosen on the design part (`ltrr protocol CONFIG --design-only` reads no test label) and "
         "read once on the test part: the headline (`ltrr protocol CONFIG`, `<workdir>/protocol/seed-N/`).")


def eval_fingerprint(run: RunContext) -> str:
    """The fingerprint of the eval stage's inputs: labels, features, ``[eval]``, ``[train]``, seed,
    and the rankers' defaults (`ltrr.rankers.ranker_defaults`)."""
    # the retrieval tables' measures and the process count change no router figure (and a run
    # saved before those keys existed keeps its fingerprint)
    ecfg = {k: v for k, v in run.config.eval.items() if k not in ("retrieval_measures", "n_jobs")}
    return input_fingerprint({"labels": run.fingerprint_of("label"), "features": run.fingerprint_of("features"),
                              "eval": ecfg, "train": run.config.train.to_dict(), "seed": run.config.seed,
                              "ranker_defaults": {r: ranker_defaults(r) for r in _rankers(run)},
                              # the report's noise floor is a share of each split's own headroom
                              # (it was the labels' overall share): a report made before is redone
                              "noise_floor": "per split",
                              # likewise: necessity accuracy over the informative queries (it was
                              # over all), the queries with headroom in the tables and arms.csv, and
                              # the report's word on what its splits hold (SCOPE)
                              "report": "necessity over informative queries, n_headroom, scope"})


def eval_stage(run: RunContext, *, force: bool = False) -> dict[str, Path]:
    """Train every router on each split's train queries and compare them on its test queries."""
    from joblib import Parallel, delayed

    from ltrr.eval import evaluate_splits, make_splits, plots, write_report
    from ltrr.eval.routing import utility_matrix

    labels, raw = run.training_inputs("eval")
    ecfg = run.config.eval
    check_int(ecfg.n_jobs, "[eval] n_jobs", low=1)
    rankers = _rankers(run)
    fp = eval_fingerprint(run)
    out = run.reports_dir / "results.csv"
    if not force and run.is_fresh("eval", fp, [out]):
        run.log(f"[eval] skipped: inputs unchanged, report in {run.reports_dir}")
        pdir = run.reports_dir / "plots"  # the plots it drew, so a warm run says where they are too
        return {"report": run.reports_dir / "eval.md", **{k: pdir / f for k, f in PLOTS.items() if (pdir / f).is_file()}}
    t0 = time.perf_counter()
    U = utility_matrix(labels)
    gains = utility_matrix(labels, value="norm_gain")
    queries = run.dataset.queries[run.dataset.queries["qid"].isin(U.index)].reset_index(drop=True)
    if queries.empty:
        raise DataError("stage eval: no query has complete labels")
    try:
        splits = make_splits(queries, names=ecfg.splits, test_size=ecfg.test_size,
                             n_folds=ecfg.n_folds, random_state=run.config.seed)
    except LtrrError as exc:
        raise type(exc)(f"stage eval: {exc}") from None
    texts = run.texts() if any(ranker_tags(r).needs_text for r in rankers) else None
    lab_idx = labels.set_index("qid")
    n_routers = len(TRAIN_FREE) + 2 + len(rankers)
    run.log(f"[eval] start: {len(splits)} splits x {n_routers} routers on {len(queries)} queries"
            + (f", {ecfg.n_jobs} processes" if ecfg.n_jobs > 1 else ""))
    predictions: dict[str, dict] = {}
    jobs = []
    for split in splits:
        train_raw, test_raw = raw.subset(split.train), raw.subset(split.test)
        train_labels = lab_idx.loc[lab_idx.index.isin(split.train)].reset_index()
        preds = predictions[split.name] = {}
        for name in (*TRAIN_FREE, "random", "no-retrieval"):
            preds[name] = _wide(run.make_router(name).fit(train_raw, train_labels).route_scores(test_raw))
        jobs.append((split.name, delayed(_fit_split)(
            [(rk, run.make_router("ltrr", rk)) for rk in rankers], split.name, train_raw, train_labels, test_raw,
            texts, "lambdamart-listwise" if split.name == "balanced" else None)))
    warned: list[str] = []
    importances: dict[str, float] = {}
    with quiet_worker_restarts():
        done = Parallel(n_jobs=ecfg.n_jobs, return_as="generator")(job for _, job in jobs)
        for (split_name, _), fitted in zip(jobs, bar(done, total=len(jobs), desc="eval fits", unit="split"),
                                           strict=True):
            for rk, scores, notes, imp in fitted:
                predictions[split_name][f"ltrr:{rk}"] = scores
                warned += [f"ltrr:{rk}: {note} on split {split_name}" for note in notes]
                importances = imp or importances
    noise, source = float("nan"), ""  # per query, in utility: each split's report gives it as a share of its headroom
    summary_path = run.labels_dir / "summary.json"
    if summary_path.exists():
        floor = json.loads(summary_path.read_text()).get("noise_floor", {})
        noise, source = floor.get("mean_abs_diff", float("nan")), noise_source_text(str(floor.get("arm", "")))
    nr = run.no_retrieval_arms()[0]
    ev = evaluate_splits(U, splits, predictions, costs=run.pool.costs, no_retrieval=nr, queries=queries, gains=gains,
                         noise_scale=noise, correction=ecfg.correction, k=ecfg.k, n_resamples=ecfg.n_bootstrap,
                         random_state=run.config.seed)
    ev.meta["warnings"] = warned
    ev.meta["noise_source"] = source
    ev.meta["scope"] = SCOPE
    paths = write_report(ev, run.reports_dir)
    pdir = run.reports_dir / "plots"
    paths["plot_utility"] = plots.plot_utility(ev.table, pdir / PLOTS["plot_utility"])
    paths["plot_headroom"] = plots.plot_headroom(ev.table, pdir / PLOTS["plot_headroom"], no_retrieval=nr)
    for key in ("plot_per_type", "plot_importance"):
        (pdir / PLOTS[key]).unlink(missing_ok=True)  # not drawn this time: an older one must not be listed
    if not ev.by_type.empty:
        paths["plot_per_type"] = plots.plot_per_type(ev.by_type, pdir / PLOTS["plot_per_type"],
                                                     split=plots.type_split(ev.by_type, ev.table))
    if importances:
        paths["plot_importance"] = plots.plot_feature_importance(importances, pdir / PLOTS["plot_importance"])
    paths["plot_cost"] = plots.plot_cost_utility(ev.table, ev.arms, pdir / PLOTS["plot_cost"])
    run.record("eval", fp, time.perf_counter() - t0)
    run.log(f"[eval] {len(splits)} splits x {len(predictions[splits[0].name])} routers in {time.perf_counter() - t0:.1f}s")
    return paths


def _wide(scores: pd.DataFrame) -> pd.DataFrame:
    """Router scores (qid, arm, score) as a qid x arm matrix."""
    return scores.pivot(index="qid", columns="arm", values="score")
