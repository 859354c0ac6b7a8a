"""Fill a long labelling run's generation cache in the order its analysis needs, resumably.

1. a seeded sample of the design part (`ltrr.eval.protocol.design_sample`, 150 queries), so
   the power analysis can be made on design labels before the rest is labelled;
2. for a dataset grown in rounds (``build_round``), the same seeded sample of each later
   round's design queries (step ``grown``), so the power analysis can be re-checked on the
   grown type mix before the test part is labelled;
3. the rest of the design part;
4. the test part (and its replicate).

Each step goes through ``Run.stage_label(only=...)``: cache only, every item cached as it is
made, so a stopped run resumes where it stopped (on a new machine after
``ltrr cache merge data/checkpoints/<name>.sqlite``). ``--shard i/n`` takes every n-th query of
each step, for n processes sharing the cache (pin each to its cores: the outputs do not depend
on the thread count). ``ltrr label CONFIG`` then labels from the cache with 0 generator calls.

    taskset -c 0 python benchmarks/relabel.py demo-qwen --shard 0/2 &
    taskset -c 1 python benchmarks/relabel.py demo-qwen --shard 1/2 &
"""

from __future__ import annotations

import argparse

from ltrr._log import configure
from ltrr.config import load_config
from ltrr.eval.protocol import design_sample, design_test_partition
from ltrr.pipeline import Run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--steps", default="sample,grown,design,test")
    ap.add_argument("--chunk", type=int, default=8, help="queries per stage_label call")
    a = ap.parse_args()
    configure()
    i, n = (int(x) for x in a.shard.split("/"))
    cfg = load_config(a.config)
    run = Run(cfg)
    run.stage_data()
    run.stage_index()
    run.stage_retrieve()
    queries = run.dataset.queries
    pcfg = cfg.protocol
    part = design_test_partition(queries, design_size=pcfg["design_size"], random_state=cfg.seed)
    sample = design_sample(queries, part, n=a.sample, random_state=cfg.seed)
    grown: list[str] = []
    if "build_round" in queries.columns:
        for r in sorted(queries["build_round"].unique())[1:]:  # later rounds: design_sample of that round
            grown += design_sample(queries[queries["build_round"] == r], part, n=a.sample, random_state=cfg.seed)
    first = set(sample) | set(grown)
    order = {"sample": sample,
             "grown": grown,
             "design": [q for q in queries["qid"].astype(str) if q in set(part.train) and q not in first],
             "test": [q for q in queries["qid"].astype(str) if q in set(part.test)]}
    gen = run.make_generator()
    for step in a.steps.split(","):
        mine = order[step][i::n]
        print(f"[relabel] {step}: {len(mine)} queries (shard {i}/{n})", flush=True)
        for start in range(0, len(mine), a.chunk):
            run.stage_label(only=mine[start:start + a.chunk], tolerate_failures=True, generator=gen)
        print(f"[relabel] {step} done: {gen.generator_calls} generator calls, {gen.hits} cache hits", flush=True)


if __name__ == "__main__":
    main()
