"""The features stage and what the later stages read of it, over a `Run`.

The tables go to ``features/<config name>/`` (`Run.features_dir`), beside the feature-set specs,
not under the workdir; so two configs of one name, or one config run from two workdirs, share
the folder. The tables therefore record the fingerprint of their inputs themselves
(`ltrr.features.feature_tables_inputs`): the stage is fresh only when its record *and* the
tables name its inputs, a later stage refuses tables of other inputs, and a config whose
inputs equal another config's copies that folder instead of computing it again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from ltrr._cpu import numeric_kernels, unpinned_note
from ltrr._errors import NotBuiltError
from ltrr._log import logger, progress_enabled
from ltrr.pipeline._common import input_fingerprint
from ltrr.pipeline.context import RunContext

__all__ = ["features_fingerprint", "features_fresh", "features_made_of", "features_stage", "training_inputs"]


def features_fingerprint(run: RunContext) -> str:
    """The fingerprint of the features stage's inputs: the retrieval it reads, ``[features]``,
    and the CPU kernels numpy, faiss and torch compute with (`ltrr._cpu.numeric_kernels`): they
    change the features' last bits, which the rankers amplify, so tables made under other
    kernels (an older ltrr, or numpy imported before ltrr) are made again, not reused."""
    inputs = {"retrieve": run.fingerprint_of("retrieve"), "features": run.config.features.to_dict(),
              "kernels": numeric_kernels()}
    sets = {str(s) for s in [run.config.features.set, *run.config.protocol.feature_sets] if s}
    files = {s: Path(s).read_text(encoding="utf-8") for s in sorted(sets) if Path(s).is_file()}
    if files:  # a feature set of the user's own file: its content, since every later stage reads it
        inputs["feature_set_files"] = files
    return input_fingerprint(inputs)


def features_fresh(run: RunContext, fingerprint: str) -> bool:
    """Whether ``features/<run>/`` holds this run's tables: its stage record and the tables'
    own ``inputs`` both equal ``fingerprint`` (the stage record alone would pass the tables that
    another workdir of the same config name wrote since)."""
    from ltrr.features import feature_tables_inputs

    return (run.is_fresh("features", fingerprint, [run.features_dir / "raw.parquet"])
            and feature_tables_inputs(run.features_dir) == fingerprint)


def features_made_of(run: RunContext, fingerprint: str) -> Path | None:
    """Another folder under ``features/`` whose tables were made of exactly these inputs
    (another config name over the same retrieval, ``[features]`` and kernels), or None."""
    from ltrr.features import feature_tables_inputs

    root = run.features_dir.parent
    for meta in sorted(root.glob("*/raw_meta.json")):
        if meta.parent != run.features_dir and feature_tables_inputs(meta.parent) == fingerprint:
            return meta.parent
    return None


def features_stage(run: RunContext, *, force: bool = False) -> Path:
    """Raw routing features of every (query, arm) -> features/<run>/ (Parquet + .npy).

    Skipped when `features_fresh`; copied, not computed, from another config's folder made of
    the same inputs (`features_made_of`) unless ``force``."""
    from ltrr.features import copy_feature_tables, extract_raw, write_feature_tables

    run.need("features", run.results_path, "retrieve")
    fp = features_fingerprint(run)
    if not force and features_fresh(run, fp):
        run.log(f"[features] skipped: inputs unchanged, tables in {run.features_dir}")
        return run.features_dir
    t0 = time.perf_counter()
    if not force and (same := features_made_of(run, fp)) is not None:
        copy_feature_tables(same, run.features_dir)
        run.record("features", fp, time.perf_counter() - t0, reused=str(same))
        run.log(f"[features] copied from {same} (made of the same inputs) -> {run.features_dir}")
        return run.features_dir
    run.log(f"[features] start: {len(run.dataset.queries)} queries x {len(run.pool.arm_names)} arms")
    if (note := unpinned_note()) is not None:
        logger.warning(f"[features] warning: {note}")
    results = pd.read_parquet(run.results_path)
    pool = run.pool.load(run.index_dir)
    raw = extract_raw(run.dataset.queries, results, arms=pool.arm_names, no_retrieval=run.no_retrieval_arms(),
                      embedding_source=pool.embedding_source(), show_progress=progress_enabled())
    write_feature_tables(raw, run.features_dir, inputs=fp)
    dt = time.perf_counter() - t0
    run.record("features", fp, dt, rows=len(raw))
    run.log(f"[features] {len(raw)} (query, arm) rows in {dt:.1f}s, loading the indexes and encoding the "
            f"queries included -> {run.features_dir}")
    return run.features_dir


def training_inputs(run: RunContext, stage: str = "train"):
    """The labels and the raw feature tables a later stage reads.

    Raises
    ------
    NotBuiltError
        Either is missing, or ``features/<run>/`` holds tables of other inputs than the features
        stage recorded for this workdir (another run of the same config name wrote it since).
    """
    from ltrr.features import feature_tables_inputs, read_feature_tables

    run.need(stage, run.labels_dir / "labels.parquet", "label")
    run.need(stage, run.features_dir / "raw.parquet", "features")
    recorded, made = run.fingerprint_of("features"), feature_tables_inputs(run.features_dir)
    if recorded is None or made != recorded:
        why = ("this workdir has no features stage record" if recorded is None else
               "they were made of other inputs than this run's features stage recorded" if made else
               "they record no inputs (another process is writing them now, or an older ltrr or a person wrote them)")
        raise NotBuiltError(f"stage {stage} cannot read the feature tables in {run.features_dir}: {why}; "
                            f"run `ltrr features CONFIG` (or `ltrr run`) first")
    labels = pd.read_parquet(run.labels_dir / "labels.parquet")
    raw = read_feature_tables(run.features_dir)
    return labels, raw
