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
- A prebuilt file may come from anyone (``ltrr cache merge``), and whoever wrote it wrote its
  sha256 too, so nothing in it is trusted: it is decompressed as a stream, a line at a time
  (`MAX_LINE_BYTES` at most; the xz decoder within `XZ_MEMLIMIT`), so memory never grows with
  what it expands to; every record is checked (types, decoding parameters, its key recomputed)
  before any row is written, and the rows are then written in one transaction. Anything wrong
  is one `DataError` naming the file and line.
- Importing only adds rows that the local cache lacks (same keys as `cache_key`).
- ``[generation] prebuilt = "NAME"`` imports ``NAME-generations.jsonl.xz``, else ``.jsonl.gz``;
  NAME is a plain file name (no path), so it cannot reach outside ``ltrr/prebuilt/``.

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

import dataclasses
import gzip
import hashlib
import importlib.resources
import io
import itertools
import json
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ltrr._atomic import atomic_path, write_json_atomic
from ltrr._checks import is_finite, is_int
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr._limits import MAX_LINE_BYTES  # a record's longest line; a longer one is refused as read
from ltrr.generation.base import DecodingParams, Generation, Generator, GeneratorWrapper
from ltrr.generation.cache import OTHER_CONTEXT, GenerationCache, cache_key, held_room
from ltrr.generation.cache_rows import KEY_PATTERN

__all__ = ["SUFFIXES", "MAX_LINE_BYTES", "XZ_MEMLIMIT", "RecordingGenerator", "write_prebuilt", "read_prebuilt",
           "check_prebuilt", "import_prebuilt", "is_prebuilt", "merge_sources", "prebuilt_path", "regenerate_sample"]


#: The file formats of a prebuilt cache, by suffix: JSON lines, gzip- or xz-compressed. xz
#: (stdlib ``lzma``, preset 9e) is the one for large caches: the prompts repeat the same passages
#: across arms, likelihood passes and replicates further apart than gzip's 32 kB window, so it
#: is 2-3 times smaller (measured on demo-agent's export: 2.38 MB gzip, 1.11 MB xz).
SUFFIXES = (".jsonl.xz", ".jsonl.gz")
#: The most memory the xz decoder may take: 128 MiB, twice what the largest preset needs (9 and
#: 9e, which ltrr writes: a 64 MiB dictionary). The decoder holds up to a dictionary of output,
#: whose size the file's header chooses (up to 4 GiB): a larger one is refused.
XZ_MEMLIMIT = 128 * 2**20
# Decompressed (and compressed input) bytes handled at a time.
_CHUNK = 2**20
# A packaged cache's name: a plain file name, never a path ('/', '..' or a leading '.').
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Records are looked up and written this many at a time (memory bound of an import).
_BATCH = 500
_RECORD_FIELDS = ("key", "backend", "identity", "params", "prompt", "text", "prompt_tokens", "completion_tokens")
_PARAM_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DecodingParams)}


