"""Fill a labelling run's generation cache on another machine, from a list of its requests.

A labelling run here is bound by CPU (the relabelled demo: some 36,700 llama.cpp generations at
0.67 a second on this project's 2 cores). A lent machine with more cores can take a share, but it
reaches nothing: no package index, no shared disk, only files carried in and out. So:

``dump`` (here)
    runs the label stage over the chosen steps' queries (`relabel.py`'s steps, less the queries
    its ledgers list) with a recorder behind the run's cache: every generation and likelihood
    request the cache lacks is written, with its cache key, exact chat messages and decoding
    parameters, to an xz JSON-lines file, in the reverse of the order the local shards reach them
    (whatever the far side finishes is then a contiguous tail of the local work). Nothing is
    generated and nothing is written to the cache. The file's header holds the generator's
    backend, identity and settings, and ``--check K`` requests of finished queries with the
    answers the cache holds.
``fill`` (on the other machine; needs llama-cpp-python, gguf and ``ltrr.generation``)
    builds the same generator from the header with the model file given and refuses to start if
    its identity differs (another file, build or batch grain would give other keys); regenerates
    the check requests and stops, generating nothing, unless every one is identical (text and
    token counts; a likelihood's token log-probabilities); then answers the rest from
    ``--workers`` processes of one thread each, until ``--deadline`` seconds have passed, into one
    SQLite generation cache (`GenerationCache`: WAL, every row written as it is made, so a killed
    fill keeps what it made; given a cache of an earlier fill, it skips what that one answered).
``ltrr cache merge FILL.sqlite`` (here)
    takes them back: rows the local cache lacks are added, existing ones kept; ``ltrr label``
    then finds every item.

The check matters: llama.cpp's portable build (``-DGGML_NATIVE=OFF``) runs the same kernels on
any x86-64 machine with AVX2, and the outputs do not depend on the thread count, so the far
machine's answers are expected to be the local ones bit for bit; the check measures that before
any row is made.

Measured on the lent H100 machine's 16 CPU cores (gVisor): session 12, 3,689 test-part requests
with 24/24 checks identical; session 19, 1,639 requests in 695 s of two calls (2.4 a second from
16 one-thread workers, 6.4 s a request each, about half this machine's per-core speed), 12/12
checks identical. The model travels in eight parts of at most 62.2 MB, one a call (a call's
working tree is at most 64 MiB; move the big tracked files out first), each call copying its
part to /tmp, which survives while the machine stays warm (the carried folder itself is
replaced on every call).

    python benchmarks/requests.py dump demo-qwen --part test --max-requests 7000 --check 12 --out .xfer/requests.jsonl.xz
    python benchmarks/requests.py fill .xfer/requests.jsonl.xz --model Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf --out $OUT/fill.sqlite --workers 16 --deadline 540
    ltrr cache merge fill.sqlite
"""

from __future__ import annotations

import argparse
import json
import lzma
import multiprocessing as mp
import os
import sqlite3
import sys
import time
from pathlib import Path


def _entry(key: str, prompt, params, continuation: str | None) -> dict:
    entry = {"key": key, "prompt": prompt, "params": params.to_dict()}
    if continuation is not None:
        entry["likelihood_of"] = continuation
    return entry


def _answer(g) -> dict:
    """What a check compares: the text and token counts, and a likelihood's log-probabilities."""
    return {"text": g.text, "prompt_tokens": g.prompt_tokens, "completion_tokens": g.completion_tokens,
            "token_logprobs": g.extra.get("token_logprobs")}


