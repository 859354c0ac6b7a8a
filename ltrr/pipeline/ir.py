"""A run's IR outputs: its retrieval measures (ir_measures) and its TREC run files.

`ltrr.pipeline.Run.retrieval_measures`, `~ltrr.pipeline.Run.retrieval_report` and
`~ltrr.pipeline.Run.write_trec` delegate here; the functions are typed against
`ltrr.pipeline.context.RunContext`, so they need not import `Run`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ltrr._errors import LtrrError
from ltrr._tables import markdown_table
from ltrr.data.io import write_text_atomic
from ltrr.pipeline.context import RunContext

__all__ = ["retrieval_measures", "retrieval_report", "write_trec"]


def retrieval_measures(run: RunContext) -> list[str]:
    """The ``[eval] retrieval_measures`` (default: nDCG@10, R@k at each arm's k, RR, P@1)."""
    from ltrr.eval.retrieval import expand_measures, parse_measures

    names = run.config.eval.retrieval_measures or None
    ks = [a.k for a in run.pool.arms if not a.is_no_retrieval]
    try:
        out = expand_measures(names, ks)
        parse_measures(out)
    except LtrrError as exc:
        raise type(exc)(f"[eval] retrieval_measures: {exc}") from None
    return out


def retrieval_report(run: RunContext) -> dict[str, pd.DataFrame] | None:
    """ir_measures tables per query type and arm (needs qrels), one per measure; written as
    ``reports/retrieval.md`` and ``reports/retrieval.csv`` (long: measure, qtype, arm, value)."""
    from ltrr.eval.retrieval import measure_tables

    ds = run.dataset
    if ds.qrels is None:
        run.log("[report] the dataset has no qrels: no retrieval measures")
        return None
    results = pd.read_parquet(run.results_path)
    arms = [a.name for a in run.pool.arms if not a.is_no_retrieval]  # closed book: nothing to measure
    tables = measure_tables(results, ds.queries, ds.qrels, retrieval_measures(run), arms=arms)
    out = run.workdir / "reports"
    long = pd.concat([t.rename_axis("qtype").reset_index().melt(id_vars="qtype", var_name="arm").assign(measure=m)
                      for m, t in tables.items()], ignore_index=True)
    write_text_atomic(out / "retrieval.csv", long[["measure", "qtype", "arm", "value"]].to_csv(index=False))
    write_text_atomic(out / "retrieval.md", "".join(f"### {m}\n\n{markdown_table(t)}\n\n" for m, t in tables.items()))
    return tables


def write_trec(run: RunContext, folder: str | Path, *, router: str | Path | None = None) -> dict[str, Path]:
    """Write the retrieve stage's run of every arm as ``folder/<arm>.trec`` (the arm as tag),
    and the routed run of a trained router (``router``; default ``<workdir>/models/<[train]
    ranker>`` when it is trained) as ``folder/routed-<ranker>.trec``. The runs are keyed by
    the retrieve stage's fingerprint and the topics and qrels (``folder/runs.json``)."""
    from ltrr.data.trec import RunKey, write_trec_runs

    run.need("trec", run.results_path, "retrieve")
    results = pd.read_parquet(run.results_path)
    runs = {arm: results[results["arm"] == arm] for arm in run.pool.arm_names
            if not run.pool.arm(arm).is_no_retrieval}
    default = run.workdir / "models" / run.config.train.ranker
    folder_r = Path(router) if router else (default if (default / "router.json").is_file() else None)
    if folder_r is not None:
        from ltrr.eval.retrieval import route_batch, routed_results
        from ltrr.routers.ltr import LTRRouter

        model = LTRRouter.load(folder_r)
        pool = run.pool.load(run.index_dir)
        choice = route_batch(model, pool, run.dataset.queries[["qid", "question"]], results)
        runs[f"routed-{model.ranker}"] = routed_results(results, choice.set_index("qid")["arm"])
    key = RunKey.of(run.fingerprint_of("retrieve") or "", run.dataset.queries, run.dataset.qrels,
                    run.config.data.dataset)
    return write_trec_runs(runs, folder, key, log=run.log)
