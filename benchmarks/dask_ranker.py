"""LambdaMART on Dask against in-process LambdaMART on the demo features.

Trains ``lambdamart-listwise`` twice on the protocol's design part of a labelled run (default the
demo): in process, and on a 2-worker Dask ``LocalCluster`` (LightGBM's ``DaskLGBMRanker``, with
query-aligned partitions checked by ``ltrr.dist.rankers.check_group_partitions``). Reports
nDCG@3 of both on the test part (gains: the labels' ``norm_gain``), their difference, the fit
times side by side, and the partition check.

    python benchmarks/dask_ranker.py [CONFIG] [--out FILE]

Writes ``benchmarks/results/dask_ranker.json`` (or ``--out``).
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

OUT = Path(__file__).resolve().parent / "results" / "dask_ranker.json"


def main(argv=None) -> int:
    from dask.distributed import Client, LocalCluster

    from ltrr.config import load_config
    from ltrr.data.io import write_text_atomic
    from ltrr.dist.rankers import check_group_partitions, dask_training, query_partitions
    from ltrr.eval.protocol import design_test_partition
    from ltrr.pipeline import Run
    from ltrr.progress import configure
    from ltrr.rankers.base import mean_ndcg

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="demo", help="a labelled run's config (default: demo)")
    ap.add_argument("--out", type=Path, default=OUT, help="the JSON file written")
    args = ap.parse_args(argv)
    configure()
    run = Run(load_config(args.config))
    labels, raw = run.training_inputs("bench")
    q = run.dataset.queries[run.dataset.queries["qid"].astype(str).isin(set(map(str, raw.qids)))]
    part = design_test_partition(q.reset_index(drop=True), design_size=run.config.protocol["design_size"],
                                 random_state=run.config.seed)
    lab_tr = labels[labels["qid"].astype(str).isin(set(part.train))]
    test = raw.subset(part.test)
    y = labels.set_index(["qid", "arm"])["norm_gain"].reindex(
        list(zip(test.table["qid"].astype(str), test.table["arm"].astype(str), strict=True))).to_numpy(float)
    res = {"config": args.config, "n_design": part.n_train, "n_test": part.n_test}

    def fit_and_score(tag):
        router = run.make_router("ltrr", "lambdamart-listwise")
        t0 = time.perf_counter()
        router.fit(raw.subset(part.train), lab_tr)
        res[f"{tag}_fit_seconds"] = round(time.perf_counter() - t0, 2)
        s = router.route_scores(test)["score"].to_numpy(float)
        res[f"{tag}_ndcg@3"] = mean_ndcg(y, s, test.table["qid"].astype(str).to_numpy(), k=3)

    fit_and_score("local")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, dask_training(client):
        fit_and_score("dask")
    sizes = raw.subset(part.train).table.groupby("qid", sort=True).size().to_numpy()
    parts = query_partitions(sizes, 2)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    check_group_partitions(tuple(int(starts[e] - starts[b]) for b, e in parts), [sizes[b:e] for b, e in parts])
    res["partitions"] = [{"queries": int(e - b), "rows": int(starts[e] - starts[b])} for b, e in parts]
    res["group_split_check"] = "passed: every partition holds whole queries"
    res["ndcg_diff"] = res["dask_ndcg@3"] - res["local_ndcg@3"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
