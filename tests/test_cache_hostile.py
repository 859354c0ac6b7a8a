"""Generation cache files that are damaged or hostile: what each kind of bad row or file gets.

- ``GenerationCache.merge`` (and ``ltrr cache merge``) of a source with a row whose values are
  not of the types ltrr writes (``extra`` that is not JSON, a BLOB, a key that is not text,
  text in a token count, TEXT that is not UTF-8), even under a correct checksum, or whose
  generations table lacks a column: one `DataError` naming the file and the row, nothing merged.
- A row that fails only its checksum is still skipped and counted as corrupt (as before).
- Such a row already in a cache: `get_many` serves it as a miss counted in ``corrupt_reads``
  (never a crash), `check` counts it corrupt and ``check(repair=True)`` deletes it.
- ``ltrr cache merge`` of several sources, one of them bad: one error line, exit code 2, and the
  destination unchanged (no row of the good sources either); a source that fails while the
  rows are being written rolls back every source's rows.
- Cache files whose names hold URI characters (``#``, ``%``, ``?``) open as any other.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3

import pytest

from ltrr._errors import DataError
from ltrr.generation import (
    CachedGenerator,
    DecodingParams,
    Generation,
    GenerationCache,
    Generator,
    cache_key,
)
from ltrr.generation.cache import check_cache_file, is_blank_database
from ltrr.generation.prebuilt import write_prebuilt


class Echo(Generator):
    backend = "echo"
    identity = "echo-1"

    def generate(self, prompts, params=None):
        return [Generation(text=f"out:{p}", prompt_tokens=1, completion_tokens=2, latency_s=0.5,
                           extra={"finish_reason": "stop"}) for p in prompts]


def _cache(path, prompts=("a", "b")):
    with GenerationCache(path) as c:
        CachedGenerator(Echo(), c).generate(list(prompts))
    return path


def _checksum(values):
    """A row's checksum as ltrr computes it: whoever crafts a row can compute it too."""
    text = json.dumps(list(values), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _good_values(prompt="p"):
    key = cache_key("echo", "echo-1", DecodingParams(), prompt)
    return [key, "echo", "echo-1", "{}", f"out:{prompt}", 1, 2, 0.5, "{}", 1.0]


def _add_raw(path, values, *, checksum=None):
    """Insert a row as a hostile writer would, its checksum correct unless given (a row holding
    a BLOB has none: JSON has no bytes)."""
    if checksum is None:
        try:
            checksum = _checksum(values)
        except TypeError:
            checksum = "0" * 64
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO generations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (*values, checksum))
    conn.close()


def _rows(path):
    conn = sqlite3.connect(path)
    try:
        return sorted(conn.execute("SELECT * FROM generations").fetchall())
    finally:
        conn.close()


def _with(column, value):
    def change(values):
        values[column] = value
        return values

    return change


# what each kind of bad value in a checksum-correct row gets: a DataError whose message says so
BAD_VALUES = {
    "extra not JSON": (_with(8, "not json"), r"extra is not JSON"),
    "extra a JSON list": (_with(8, "[1]"), r"extra is a JSON list, not an object"),
    "params not JSON": (_with(3, "{"), r"params is not JSON"),
    "key a number": (_with(0, 12345), r"key '12345' is not text"),
    "key empty": (_with(0, ""), r"key '' is not text"),
    "text an integer": (_with(4, 12345), r"text is int, not text"),
    "token count text": (_with(5, "notint"), r"prompt_tokens is 'notint', not an integer >= 0"),
    "negative token count": (_with(6, -1), r"completion_tokens is '-1', not an integer >= 0"),
    "latency text": (_with(7, "x"), r"latency_s is 'x', not a finite number"),
    "latency NULL": (_with(7, None), r"latency_s is 'None', not a finite number"),
    "text a BLOB": (_with(4, b"\xff"), r"text is bytes, not text"),
}


def _untyped_source(path, values, **kw):
    """A cache file whose generations table has no column types, so any value goes in."""
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE generations (key, backend, identity, params, text, prompt_tokens, completion_tokens, "
        "latency_s, extra, created_at, checksum); CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL); "
        "INSERT INTO meta VALUES ('schema_version', '1');")
    conn.close()
    _add_raw(path, _good_values("ok"))
    _add_raw(path, values, **kw)
    return path


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_merge_refuses_a_row_of_the_wrong_types_under_a_correct_checksum(tmp_path, kind):
    change, message = BAD_VALUES[kind]
    src = _untyped_source(tmp_path / "src.sqlite", change(_good_values()))
    into = _cache(tmp_path / "into.sqlite")
    before = _rows(into)
    with GenerationCache(into) as cache:
        with pytest.raises(DataError, match=rf"src\.sqlite: row 2 of its generations table: {message}"):
            cache.merge(src)
        assert cache.check() == {"rows": 2, "corrupt": 0, "integrity": "ok"}
    assert _rows(into) == before


