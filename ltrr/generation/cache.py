"""A persistent cache of LLM calls in SQLite (WAL mode), and a generator wrapper that uses it.

The key of a call is the sha256 of a canonical JSON of (backend, model identity, decoding
parameters, full prompt or chat messages), so changing any of them misses. Each row stores the
text, token counts, latency, creation time and a checksum of the row's content, which
`GenerationCache.check` recomputes to find rows damaged on disk or edited by hand.

Several processes may write to one cache file at once: every connection sets a busy timeout and
writes in short ``BEGIN IMMEDIATE`` transactions. `CachedGenerator` commits after each batch it
sends to the backend, and WAL mode keeps committed rows through a SIGKILL of the writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ltrr._atomic import atomic_path
from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.generation.base import DecodingParams, Generation, Generator, GeneratorWrapper
from ltrr.generation.cache_rows import (
    _COLUMNS,
    _SCHEMA,
    SCHEMA_VERSION,
    _canonical,
    _lenient_text,
    _row_checksum,
    check_cache_file,
    decode_row,
    is_blank_database,
    read_cache_rows,
)

__all__ = ["GenerationCache", "CachedGenerator", "cache_key", "check_cache_file", "is_blank_database", "stats",
           "SCORE_PARAMS", "OTHER_CONTEXT", "held_room"]

# The decoding parameters of a scoring (teacher-forcing) call: no token is generated.
SCORE_PARAMS = DecodingParams(max_new_tokens=0)


# Why a cached answer is not served: the context it was made in cut its prompt otherwise
# (`Generator.answer_holds`); the run that may generate makes it again.
OTHER_CONTEXT = ("cached in another context (this generator's context, llama_cpp n_ctx, cuts the "
                 "prompt otherwise than the one it was made in)")


def held_room(params: DecodingParams, generation: Generation) -> int:
    """The tokens a cached call kept free beside its prompt: ``max_new_tokens`` for a
    generation, the continuation's tokens for a likelihood score (keyed with `SCORE_PARAMS`)."""
    return generation.completion_tokens if params == SCORE_PARAMS else params.max_new_tokens


# SQLite's default limit on host parameters is 999 in old builds; stay well under it.
_LOOKUP_CHUNK = 500


def cache_key(
    backend: str,
    identity: str,
    params: DecodingParams,
    prompt: str | list[dict[str, str]],
) -> str:
    """The cache key of one call: sha256 of the canonical JSON of everything that shapes it."""
    payload = {
        "v": SCHEMA_VERSION,
        "backend": backend,
        "identity": identity,
        "params": params.to_dict(),
        "prompt": prompt,
    }
    return hashlib.sha256(_canonical(payload).encode("utf-8")).hexdigest()


