"""`ltrr cache stats|export|extract|merge`: the generation cache on the command line
(`ltrr.generation.cache`, `ltrr.generation.prebuilt`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from ltrr._errors import LtrrError


def add_parser(sub, log: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Register ``ltrr cache`` on the CLI's subparsers."""
    ca = sub.add_parser("cache", help="inspect the generation cache")
    csub = ca.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    cs = csub.add_parser("stats", help="rows, size, per-model counts and corrupt rows")
    cs.add_argument("path", nargs="?", help="cache file (default: data/cache/generations.sqlite)")
    cs.set_defaults(func=lambda a: _stats(a, out))
    ce = csub.add_parser("export", help="export the generations a labelled run used, as a prebuilt cache")
    ce.add_argument("config")
    ce.add_argument("out", help="output .jsonl.xz (smallest) or .jsonl.gz; a .json checksum is written beside it")
    ce.set_defaults(func=lambda a: _export(a, log, out))
    cx = csub.add_parser("extract", help="copy one model's generations (an agent eval's policy, say) into a new "
                                          "cache file, to commit and merge on another machine")
    cx.add_argument("out", help="the new cache file (.sqlite); never overwritten")
    cx.add_argument("--identity", action="append", required=True,
                    help="a model identity as `ltrr cache stats` lists it (repeat for several)")
    cx.add_argument("--from", dest="source", help="cache to read (default: data/cache/generations.sqlite)")
    cx.set_defaults(func=lambda a: _extract(a, out))
    cm = csub.add_parser("merge", help="copy the rows of other caches (e.g. shards labelled on other machines) into this one")
    cm.add_argument("sources", nargs="+", help="cache files (.sqlite) or prebuilt exports (.jsonl.xz, .jsonl.gz)")
    cm.add_argument("--into", help="cache to merge into (default: data/cache/generations.sqlite)")
    cm.set_defaults(func=lambda a: _merge(a, log))


def _stats(args: argparse.Namespace, out) -> int:
    from ltrr.data.io import default_generation_cache
    from ltrr.generation.cache import stats

    path = Path(args.path) if args.path else default_generation_cache()
    if not path.exists():
        raise LtrrError(f"no generation cache at {path}")
    out(json.dumps(stats(path), indent=2, sort_keys=True, default=str))
    return 0


def _extract(args: argparse.Namespace, out) -> int:
    from ltrr.data.io import default_generation_cache
    from ltrr.generation.cache import GenerationCache

    source = Path(args.source) if args.source else default_generation_cache()
    if not source.is_file():
        raise LtrrError(f"no generation cache at {source}")
    with GenerationCache(source) as cache:
        n = cache.extract(args.identity, args.out)
    out(f"extracted {n} generations of {', '.join(args.identity)} to {args.out}; "
        f"on another machine: ltrr cache merge {args.out}")
    return 0


def _merge(args: argparse.Namespace, log) -> int:
    from ltrr.data.io import default_generation_cache
    from ltrr.generation.cache import GenerationCache
    from ltrr.generation.prebuilt import merge_sources

    into = Path(args.into) if args.into else default_generation_cache()
    existed = into.exists()
    try:
        with GenerationCache(into) as cache:
            # every row of every source is checked as it is written, all in one transaction: a
            # bad source is one error line, rolled back, and no half-merged cache
            for r in merge_sources(cache, args.sources):
                if r["prebuilt"]:
                    log(f"{r['source']}: {r['added']} generations added (a prebuilt export, sha256 verified)")
                else:
                    log(f"{r['source']}: {r['rows']} rows, {r['added']} added, {r['present']} already present, "
                        f"{r['corrupt']} corrupt (skipped)")
            log(f"{into}: {len(cache)} rows")
    except BaseException:
        if not existed:  # a cache this merge created holds nothing: it goes, with its journal files
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{into}{suffix}").unlink(missing_ok=True)
        raise
    return 0


def _export(args: argparse.Namespace, log, out) -> int:
    from ltrr.config import load_config
    from ltrr.generation.prebuilt import SUFFIXES
    from ltrr.pipeline import Run

    if not args.out.endswith(SUFFIXES):  # before the run is read: a bad name costs nothing
        raise LtrrError(f"the export's name must end in {' or '.join(SUFFIXES)}, got {args.out!r}")
    run = Run(load_config(args.config), log=log)
    side = run.export_generations(Path(args.out))
    out(f"exported {side['rows']} generations to {args.out} (sha256 {side['sha256'][:16]}...)")
    return 0