def test_merge_refuses_text_that_is_not_utf8(tmp_path):
    """TEXT that is not UTF-8 names its row (sqlite3 would fail the whole fetch, naming none)."""
    src = _untyped_source(tmp_path / "src.sqlite", _good_values())
    conn = sqlite3.connect(src)
    with conn:
        conn.execute("UPDATE generations SET text = CAST(x'ff41' AS TEXT) WHERE text = 'out:p'")
    conn.close()
    with GenerationCache(tmp_path / "into.sqlite") as cache:
        with pytest.raises(DataError, match=r"src\.sqlite: row 2 of its generations table: a text column is not valid UTF-8"):
            cache.merge(src)
        assert len(cache) == 0


def test_merge_refuses_a_generations_table_without_its_columns(tmp_path):
    src = tmp_path / "cols.sqlite"
    conn = sqlite3.connect(src)
    conn.executescript("CREATE TABLE generations (key TEXT); CREATE TABLE meta (name TEXT, value TEXT); "
                       "INSERT INTO meta VALUES ('schema_version', '1');")
    conn.close()
    with GenerationCache(tmp_path / "into.sqlite") as cache:
        with pytest.raises(DataError, match=r"cols\.sqlite: cannot read the rows of its generations table "
                                            r"\(no such column: backend\)"):
            cache.merge(src)
        assert len(cache) == 0


def test_a_row_failing_only_its_checksum_is_still_skipped_and_counted(tmp_path):
    src = _untyped_source(tmp_path / "src.sqlite", _good_values(), checksum="0" * 64)
    with GenerationCache(tmp_path / "into.sqlite") as cache:
        assert cache.merge(src) == {"rows": 2, "added": 1, "present": 0, "corrupt": 1}


@pytest.mark.parametrize("kind", ["extra not JSON", "extra a JSON list", "token count text", "text a BLOB"])
def test_a_stored_row_of_the_wrong_types_is_a_miss_then_repaired(tmp_path, kind):
    """A bad row already in a cache (merged by an older ltrr, or edited) is served as a miss,
    not a crash; the next put of its key replaces it, and `check(repair=True)` deletes it."""
    change, _ = BAD_VALUES[kind]
    path = _cache(tmp_path / "c.sqlite", ["q"])
    poisoned = change(_good_values("p"))
    _add_raw(path, poisoned)
    key = poisoned[0]
    with GenerationCache(path) as cache:
        assert cache.get_many([key]) == {} and cache.corrupt_reads == 1
        assert cache.check() == {"rows": 2, "corrupt": 1, "integrity": "ok"}
        assert cache.check(repair=True)["corrupt"] == 1
        assert cache.check() == {"rows": 1, "corrupt": 0, "integrity": "ok"}
    _add_raw(path, poisoned)
    with GenerationCache(path) as cache:
        gen = CachedGenerator(Echo(), cache)
        assert [g.text for g in gen.generate(["p", "q"])] == ["out:p", "out:q"]
        assert gen.generator_calls == 1 and cache.corrupt_reads == 1  # "p" again, replacing the bad row
        assert cache.check() == {"rows": 2, "corrupt": 0, "integrity": "ok"}


def test_a_stored_row_with_text_that_is_not_utf8_is_a_miss(tmp_path):
    path = _cache(tmp_path / "c.sqlite", ["p"])
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE generations SET text = CAST(x'ff' AS TEXT)")
    conn.close()
    key = cache_key("echo", "echo-1", DecodingParams(), "p")
    with GenerationCache(path) as cache:
        assert cache.get_many([key]) == {} and cache.corrupt_reads == 1
        assert cache.check(repair=True)["corrupt"] == 1 and len(cache) == 0


def _prebuilt(path, prompts):
    params = DecodingParams()
    recs = {}
    for p in prompts:
        key = cache_key("echo", "echo-1", params, p)
        recs[key] = {"key": key, "backend": "echo", "identity": "echo-1", "params": params.to_dict(), "prompt": p,
                     "text": f"out:{p}", "prompt_tokens": 1, "completion_tokens": 2, "extra": {}}
    write_prebuilt(recs, path)
    return recs


