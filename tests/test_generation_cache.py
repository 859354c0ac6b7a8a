"""The SQLite LLM-call cache and the CachedGenerator wrapper."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from ltrr._errors import ConfigError, NotBuiltError
from ltrr.generation import (
    CachedGenerator,
    DecodingParams,
    Generation,
    GenerationCache,
    Generator,
    cache_key,
    stats,
)
from ltrr.generation.cache import OTHER_CONTEXT
from ltrr.generation.prebuilt import RecordingGenerator

ROOT = Path(__file__).resolve().parents[1]


class Scripted(Generator):
    """Deterministic fake backend: ``out:<prompt>``; prompts containing 'fail' fail."""

    backend = "scripted"

    def __init__(self, identity: str = "scripted-v1"):
        self._identity = identity
        self.sent: list = []

    @property
    def identity(self) -> str:
        return self._identity

    def generate(self, prompts: Sequence, params: DecodingParams | None = None) -> list[Generation]:
        out = []
        for p in prompts:
            self.sent.append(p)
            text = p if isinstance(p, str) else p[-1]["content"]
            if "fail" in text:
                out.append(Generation(text="", error="scripted failure"))
            else:
                out.append(
                    Generation(
                        text=f"out:{text}",
                        prompt_tokens=len(text),
                        completion_tokens=3,
                        latency_s=0.25,
                        extra={"finish_reason": "stop"},
                    )
                )
        return out


@pytest.fixture
def cache(tmp_path):
    c = GenerationCache(tmp_path / "cache" / "llm.sqlite")
    yield c
    c.close()


def test_hits_misses_and_generator_calls(cache):
    backend = Scripted()
    gen = CachedGenerator(backend, cache)
    first = gen.generate(["a", "b", "a"])
    assert [g.text for g in first] == ["out:a", "out:b", "out:a"]
    assert not any(g.cached for g in first)
    # Identical prompts within one batch are sent once.
    assert gen.counters == {"hits": 0, "misses": 3, "generator_calls": 2}
    assert backend.sent == ["a", "b"]
    gen.reset_counters()
    warm = gen.generate(["a", "b", "a"])
    assert gen.counters == {"hits": 3, "misses": 0, "generator_calls": 0}
    assert all(g.cached for g in warm)
    assert [(g.text, g.prompt_tokens, g.completion_tokens, g.latency_s) for g in warm] == [
        (g.text, g.prompt_tokens, g.completion_tokens, g.latency_s) for g in first
    ]
    assert warm[0].extra == {"finish_reason": "stop"}
    assert len(backend.sent) == 2 and len(cache) == 2


def test_warm_rerun_in_a_new_process_object_makes_no_calls(tmp_path):
    path = tmp_path / "c.sqlite"
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]
    with GenerationCache(path) as c1:
        CachedGenerator(Scripted(), c1).generate(prompts)
    with GenerationCache(path) as c2:
        backend = Scripted()
        gen = CachedGenerator(backend, c2)
        gen.generate(prompts)
        assert gen.generator_calls == 0 and gen.hits == 10 and backend.sent == []


@pytest.mark.parametrize(
    "change",
    [
        "backend",
        "identity",
        "max_new_tokens",
        "temperature",
        "top_p",
        "stop",
        "json_mode",
        "seed",
        "prompt",
        "role",
    ],
)
def test_key_changes_with_every_part(change):
    base = dict(
        backend="transformers",
        identity="m1",
        params=DecodingParams(),
        prompt=[{"role": "user", "content": "q"}],
    )
    changed = dict(base)
    if change in ("backend", "identity"):
        changed[change] = base[change] + "x"
    elif change == "prompt":
        changed["prompt"] = [{"role": "user", "content": "q2"}]
    elif change == "role":
        changed["prompt"] = [{"role": "system", "content": "q"}]
    else:
        value = {
            "max_new_tokens": 65,
            "temperature": 0.5,
            "top_p": 0.9,
            "stop": ("\n",),
            "json_mode": True,
            "seed": 1,
        }[change]
        changed["params"] = DecodingParams(**{change: value})
    assert cache_key(**base) == cache_key(**dict(base))
    assert cache_key(**base) != cache_key(**changed)


def test_cached_generator_misses_on_identity_and_params(cache):
    CachedGenerator(Scripted("m1"), cache).generate(["q"])
    other_model = CachedGenerator(Scripted("m2"), cache)
    other_model.generate(["q"])
    assert other_model.misses == 1 and other_model.generator_calls == 1
    same = CachedGenerator(Scripted("m1"), cache)
    same.generate(["q"], DecodingParams(max_new_tokens=10))
    same.generate(["q"])
    assert same.counters == {"hits": 1, "misses": 1, "generator_calls": 1}


class Cutting(Scripted):
    """A backend with a context outside its identity, as llama.cpp's ``n_ctx``: a prompt longer
    than ``context - max_new_tokens`` characters is cut to fit, and the cut recorded."""

    def __init__(self, context: int):
        super().__init__("cutting-v1")
        self.context = context

    def generate(self, prompts: Sequence, params: DecodingParams | None = None) -> list[Generation]:
        room = (params or DecodingParams()).max_new_tokens
        out = []
        for p in prompts:
            self.sent.append(p)
            fed = p[: self.context - room]
            extra = {"truncated_tokens": len(p) - len(fed), "context_length": self.context} if fed != p else {}
            out.append(Generation(text=f"out:{fed}", prompt_tokens=len(fed), extra=extra))
        return out

    def answer_holds(self, generation: Generation, room: int) -> bool:
        if generation.extra.get("truncated_tokens"):
            return generation.extra.get("context_length") == self.context
        return generation.prompt_tokens + room <= self.context


def test_an_answer_made_in_another_context_is_made_again(cache):
    # A cut prompt's answer holds only in the context it was cut for; an uncut one only where it
    # still fits. Either way, what a run answers does not depend on what an earlier run cached.
    params = DecodingParams(max_new_tokens=4)
    long, short = "x" * 40, "y" * 20
    small = CachedGenerator(Cutting(context=30), cache)
    assert [g.text for g in small.generate([long, short], params)] == ["out:" + "x" * 26, "out:" + short]
    large = CachedGenerator(Cutting(context=100), cache)
    assert [g.text for g in large.generate([long, short], params)] == ["out:" + long, "out:" + short]
    assert large.counters == {"hits": 1, "misses": 1, "generator_calls": 1}  # the short one held
    again = CachedGenerator(Cutting(context=100), cache)
    again.generate([long, short], params)
    assert again.counters == {"hits": 2, "misses": 0, "generator_calls": 0}
    tiny = CachedGenerator(Cutting(context=20), cache)  # an uncut answer that would be cut now
    assert [g.text for g in tiny.generate([short], params)] == ["out:" + "y" * 16]
    assert tiny.generator_calls == 1 and len(cache) == 2  # the new answers replaced the old
    offline = CachedGenerator(Cutting(context=30), cache, offline=True)  # cut otherwise at 30
    out = offline.generate([long, "new"], params)
    assert out[0].error == OTHER_CONTEXT + " (cache only)" and "n_ctx" in out[0].error
    assert out[1].error == "not in the generation cache (cache only)" and offline.generator_calls == 0
    with pytest.raises(NotBuiltError, match=r"cached in another context .*label the run again"):
        RecordingGenerator(Cutting(context=30), cache).generate([long], params)  # the prebuilt export


def test_failed_generations_are_not_cached(cache):
    backend = Scripted()
    gen = CachedGenerator(backend, cache)
    out = gen.generate(["fail me", "fine"])
    assert not out[0].ok and out[1].ok
    again = gen.generate(["fail me", "fine"])
    assert not again[0].ok and not again[0].cached and again[1].cached
    assert backend.sent == ["fail me", "fine", "fail me"]
    assert len(cache) == 1


def test_disabled_cache_always_calls_backend(cache):
    backend = Scripted()
    gen = CachedGenerator(backend, cache, enabled=False)
    gen.generate(["a"])
    gen.generate(["a"])
    assert gen.counters == {"hits": 0, "misses": 2, "generator_calls": 2}
    assert len(cache) == 0
    no_cache = CachedGenerator(backend, None)
    no_cache.generate(["a"])
    assert no_cache.generator_calls == 1 and no_cache.identity == backend.identity


def test_offline_answers_from_the_cache_alone(cache):
    """``offline=True`` (``ltrr label --cache-only``): hits as usual, a miss is a failed
    generation naming the cache, the backend is never called and nothing is written; an offline
    generator without an enabled cache is a ConfigError."""
    backend = Scripted()
    CachedGenerator(backend, cache).generate(["a", "b"])
    sent = list(backend.sent)
    off = CachedGenerator(backend, cache, offline=True)
    out = off.generate(["a", "new", "b", "new"])
    assert [g.ok for g in out] == [True, False, True, False] and out[0].text == "out:a"
    assert out[1].error == "not in the generation cache (cache only)" and out[3].error == out[1].error
    assert off.counters == {"hits": 2, "misses": 2, "generator_calls": 0}
    assert backend.sent == sent and len(cache) == 2
    assert not off.score(["a"], [" b"])[0].ok and backend.sent == sent
    with pytest.raises(ConfigError, match="offline CachedGenerator answers from its cache"):
        CachedGenerator(backend, cache, enabled=False, offline=True)
    with pytest.raises(ConfigError, match="offline CachedGenerator answers from its cache"):
        CachedGenerator(backend, None, offline=True)


def test_batches_are_committed_separately(cache):
    backend = Scripted()
    calls = []
    original = backend.generate
    backend.generate = lambda prompts, params=None: (
        calls.append(len(prompts)) or original(prompts, params)
    )
    CachedGenerator(backend, cache, batch_size=4).generate([f"p{i}" for i in range(10)])
    assert calls == [4, 4, 2]
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        CachedGenerator(backend, cache, batch_size=0).generate(["x"])


def test_wal_mode(cache):
    CachedGenerator(Scripted(), cache).generate(["a"])
    assert cache.journal_mode == "wal"
    assert Path(f"{cache.path}-wal").exists()
    raw = sqlite3.connect(cache.path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_check_finds_injected_corrupt_row_and_repairs(cache):
    gen = CachedGenerator(Scripted(), cache)
    gen.generate(["a", "b", "c"])
    assert cache.check() == {"rows": 3, "corrupt": 0, "integrity": "ok"}
    raw = sqlite3.connect(cache.path)
    with raw:
        raw.execute("UPDATE generations SET text = 'tampered' WHERE text = 'out:b'")
    raw.close()
    assert cache.check() == {"rows": 3, "corrupt": 1, "integrity": "ok"}
    # A corrupt row is served as a miss and rewritten.
    gen.reset_counters()
    out = gen.generate(["b"])
    assert out[0].text == "out:b" and gen.misses == 1 and cache.corrupt_reads == 1
    assert cache.check()["corrupt"] == 0
    with raw_conn(cache.path) as conn:
        conn.execute("UPDATE generations SET completion_tokens = 99 WHERE text = 'out:a'")
    assert cache.check(repair=True)["corrupt"] == 1
    assert cache.check() == {"rows": 2, "corrupt": 0, "integrity": "ok"}


class raw_conn:
    def __init__(self, path):
        self.conn = sqlite3.connect(path)

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        self.conn.commit()
        self.conn.close()


def test_stats(cache, tmp_path):
    CachedGenerator(Scripted("m1"), cache).generate(["a", "b"])
    CachedGenerator(Scripted("m2"), cache).generate(["a"])
    s = stats(cache.path)
    assert s["rows"] == 3 and s["corrupt"] == 0 and s["size_bytes"] > 0
    assert [(m["identity"], m["rows"]) for m in s["models"]] == [("m1", 2), ("m2", 1)]
    assert s["models"][0]["backend"] == "scripted" and s["models"][0]["completion_tokens"] == 6
    with pytest.raises(NotBuiltError, match="no generation cache"):
        stats(tmp_path / "missing.sqlite")


def test_not_a_database_is_a_config_error(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match="cannot open the generation cache"):
        len(GenerationCache(path))


def _writer(path: str, worker: int, n: int) -> None:
    cache = GenerationCache(path, timeout=60)
    gen = CachedGenerator(Scripted(), cache, batch_size=5)
    for i in range(0, n, 5):
        # Own rows plus rows every worker writes, so writers contend for the same keys too.
        gen.generate([f"w{worker}-{j}" for j in range(i, i + 5)] + [f"shared-{i}"])
    cache.close()


def _opener(path: str, barrier) -> None:
    barrier.wait()
    cache = GenerationCache(path, timeout=30)
    assert cache.journal_mode == "wal"  # opens the connection
    cache.close()


@pytest.mark.slow  # 320 process starts
def test_processes_creating_the_same_cache_at_once_all_open_it(tmp_path):
    """Eight processes open one new cache file at the same instant, 40 times: each opens it. (SQLite
    answers "database is locked" at once, without its busy handler, to a process that loses the
    race to switch a new file to WAL; before the retry, about 1 open in 80 failed so.)"""
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    codes = []
    for r in range(40):
        barrier = ctx.Barrier(8)
        procs = [ctx.Process(target=_opener, args=(str(tmp_path / f"c{r}.sqlite"), barrier)) for _ in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        codes += [p.exitcode for p in procs]
    assert codes == [0] * 320


def test_concurrent_writers_from_several_processes(tmp_path):
    path = str(tmp_path / "shared.sqlite")  # created concurrently by the writers themselves
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 300)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with GenerationCache(path) as cache:
        assert cache.check() == {"rows": 3 * 300 + 60, "corrupt": 0, "integrity": "ok"}
        found = cache.get_many([cache_key("scripted", "scripted-v1", DecodingParams(), "w2-299")])
        assert [g.text for g in found.values()] == ["out:w2-299"]


KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{root!r}, {tests!r}]
    from test_generation_cache import Scripted
    from ltrr.generation import CachedGenerator, GenerationCache
    gen = CachedGenerator(Scripted(), GenerationCache({path!r}), batch_size=10)
    i = 0
    while True:
        gen.generate([f"row-{{i}}-{{j}}" + "x" * 500 for j in range(10)])
        i += 1
        print(i * 10, flush=True)
    """
)


