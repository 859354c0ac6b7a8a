"""Fill a labelling run's generation cache on another machine, from a list of its requests.

``dump`` (here) runs the label stage over some queries with a recording backend behind the
run's cache: every generation and likelihood request the cache lacks is written, with its
exact chat messages and decoding parameters, to a JSONL file; nothing is generated. ``--check
N`` adds N requests of already-labelled queries with the outputs the cache holds.

``fill`` (on the other machine; needs only llama-cpp-python and ltrr.generation) answers the
requests with the same model file and runtime into a shard cache, ``--shard i/n`` for n
processes, and compares the check requests' outputs with the expected ones, bit for bit. The
shards come back and ``ltrr cache merge`` copies them in: the cache keys are the ones the label
stage computes, so ``ltrr label`` then finds every item.

    python benchmarks/requests.py dump demo-qwen --part test --out .req/test.jsonl --check 24
    python benchmarks/requests.py fill .req/test.jsonl --model Qwen.gguf --shard 0/16 --out shard0.sqlite
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def dump(config: str, part: str, out: Path, check: int, seed_sample: int = 150) -> None:
    from ltrr.config import load_config
    from ltrr.eval.protocol import design_sample, design_test_partition
    from ltrr.generation.base import Generation, Generator
    from ltrr.generation.cache import SCORE_PARAMS, CachedGenerator, GenerationCache, cache_key
    from ltrr.pipeline import Run

    run = Run(load_config(config), log=lambda m: None)
    real = run.make_generator()
    queries = run.dataset.queries
    p = design_test_partition(queries, design_size=run.config.protocol["design_size"], random_state=run.config.seed)
    sample = design_sample(queries, p, n=seed_sample, random_state=run.config.seed)
    qids = {"test": sorted(p.test), "design": sorted(set(p.train) - set(sample))}[part]

    class Recorder(Generator):
        backend, identity = real.generator.backend, real.generator.identity

        def __init__(self):
            self.items: dict[str, dict] = {}

        def __getattr__(self, name):
            return getattr(real.generator, name)

        def generate(self, prompts, params=None):
            for pr in prompts:
                key = cache_key(self.backend, self.identity, params, pr)
                self.items.setdefault(key, {"kind": "gen", "prompt": pr, "params": params.to_dict(), "key": key})
            return [Generation(text="", error="recorded: not in the cache") for _ in prompts]

        def score(self, prompts, continuations):
            for pr, c in zip(prompts, continuations, strict=True):
                key = cache_key(self.backend, self.identity, SCORE_PARAMS, {"likelihood_of": c, "prompt": pr})
                self.items.setdefault(key, {"kind": "score", "prompt": pr, "continuation": c, "key": key})
            return [Generation(text="", error="recorded: not in the cache") for _ in prompts]

    rec = Recorder()
    for start in range(0, len(qids), 16):
        run.stage_label(only=qids[start:start + 16], tolerate_failures=True,
                        generator=CachedGenerator(rec, real.cache, enabled=True))
    items = list(rec.items.values())
    checks = []
    if check:
        probe = Recorder()
        empty = GenerationCache(out.with_suffix(".empty.sqlite"))
        run.stage_label(only=sample[:8], tolerate_failures=True, generator=CachedGenerator(probe, empty, enabled=True))
        found = real.cache.get_many(list(probe.items))
        for key, item in probe.items.items():
            if key in found and len(checks) < check:
                g = found[key]
                checks.append({**item, "expect_text": g.text, "expect_logprobs": g.extra.get("token_logprobs")})
        out.with_suffix(".empty.sqlite").unlink(missing_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for item in items:
            f.write(json.dumps(item) + "\n")
        for item in checks:
            f.write(json.dumps({**item, "check": True}) + "\n")
    print(f"{len(items)} requests ({sum(i['kind'] == 'gen' for i in items)} generations) and {len(checks)} "
          f"checks for {len(qids)} {part} queries -> {out}; identity {rec.identity}")


def fill(requests: Path, model: str, shard: str, out: Path, n_ctx: int, threads: int) -> None:
    import time

    from ltrr.generation.base import DecodingParams
    from ltrr.generation.cache import CachedGenerator, GenerationCache
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    i, n = (int(x) for x in shard.split("/"))
    rows = [json.loads(line) for line in requests.read_text().splitlines() if line.strip()]
    gen = LlamaCppGenerator(model, n_ctx=n_ctx, n_threads=threads)
    cached = CachedGenerator(gen, GenerationCache(out))
    checks = [r for r in rows if r.get("check")]
    mine = [r for r in rows if not r.get("check")][i::n]
    t0, same, differ = time.perf_counter(), 0, []
    for r in (checks if i == 0 else []):
        if r["kind"] == "gen":
            got = gen.generate([r["prompt"]], DecodingParams(**{**r["params"], "stop": tuple(r["params"]["stop"])}))[0]
            ok = got.text == r["expect_text"]
        else:
            got = gen.score([r["prompt"]], [r["continuation"]])[0]
            ok = got.extra.get("token_logprobs") == r["expect_logprobs"]
        same += ok
        if not ok:
            differ.append(r["key"][:12])
    if checks and i == 0:
        print(json.dumps({"checks_identical": same, "checks_differing": differ}), flush=True)
    for r in mine:
        if r["kind"] == "gen":
            cached.generate([r["prompt"]], DecodingParams(**{**r["params"], "stop": tuple(r["params"]["stop"])}))
        else:
            cached.score([r["prompt"]], [r["continuation"]])
    print(json.dumps({"shard": shard, "identity": gen.identity, "requests": len(mine),
                      "generator_calls": cached.generator_calls, "seconds": round(time.perf_counter() - t0, 1),
                      "checks_identical": same, "checks_differing": differ}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("config")
    d.add_argument("--part", choices=["test", "design"], default="test")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--check", type=int, default=0)
    f = sub.add_parser("fill")
    f.add_argument("requests", type=Path)
    f.add_argument("--model", required=True)
    f.add_argument("--shard", default="0/1")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--n-ctx", type=int, default=2048)
    f.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.cmd == "dump":
        dump(a.config, a.part, a.out, a.check)
    else:
        fill(a.requests, a.model, a.shard, a.out, a.n_ctx, a.threads)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