@pytest.mark.parametrize("bad", ["poisoned.sqlite", "bad-generations.jsonl.gz", "notgz-generations.jsonl.gz"])
@pytest.mark.parametrize("fresh", [True, False], ids=["new-into", "existing-into"])
def test_cli_merge_of_a_good_and_a_bad_source_writes_nothing(tmp_path, capsys, bad, fresh):
    """`ltrr cache merge good.sqlite BAD --into into.sqlite`: one error line naming BAD, exit code 2,
    and into.sqlite as it was (absent if it was), without the good source's rows."""
    from ltrr.cli import main

    good = _cache(tmp_path / "good.sqlite", ["g1", "g2"])
    if bad == "poisoned.sqlite":
        _untyped_source(tmp_path / bad, _with(8, "not json")(_good_values()))
        message = r"poisoned\.sqlite: row 2 of its generations table: extra is not JSON"
    elif bad == "bad-generations.jsonl.gz":
        recs = _prebuilt(tmp_path / bad, ["x"])
        (rec,) = recs.values()
        rec["params"]["bogus"] = 1  # an unknown decoding parameter
        write_prebuilt(recs, tmp_path / bad)
        message = r"bad-generations\.jsonl\.gz: line 1: unknown decoding parameter 'bogus'"
    else:
        _prebuilt(tmp_path / bad, ["x"])
        (tmp_path / bad).write_bytes(b"hello")
        (tmp_path / "notgz-generations.json").write_text(json.dumps(
            {"sha256": hashlib.sha256(b"hello").hexdigest(), "rows": 1}))
        message = r"notgz-generations\.jsonl\.gz: not a valid gzip file"
    into = tmp_path / "into.sqlite"
    if not fresh:
        _cache(into, ["i"])
    before = _rows(into) if not fresh else None
    capsys.readouterr()
    assert main(["cache", "merge", str(good), str(tmp_path / bad), "--into", str(into)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ltrr: error: ")
    assert re.search(message, err[0]), err[0]
    if fresh:
        assert not into.exists()
    else:
        assert _rows(into) == before


def test_cli_merge_rolls_back_every_source_when_one_fails_while_writing(tmp_path, capsys, monkeypatch):
    """Sources are checked first, then copied in one transaction: should a source fail while it is
    copied (changed since it was checked), the rows of the sources copied before it go too."""
    from ltrr.cli import main
    from ltrr.generation import prebuilt

    good = _cache(tmp_path / "good.sqlite", ["g1", "g2"])
    _prebuilt(tmp_path / "x-generations.jsonl.xz", ["x"])
    into = _cache(tmp_path / "into.sqlite", ["i"])
    before = _rows(into)

    def fail(path, cache):
        raise DataError(f"{path}: changed while it was merged")

    monkeypatch.setattr(prebuilt, "_add", fail)
    assert main(["cache", "merge", str(good), str(tmp_path / "x-generations.jsonl.xz"), "--into", str(into)]) == 2
    assert "changed while it was merged" in capsys.readouterr().err
    assert _rows(into) == before
    monkeypatch.undo()
    assert main(["cache", "merge", str(good), str(tmp_path / "x-generations.jsonl.xz"), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert "2 added" in out and "1 generations added (a prebuilt export" in out and out.splitlines()[-1].endswith("4 rows")


def test_transaction_commits_all_writes_or_none(tmp_path):
    entries = [(cache_key("echo", "echo-1", DecodingParams(), p), "echo", "echo-1", DecodingParams(),
                Generation(text=p)) for p in ("a", "b")]
    with GenerationCache(tmp_path / "c.sqlite") as cache:
        with pytest.raises(RuntimeError, match="stop"), cache.transaction():
            cache.put_many(entries[:1])
            cache.put_many(entries[1:])
            raise RuntimeError("stop")
        assert len(cache) == 0
        with cache.transaction():
            cache.put_many(entries)
        assert len(cache) == 2


@pytest.mark.parametrize("name", ["shard#1.sqlite", "x%41.sqlite", "what?mode=rw.sqlite"])
def test_cache_files_named_with_uri_characters(tmp_path, name):
    """'#' starts a URI fragment and '%' an escape: the read-only URI of a source quotes them, so
    such a file is read as itself (it was refused, or another file was opened)."""
    src = _cache(tmp_path / name, ["a", "b"])
    (tmp_path / "xA.sqlite").write_bytes(b"not this one")
    check_cache_file(src)
    assert not is_blank_database(src)
    with GenerationCache(tmp_path / "into.sqlite") as cache:
        assert cache.merge(src) == {"rows": 2, "added": 2, "present": 0, "corrupt": 0}
    blank = tmp_path / f"blank-{name}"
    conn = sqlite3.connect(blank)
    conn.execute("PRAGMA user_version = 1")  # a real (empty) SQLite file with no table
    conn.close()
    assert is_blank_database(blank)


# a child process that creates a cache and dies (os._exit, as a SIGKILL: no cleanup) when its
# connection starts the statement named in argv[2]
_KILLED_WHILE_CREATING = r"""
import os, sqlite3, sys

real = sqlite3.connect

def connect(*args, **kwargs):
    conn = real(*args, **kwargs)
    conn.set_trace_callback(lambda sql: os._exit(9) if sys.argv[2] in sql else None)
    return conn

sqlite3.connect = connect
from ltrr.generation.cache import GenerationCache
GenerationCache(sys.argv[1]).check()
"""


@pytest.mark.parametrize("dies_at", ["CREATE TABLE IF NOT EXISTS meta", "INSERT OR IGNORE INTO meta", "COMMIT"])
def test_a_process_killed_while_it_creates_a_cache_leaves_a_blank_file(tmp_path, dies_at):
    """The schema is one transaction: a worker killed while creating its shard left the table of
    generations without the meta table (its statements were committed one by one), a file that is
    neither blank (skipped by a merge) nor a cache, so merging the shards refused the run's work."""
    import subprocess
    import sys

    path = tmp_path / "worker-1.sqlite"
    done = subprocess.run([sys.executable, "-c", _KILLED_WHILE_CREATING, str(path), dies_at], timeout=120)
    assert done.returncode == 9 and path.exists()
    assert is_blank_database(path)
    with GenerationCache(path) as again:  # the next process that opens it makes a whole cache
        assert again.check()["rows"] == 0
    check_cache_file(path)