class GenerationCache:
    """SQLite store of generations keyed by `cache_key`.

    Parameters
    ----------
    path : str or Path
        Database file; created (with its folder) when missing.
    timeout : float
        Seconds a writer waits for another process's lock before failing.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from ltrr.generation.base import DecodingParams, Generation
    >>> cache = GenerationCache(pathlib.Path(tempfile.mkdtemp()) / "llm.sqlite")
    >>> key = cache_key("echo", "echo-1", DecodingParams(), "hello")
    >>> cache.put_many([(key, "echo", "echo-1", DecodingParams(), Generation(text="hi"))])
    1
    >>> cache.get_many([key])[key].text
    'hi'
    >>> cache.check()
    {'rows': 1, 'corrupt': 0, 'integrity': 'ok'}
    >>> cache.close()
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 60.0):
        self.path = Path(path)
        self.timeout = timeout
        self.corrupt_reads = 0
        self._lock = threading.RLock()  # re-entered by the writes inside `transaction`
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None

    # A connection must not cross a fork; each process (and each unpickled copy) opens its own.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_conn=None, _pid=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    @property
    def conn(self) -> sqlite3.Connection:
        """This process's WAL-mode connection, opened on first use (and again after a fork)."""
        if self._conn is None or self._pid != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            deadline = time.monotonic() + self.timeout
            pause = 0.01
            while True:
                try:
                    conn, mode = self._open()
                    break
                except sqlite3.OperationalError as exc:
                    # Several processes creating the file at once: switching a new database to
                    # WAL takes an exclusive lock, and SQLite answers "database is locked" at once
                    # (without its busy handler) to the loser; it succeeds once the winner is done.
                    if "locked" not in str(exc) or time.monotonic() >= deadline:
                        raise self._unusable(exc) from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.5)
                except sqlite3.DatabaseError as exc:
                    raise self._unusable(exc) from None
            if str(mode).lower() != "wal":
                raise ConfigError(
                    f"the generation cache {str(self.path)!r} cannot use WAL mode (got {mode!r}); "
                    "put it on a local file system"
                )
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _open(self) -> tuple[sqlite3.Connection, str]:
        conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None, check_same_thread=False)
        conn.text_factory = _lenient_text  # a row of TEXT that is not UTF-8 is one corrupt row
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            # NORMAL is durable against a crash of the process (what SIGKILL is) in WAL mode;
            # only a power loss may lose the last commits, which then simply miss.
            conn.execute("PRAGMA synchronous = NORMAL")
            # one transaction: a process killed while it creates the file leaves a blank database
            # (is_blank_database: no row, skipped by a merge) or a whole cache, never the table
            # of generations without its meta table or schema version (executescript would
            # commit each statement on its own)
            conn.executescript(f"BEGIN IMMEDIATE;\n{_SCHEMA}\n"
                               f"INSERT OR IGNORE INTO meta VALUES ('schema_version', '{int(SCHEMA_VERSION)}');\n"
                               "COMMIT;")
        except BaseException:
            conn.close()
            raise
        return conn, mode

    def _unusable(self, exc: Exception) -> ConfigError:
        return ConfigError(
            f"cannot open the generation cache {str(self.path)!r} ({exc}); delete the "
            "file or point the cache to another path"
        )

    def close(self) -> None:
        """Close this process's connection; the next use of the cache opens a new one.

        A connection inherited across a fork is dropped without being closed: it belongs to the
        parent process.
        """
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def __enter__(self) -> GenerationCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def journal_mode(self) -> str:
        """The file's journal mode as SQLite reports it (``"wal"``: `conn` accepts no other)."""
        return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    def get_many(self, keys: Sequence[str]) -> dict[str, Generation]:
        """Cached generations for those of ``keys`` that are present and intact.

        A row that fails its checksum, or holds a value ltrr does not write (``extra`` that is
        not a JSON object, say), is a miss counted in ``corrupt_reads``; the next put of its key
        replaces it.
        """
        found: dict[str, Generation] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                chunk = unique[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self.conn.execute(
                    f"SELECT {_COLUMNS} FROM generations WHERE key IN ({marks})", chunk
                ).fetchall()
                for row in rows:
                    try:
                        gen, intact = decode_row(row)
                    except DataError:
                        intact = False
                    if not intact:
                        self.corrupt_reads += 1
                        continue
                    found[row[0]] = gen
        return found

    def put_many(self, entries: Sequence[tuple[str, str, str, DecodingParams, Generation]]) -> int:
        """Store ``(key, backend, identity, params, generation)`` entries in one transaction.

        Failed generations (``error`` set) are not stored. Returns the number of rows written.
        """
        rows = []
        now = time.time()
        for key, backend, identity, params, gen in entries:
            if not gen.ok:
                continue
            row = (
                key,
                backend,
                identity,
                _canonical(params.to_dict()),
                gen.text,
                int(gen.prompt_tokens),
                int(gen.completion_tokens),
                float(gen.latency_s),
                _canonical(gen.extra),
                now,
            )
            rows.append((*row, _row_checksum(row)))
        if not rows:
            return 0
        self._insert(rows, "REPLACE")
        return len(rows)

    def _insert(self, rows: Sequence[tuple], on_conflict: str) -> int:
        """Insert full rows in one ``BEGIN IMMEDIATE`` transaction; returns rows changed."""
        with self.transaction() as conn:
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR {on_conflict} INTO generations ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            return conn.total_changes - before

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction around several writes: all are committed, or none.

        The writes of this object inside it (`put_many`, `merge`) join it rather than commit
        on their own, so an error anywhere in the block leaves the file as it was
        (``ltrr cache merge`` of several sources). Other threads wait for it to end.
        """
        with self._lock:
            conn = self.conn
            if conn.in_transaction:  # the enclosing transaction commits or rolls back
                yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite rolls back by itself on some errors (a full disk)
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def __len__(self) -> int:
        with self._lock:
            return int(self.conn.execute("SELECT COUNT(*) FROM generations").fetchone()[0])

    def check(self, *, repair: bool = False) -> dict[str, Any]:
        """Recompute every row's checksum; with ``repair=True`` delete the corrupt rows.

        A row is corrupt when its checksum fails or a value is not of the type ltrr writes
        (`decode_row`): the rows `get_many` would not serve.

        Returns ``{"rows": n, "corrupt": m, "integrity": "ok" | sqlite's report}``, where
        ``integrity`` is SQLite's own ``quick_check`` of the file structure.
        """
        with self._lock:
            conn = self.conn
            integrity = "; ".join(str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall())
            n, bad = 0, []
            for rowid, *row in conn.execute(f"SELECT rowid, {_COLUMNS} FROM generations"):
                n += 1
                try:
                    _, intact = decode_row(row)
                except DataError:
                    intact = False
                if not intact:
                    bad.append(rowid)  # by rowid: the key itself may be what is wrong
            if repair and bad:
                with self.transaction():
                    conn.executemany("DELETE FROM generations WHERE rowid = ?", [(r,) for r in bad])
        return {"rows": n, "corrupt": len(bad), "integrity": integrity}

    def merge(self, source: str | os.PathLike[str]) -> dict[str, int]:
        """Copy into this cache the rows of another cache file that it lacks.

        The scale-out path of labelling: N machines each run ``ltrr label CONFIG --shard i/N``
        into their own cache, and the caches are merged into one, where ``ltrr label CONFIG``
        then finds every generation. Rows are copied verbatim (their checksums stay valid);
        a row whose checksum fails in ``source`` is skipped and counted, never copied; a key
        already here is kept as it is. Every row is read and checked before anything is
        written, and the copy is one transaction (or joins the `transaction` it runs in): all
        or nothing.

        Returns ``{"rows", "added", "present", "corrupt"}`` over the rows of ``source``.

        Raises
        ------
        DataError
            A row of ``source`` holds a value of a type ltrr does not write (``extra`` that is
            not a JSON object, a BLOB, text for a number, ...; see `decode_row`), or its
            generations table lacks a column. Nothing is merged.
        ConfigError
            ``source`` is this cache, or not an ltrr generation cache of this schema version.
        """
        good, corrupt = self.source_rows(source)
        added = self._insert(good, "IGNORE") if good else 0
        return {"rows": len(good) + corrupt, "added": added, "present": len(good) - added, "corrupt": corrupt}

    def source_rows(self, source: str | os.PathLike[str]) -> tuple[list[tuple], int]:
        """The intact rows of the cache file ``source`` that `merge` would copy, and the number
        of corrupt ones; it raises what `merge` raises, and reads nothing of this cache."""
        src = Path(source)
        if src.resolve() == self.path.resolve():
            raise ConfigError(f"cannot merge the generation cache {str(src)!r} into itself")
        if not src.is_file():
            raise NotBuiltError(f"no generation cache at {src}")
        return read_cache_rows(src)

    def extract(self, identities: Sequence[str], dest: str | os.PathLike[str]) -> int:
        """Write the rows of the model ``identities`` into a new cache file ``dest``; returns how many.

        The checkpoint of a long computation for another machine, small enough to commit: an
        interrupted ``ltrr agent eval`` keeps each continuation of its policy under the policy's
        identity, so a fresh clone that merges the file (``ltrr cache merge``) resumes it where it
        stopped. Rows are copied verbatim, their checksums included; ``dest`` appears whole or
        not at all, and is never overwritten.

        Raises
        ------
        ConfigError
            ``dest`` exists, or an identity has no row here (the message lists those it has).
        """
        dest = Path(dest)
        wanted = sorted(set(map(str, identities)))
        if not wanted:
            raise ConfigError("name at least one model identity to extract (see `ltrr cache stats`)")
        if dest.exists():
            raise ConfigError(f"{dest} exists; extract writes a new cache file")
        with self._lock:
            marks = ", ".join("?" * len(wanted))
            rows = self.conn.execute(f"SELECT {_COLUMNS} FROM generations WHERE identity IN ({marks}) ORDER BY key",
                                     wanted).fetchall()
            have = [r[0] for r in self.conn.execute("SELECT DISTINCT identity FROM generations ORDER BY identity")]
        missing = sorted(set(wanted) - {r[2] for r in rows})
        if missing:
            raise ConfigError(f"no generation of model identity {missing} in {self.path}; it holds {have}")
        try:
            self._write_extract(rows, dest)
        except OSError as exc:  # named by the path asked for, not the temporary file beside it
            raise ConfigError(f"cannot write {dest}: {exc.strerror or exc}") from None
        except ConfigError:  # SQLite could not create the temporary file beside it
            raise ConfigError(f"cannot write {dest}: SQLite cannot create a file in {dest.parent}") from None
        return len(rows)

    @staticmethod
    def _write_extract(rows: Sequence[tuple], dest: Path) -> None:
        with atomic_path(dest) as tmp:
            try:
                with GenerationCache(tmp) as out:
                    out._insert(rows, "ABORT")
                    out.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    out.conn.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            finally:  # SQLite's side files of the temporary database, if it failed before DELETE mode
                for side in (Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
                    side.unlink(missing_ok=True)

    def stats(self) -> dict[str, Any]:
        """Rows, size on disk, rows per backend and model identity, corrupt rows."""
        checked = self.check()
        with self._lock:
            groups = self.conn.execute(
                "SELECT backend, identity, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), "
                "MIN(created_at), MAX(created_at) FROM generations GROUP BY backend, identity "
                "ORDER BY backend, identity"
            ).fetchall()
        size = sum(
            p.stat().st_size
            for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
            if p.exists()
        )
        return {
            "path": str(self.path),
            "rows": checked["rows"],
            "corrupt": checked["corrupt"],
            "integrity": checked["integrity"],
            "size_bytes": size,
            "models": [
                {
                    "backend": b,
                    "identity": ident,
                    "rows": n,
                    "prompt_tokens": int(pt or 0),
                    "completion_tokens": int(ct or 0),
                    "first_created": first,
                    "last_created": last,
                }
                for b, ident, n, pt, ct, first, last in groups
            ],
        }


def stats(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Statistics of the cache at ``path`` (for ``ltrr cache stats``).

    Raises
    ------
    NotBuiltError
        When no cache exists at ``path``.
    """
    if not Path(path).is_file():
        raise NotBuiltError(f"no generation cache at {str(path)!r}; it is created by the first run")
    check_cache_file(path)  # a file that is not a cache is refused, not given the cache's tables
    with GenerationCache(path) as cache:
        return cache.stats()


class CachedGenerator(GeneratorWrapper):
    """Wrap a generator with a `GenerationCache`: only cache misses reach the backend.

    Counters: ``hits`` and ``misses`` (per prompt), ``generator_calls`` (prompts actually sent
    to the backend; identical prompts in one batch are sent once). A warm re-run therefore shows
    ``generator_calls == 0``. Failed generations are returned but never cached.

    Parameters
    ----------
    generator : Generator
        The backend.
    cache : GenerationCache or None
        Where generations are kept; None works like ``enabled=False``.
    enabled : bool
        False bypasses the cache entirely (``--no-cache``); counters still count.
    batch_size : int
        Misses are sent to the backend and committed in batches of this size, so an interrupted
        run keeps all but the last batch.
    offline : bool
        Answer from the cache alone: a miss is a failed generation (``error`` names it) and the
        backend is never called (``ltrr label --cache-only``). The backend still gives the key's
        identity and counts prompt tokens.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from ltrr.generation.base import Generation, Generator
    >>> class Upper(Generator):
    ...     backend = "upper"
    ...     identity = "upper-1"
    ...     def generate(self, prompts, params=None):
    ...         return [Generation(text=p.upper()) for p in prompts]
    >>> cache = GenerationCache(pathlib.Path(tempfile.mkdtemp()) / "llm.sqlite")
    >>> gen = CachedGenerator(Upper(), cache)
    >>> [g.text for g in gen.generate(["a", "b"])], gen.generator_calls
    (['A', 'B'], 2)
    >>> [g.cached for g in gen.generate(["a", "b"])], gen.generator_calls, gen.hits
    ([True, True], 2, 2)
    """

    def __init__(
        self,
        generator: Generator,
        cache: GenerationCache | None,
        *,
        enabled: bool = True,
        batch_size: int = 32,
        offline: bool = False,
    ):
        if offline and (not enabled or cache is None):
            raise ConfigError("an offline CachedGenerator answers from its cache: it needs one, enabled")
        self.generator = generator
        self.cache = cache
        self.enabled = enabled
        self.batch_size = batch_size
        self.offline = offline
        self.hits = 0
        self.misses = 0
        self.generator_calls = 0

    @property
    def counters(self) -> dict[str, int]:
        """``hits``, ``misses`` and ``generator_calls`` by name."""
        return {"hits": self.hits, "misses": self.misses, "generator_calls": self.generator_calls}

    def reset_counters(self) -> None:
        """Set ``hits``, ``misses`` and ``generator_calls`` back to 0."""
        self.hits = self.misses = self.generator_calls = 0

    def score(
        self, prompts: Sequence[str | list[dict[str, str]]], continuations: Sequence[str]
    ) -> list[Generation]:
        """The backend's `Generator.score`, through the cache like `generate`.

        A scoring call is keyed on the prompt and the continuation, with ``max_new_tokens = 0``
        as its decoding parameters, so it never collides with a generation of the same prompt.
        """
        prompts, continuations = list(prompts), list(continuations)
        requests = [{"likelihood_of": c, "prompt": p} for p, c in zip(prompts, continuations, strict=True)]
        return self._cached(requests, SCORE_PARAMS, lambda reqs: self.generator.score(
            [r["prompt"] for r in reqs], [r["likelihood_of"] for r in reqs]))

    def generate(
        self, prompts: Sequence[str | list[dict[str, str]]], params: DecodingParams | None = None
    ) -> list[Generation]:
        params = params or DecodingParams()
        return self._cached(list(prompts), params, lambda ps: self.generator.generate(ps, params))

    def _cached(self, prompts: list, params: DecodingParams, call) -> list[Generation]:
        check_int(self.batch_size, "CachedGenerator batch_size", low=1)
        if not self.enabled or self.cache is None:
            self.misses += len(prompts)
            self.generator_calls += len(prompts)
            return call(prompts)
        backend, identity = self.generator.backend, self.generator.identity
        keys = [cache_key(backend, identity, params, p) for p in prompts]
        cached = self.cache.get_many(keys)
        # an answer made in another context (llama.cpp's n_ctx cut its prompt, or would cut it
        # now) is a miss: made again, and it replaces the cached one
        found = {k: g for k, g in cached.items() if self.generator.answer_holds(g, held_room(params, g))}
        out: list[Generation | None] = [None] * len(prompts)
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            if key in found:
                self.hits += 1
                out[i] = found[key]
            else:
                self.misses += 1
                todo.setdefault(key, []).append(i)
        pending = list(todo.items())
        if self.offline:
            for key, idx in pending:
                error = (OTHER_CONTEXT if key in cached else "not in the generation cache") + " (cache only)"
                for j in idx:
                    out[j] = Generation(text="", error=error)
            return out  # type: ignore[return-value]
        for start in range(0, len(pending), self.batch_size):
            batch = pending[start : start + self.batch_size]
            gens = call([prompts[idx[0]] for _, idx in batch])
            if len(gens) != len(batch):
                raise RuntimeError(
                    f"{type(self.generator).__name__}.generate returned {len(gens)} generations "
                    f"for {len(batch)} prompts"
                )
            self.generator_calls += len(batch)
            self.cache.put_many(
                [
                    (key, backend, identity, params, g)
                    for (key, _), g in zip(batch, gens, strict=True)
                ]
            )
            for (_, idx), gen in zip(batch, gens, strict=True):
                out[idx[0]] = gen
                for j in idx[1:]:
                    out[j] = Generation(**{**gen.__dict__, "extra": dict(gen.extra)})
        return out  # type: ignore[return-value]