def test_survives_sigkill_of_a_writer(tmp_path):
    path = str(tmp_path / "killed.sqlite")
    script = KILL_SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"), path=path)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    committed = 0
    try:
        while committed < 300:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"writer exited early: {proc.stderr.read()}")
            committed = int(line)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    with GenerationCache(path) as cache:
        result = cache.check()
    assert result["corrupt"] == 0 and result["integrity"] == "ok"
    assert result["rows"] >= committed and result["rows"] % 10 == 0


# ---- merging caches: the scale-out path (shards labelled on other machines) ---------------------
def test_merge_copies_missing_rows_verbatim_and_is_idempotent(tmp_path):
    a, b = GenerationCache(tmp_path / "a.sqlite"), GenerationCache(tmp_path / "b.sqlite")
    CachedGenerator(Scripted(), a).generate(["x", "y"])
    CachedGenerator(Scripted(), b).generate(["y", "z", "w"])
    a.close(), b.close()
    before = sqlite3.connect(tmp_path / "b.sqlite").execute("SELECT * FROM generations ORDER BY key").fetchall()
    with GenerationCache(tmp_path / "a.sqlite") as into:
        assert into.merge(tmp_path / "b.sqlite") == {"rows": 3, "added": 2, "present": 1, "corrupt": 0}
        assert into.merge(tmp_path / "b.sqlite") == {"rows": 3, "added": 0, "present": 3, "corrupt": 0}
        assert into.check() == {"rows": 4, "corrupt": 0, "integrity": "ok"}
        gen = CachedGenerator(Scripted(), into)
        assert [g.text for g in gen.generate(["x", "y", "z", "w"])] == ["out:x", "out:y", "out:z", "out:w"]
        assert gen.generator_calls == 0  # every generation is served from the merged rows
    after = set(sqlite3.connect(tmp_path / "a.sqlite").execute("SELECT * FROM generations").fetchall())
    new_rows = [r for r in before if r[4] in ("out:z", "out:w")]
    assert len(new_rows) == 2 and set(new_rows) <= after  # copied as they were (created_at, checksum)
    assert next(r for r in after if r[4] == "out:y") not in before  # a key already here is kept


