"""Routing signal, step 1: choose the generation options on the design part only.

The pre-registered protocol (`ltrr.eval.protocol`): the demo queries are split by group into a
design part (70%) and a test part (seed 13). This script never reads a test query. On a fixed,
type-stratified sample of 150 design queries it labels every arm under at most four
generation-changing options (k passages per arm, prompt template, max_new_tokens), with the
generator's likelihood of the gold answer scored on the same prompts. Options that change only
the label or the metric cost nothing and are crossed with them.

For each (option, training label, metric) it reports the cross-validated share of the oracle
headroom that one fixed ranker captures (grouped 5-fold CV on the 150 queries, pooled), the
generations and scoring passes per query, and the throughput.

Run from the project folder (resumable: every generation and score goes through the cache)::

    python benchmarks/design_search.py [--only k1-short,k2-short] [--table-only]

Writes ``benchmarks/results/design_search.md`` and ``.json``; labels under ``runs/design/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"

SEED = 13
DESIGN_SIZE = 0.7
N_SAMPLE = 150
RANKER = "lambdamart-listwise"  # the one fixed ranker of the option table
OPTIONS = {  # name -> (k passages per retrieval arm, template, max_new_tokens)
    "k1-short": (1, "short_answer", 32),
    "k2-short": (2, "short_answer", 32),
    "k1-fewshot": (1, "few_shot", 16),
    "k3-short": (3, "short_answer", 32),
}
METRICS = ["f1", "contains", "recall", "em"]
FEATURE_SETS = ["paper", "paper_onehot"]  # the paper's, and the paper's plus arm identity
LABELS = ["f1", "contains", "recall", "likelihood"]


def option_config(name: str):
    from ltrr.config import load_config, validate

    k, template, max_new = OPTIONS[name]
    d = load_config("demo").to_dict()
    d["run"]["name"] = f"design-{name}"
    d["run"]["workdir"] = str(ROOT / "runs" / "design" / name)
    d["data"]["max_queries"] = 0
    for arm in d["arms"]:
        if arm.get("retriever") != "none":
            arm["k"] = k
    d["generation"].update(template=template, max_new_tokens=max_new)
    d["labels"].update(metric="f1", extra_metrics=["em", "contains", "recall"], likelihood=True)
    return validate(d, f"design option {name}")


def sample_qids(run) -> list[str]:
    from ltrr.eval.protocol import design_sample, design_test_partition

    q = run.dataset.queries
    part = design_test_partition(q, design_size=DESIGN_SIZE, random_state=SEED)
    return design_sample(q, part, n=N_SAMPLE, random_state=SEED)


def label_option(name: str) -> dict:
    from ltrr.pipeline import Run

    run = Run(option_config(name), log=lambda m: print(m, flush=True))
    run.stage_data()
    run.stage_index()
    keep = set(sample_qids(run))
    run.dataset.queries = run.dataset.queries[run.dataset.queries["qid"].isin(keep)].reset_index(drop=True)
    run.stage_retrieve()
    t0 = time.perf_counter()
    run.stage_label(tolerate_failures=True)
    summary = json.loads((run.labels_dir / "summary.json").read_text())
    run.stage_features()
    return {"seconds": time.perf_counter() - t0, "summary": summary, "run": run}


def with_metric_gains(labels: pd.DataFrame, metric: str, no_retrieval: str = "none") -> pd.DataFrame:
    """``<metric>_norm_gain``: per-query min-max normalised gain of a metric column."""
    from ltrr.labels import normalise_gains

    col = "likelihood" if metric == "likelihood" else ("utility" if metric == "f1" else metric)
    out = labels.copy()
    vals = np.full(len(out), np.nan)
    for _, idx in out.groupby("qid", sort=False).indices.items():
        grp = out.iloc[idx]
        u = grp[col].to_numpy(dtype=float)
        if np.isnan(u).any():
            continue
        base = float(grp.loc[grp["arm"] == no_retrieval, col].iloc[0])
        vals[idx] = normalise_gains(u, base)[1]
    out[f"{metric}_norm_gain"] = vals
    return out


def cv_table(name: str, run) -> list[dict]:
    from ltrr.eval import evaluate_splits, make_splits
    from ltrr.eval.routing import utility_matrix
    from ltrr.features import read_feature_tables
    from ltrr.routers.ltr import LTRRouter

    labels = pd.read_parquet(run.labels_dir / "labels.parquet")
    raw = read_feature_tables(run.features_dir)
    queries = run.dataset.queries
    splits = make_splits(queries, ["kfold"], n_folds=5, random_state=SEED)
    for lab in LABELS:
        labels = with_metric_gains(labels, lab)
    lab_idx = labels.set_index("qid")
    rows = []
    qtype = queries.set_index("qid")["qtype"]
    for metric in METRICS:
        col = "utility" if metric == "f1" else metric
        U = utility_matrix(labels, value=col)
        tp = {}
        for split in splits:  # the type rule is chosen on the metric it is scored on
            U_train = U.loc[U.index.isin(set(split.train))]
            best = U_train.groupby(qtype.reindex(U_train.index).to_numpy()).mean().idxmax(axis=1)
            sc = pd.DataFrame(0.0, index=list(split.test), columns=list(U.columns))
            for q in split.test:
                sc.loc[q, best.get(qtype[q], U_train.mean().idxmax())] = 1.0
            tp[split.name] = {"per-type best arm": sc}
        ev = evaluate_splits(U, splits, tp, costs=run.pool.costs, no_retrieval="none",
                             queries=queries, n_resamples=500, random_state=SEED)
        r = ev.table[ev.table["pooled"]].iloc[0]
        rows.append({"option": name, "label": "(per-type best arm, no features)", "metric": metric,
                     "n": int(r["n_test"]), "best_single": r["best_single_utility"], "router": r["mean_utility"],
                     "oracle": r["oracle_utility"], "headroom": r["headroom"], "captured": r["headroom_captured"],
                     "ci_low": r["headroom_ci_low"], "ci_high": r["headroom_ci_high"], "p": r["p_value"]})
    for lab, fs in [(lab, fs) for fs in FEATURE_SETS for lab in LABELS]:
        preds = {}
        for split in splits:
            train = lab_idx.loc[lab_idx.index.isin(split.train)].reset_index()
            train = train[train[f"{lab}_norm_gain"].notna()]
            router = LTRRouter(ranker=RANKER, features=fs, label=f"{lab}_norm_gain",
                               pool_config={"retrievers": run.config.retrievers, "rerankers": run.config.rerankers,
                                            "arms": run.config.arms, "seed": SEED},
                               index_dir=str(run.index_dir), random_state=SEED)
            router.fit(raw.subset(split.train), train)
            s = router.route_scores(raw.subset(split.test))
            preds[split.name] = {f"ltrr:{RANKER}": s.pivot(index="qid", columns="arm", values="score")}
        for metric in METRICS:
            col = "utility" if metric == "f1" else metric
            U = utility_matrix(labels, value=col)
            ev = evaluate_splits(U, splits, preds, costs=run.pool.costs, no_retrieval="none",
                                 queries=queries, n_resamples=500, random_state=SEED)
            r = ev.table[ev.table["pooled"]].iloc[0]
            rows.append({"option": name, "label": lab + ("" if fs == "paper" else f" [{fs}]"), "metric": metric,
                         "n": int(r["n_test"]),
                         "best_single": r["best_single_utility"], "router": r["mean_utility"],
                         "oracle": r["oracle_utility"], "headroom": r["headroom"],
                         "captured": r["headroom_captured"], "ci_low": r["headroom_ci_low"],
                         "ci_high": r["headroom_ci_high"], "p": r["p_value"]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated option names (default: all)")
    ap.add_argument("--table-only", action="store_true", help="only options already labelled")
    args = ap.parse_args(argv)
    from ltrr.data.io import write_text_atomic
    from ltrr.progress import configure

    configure()  # quiet library progress bars when the output goes to a log file
    names = args.only.split(",") if args.only else list(OPTIONS)
    unknown = [n for n in names if n not in OPTIONS]
    if unknown:
        print(f"unknown option(s) {unknown}; known: {list(OPTIONS)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    done_path = OUT / "design_search.json"
    doc = json.loads(done_path.read_text()) if done_path.exists() else {"options": {}, "rows": []}
    for name in names:
        if args.table_only and name not in doc["options"]:
            continue
        res = label_option(name)
        s = res["summary"]
        k, template, max_new = OPTIONS[name]
        n_q = s["queries"]
        if not (name in doc["options"] and s["generator_calls"] == 0):  # keep the measured cost
            doc["options"][name] = {
                "k": k, "template": template, "max_new_tokens": max_new, "queries": n_q,
                "generator_calls": s["generator_calls"], "cache_hits": s["cache_hits"],
                "label_seconds": s["seconds"], "calls_per_query": s["generator_calls"] / max(1, n_q),
                "calls_per_second": s["generator_calls"] / s["seconds"] if s["seconds"] else None,
                "tie_rate": s["tie_rate"], "noise_floor": s.get("noise_floor"),
            }
        doc["rows"] = [r for r in doc["rows"] if r["option"] != name] + cv_table(name, res["run"])
        write_text_atomic(done_path, json.dumps(doc, indent=2, default=float) + "\n")  # the resume ledger
        write_markdown(doc)
    return 0


def write_markdown(doc: dict) -> None:
    lines = ["# Design-part option search (routing signal)", "",
             f"Design sample: {N_SAMPLE} design queries (seed {SEED}, design share {DESIGN_SIZE}); "
             f"ranker {RANKER}; grouped 5-fold CV, pooled. No test query is used.", "",
             "| option | k | template | max_new | gen calls/query | calls/s | tie rate |", "|---|---|---|---|---|---|---|"]
    for name, o in doc["options"].items():
        cps = f"{o['calls_per_second']:.2f}" if o["calls_per_second"] else "cached"
        lines.append(f"| {name} | {o['k']} | {o['template']} | {o['max_new_tokens']} | "
                     f"{o['calls_per_query']:.1f} | {cps} | {o['tie_rate']:.2f} |")
    lines += ["", "| option | label | metric | best single | router | oracle | headroom | captured [95% CI] | p |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        cap = "n/a" if r["captured"] is None or r["captured"] != r["captured"] else \
            f"{100 * r['captured']:.0f}% [{100 * r['ci_low']:.0f}%, {100 * r['ci_high']:.0f}%]"
        lines.append(f"| {r['option']} | {r['label']} | {r['metric']} | {r['best_single']:.3f} | "
                     f"{r['router']:.3f} | {r['oracle']:.3f} | {r['headroom']:.3f} | {cap} | {r['p']:.3g} |")
    from ltrr.data.io import write_text_atomic

    write_text_atomic(OUT / "design_search.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
