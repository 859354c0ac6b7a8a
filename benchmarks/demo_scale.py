"""How long a config's stages take after labelling, at its full scale, before its labels exist.

The generator issue makes `demo` the relabelled, grown demo (`demo-qwen`: 5,732 queries, 7 arms)
and asks that a cold `make demo` stay within 15 minutes once the environment exists, with the
generations shipped as a prebuilt cache. The labels take a day of CPU; the stages after them
(retrieve, features, eval, train, the protocol's headline) can be timed now: this runs them on
the config's own data, pool, features and settings, with a deterministic stand-in reader in
place of the LLM (it answers with the first word of the last passage shown, so arms differ and
every stage has work to do; its labels mean nothing) and its own cache and run folder, so
nothing of the real run is touched. The label stage's time here is the reader's, not the LLM's:
a cold `make demo` reads the shipped generations from the prebuilt cache instead.

    .venv/bin/python benchmarks/demo_scale.py demo-qwen --out benchmarks/results/demo_scale.json

The built dataset and its indexes are shared with the real run (``LTRR_DATA_DIR``); the run
folder, features and cache go under ``--work`` (a temporary folder by default).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

READER = "stand-in-last-passage"


def register_reader() -> None:
    """The stand-in reader (see the module docstring), registered as a generator backend."""
    from ltrr.generation import generators
    from ltrr.generation.base import Generation, Generator

    if READER in generators:
        return

    class LastPassageReader(Generator):
        backend = READER

        def __init__(self, model=None, n_ctx: int = 2048):  # the options of the configs it stands in for
            self.model, self.n_ctx = model, n_ctx

        @property
        def identity(self) -> str:
            return f"{READER}-1"

        def generate(self, prompts, params=None):
            out = []
            for p in prompts:
                text = p if isinstance(p, str) else "\n".join(m["content"] for m in p)
                docs = text.split("Document ")[1:]
                words = docs[-1].split(":", 1)[-1].split() if docs else []
                out.append(Generation(text=words[0] if words else "unknown", prompt_tokens=len(text.split()),
                                      completion_tokens=1))
            return out

    generators.register(READER, LastPassageReader)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a packaged config name or TOML file")
    ap.add_argument("--work", help="run folder, features and cache (default: a temporary folder)")
    ap.add_argument("--stages", default="retrieve,label,features,eval,train,protocol")
    ap.add_argument("--out", help="a JSON file for the timings")
    args = ap.parse_args(argv)
    os.environ.setdefault("LTRR_DATA_DIR", str(Path("data").resolve()))
    work = Path(args.work or tempfile.mkdtemp(prefix="demo-scale-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "scale.toml"
    cfg.write_text(f'extends = "{args.config}"\n\n[run]\nname = "scale-{Path(args.config).stem}"\n'
                   f'workdir = "{work / "run"}"\n\n[generation]\nbackend = "{READER}"\nmodel = ""\n'
                   f'prebuilt = ""\ncache = "{work / "cache.sqlite"}"\n')
    register_reader()
    from ltrr.cli import main as ltrr
    from ltrr.data.io import write_text_atomic

    out = Path(args.out).resolve() if args.out else None  # before the chdir: --out is relative to the caller
    os.chdir(work)  # features/<run>/ is written under the working directory
    rows = []
    for stage in args.stages.split(","):
        start = time.perf_counter()
        code = ltrr([stage, str(cfg)])
        rows.append({"stage": stage, "seconds": round(time.perf_counter() - start, 1), "exit": code})
        print(f"[demo_scale] {stage}: {rows[-1]['seconds']} s (exit {code})", flush=True)
        if code != 0:
            break
    doc = {"config": args.config, "work": str(work), "stages": rows,
           "total_s": round(sum(r["seconds"] for r in rows), 1)}
    print(json.dumps(doc, indent=1))
    if out:
        write_text_atomic(out, json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
