"""Prebuilt generation caches: checksums, import, and regeneration of shipped entries."""

from __future__ import annotations

import gzip
import json
import lzma

import pytest

from ltrr._errors import DataError, NotBuiltError
from ltrr.generation.base import DecodingParams, Generation, Generator
from ltrr.generation.cache import GenerationCache, cache_key
from ltrr.generation.prebuilt import (
    import_prebuilt,
    prebuilt_path,
    read_prebuilt,
    regenerate_sample,
    write_prebuilt,
)


class Upper(Generator):
    backend = "upper"
    identity = "upper-1"

    def generate(self, prompts, params=None):
        return [Generation(text=" ".join(m["content"] for m in p).upper(), prompt_tokens=1, completion_tokens=1)
                for p in prompts]


def _records(n=5):
    params = DecodingParams(max_new_tokens=8)
    out = {}
    for i in range(n):
        prompt = [{"role": "user", "content": f"question {i}"}]
        key = cache_key("upper", "upper-1", params, prompt)
        out[key] = {"key": key, "backend": "upper", "identity": "upper-1", "params": params.to_dict(),
                    "prompt": prompt, "text": f"QUESTION {i}", "prompt_tokens": 1, "completion_tokens": 1, "extra": {}}
    return out


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.xz"])
def test_write_read_import_roundtrip(tmp_path, suffix):
    p = tmp_path / f"x-generations{suffix}"
    side = write_prebuilt(_records(), p, meta={"made_by": "test"})
    again = write_prebuilt(_records(), tmp_path / f"y-generations{suffix}")
    assert side["sha256"] == again["sha256"]  # deterministic bytes
    assert (tmp_path / "x-generations.json").is_file()
    assert (gzip.decompress if suffix == ".jsonl.gz" else lzma.decompress)(p.read_bytes()).count(b"\n") == 5
    assert len(read_prebuilt(p)) == 5
    with GenerationCache(tmp_path / "c.sqlite") as cache:
        assert import_prebuilt(p, cache) == 5
        assert import_prebuilt(p, cache) == 0  # only missing rows are added
        assert cache.check()["corrupt"] == 0
    assert all(old == new for _, old, new in regenerate_sample(p, Upper(), n=3))


@pytest.mark.parametrize("codec", [gzip, lzma], ids=["gz", "xz"])
def test_tampered_file_is_refused(tmp_path, codec):
    p = tmp_path / f"x-generations.jsonl.{'gz' if codec is gzip else 'xz'}"
    write_prebuilt(_records(), p)
    rows = codec.decompress(p.read_bytes()).decode().splitlines()
    rows[0] = rows[0].replace("QUESTION", "ANSWER")
    assert "ANSWER" in rows[0]
    p.write_bytes(codec.compress(("\n".join(rows) + "\n").encode()))
    with pytest.raises(DataError, match=r"sha256 .* does not match"):
        read_prebuilt(p)
    with pytest.raises(NotBuiltError, match=r"no prebuilt generation cache"):
        read_prebuilt(tmp_path / "none-generations.jsonl.gz")


def test_a_prebuilt_name_of_another_format_is_refused(tmp_path, capsys):
    """A prebuilt cache is .jsonl.xz or .jsonl.gz: another name is one error, writing nothing,
    and `ltrr cache export` says so before it reads the run."""
    from ltrr.cli import main

    with pytest.raises(DataError, match=r"\.jsonl\.xz or \.jsonl\.gz file"):
        write_prebuilt(_records(), tmp_path / "x-generations.jsonl")
    assert list(tmp_path.iterdir()) == []
    assert main(["cache", "export", "packaged:demo", str(tmp_path / "x.zip")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must end in .jsonl.xz or .jsonl.gz" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_entry_whose_key_does_not_match_is_refused(tmp_path):
    recs = _records(1)
    (key,) = recs
    recs[key]["prompt"] = [{"role": "user", "content": "something else"}]
    p = tmp_path / "x-generations.jsonl.gz"
    write_prebuilt(recs, p)
    with GenerationCache(tmp_path / "c.sqlite") as cache, pytest.raises(DataError, match=r"does not hash to its key"):
        import_prebuilt(p, cache)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "demo-smollm2", "demo-agent"])
def test_shipped_demo_cache_regenerates_with_its_configs_generator(name):
    """A random sample of each shipped generation cache, regenerated here by the generator of the
    packaged config that made it (Qwen2.5-Coder-0.5B on llama.cpp for `demo`, whose cache is the
    export of `demo-qwen`: the same run but for its name and folder; SmolLM2 on transformers for
    the others), gives the same text."""
    from ltrr.config import backend_settings, load_config
    from ltrr.generation import make_generator

    path = prebuilt_path(name)
    side = json.loads(path.with_name(f"{name}-generations.json").read_text())
    assert side["made_by"] == "ltrr label" and side["rows"] > 1000 and side["config"].startswith("packaged:")
    made_by = load_config(side["config"].removeprefix("packaged:"))
    assert backend_settings(made_by.generation) == backend_settings(load_config(name).generation)
    gen = make_generator(backend_settings(made_by.generation))
    same = regenerate_sample(path, gen, n=4, seed=20261122)
    assert [old for _, old, _ in same] == [new for _, _, new in same]


def test_likelihood_scores_round_trip_and_regenerate(tmp_path):
    from ltrr.generation.cache import SCORE_PARAMS, CachedGenerator
    from ltrr.generation.prebuilt import RecordingGenerator

    class Scorer(Upper):
        def score(self, prompts, continuations):
            return [Generation(text="", completion_tokens=1, extra={"token_logprobs": [-float(len(c))]})
                    for c in continuations]

    with GenerationCache(tmp_path / "c.sqlite") as cache:
        CachedGenerator(Scorer(), cache).score(["p1", "p2"], ["ab", "abc"])
        rec = RecordingGenerator(Scorer(), cache)
        assert [g.extra["token_logprobs"] for g in rec.score(["p1", "p2"], ["ab", "abc"])] == [[-2.0], [-3.0]]
        with pytest.raises(NotBuiltError, match="not in the generation cache"):
            rec.score(["p3"], ["x"])
    p = tmp_path / "s-generations.jsonl.gz"
    write_prebuilt(rec.records, p)
    assert all(r["params"] == SCORE_PARAMS.to_dict() for r in read_prebuilt(p))
    with GenerationCache(tmp_path / "d.sqlite") as fresh:
        assert import_prebuilt(p, fresh) == 2
        gen = CachedGenerator(Scorer(), fresh)
        gen.score(["p1"], ["ab"])
        assert gen.hits == 1 and gen.generator_calls == 0
    assert all(old == new for _, old, new in regenerate_sample(p, Scorer(), n=2))
