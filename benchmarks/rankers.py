"""Every registered ranker on the demo labels: fit time, saved size, save/load identity.

Each ranker is trained inside an `LTRRouter` (the run's feature pipeline) on the labelled
queries of a run, saved, reloaded, and its predictions compared bit for bit with the original.
The transformer rankers fine-tune MiniLM, which is slow on a CPU: they train on a seeded subset
(``--text-queries``) with ``max_length=128`` and one epoch; the table says so.

Usage::

    python benchmarks/rankers.py [--config demo] [--text-queries 60] [--out benchmarks/results/rankers.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

from ltrr.config import load_config
from ltrr.data.io import write_text_atomic
from ltrr.pipeline import Run
from ltrr.rankers import rankers
from ltrr.routers import LTRRouter


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="demo")
    ap.add_argument("--text-queries", type=int, default=60)
    ap.add_argument("--only", default="", help="comma-separated ranker names")
    ap.add_argument("--out", default="benchmarks/results/rankers.json")
    args = ap.parse_args()
    run = Run(load_config(args.config), log=lambda m: None)
    labels, raw = run.training_inputs("benchmark")
    texts = None
    rows = []
    names = args.only.split(",") if args.only else rankers.names()
    for name in names:
        text = name.startswith("transformer-")
        sub = raw
        params = {}
        if text:
            texts = texts if texts is not None else run.texts()
            rng = np.random.default_rng(0)
            keep = sorted(rng.choice(raw.qids, size=min(args.text_queries, len(raw.qids)), replace=False))
            sub = raw.subset(keep)
            params = {"max_length": 128, "n_epochs": 1}
        router = LTRRouter(ranker=name, ranker_params=params, random_state=0)
        t0 = time.perf_counter()
        router.fit(sub, labels, texts=texts if text else None)
        fit_s = time.perf_counter() - t0
        before = router.route_scores(sub, texts=texts if text else None)
        with tempfile.TemporaryDirectory() as tmp:
            router.save(Path(tmp) / "m")
            size = _size(Path(tmp) / "m" / "ranker")
            after = LTRRouter.load(Path(tmp) / "m").route_scores(sub, texts=texts if text else None)
        identical = bool(np.array_equal(before["score"].to_numpy(), after["score"].to_numpy()))
        rows.append({"ranker": name, "queries": len(sub.qids), "rows": len(sub), "fit_s": round(fit_s, 2),
                     "model_kib": round(size / 1024, 1), "reload_identical": identical,
                     "note": (("subset" if len(sub.qids) < len(raw.qids) else "all queries")
                              + ", max_length 128, 1 epoch") if text else ""})
        print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(rows, indent=2))
    from ltrr.eval.report import markdown_table

    md = markdown_table(df.set_index("ranker"), ".2f")
    write_text_atomic(Path(args.out).with_suffix(".md"), md + "\n")
    print(md)


if __name__ == "__main__":
    main()
