"""Answer part of a long labelling run's generation requests on another machine, and merge them back.

A labelling run here is bound by CPU (the relabelled demo: some 36,700 llama.cpp generations at
0.67 a second on this project's 2 cores). A lent machine with more cores can take a share, but it
reaches nothing: no package index, no shared disk, only files carried in and out. So:

``export``
    runs the label stage for the chosen queries with a recorder in place of the LLM. Every
    request whose cache key is not in the cache yet is written, with its key, chat messages and
    decoding parameters, to an xz JSON-lines file, in the reverse of the order the local shards
    will reach them (so that whatever the far side finishes is a contiguous tail). The file's
    header holds the generator's identity and settings, and ``--check K`` requests that the cache
    already answers, with their cached answers.
``run``
    (on the far machine) builds the same generator from the header, with the model file given,
    refuses to start if its identity differs (another file, build or batch grain gives other
    keys), regenerates the check requests first and stops unless every one is identical (text
    and token counts), then answers the rest from ``--workers`` processes of one thread each until
    ``--deadline`` seconds have passed, into one SQLite generation cache (`GenerationCache`).
``ltrr cache merge OUT.sqlite``
    takes them back: rows the local cache lacks are added, existing ones kept.

The check matters: llama.cpp's portable build (``-DGGML_NATIVE=OFF``) runs the same kernels on
any x86-64 machine with AVX2, and the outputs do not depend on the thread count, so the far
machine's answers are expected to be the local ones bit for bit; the check measures that before
any row is kept.

Measured (session 19, the lent H100 machine's 16 CPU cores, gVisor): 12/12 check requests
identical; 1,639 requests answered in 695 s of two calls, 2.4 a second from 16 one-thread
workers, 6.4 s a request each (about half this machine's per-core speed). The model travelled in
eight parts of at most 62.2 MB, one per call, each call copying its part to /tmp, which survives
while the machine stays warm (the carried folder itself is replaced on every call).

    python benchmarks/label_offload.py export demo-qwen --steps test --max-requests 6000 --check 24 --out .xfer/requests.jsonl.xz
    python benchmarks/label_offload.py run .xfer/requests.jsonl.xz --model Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf --out $OUT/answers.sqlite --workers 16 --deadline 480
    ltrr cache merge answers.sqlite
"""

from __future__ import annotations

import argparse
import json
import lzma
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path


