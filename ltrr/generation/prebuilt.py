"""Prebuilt generation caches: the demo's LLM calls, shipped with the package, checksummed.

Labelling the demo takes 36,671 generations for its 5,732 queries (each query with each arm's
passage and closed book, and the test part again under the replicate prompt), some 17 hours on
2 cores. Like pyserini's prebuilt indexes, ltrr ships the generations of the demo run so that
the main job is fast on a fresh machine; here nothing can be downloaded, so the file lives
inside the package (``ltrr/prebuilt/``).

- Every entry was produced by ltrr's own ``ltrr label`` with the generator of the config that
  made it, and keeps the full chat messages it answered, so anyone can regenerate and compare
  it (`regenerate_sample`; a test does this on a random sample).
- The file's sha256 is recorded beside it and checked before anything is imported; a mismatch
  is an error, never a silent partial import.
- Importing only adds rows that the local cache lacks (same keys as `cache_key`).
- ``[generation] prebuilt = "NAME"`` imports ``NAME-generations.jsonl.xz``, else ``.jsonl.gz``.

Rebuilding the demo's cache (README, "Rebuilding the prebuilt cache"). ``demo`` is ``demo-qwen``
with ``prebuilt = "demo"``, so ``ltrr run demo`` would only import the shipped file again; the
export is made from ``demo-qwen``, which imports none::

    ltrr cache merge data/checkpoints/demo-qwen-generations.sqlite   # or label from nothing: ~17 h
    ltrr label demo-qwen               # every query from the cache: 0 generator calls
    ltrr cache export demo-qwen ltrr/prebuilt/demo-generations.jsonl.xz

``demo-smollm2``'s is made the same way (``ltrr run demo-smollm2``, about an hour with SmolLM2,
then ``ltrr cache export demo-smollm2 ltrr/prebuilt/demo-smollm2-generations.jsonl.gz``).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ltrr._atomic import atomic_path, write_json_atomic
from ltrr._errors import DataError, NotBuiltError
from ltrr.generation.base import DecodingParams, Generation, Generator, GeneratorWrapper
from ltrr.generation.cache import GenerationCache, cache_key

__all__ = ["SUFFIXES", "RecordingGenerator", "write_prebuilt", "read_prebuilt", "import_prebuilt", "prebuilt_path", "regenerate_sample"]


#: The file formats of a prebuilt cache, by suffix: JSON lines, gzip- or xz-compressed. xz
#: (stdlib ``lzma``, preset 9e) is the one for large caches: the prompts repeat the same passages
#: across arms, likelihood passes and replicates further apart than gzip's 32 kB window, so it
#: is 2-3 times smaller (measured on demo-agent's export: 2.38 MB gzip, 1.11 MB xz).
SUFFIXES = (".jsonl.xz", ".jsonl.gz")


def prebuilt_path(name: str) -> Path:
    """Path of the packaged prebuilt cache ``name`` (e.g. ``demo``): its ``.jsonl.xz`` file,
    else its ``.jsonl.gz`` (the path of the latter when neither exists)."""
    folder = importlib.resources.files("ltrr") / "prebuilt"
    paths = [Path(str(folder / f"{name}-generations{suffix}")) for suffix in SUFFIXES]
    return next((p for p in paths if p.is_file()), paths[-1])


def _suffix(path: Path) -> str:
    suffix = next((s for s in SUFFIXES if path.name.endswith(s)), None)
    if suffix is None:
        raise DataError(f"{path}: a prebuilt generation cache is a {' or '.join(SUFFIXES)} file")
    return suffix


def _compress(data: bytes, suffix: str) -> bytes:
    if suffix == ".jsonl.xz":
        import lzma

        return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9 | lzma.PRESET_EXTREME)
    import io

    buf = io.BytesIO()  # GzipFile, not gzip.compress: the header bytes of the files shipped before xz
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(data)
    return buf.getvalue()


def _decompress(data: bytes, suffix: str) -> bytes:
    if suffix == ".jsonl.xz":
        import lzma

        return lzma.decompress(data, format=lzma.FORMAT_XZ)
    return gzip.decompress(data)


class RecordingGenerator(GeneratorWrapper):
    """Serves generations from a cache only and records every (key, prompt, generation).

    Used to export exactly the calls a labelling run made; a prompt missing from the cache is
    an error (the run must have been labelled first).
    """

    def __init__(self, generator: Generator, cache: GenerationCache):
        # token counting (and so passage truncation) must be the real model's, or prompts differ
        self.generator = generator
        self.cache = cache
        self.records: dict[str, dict[str, Any]] = {}

    def generate(self, prompts: Sequence[Any], params: DecodingParams | None = None) -> list[Generation]:
        return self._serve(list(prompts), params or DecodingParams())

    def score(self, prompts: Sequence[Any], continuations: Sequence[str]) -> list[Generation]:
        """Likelihood scores from the cache (keyed as `CachedGenerator.score` keys them)."""
        from ltrr.generation.cache import SCORE_PARAMS

        return self._serve([{"likelihood_of": c, "prompt": p} for p, c in zip(prompts, continuations, strict=True)],
                           SCORE_PARAMS)

    def _serve(self, prompts: list, params: DecodingParams) -> list[Generation]:
        backend, identity = self.backend, self.identity
        keys = [cache_key(backend, identity, params, p) for p in prompts]
        found = self.cache.get_many(keys)
        out = []
        for key, prompt in zip(keys, prompts, strict=True):
            if key not in found:
                raise NotBuiltError("a prompt of this run is not in the generation cache; label the run first (ltrr label)")
            gen = found[key]
            self.records[key] = {
                "key": key, "backend": backend, "identity": identity, "params": params.to_dict(),
                "prompt": prompt, "text": gen.text, "prompt_tokens": gen.prompt_tokens,
                "completion_tokens": gen.completion_tokens, "extra": gen.extra,
            }
            out.append(gen)
        return out


def write_prebuilt(records: dict[str, dict], path: str | Path, *, meta: dict | None = None) -> dict:
    """Write records as deterministic compressed JSONL (``.jsonl.gz`` or ``.jsonl.xz``, by the
    path's suffix) plus a ``.json`` sidecar with its sha256."""
    path = Path(path)
    suffix = _suffix(path)
    text = "".join(json.dumps(records[key], sort_keys=True, ensure_ascii=False) + "\n" for key in sorted(records))
    data = _compress(text.encode(), suffix)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
    side = {"sha256": digest, "rows": len(records), **(meta or {})}
    write_json_atomic(_sidecar(path), side, indent=2, sort_keys=True)
    return side


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(_suffix(path)) + ".json")