def prebuilt_path(name: str) -> Path:
    """Path of the packaged prebuilt cache ``name`` (e.g. ``demo``): its ``.jsonl.xz`` file,
    else its ``.jsonl.gz`` (the path of the latter when neither exists).

    Raises
    ------
    ConfigError
        ``name`` is not a plain name (letters, digits, ``_``, ``.``, ``-``; not starting with
        ``.``): a path would reach outside the package's ``prebuilt`` folder.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"[generation] prebuilt names a cache packaged in ltrr/prebuilt/: letters, digits, "
                          f"'_', '.' and '-', starting with a letter or digit, no path; got {str(name)[:80]!r}")
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


def _xz_chunks(data: bytes) -> Iterator[bytes]:
    """The decompressed bytes of the concatenated xz streams in ``data``, `_CHUNK` at a time.

    Read as `lzma.decompress` reads them (a trailing block that starts no stream is ignored)
    but fed `_CHUNK` of input at a time, in time linear in the number of streams, with the
    decoder's memory capped at `XZ_MEMLIMIT`. ``lzma.open`` takes no memory limit.
    """
    import lzma

    view = memoryview(data)
    pos, pending, streams = 0, b"", 0
    dec, fresh = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=XZ_MEMLIMIT), True
    while True:
        if dec.eof:
            streams += 1
            pending = dec.unused_data
            if not pending and pos >= len(view):
                return
            dec, fresh = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=XZ_MEMLIMIT), True
        chunk: bytes | memoryview = b""
        if dec.needs_input:
            if pending:
                chunk, pending = pending, b""
            elif pos < len(view):
                chunk, pos = view[pos : pos + _CHUNK], pos + _CHUNK
            else:
                raise EOFError("compressed data ended before the end-of-stream marker was reached")
        try:
            out = dec.decompress(chunk, max_length=_CHUNK)
        except lzma.LZMAError:
            if fresh and streams:  # trailing bytes after the last stream, as lzma.decompress ignores them
                return
            raise
        fresh = False
        if out:
            yield out


def _gz_chunks(data: bytes) -> Iterator[bytes]:
    """The decompressed bytes of the gzip members in ``data``, `_CHUNK` at a time (gzip's
    window is 32 kB: its decoder needs no memory limit)."""
    with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def _lines(data: bytes, suffix: str, path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of each line of the compressed ``data``, decompressed as a stream.

    Memory holds one line at most (`MAX_LINE_BYTES`) and a chunk of output, however far the file
    expands: a small file of concatenated streams may expand to gigabytes.
    """
    errors: tuple[type[Exception], ...]
    if suffix == ".jsonl.xz":
        import lzma

        chunks, codec, errors = _xz_chunks(data), "xz", (lzma.LZMAError, EOFError)
    else:
        chunks, codec, errors = _gz_chunks(data), "gzip", (OSError, EOFError, zlib.error)  # BadGzipFile: an OSError

    def text(line: bytes, number: int) -> str:
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: line {number} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None

    def too_long(number: int) -> DataError:
        return DataError(f"{path}: line {number} is longer than {MAX_LINE_BYTES} bytes; not a prebuilt cache that ltrr wrote")

    number, head = 0, bytearray()  # head: the start of a line that the next chunk continues
    while True:
        try:
            chunk = next(chunks, None)
        except errors as exc:
            raise DataError(f"{path}: not a valid {codec} file ({exc})") from None
        if chunk is None:
            break
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            number += 1
            if len(head) + end + 1 - start > MAX_LINE_BYTES:
                raise too_long(number)
            if head:
                head += chunk[start : end + 1]
                line, head = bytes(head), bytearray()
            else:
                line = chunk[start : end + 1]
            yield number, text(line, number)
            start = end + 1
        head += chunk[start:]
        if len(head) > MAX_LINE_BYTES:
            raise too_long(number + 1)
    if head:
        yield number + 1, text(bytes(head), number + 1)


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
            gen = found.get(key)
            if gen is None:
                raise NotBuiltError("a prompt of this run is not in the generation cache; label the run first (ltrr label)")
            if not self.generator.answer_holds(gen, held_room(params, gen)):
                raise NotBuiltError(f"a prompt of this run was {OTHER_CONTEXT}; label the run again (ltrr label)")
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


