"""Labelling on Dask against one process, from an empty cache, side by side in one run.

Labels the same N demo queries (default 20, the seeded type-stratified sample of
``[data] max_queries``) of a config (default ``demo-signal``) twice, each from its own empty
generation cache and work directory: once in this process, once on a ``LocalCluster`` of W
workers (default 2, one thread each). Reports both wall times, their ratio, the generator calls
of each, and whether the two ``labels.parquet`` files are byte-identical.

    python benchmarks/dask_label.py [--config demo-signal] [--queries 20] [--workers 2]

Needs the demo built and indexed (``ltrr index CONFIG``). Writes
``benchmarks/results/dask_label.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "dask_label.json"


def _config(base: str, root: Path, name: str, n: int) -> Path:
    cfg = root / f"{name}.toml"
    cfg.write_text(f'extends = "{base}"\n[run]\nname = "{name}"\nworkdir = "{root / name}"\n'
                   f'[data]\nmax_queries = {n}\n'
                   f'[generation]\ncache = "{root / name / "cache.sqlite"}"\nprebuilt = ""\n'
                   '[labels]\nreplicate_template = ""\n')
    return cfg


def _label(cfg: Path, scheduler: str | None) -> tuple[float, Path, int]:
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    run = Run(load_config(str(cfg)), log=lambda m: None)
    run.stage_retrieve()
    t0 = time.perf_counter()
    path = run.stage_label(scheduler=scheduler)
    seconds = time.perf_counter() - t0
    import sqlite3

    with sqlite3.connect(run.cache_path) as con:
        rows = con.execute("select count(*) from generations").fetchone()[0]
    return seconds, path, int(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="demo-signal")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="dask-label-") as tmp:
        root = Path(tmp)
        one_s, one_path, one_rows = _label(_config(args.config, root, "one", args.queries), None)
        many_s, many_path, many_rows = _label(_config(args.config, root, "many", args.queries),
                                              f"local:{args.workers}")
        identical = one_path.read_bytes() == many_path.read_bytes()
    doc = {"config": args.config, "queries": args.queries, "workers": args.workers,
           "one_process_s": round(one_s, 1), "dask_s": round(many_s, 1),
           "speedup": round(one_s / many_s, 2), "cache_rows_one": one_rows, "cache_rows_dask": many_rows,
           "labels_byte_identical": identical, "cpus": os.cpu_count()}
    from ltrr.data.io import write_text_atomic

    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(OUT, json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