def read_prebuilt(path: str | Path) -> list[dict]:
    """Verify the sha256 recorded beside ``path`` and return its records."""
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file() or not _sidecar(path).is_file():
        raise NotBuiltError(f"no prebuilt generation cache at {path} (with its .json checksum)")
    side = json.loads(_sidecar(path).read_text())
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != side.get("sha256"):
        raise DataError(f"{path}: sha256 {digest[:12]}... does not match the recorded {str(side.get('sha256'))[:12]}...; "
                        "the prebuilt cache is damaged: reinstall ltrr or rebuild it (see ltrr.generation.prebuilt)")
    rows = [json.loads(line) for line in _decompress(data, suffix).decode().splitlines() if line.strip()]
    if len(rows) != side.get("rows"):
        raise DataError(f"{path}: {len(rows)} rows, the sidecar says {side.get('rows')}")
    return rows


def import_prebuilt(path: str | Path, cache: GenerationCache) -> int:
    """Add the prebuilt rows that ``cache`` lacks; returns how many were added."""
    rows = read_prebuilt(path)
    present = cache.get_many([r["key"] for r in rows])
    entries = []
    for r in rows:
        if r["key"] in present:
            continue
        p = r["params"]
        params = DecodingParams(**{**p, "stop": tuple(p.get("stop", ()))})
        if cache_key(r["backend"], r["identity"], params, r["prompt"]) != r["key"]:
            raise DataError(f"{path}: entry {r['key'][:12]} does not hash to its key; the file is not an ltrr cache export")
        gen = Generation(text=r["text"], prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
                         extra=r.get("extra") or {})
        entries.append((r["key"], r["backend"], r["identity"], params, gen))
    return cache.put_many(entries) if entries else 0


def regenerate_sample(path: str | Path, generator: Generator, *, n: int = 3, seed: int = 0) -> list[tuple[str, str, str]]:
    """Regenerate ``n`` random entries with ``generator``: (key, shipped, new) each.

    For a generation, shipped and new are texts; for a likelihood score, the token
    log-probability lists.
    """
    import random

    rows = read_prebuilt(path)
    rows = [r for r in rows if r["identity"] == generator.identity]
    if not rows:
        raise DataError(f"{path}: no entry was made by {generator.identity}")
    pick = random.Random(seed).sample(rows, min(n, len(rows)))
    out = []
    for r in pick:
        if is_score_record(r):
            new = generator.score([r["prompt"]["prompt"]], [r["prompt"]["likelihood_of"]])[0]
            out.append((r["key"], r["extra"].get("token_logprobs"), new.extra.get("token_logprobs")))
            continue
        p = r["params"]
        params = DecodingParams(**{**p, "stop": tuple(p.get("stop", ()))})
        gen = generator.generate([r["prompt"]], params)[0]
        out.append((r["key"], r["text"], gen.text))
    return out


def is_score_record(r: dict) -> bool:
    """A likelihood score (`Generator.score`), not a generation."""
    return isinstance(r.get("prompt"), dict) and "likelihood_of" in r["prompt"]
