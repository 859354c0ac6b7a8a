"""Labelling throughput against the bare generator, measured side by side in one run.

For each of N demo queries (interleaved, so both sides see the same machine load, and each side
goes first on every other query, so neither always runs on what the other just warmed):

- bare: the same first prompts the labeller sends (built with `ltrr.generation.build_prompt`)
  go straight to the backend's ``generate``;
- labelling: `ltrr.labels.label_queries` on that query with a cold `CachedGenerator` (prompt
  building, the cache, answer parsing and fallbacks, F1 scoring, gains).

Throughput is generator calls per second on each side; the ratio is labelling / bare. The
demo must be built and retrieved first (``ltrr run demo --retrieval-only``).

Usage::

    python benchmarks/labelling.py [--n 8] [--arms bm25,dense,none] [--out benchmarks/results/labelling.json]
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
import pandas as pd

from ltrr.config import load_config
from ltrr.data.io import write_text_atomic
from ltrr.generation import (
    CachedGenerator,
    GenerationCache,
    build_prompt,
    load_template,
    make_generator,
)
from ltrr.labels import label_queries
from ltrr.metrics import parse_metric
from ltrr.pipeline import Run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="demo")
    ap.add_argument("--n", type=int, default=8, help="queries")
    ap.add_argument("--arms", default="bm25,dense,none")
    ap.add_argument("--out", default="benchmarks/results/labelling.json")
    args = ap.parse_args()

    run = Run(load_config(args.config), log=lambda m: None)
    if not run.results_path.exists():
        raise SystemExit(f"no retrieval results at {run.results_path}: run `ltrr run {args.config} --retrieval-only`")
    results = pd.read_parquet(run.results_path)
    queries = run.dataset.queries.sample(n=args.n, random_state=0).reset_index(drop=True)
    arms = args.arms.split(",")
    template = load_template(run.config.generation["template"])
    params = template.default_params(max_new_tokens=run.config.generation["max_new_tokens"])
    backend = make_generator({k: v for k, v in run.config.generation.items()
                              if k in ("backend", "model", "n_threads", "device", "dtype")})
    backend.generate([[{"role": "user", "content": "Warm up."}]], params)  # load the model once

    bare_t = bare_calls = lab_t = lab_calls = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        cache = GenerationCache(Path(tmp) / "bench.sqlite")
        cached = CachedGenerator(backend, cache)
        scorer = parse_metric("f1").bind()
        for i in range(len(queries)):
            q = queries.iloc[[i]]
            prompts = []
            for arm in arms:
                docs = None if arm == "none" else results[(results["qid"] == q["qid"].iloc[0]) & (results["arm"] == arm)].sort_values("rank")["text"].tolist()
                prompts.append(build_prompt(template, q["question"].iloc[0], docs, generator=backend,
                                            max_new_tokens=params.max_new_tokens).messages)

            def bare(q=q, prompts=prompts) -> tuple[float, int]:
                t0 = time.perf_counter()
                backend.generate(prompts, params)
                return time.perf_counter() - t0, len(prompts)

            def labelling(q=q) -> tuple[float, int]:
                before = cached.generator_calls
                t0 = time.perf_counter()
                label_queries(q, results[results["qid"] == q["qid"].iloc[0]], arms=arms, no_retrieval="none",
                              generator=cached, template=template, scorer=scorer, metric_name="f1", params=params)
                return time.perf_counter() - t0, cached.generator_calls - before

            # each side goes first on every other query, so neither always runs second, on a
            # backend whose state (a prompt cache, warm memory) the other side has just left
            timed = {}
            for name, side in ([("bare", bare), ("labelling", labelling)] if i % 2 == 0
                               else [("labelling", labelling), ("bare", bare)]):
                timed[name] = side()
            bare_t += timed["bare"][0]
            bare_calls += timed["bare"][1]
            lab_t += timed["labelling"][0]
            lab_calls += timed["labelling"][1]
        cache.close()
    out = {
        "queries": len(queries), "arms": arms, "generator": backend.identity,
        "bare": {"calls": bare_calls, "seconds": round(bare_t, 2), "calls_per_s": bare_calls / bare_t},
        "labelling": {"calls": lab_calls, "seconds": round(lab_t, 2), "calls_per_s": lab_calls / lab_t},
    }
    out["ratio"] = out["labelling"]["calls_per_s"] / out["bare"]["calls_per_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(out, indent=2))
    print(f"bare backend : {bare_calls:.0f} calls in {bare_t:.1f}s = {out['bare']['calls_per_s']:.3f} calls/s")
    print(f"labelling    : {lab_calls:.0f} calls in {lab_t:.1f}s = {out['labelling']['calls_per_s']:.3f} calls/s")
    print(f"labelling / bare throughput: {out['ratio']:.3f}  -> {args.out}")


if __name__ == "__main__":
    main()
