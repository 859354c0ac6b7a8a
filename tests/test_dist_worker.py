"""A Dask labelling worker's task (`ltrr.dist.label`), without a cluster: a worker started with
several threads runs one chunk at a time (unit tier)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import ltrr.config
from ltrr.dist import label


def test_a_worker_with_two_threads_labels_one_chunk_at_a_time(tmp_path, monkeypatch):
    """``dask worker --nthreads 2`` runs two tasks at once in one process: both would share the
    process's generator and cache connection (neither thread-safe) and count each other's calls."""
    monkeypatch.setattr(label, "_RUNS", {})
    monkeypatch.setattr(ltrr.config, "validate", lambda cfg, where: cfg)
    state = {"now": 0, "most": 0}

    class Generator:
        generator_calls = 0

    class FakeRun:
        def __init__(self, config, log):
            self.cache_path = tmp_path / "worker.sqlite"
            self.cache_path.touch()

        def make_generator(self):
            return Generator()

        def stage_label(self, *, only, tolerate_failures, generator):
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            time.sleep(0.05)  # long enough that a second thread's chunk starts meanwhile, unless locked
            generator.generator_calls += len(only)
            state["now"] -= 1

    chunks = [[f"q{i}{j}" for j in range(i + 1)] for i in range(4)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda qids: label._label_chunk(FakeRun, {"generation": {}}, str(tmp_path), qids),
                                chunks))
    assert state["most"] == 1
    assert [r["generator_calls"] for r in results] == [1, 2, 3, 4]  # each chunk's own calls
    assert len(label._RUNS) == 1  # one run and generator per config in the process


def test_a_shard_left_without_its_schema_by_a_killed_worker_is_passed_over(tmp_path):
    """A worker killed between creating its shard file and writing the cache's schema leaves an
    SQLite file with no table: the merge skips it (it holds no row) instead of refusing it as
    "not an ltrr generation cache", which failed the whole labelling."""
    import sqlite3

    from ltrr.generation import DecodingParams, Generation
    from ltrr.generation.cache import GenerationCache, is_blank_database

    shards = tmp_path / "shards"
    shards.mkdir()
    sqlite3.connect(shards / "worker-1.sqlite").execute("PRAGMA journal_mode=WAL").close()  # file, no table
    (shards / "worker-2.sqlite").touch()  # not even a header yet
    with GenerationCache(shards / "worker-3.sqlite") as good:
        good.put_many([("k1", "b", "model", DecodingParams(), Generation(text="one"))])
    assert is_blank_database(shards / "worker-1.sqlite") and is_blank_database(shards / "worker-2.sqlite")
    assert not is_blank_database(shards / "worker-3.sqlite")
    (tmp_path / "other.sqlite").write_bytes(b"not a database at all, longer than a header " * 4)
    assert not is_blank_database(tmp_path / "other.sqlite")
    main = GenerationCache(tmp_path / "cache.sqlite")
    label._merge_shards(main, shards)
    assert main.check()["rows"] == 1