def dump(args) -> int:
    from relabel import (  # this folder's relabel.py: the same steps and ledgers
        STEPS,
        finished,
        step_orders,
    )

    from ltrr.config import backend_settings, load_config
    from ltrr.data.io import atomic_path
    from ltrr.generation.base import Generation
    from ltrr.generation.cache import CachedGenerator, cache_key
    from ltrr.pipeline import Run

    parts = args.part.split(",")
    unknown = sorted(set(parts) - set(STEPS))
    if unknown:
        raise SystemExit(f"requests: unknown part {', '.join(unknown)}; the parts are {', '.join(STEPS)}")
    cfg = load_config(args.config)
    run = Run(cfg)
    run.stage_data()
    run.stage_index()
    run.stage_retrieve()
    real = run.make_generator()
    backend, identity, cache = real.generator.backend, real.generator.identity, real.cache
    missing: dict[str, dict] = {}
    checks: list[dict] = []

    class Recorder(CachedGenerator):
        """Looks every request up in the run's cache and records the misses; writes nothing."""

        def _cached(self, prompts, params, call):
            keys = [cache_key(backend, identity, params, p) for p in prompts]
            found = cache.get_many(keys)
            for key, p in zip(keys, prompts, strict=True):
                # a likelihood request is {"likelihood_of", "prompt"} (CachedGenerator.score)
                prompt, cont = (p["prompt"], p["likelihood_of"]) if isinstance(p, dict) else (p, None)
                if key in found:
                    if len(checks) < args.check:
                        checks.append({**_entry(key, prompt, params, cont), "answer": _answer(found[key])})
                elif key not in missing:
                    missing[key] = _entry(key, prompt, params, cont)
            return [found.get(k) or Generation(text="", error="recorded: not in the cache") for k in keys]

    rec = Recorder(real.generator, cache)
    done = finished(Path(args.ledger_dir), run)
    if args.check:  # the check requests: the first finished queries, which the cache answers
        run.stage_label(only=done[:max(1, args.check // 4)], tolerate_failures=True, generator=rec)
    missing.clear()
    order, finished_set = step_orders(run), set(done)
    qids = [q for step in parts for q in order[step] if q not in finished_set][::-1]
    for start in range(0, len(qids), 64):
        run.stage_label(only=qids[start:start + 64], tolerate_failures=True, generator=rec)
        if len(missing) >= args.max_requests:
            break
    requests = list(missing.values())[:args.max_requests]
    header = {"config": cfg.name, "backend": backend, "identity": identity,
              "settings": dict(backend_settings(cfg.generation)), "model_file": real.generator.model_path.name,
              "requests": len(requests), "check": checks}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, lzma.open(tmp, "wt", encoding="utf-8", preset=6) as f:
        f.write(json.dumps(header) + "\n")
        f.writelines(json.dumps(r) + "\n" for r in requests)
    print(f"[requests] {len(requests)} requests ({sum('likelihood_of' in r for r in requests)} likelihoods) "
          f"of {len(qids)} {args.part} queries, reverse order; {len(checks)} checks -> {out} "
          f"({out.stat().st_size / 1e6:.1f} MB); identity {identity}")
    return 0


def _read(path: str) -> tuple[dict, list[dict]]:
    with lzma.open(path, "rt", encoding="utf-8") as f:
        header = json.loads(f.readline())
        return header, [json.loads(line) for line in f]


def _generator(header: dict, model: str, threads: int = 1):
    from ltrr.generation import make_generator

    gen = make_generator({**header["settings"], "model": model, "n_threads": threads})
    if gen.backend != header["backend"] or gen.identity != header["identity"]:
        raise SystemExit(f"requests: this generator is {gen.backend} {gen.identity}; the requests were "
                         f"made for {header['backend']} {header['identity']}")
    return gen


def _ask(gen, r: dict):
    from ltrr.generation.base import DecodingParams

    if "likelihood_of" in r:
        return gen.score([r["prompt"]], [r["likelihood_of"]])[0]
    return gen.generate([r["prompt"]], DecodingParams(**r["params"]))[0]


def _worker(path: str, model: str, out: str, index: int, workers: int, stop_at: float) -> int:
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
        _ask(gen, r)
        n += 1
    return n


def fill(args) -> int:
    from ltrr.generation.cache import GenerationCache

    header, requests = _read(args.requests)
    gen = _generator(header, args.model, threads=args.workers)  # outputs do not depend on threads
    t0 = time.time()
    same = 0
    for c in header["check"]:
        got = _answer(_ask(gen, c))
        same += got == c["answer"]
        if got != c["answer"]:
            print(f"[requests] check {c['key'][:12]} differs: here {got}, cached {c['answer']}", flush=True)
    print(f"[requests] checks identical: {same}/{len(header['check'])} ({time.time() - t0:.1f} s)", flush=True)
    if same != len(header["check"]) or not header["check"]:
        print("[requests] not identical to the cached answers (or nothing to check): nothing generated",
              file=sys.stderr)
        return 1
    with GenerationCache(args.out) as cache:  # the schema, before the workers share the file
        before = len(cache)
    t1 = time.time()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        counts = pool.starmap(_worker, [(args.requests, args.model, args.out, i, args.workers, t0 + args.deadline)
                                        for i in range(args.workers)])
    con = sqlite3.connect(args.out)
    con.execute("pragma wal_checkpoint(TRUNCATE)")
    con.execute("pragma journal_mode=DELETE")  # one self-contained file to carry back
    rows = con.execute("select count(*) from generations").fetchone()[0]
    con.close()
    dt = time.time() - t1
    print(f"[requests] {rows - before} new answers ({sum(counts)} of {len(requests)} requests passed, "
          f"{before} answered before) by {args.workers} workers in {dt:.0f} s ({(rows - before) / dt:.2f}/s); "
          f"{rows} rows in {args.out}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="write the requests the cache lacks (here)")
    d.add_argument("config")
    d.add_argument("--part", default="test", help="relabel.py's steps, comma-separated: sample, grown, design, test")
    d.add_argument("--max-requests", type=int, default=7000)
    d.add_argument("--check", type=int, default=12, help="requests the cache answers, to regenerate first")
    d.add_argument("--ledger-dir", default="data/checkpoints", help="relabel.py's ledgers of finished queries")
    d.add_argument("--out", required=True)
    f = sub.add_parser("fill", help="answer the requests (on the other machine)")
    f.add_argument("requests")
    f.add_argument("--model", required=True, help="the model file the requests were made for")
    f.add_argument("--out", required=True, help="a generation cache (SQLite) to fill")
    f.add_argument("--workers", type=int, default=os.cpu_count())
    f.add_argument("--deadline", type=float, default=480.0, help="seconds after the start to stop taking requests")
    args = ap.parse_args(argv)
    from ltrr.errors import LtrrError

    try:
        return dump(args) if args.cmd == "dump" else fill(args)
    except (LtrrError, OSError, lzma.LZMAError, json.JSONDecodeError, KeyError, TypeError) as exc:
        # one line; nothing half-written (the request file is written atomically, cache rows one by one)
        print(f"requests: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
