"""The rows of a generation cache file: their schema, checksum and checks, and read-only access.

A cache file may come from another machine (``ltrr cache merge``) or be damaged on disk, so no
value read from one is trusted: `decode_row` checks every column's type (text for the key, JSON
objects for the decoding parameters and ``extra``, text and numbers where the schema says so)
before the row's checksum is recomputed or its generation served.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ltrr._checks import is_finite, is_int
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.generation.base import Generation

__all__ = ["SCHEMA_VERSION", "check_cache_file", "decode_row", "is_blank_database", "read_cache_rows",
           "KEY_PATTERN"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    identity TEXT NOT NULL,
    params TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_s REAL NOT NULL,
    extra TEXT NOT NULL,
    created_at REAL NOT NULL,
    checksum TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_COLUMNS = (
    "key, backend, identity, params, text, prompt_tokens, completion_tokens, latency_s, extra, "
    "created_at, checksum"
)
_N_COLUMNS = len(_COLUMNS.split(","))
#: A cache key: the lowercase hex sha256 `cache_key` gives.
KEY_PATTERN = re.compile(r"[0-9a-f]{64}")


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _row_checksum(row: Sequence[Any]) -> str:
    # All columns but the checksum itself, in table order; floats round-trip through SQLite's
    # REAL (an IEEE double) exactly, so the JSON text is the same when recomputed.
    return hashlib.sha256(_canonical(list(row)).encode("utf-8")).hexdigest()


def _lenient_text(data: bytes) -> str:
    # SQLite TEXT that is not UTF-8 (a hand-made or damaged file) would make sqlite3 raise on the
    # whole fetch, naming no row; decoded leniently, `decode_row` refuses that one row instead.
    return data.decode("utf-8", "surrogateescape")


def _json_object(value: Any, column: str) -> dict[str, Any]:
    if not isinstance(value, str):
        raise DataError(f"{column} is {type(value).__name__}, not JSON text")
    try:
        obj = json.loads(value)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than Python's stack
        raise DataError(f"{column} is not JSON ({str(exc)[:80]})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{column} is a JSON {type(obj).__name__}, not an object")
    return obj


def decode_row(row: Sequence[Any]) -> tuple[Generation, bool]:
    """Check a stored row's values; return its generation and whether its checksum holds.

    Parameters
    ----------
    row : sequence
        The columns of `_COLUMNS`, in order, as SQLite returned them.

    Returns
    -------
    generation : Generation
        The row's generation, ``cached=True``.
    intact : bool
        Whether the row's checksum matches its content (False for a row edited or damaged
        without changing any value's type).

    Raises
    ------
    DataError
        A value is not of the type ltrr writes: the row was not written by ltrr, or its file is
        damaged. The message says which column (with no file name: the caller adds it).
    """
    if len(row) != _N_COLUMNS:
        raise DataError(f"{len(row)} columns, not {_N_COLUMNS}")
    key, backend, identity, params, text, prompt_tokens, completion_tokens, latency_s, extra, created_at, checksum = row
    # Text, not necessarily `KEY_PATTERN`: a row under any other key is never looked up (a
    # `cache_key` is a sha256), so it is harmless, and callers of `put_many` may choose keys.
    if not isinstance(key, str) or not key:
        raise DataError(f"key {str(key)[:70]!r} is not text")
    for name, value in (("backend", backend), ("identity", identity), ("text", text), ("checksum", checksum)):
        if not isinstance(value, str):
            raise DataError(f"{name} is {type(value).__name__}, not text")
    for name, value in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
        if not is_int(value) or value < 0:
            raise DataError(f"{name} is {str(value)[:40]!r}, not an integer >= 0")
    for name, value in (("latency_s", latency_s), ("created_at", created_at)):
        if not is_finite(value):
            raise DataError(f"{name} is {str(value)[:40]!r}, not a finite number")
    _json_object(params, "params")
    decoded = _json_object(extra, "extra")
    try:
        intact = _row_checksum(row[:-1]) == checksum
    except UnicodeEncodeError:  # a lone surrogate: TEXT that was not UTF-8 (see _lenient_text)
        raise DataError("a text column is not valid UTF-8") from None
    gen = Generation(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     latency_s=float(latency_s), extra=decoded, cached=True)
    return gen, intact


def read_cache_rows(path: str | os.PathLike[str]) -> tuple[list[tuple], int]:
    """The intact rows of the ltrr generation cache at ``path`` (read-only), every one checked.

    Returns
    -------
    rows : list of tuple
        The rows whose checksum holds, verbatim (columns `_COLUMNS`).
    corrupt : int
        How many rows failed their checksum (values of the right types, edited or damaged).

    Raises
    ------
    DataError
        A row holds a value of the wrong type (`decode_row`; the message names the file and the
        row's rowid), or the generations table cannot be read (columns missing, say).
    ConfigError
        ``path`` is not an ltrr generation cache of this schema version.
    """
    good, corrupt = [], 0
    with _read_only(path) as conn:
        try:
            for rowid, *row in conn.execute(f"SELECT rowid, {_COLUMNS} FROM generations"):
                try:
                    _, intact = decode_row(row)
                except DataError as exc:
                    raise DataError(f"{path}: row {rowid} of its generations table: {exc}; the file is "
                                    "damaged or not written by ltrr, and nothing of it was merged") from None
                if intact:
                    good.append(tuple(row))
                else:
                    corrupt += 1
        except sqlite3.DatabaseError as exc:
            raise DataError(f"{path}: cannot read the rows of its generations table ({exc})") from None
    return good, corrupt


def _ro_uri(path: str | os.PathLike[str]) -> str:
    # as_uri percent-encodes what a URI would read otherwise: '#' (a fragment), '?', '%'.
    return Path(path).resolve().as_uri() + "?mode=ro"


@contextlib.contextmanager
def _read_only(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the ltrr generation cache at ``path``, its schema checked.

    Nothing is written to the file, so a file that is not a cache (or of another schema
    version) is refused untouched.

    Raises
    ------
    ConfigError
        ``path`` is not an SQLite file, not an ltrr generation cache, or of another schema version.
    """
    src = Path(path)
    try:
        conn = sqlite3.connect(_ro_uri(src), uri=True)
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{src} is not an ltrr generation cache ({exc})") from None
    conn.text_factory = _lenient_text
    try:
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"generations", "meta"} <= tables:
                raise ConfigError(f"{src} is an SQLite file but not an ltrr generation cache")
            version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{src} is not an ltrr generation cache ({exc})") from None
        if version is None or version[0] != str(SCHEMA_VERSION):
            raise ConfigError(f"{src}: generation cache schema version {version and str(version[0])[:20]!r}, "
                              f"this ltrr reads {SCHEMA_VERSION}")
        yield conn
    finally:
        conn.close()


def is_blank_database(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an SQLite file with no table at all (read-only): what a process killed
    between creating its cache file and writing the cache's schema leaves. It holds no row."""
    try:
        conn = sqlite3.connect(_ro_uri(path), uri=True)
    except sqlite3.DatabaseError:
        return False
    try:
        return conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


def check_cache_file(path: str | os.PathLike[str]) -> None:
    """Raise `ConfigError` unless ``path`` is an ltrr generation cache this ltrr reads (read-only)."""
    if not Path(path).is_file():
        raise NotBuiltError(f"no generation cache at {path}")
    with _read_only(path):
        pass