def _verified(path: Path) -> tuple[bytes, str, int]:
    """The compressed bytes of ``path`` once their sha256 is the sidecar's, its suffix, and the
    number of rows the sidecar records.

    The bytes are checked before a byte is decompressed, and are decompressed from memory (their
    size is the file's on disk, bounded by what was written), so the bytes checked are the bytes
    read, whatever happens to the file meanwhile.
    """
    suffix = _suffix(path)
    side_path = _sidecar(path)
    if not path.is_file() or not side_path.is_file():
        raise NotBuiltError(f"no prebuilt generation cache at {path} (with its .json checksum)")
    try:
        side = json.loads(side_path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise DataError(f"{side_path}: not JSON ({str(exc)[:80]}); the sidecar of a prebuilt cache "
                        "records its sha256 and rows") from None
    if not (isinstance(side, dict) and isinstance(side.get("sha256"), str) and is_int(side.get("rows"))
            and side["rows"] >= 0):
        raise DataError(f"{side_path}: the sidecar of a prebuilt cache is a JSON object with its \"sha256\" "
                        "(text) and \"rows\" (an integer >= 0)")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != side["sha256"]:
        raise DataError(f"{path}: sha256 {digest[:12]}... does not match the recorded {side['sha256'][:12]}...; "
                        "the prebuilt cache is damaged: reinstall ltrr or rebuild it (see ltrr.generation.prebuilt)")
    return data, suffix, side["rows"]


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) for each record of the prebuilt file ``path``, read as a stream after its
    sha256 is checked; where is ``"PATH: line N"``. The row count is checked against the
    sidecar's at the end, and reading stops as soon as it is exceeded."""
    data, suffix, expected = _verified(path)
    n = 0
    for number, line in _lines(data, suffix, path):
        if not line.strip():
            continue
        n += 1
        if n > expected:
            raise DataError(f"{path}: more rows than the {expected} its sidecar records")
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise DataError(f"{path}: line {number} is not JSON ({str(exc)[:80]})") from None
        yield f"{path}: line {number}", record
    if n != expected:
        raise DataError(f"{path}: {n} rows, the sidecar says {expected}")


def _params(p: Any, where: str) -> DecodingParams:
    if not isinstance(p, dict):
        raise DataError(f"{where}: params is a JSON {type(p).__name__}, not an object")
    for name, value in p.items():
        if name not in _PARAM_DEFAULTS:
            raise DataError(f"{where}: unknown decoding parameter {name[:40]!r} (known: {', '.join(_PARAM_DEFAULTS)})")
        default = _PARAM_DEFAULTS[name]
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = is_int(value), "an integer"
        elif isinstance(default, float):
            ok, kind = is_finite(value), "a finite number"
        elif isinstance(default, tuple):
            ok, kind = isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of strings"
        else:
            ok, kind = True, ""
        if not ok:
            raise DataError(f"{where}: decoding parameter {name} is {str(value)[:40]!r}, not {kind}")
    return DecodingParams(**{**p, "stop": tuple(p.get("stop", ()))})


