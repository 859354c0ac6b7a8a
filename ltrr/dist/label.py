"""Labelling on Dask workers: chunks of queries, one generator and one cache shard per worker.

1. The driver asks the run's cache which chunks of queries have an item (a generation or a
   likelihood score, replicate included) it lacks: a probe backend answers every miss with a
   failed generation, which the cache never stores, so nothing is generated or written.
2. Each such chunk is a Dask task (``retries``; a lost worker's tasks are rescheduled by Dask,
   up to ``distributed.scheduler.allowed-failures``). A worker process keeps one run per
   config, so its generator loads once, and writes to its own shard cache; it runs one chunk at
   a time, however many threads it was started with. It builds that run
   with the driver's run class (``type(run)``, sent with the task), so this module, which sits
   below the pipeline, never imports it.
3. As shards finish they are merged into the run's cache (`GenerationCache.merge`: rows are
   checksummed and copied verbatim). The driver then labels from the cache in one process, so
   labels.parquet is byte-identical to a one-process run.

Workers must see the run's files (dataset, retrieval results, model): one machine, or a shared
file system.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from ltrr._errors import LtrrError
from ltrr._log import bar

__all__ = ["fill_cache_on_dask", "missing_chunks"]

_RUNS: dict[str, Any] = {}  # per worker process: config JSON -> (Run, its cached generator, loaded once)
# One chunk at a time per worker process: a worker started with several threads (``dask worker
# --nthreads 2``) would otherwise run two chunks on the one generator and cache connection,
# which are not thread-safe (llama.cpp's context, SQLite), and count each other's calls.
_WORKER_LOCK = threading.Lock()


def missing_chunks(run, chunks: list[list[str]]) -> list[list[str]]:
    """The chunks of query ids with at least one item the run's cache lacks."""
    from ltrr.generation.base import Generation, Generator
    from ltrr.generation.cache import CachedGenerator

    cached = run.make_generator()
    real = cached.generator

    class Probe(Generator):
        backend, identity = real.backend, real.identity
        missed = 0

        def __getattr__(self, name):
            return getattr(real, name)

        def generate(self, prompts, params=None):
            Probe.missed += len(prompts)
            return [Generation(text="", error="probe: not in the cache") for _ in prompts]

        def score(self, prompts, continuations):
            Probe.missed += len(prompts)
            return [Generation(text="", error="probe: not in the cache") for _ in prompts]

    out = []
    for chunk in chunks:
        before = Probe.missed
        run.stage_label(only=chunk, tolerate_failures=True,
                        generator=CachedGenerator(Probe(), cached.cache, enabled=True))
        if Probe.missed > before:
            out.append(chunk)
    return out


def _label_chunk(run_class: type, config: dict, shard_dir: str, qids: list[str]) -> dict:
    """A Dask task: label ``qids`` into this worker's shard cache; returns the shard and counts.

    ``run_class`` is the driver's run class (`ltrr.pipeline.Run`), built here from ``config``.
    """
    with _WORKER_LOCK:
        return _label_chunk_alone(run_class, config, shard_dir, qids)


def _label_chunk_alone(run_class: type, config: dict, shard_dir: str, qids: list[str]) -> dict:
    """`_label_chunk`'s work, under the worker's lock."""
    import json

    from ltrr import _log
    from ltrr.config import validate

    key = json.dumps(config, sort_keys=True)
    if key in _RUNS and not _RUNS[key][0].cache_path.exists():  # its shard was removed since: start it afresh
        _RUNS[key][1].cache.close()
        del _RUNS[key]
    if key not in _RUNS:
        _log.configure()
        cfg = dict(config)
        shard = Path(shard_dir) / f"worker-{os.getpid()}.sqlite"
        cfg["generation"] = {**cfg["generation"], "cache": str(shard), "prebuilt": ""}
        run = run_class(validate(cfg, "dask worker"), log=lambda m: None)
        _RUNS[key] = (run, run.make_generator())
    run, gen = _RUNS[key]
    t0, before = time.perf_counter(), gen.generator_calls
    run.stage_label(only=qids, tolerate_failures=True, generator=gen)
    return {"shard": str(run.cache_path), "queries": len(qids), "generator_calls": gen.generator_calls - before,
            "seconds": time.perf_counter() - t0, "pid": os.getpid()}


