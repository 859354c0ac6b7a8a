"""The train stage: fit the config's LTR router on the labelled queries and save it.

`ltrr.pipeline.Run.stage_train` and `ltrr.pipeline.Run.train_fingerprint` delegate here; the
functions are typed against `ltrr.pipeline.context.RunContext`, so they need not import `Run`.
"""

from __future__ import annotations

import time
from pathlib import Path

from ltrr._errors import ConfigError, DataError
from ltrr.pipeline._common import input_fingerprint
from ltrr.pipeline.context import RunContext
from ltrr.rankers.tags import ranker_defaults, ranker_tags

__all__ = ["train_fingerprint", "train_stage"]


def train_fingerprint(run: RunContext, ranker: str | None = None) -> str:
    """The fingerprint of the train stage's inputs for ``ranker`` (default ``[train] ranker``)."""
    ranker = ranker or run.config.train.ranker
    return input_fingerprint({"label": run.fingerprint_of("label"), "features": run.fingerprint_of("features"),
                              "ranker": ranker, "params": run.config.train.params.get(ranker),
                              "defaults": ranker_defaults(ranker),
                              "feature_set": run.config.features.set, "seed": run.config.seed})


def train_stage(run: RunContext, ranker: str | None = None, *, force: bool = False, part: str | None = None,
                trained_on: str | None = None) -> Path:
    """Fit an LTRRouter on every labelled query and save it to <workdir>/models/<ranker>.

    ``ranker`` defaults to the config's ``[train] ranker``. It is named by the config, never
    picked from the eval tables, which would choose it on test numbers. Skipped (and said)
    when the labels, features, ranker parameters and seed are unchanged.

    ``part="design"`` fits on the protocol's design part alone (`ltrr.pipeline.Run.protocol_part`) and saves to
    ``<workdir>/models/<ranker>-design``: a router held out from every test question, for
    stages that route test questions (`ltrr context run`, which fits it when it is missing).

    ``trained_on`` (``"dask"``: `ltrr train --scheduler`) marks the record: the model depends
    on the workers' partitions, so a later local `ltrr train` fits again rather than keeping it.
    """
    from ltrr.routers.ltr import GENERATOR_FILE

    ranker = ranker or run.config.train.ranker
    labels, raw = run.training_inputs()
    out = run.workdir / "models" / ranker
    fp = train_fingerprint(run, ranker)
    record = f"train-{ranker}"
    if part is not None:
        if part != "design":
            raise ConfigError(f"--part must be 'design' (a router is never fitted on the test part alone), got {part!r}")
        qids, source = run.protocol_part("design", labels=labels)
        labels = labels[labels["qid"].isin(qids)]
        if labels.empty:
            raise DataError(f"no labelled query in {source}")
        out = run.workdir / "models" / f"{ranker}-design"
        fp = input_fingerprint({"train": fp, "part": "design", "qids": sorted(map(str, qids))})
        record = f"train-{ranker}-design"
    if not force and run.is_fresh(record, fp, [out / "router.json", out / GENERATOR_FILE]):
        run.log(f"[train] skipped: inputs unchanged, router in {out}")
        return out

    texts = run.texts() if ranker_tags(ranker).needs_text else None
    t0 = time.perf_counter()
    run.log(f"[train] start: {ranker} on {labels['qid'].nunique()} labelled queries")
    router, notes = run.fit_ltr_router(ranker, raw, labels, texts=texts, stage="train")
    for note in notes:
        run.log(f"[train] warning: {ranker}: {note}")
    router.save(out, labelled_with=run.labelled_with())
    dt = time.perf_counter() - t0
    run.record(record, f"{fp}:{trained_on}" if trained_on else fp, dt, ranker=ranker,
               n_train_queries=router.n_train_queries_, **({"trained_on": trained_on} if trained_on else {}))
    run.log(f"[train] {ranker} on {router.n_train_queries_} queries in {dt:.1f}s -> {out}")
    return out