def _entry(r: Any, where: str) -> tuple[str, str, str, DecodingParams, Generation]:
    """The cache entry ``(key, backend, identity, params, generation)`` of one record, every
    field checked and the key recomputed; `DataError` (naming ``where``) if anything is wrong."""
    if not isinstance(r, dict):
        raise DataError(f"{where}: a JSON {type(r).__name__}, not an object")
    missing = [f for f in _RECORD_FIELDS if f not in r]
    if missing:
        raise DataError(f"{where}: no {missing[0]!r} field")
    key = r["key"]
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise DataError(f"{where}: key {str(key)[:70]!r} is not a 64-digit lowercase hex sha256")
    for name in ("backend", "identity", "text"):
        if not isinstance(r[name], str):
            raise DataError(f"{where}: {name} is a JSON {type(r[name]).__name__}, not a string")
    for name in ("prompt_tokens", "completion_tokens"):
        if not is_int(r[name]) or r[name] < 0:
            raise DataError(f"{where}: {name} is {str(r[name])[:40]!r}, not an integer >= 0")
    extra = r.get("extra") or {}
    if not isinstance(extra, dict):
        raise DataError(f"{where}: extra is a JSON {type(extra).__name__}, not an object")
    params = _params(r["params"], where)
    try:
        # the text and extra go into the row and its checksum as UTF-8: no lone surrogate
        r["text"].encode("utf-8")
        json.dumps(extra, ensure_ascii=False).encode("utf-8")
        same = cache_key(r["backend"], r["identity"], params, r["prompt"]) == key
    except (UnicodeEncodeError, RecursionError) as exc:
        raise DataError(f"{where}: not storable ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not same:
        raise DataError(f"{where}: entry {key[:12]} does not hash to its key; the file is not an ltrr cache export")
    gen = Generation(text=r["text"], prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
                     extra=extra)
    return key, r["backend"], r["identity"], params, gen


def _entries(path: Path) -> Iterator[tuple[dict, tuple[str, str, str, DecodingParams, Generation]]]:
    for where, record in _records(path):
        yield record, _entry(record, where)


def read_prebuilt(path: str | Path) -> list[dict]:
    """Verify the sha256 recorded beside ``path`` and return its records, every one checked as
    `check_prebuilt` checks them."""
    return [record for record, _ in _entries(Path(path))]


def check_prebuilt(path: str | Path) -> int:
    """Check the prebuilt cache ``path`` whole, keeping none of it; returns its number of rows.

    Its sha256 against the sidecar's, then each record as it is decompressed: a JSON object
    whose key is a sha256 and recomputes from its fields (`cache_key`), text fields that are
    strings, token counts that are integers >= 0, known decoding parameters of their types, and
    as many rows as the sidecar records.

    Raises
    ------
    NotBuiltError
        ``path`` or its ``.json`` sidecar is missing.
    DataError
        Anything else is wrong; the message names the file (and the line).
    """
    return sum(1 for _ in _entries(Path(path)))


def _add(path: Path, cache: GenerationCache) -> int:
    added = 0
    entries = _entries(path)
    while batch := [entry for _, entry in itertools.islice(entries, _BATCH)]:
        present = cache.get_many([e[0] for e in batch])
        added += cache.put_many([e for e in batch if e[0] not in present])
    return added


def import_prebuilt(path: str | Path, cache: GenerationCache) -> int:
    """Add the prebuilt rows that ``cache`` lacks; returns how many were added.

    The file is read once, each record checked as `check_prebuilt` checks it as it is added,
    all in one transaction: a bad file (a bad record, or fewer rows than its sidecar records)
    rolls back and adds nothing. Raises what `check_prebuilt` raises.
    """
    with cache.transaction():  # one pass: a first pass to check would read and decompress it twice
        return _add(Path(path), cache)


def is_prebuilt(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a prebuilt export (by its suffix) rather than a cache file."""
    return str(path).endswith(SUFFIXES)


def merge_sources(cache: GenerationCache, sources: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Merge cache files and prebuilt exports into ``cache``: all of them, or nothing.

    What ``ltrr cache merge`` does. A missing source is refused before anything is read; then
    every source is read once and copied in one transaction, each row checked as it is copied
    (`check_prebuilt`'s checks, `GenerationCache.merge`'s), so a damaged or hostile source is
    one error that names it, and the transaction's rollback leaves ``cache`` as it was.

    Returns
    -------
    list of dict
        One per source, in order: ``{"source", "prebuilt": True, "added"}`` for a prebuilt
        export, else `GenerationCache.merge`'s counts with ``"source"`` and ``"prebuilt": False``.

    Raises
    ------
    NotBuiltError
        A source is missing.
    DataError, ConfigError
        A source is not a cache or an export, or holds a bad row; nothing is written.
    """
    paths = [Path(s) for s in sources]
    for src in paths:
        if not src.is_file():
            raise NotBuiltError(f"no generation cache at {src}")
    reports = []
    with cache.transaction():
        for src in paths:
            if is_prebuilt(src):
                reports.append({"source": str(src), "prebuilt": True, "added": _add(src, cache)})
            else:
                reports.append({"source": str(src), "prebuilt": False, **cache.merge(src)})
    return reports


def regenerate_sample(path: str | Path, generator: Generator, *, n: int = 3,
                      seed: int = 0) -> list[tuple[str, Any, Any]]:
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