def fill_cache_on_dask(run, scheduler: str, *, use_cache: bool | None = None, chunk_queries: int = 4,
                       retries: int = 2, timeout: float = 30.0) -> dict:
    """Fill ``run``'s generation cache from Dask workers (see the module docstring)."""
    from ltrr._errors import ConfigError
    from ltrr.dist import connected
    from ltrr.generation.cache import GenerationCache

    if use_cache is False or (use_cache is None and not run.config.generation.use_cache):
        raise ConfigError("--scheduler fills the generation cache: it cannot run with the cache off "
                          "(--no-cache or [generation] use_cache = false)")
    shard_dir = run.cache_path.parent / "dask-shards" / run.config.name
    main = GenerationCache(run.cache_path)
    _merge_shards(main, shard_dir)  # an interrupted run's finished work counts first
    qids = [str(q) for q in run.dataset.queries["qid"]]
    chunks = [qids[i:i + chunk_queries] for i in range(0, len(qids), chunk_queries)]
    todo = missing_chunks(run, chunks)
    run.log(f"[label] dask {scheduler}: {len(todo)} of {len(chunks)} chunks of {chunk_queries} queries have "
            "items missing from the cache")
    if not todo:
        return {"chunks": 0}
    shard_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cfg = _absolute_paths(run)
    calls, shards = 0, set()
    try:
        with connected(scheduler, timeout=timeout) as client:
            from dask.distributed import as_completed  # importable once connect has checked Dask

            futures = [client.submit(_label_chunk, type(run), cfg, str(shard_dir), chunk,
                                     key=f"ltrr-label-{i}-{chunk[0]}", retries=retries, pure=False)
                       for i, chunk in enumerate(todo)]
            with bar(total=len(futures), desc="dask chunks", unit="chunk") as pbar:
                for fut in as_completed(futures):
                    try:
                        res = fut.result()
                    except LtrrError:
                        raise
                    except Exception as exc:  # a worker killed again and again (KilledWorker), say
                        raise LtrrError(f"Dask task {fut.key} failed: {type(exc).__name__}: {exc}; the chunks "
                                        "that finished are kept, and the next run sends only the rest") from None
                    calls += res["generator_calls"]
                    shards.add(res["shard"])
                    pbar.update(1)
    finally:  # finished or not, every shard's rows reach the run's cache (checksummed, verbatim)
        _merge_shards(main, shard_dir)
    run.log(f"[label] dask: {len(todo)} chunks, {calls} generator calls on {len(shards)} workers in "
            f"{time.perf_counter() - t0:.1f}s; shards merged into {run.cache_path}")
    return {"chunks": len(todo), "generator_calls": calls, "shards": sorted(shards)}


def _merge_shards(main, shard_dir: Path) -> None:
    """Merge every worker shard in ``shard_dir`` into the run's cache ``main`` (rows it has are
    kept as they are), so an interrupted or failed run keeps what its workers finished."""
    from ltrr.generation.cache import is_blank_database

    for shard in sorted(shard_dir.glob("worker-*.sqlite")) if shard_dir.is_dir() else []:
        if is_blank_database(shard):  # a worker killed before it wrote its cache's schema: no row in it
            continue
        main.merge(shard)


def _absolute_paths(run) -> dict:
    """The run's config for a worker, its paths made absolute: a worker started in another
    folder read a relative workdir or dataset from its own folder."""
    cfg = run.config.to_dict()
    cfg["run"] = {**cfg["run"], "workdir": str(Path(run.workdir).resolve())}
    if Path(run.dataset_path).exists():
        cfg["data"] = {**cfg["data"], "dataset": str(Path(run.dataset_path).resolve())}
    return cfg