def export(args) -> int:
    from relabel import (  # this folder's relabel.py: the same steps and ledgers
        finished,
        step_orders,
    )

    from ltrr._atomic import atomic_path
    from ltrr.config import backend_settings, load_config
    from ltrr.generation.base import Generation
    from ltrr.generation.cache import CachedGenerator, cache_key
    from ltrr.pipeline import Run

    cfg = load_config(args.config)
    run = Run(cfg)
    run.stage_data()
    run.stage_index()
    run.stage_retrieve()
    real = run.make_generator()
    backend, identity = real.generator.backend, real.generator.identity
    cache = real.cache
    seen: dict[str, dict] = {}
    known: list[dict] = []

    class Recorder(CachedGenerator):
        """Looks every request up in the real cache and records the misses; writes nothing."""

        def _cached(self, prompts, params, call):
            keys = [cache_key(backend, identity, params, p) for p in prompts]
            found = cache.get_many(keys)
            for key, p in zip(keys, prompts, strict=True):
                if key in found:
                    if len(known) < args.check:
                        g = found[key]
                        known.append({"key": key, "prompt": p, "params": params.to_dict(),
                                      "answer": {"text": g.text, "prompt_tokens": g.prompt_tokens,
                                                 "completion_tokens": g.completion_tokens}})
                elif key not in seen:
                    seen[key] = {"key": key, "prompt": p, "params": params.to_dict()}
            return [found.get(k) or Generation(text="") for k in keys]

    rec = Recorder(real.generator, cache)
    done = finished(Path(args.ledger_dir), run)
    if args.check:  # the check requests: the first finished queries, answered by the cache
        run.stage_label(only=done[:max(1, args.check // 4)], tolerate_failures=True, generator=rec)
    seen.clear()
    order = step_orders(run)
    qids = [q for step in args.steps.split(",") for q in order[step]]
    if args.tail:
        qids = qids[-args.tail:]
    qids = [q for q in qids if q not in set(done)][::-1]  # the reverse of the local order
    for start in range(0, len(qids), 64):
        run.stage_label(only=qids[start:start + 64], tolerate_failures=True, generator=rec)
        if len(seen) >= args.max_requests:
            break
    requests = list(seen.values())[:args.max_requests]
    gcfg = dict(backend_settings(cfg.generation))
    header = {"config": cfg.name, "backend": backend, "identity": identity, "settings": gcfg,
              "model_file": real.generator.model_path.name, "requests": len(requests), "check": known}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, lzma.open(tmp, "wt", encoding="utf-8", preset=6) as f:
        f.write(json.dumps(header) + "\n")
        for r in requests:
            f.write(json.dumps(r) + "\n")
    print(f"[offload] {len(requests)} requests of {len(qids)} queries (reverse order), {len(known)} checks "
          f"-> {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


def _read(path: str) -> tuple[dict, list[dict]]:
    with lzma.open(path, "rt", encoding="utf-8") as f:
        header = json.loads(f.readline())
        return header, [json.loads(line) for line in f]


def _generator(header: dict, model: str, threads: int = 1):
    from ltrr.generation import make_generator

    settings = {**header["settings"], "model": model, "n_threads": threads}
    gen = make_generator(settings)
    if gen.backend != header["backend"] or gen.identity != header["identity"]:
        raise SystemExit(f"label_offload: this generator is {gen.backend} {gen.identity}, the requests "
                         f"were made for {header['backend']} {header['identity']}")
    return gen


def _worker(path: str, model: str, out: str, index: int, workers: int, stop_at: float) -> int:
    from ltrr.generation.base import DecodingParams
    from ltrr.generation.cache import CachedGenerator, GenerationCache

    try:  # one core each, where the kernel lets a process choose
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[index % len(cores)]})
    except (AttributeError, OSError):
        pass
    header, requests = _read(path)
    gen = CachedGenerator(_generator(header, model), GenerationCache(out, timeout=600))
    n = 0
    for r in requests[index::workers]:
        if time.time() > stop_at:
            break
        gen.generate([r["prompt"]], DecodingParams(**r["params"]))
        n += 1
    return n


def run_requests(args) -> int:
    from ltrr.generation.base import DecodingParams

    header, requests = _read(args.requests)
    gen = _generator(header, args.model, threads=args.workers)  # outputs do not depend on threads
    t0 = time.time()
    same = 0
    for c in header["check"]:
        g = gen.generate([c["prompt"]], DecodingParams(**c["params"]))[0]
        got = {"text": g.text, "prompt_tokens": g.prompt_tokens, "completion_tokens": g.completion_tokens}
        same += got == c["answer"]
        if got != c["answer"]:
            print(f"[offload] check differs: {c['key'][:12]} here {got} cached {c['answer']}", flush=True)
    n_check = len(header["check"])
    print(f"[offload] checks identical: {same}/{n_check} ({time.time() - t0:.1f} s)", flush=True)
    if same != n_check or not n_check:
        print("[offload] not identical to the cached answers: nothing generated", flush=True)
        return 1
    from ltrr.generation.cache import GenerationCache

    GenerationCache(args.out).close()  # the schema, before the workers share the file
    stop_at = t0 + args.deadline
    t1 = time.time()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        counts = pool.starmap(_worker, [(args.requests, args.model, args.out, i, args.workers, stop_at)
                                        for i in range(args.workers)])
    import sqlite3

    con = sqlite3.connect(args.out)
    con.execute("pragma wal_checkpoint(TRUNCATE)")
    con.execute("pragma journal_mode=DELETE")
    rows = con.execute("select count(*) from generations").fetchone()[0]
    con.close()
    dt = time.time() - t1
    print(f"[offload] {sum(counts)} of {len(requests)} requests answered by {args.workers} workers in {dt:.0f} s "
          f"({sum(counts) / dt:.2f}/s); {rows} rows in {args.out}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("config")
    e.add_argument("--steps", default="test")
    e.add_argument("--tail", type=int, default=0, help="only the last N queries of the steps")
    e.add_argument("--max-requests", type=int, default=6000)
    e.add_argument("--check", type=int, default=24)
    e.add_argument("--out", required=True)
    e.add_argument("--ledger-dir", default="data/checkpoints", help="relabel.py's ledgers of finished queries")
    r = sub.add_parser("run")
    r.add_argument("requests")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--workers", type=int, default=os.cpu_count())
    r.add_argument("--deadline", type=float, default=480.0, help="seconds after the start to stop taking requests")
    args = ap.parse_args(argv)
    from ltrr._errors import LtrrError

    try:
        return export(args) if args.cmd == "export" else run_requests(args)
    except (LtrrError, OSError, lzma.LZMAError, json.JSONDecodeError, KeyError, TypeError) as exc:
        # one line, nothing half-written (the request file and the cache rows are written atomically)
        print(f"label_offload: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