def test_merge_skips_corrupt_rows(tmp_path):
    src = GenerationCache(tmp_path / "src.sqlite")
    CachedGenerator(Scripted(), src).generate(["p", "q"])
    src.close()
    with raw_conn(tmp_path / "src.sqlite") as conn:
        conn.execute("UPDATE generations SET text = 'tampered' WHERE text = 'out:q'")
    with GenerationCache(tmp_path / "into.sqlite") as into:
        assert into.merge(tmp_path / "src.sqlite") == {"rows": 2, "added": 1, "present": 0, "corrupt": 1}
        assert into.check() == {"rows": 1, "corrupt": 0, "integrity": "ok"}


def test_merge_bad_sources(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite" * 200)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    with GenerationCache(tmp_path / "into.sqlite") as into:
        with pytest.raises(NotBuiltError, match="no generation cache"):
            into.merge(tmp_path / "missing.sqlite")
        with pytest.raises(ConfigError, match="not an ltrr generation cache"):
            into.merge(junk)
        with pytest.raises(ConfigError, match="not an ltrr generation cache"):
            into.merge(other)
        with pytest.raises(ConfigError, match="into itself"):
            into.merge(tmp_path / "into.sqlite")
        assert len(into) == 0


def test_cli_cache_merge(tmp_path, capsys, monkeypatch):
    from ltrr.cli import main

    monkeypatch.setenv("LTRR_DATA_DIR", str(tmp_path / "data"))
    for name, prompts in (("s0.sqlite", ["a", "b"]), ("s1.sqlite", ["b", "c"])):
        with GenerationCache(tmp_path / name) as c:
            CachedGenerator(Scripted(), c).generate(prompts)
    assert main(["cache", "merge", str(tmp_path / "s0.sqlite"), str(tmp_path / "s1.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "2 added" in out and "1 already present" in out and "3 rows" in out.splitlines()[-1]
    assert len(GenerationCache(tmp_path / "data" / "cache" / "generations.sqlite")) == 3
    # a missing source is refused before anything is written
    target = tmp_path / "fresh.sqlite"
    assert main(["cache", "merge", str(tmp_path / "s0.sqlite"), str(tmp_path / "nope.sqlite"), "--into", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ltrr: error: no generation cache") and not target.exists()


def test_wrappers_take_backend_identity_and_tokens_from_the_wrapped_generator(cache):
    """CachedGenerator and RecordingGenerator share `GeneratorWrapper`: what goes into a cache
    key (backend, identity) and into prompt truncation (context length, token counts) is the
    wrapped generator's, and a recorded key is the key the cache stored."""
    from ltrr.generation.base import GeneratorWrapper
    from ltrr.generation.prebuilt import RecordingGenerator

    inner = Scripted("scripted-v7")
    cached = CachedGenerator(inner, cache)
    recorder = RecordingGenerator(inner, cache)
    for wrapper in (cached, recorder):
        assert isinstance(wrapper, GeneratorWrapper)
        assert (wrapper.backend, wrapper.identity) == ("scripted", "scripted-v7")
        assert wrapper.context_length == inner.context_length == 2048
        assert wrapper.count_tokens("one two three") == inner.count_tokens("one two three")
    params = DecodingParams(max_new_tokens=5)
    cached.generate(["hello"], params)
    assert recorder.generate(["hello"], params)[0].text == "out:hello"
    assert list(recorder.records) == [cache_key("scripted", "scripted-v7", params, "hello")]


def test_extract_one_models_rows_for_another_machine(tmp_path, capsys):
    """`ltrr cache extract`: the rows of the named identities, verbatim, in one new self-contained
    file that a fresh cache merges and then serves from with no generator call; an existing file or
    an identity the cache lacks is one error, and nothing is written."""
    from ltrr.cli import main

    src = tmp_path / "src.sqlite"
    with GenerationCache(src) as c:
        CachedGenerator(Scripted("policy-a"), c).generate(["x", "y"])
        CachedGenerator(Scripted("labels-b"), c).generate(["x", "z"])
    out = tmp_path / "ckpt" / "policy-a.sqlite"
    out.parent.mkdir()
    assert main(["cache", "extract", str(out), "--identity", "policy-a", "--from", str(src)]) == 0
    assert "extracted 2 generations of policy-a" in capsys.readouterr().out
    assert sorted(p.name for p in out.parent.iterdir()) == ["policy-a.sqlite"]  # no -wal, -shm or temporary
    rows = lambda p: sorted(sqlite3.connect(p).execute("SELECT * FROM generations").fetchall())  # noqa: E731
    assert rows(out) == [r for r in rows(src) if r[2] == "policy-a"]
    with GenerationCache(tmp_path / "fresh.sqlite") as fresh:
        assert fresh.merge(out)["added"] == 2
        gen = CachedGenerator(Scripted("policy-a"), fresh)
        assert [g.text for g in gen.generate(["x", "y"])] == ["out:x", "out:y"] and gen.generator_calls == 0
    assert main(["cache", "extract", str(out), "--identity", "policy-a", "--from", str(src)]) == 2
    assert "exists; extract writes a new cache file" in capsys.readouterr().err
    other = tmp_path / "other.sqlite"
    assert main(["cache", "extract", str(other), "--identity", "policy-c", "--from", str(src)]) == 2
    err = capsys.readouterr().err
    assert "no generation of model identity ['policy-c']" in err and "'labels-b', 'policy-a'" in err
    assert not other.exists() and not list(tmp_path.glob(".other*"))


def test_exact_token_counts_is_a_tag_a_wrapper_takes_from_its_model(cache):
    """Whether `count_tokens` is the model's own count is a tag (the context loop's memory records
    ``tokenizer`` or ``estimate`` by it), not the backend's name; a cache answers for its model."""
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator
    from ltrr.generation.openai_backend import OpenAIGenerator
    from ltrr.generation.transformers_backend import TransformersGenerator

    assert LlamaCppGenerator.exact_token_counts and TransformersGenerator.exact_token_counts
    assert not OpenAIGenerator.exact_token_counts and not Scripted.exact_token_counts

    class Tokenized(Scripted):
        exact_token_counts = True

    assert CachedGenerator(Tokenized(), cache).exact_token_counts
    assert not CachedGenerator(Scripted(), cache).exact_token_counts
