"""Prebuilt generation caches: checksums, import, and regeneration of shipped entries."""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
from pathlib import Path

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


# ---- hostile prebuilt files: whoever writes one writes its sha256 too ----------------------------
def _hostile(tmp_path, data: bytes, *, suffix=".jsonl.gz", rows=1, side=None):
    """A prebuilt file of raw ``data`` with a sidecar that matches it (or the given sidecar text)."""
    p = tmp_path / f"h-generations{suffix}"
    p.write_bytes(data)
    text = side if side is not None else json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "rows": rows})
    (tmp_path / "h-generations.json").write_text(text)
    return p


def _line(**change):
    (rec,) = _records(1).values()
    return (json.dumps({**rec, **change}) + "\n").encode()


def _gz(text: bytes) -> bytes:
    return gzip.compress(text)


# what each kind of bad prebuilt file gets: one DataError naming the file (and the line)
BAD_FILES = {
    "sidecar not JSON": (lambda: dict(data=_gz(_line()), side="not json"), r"h-generations\.json: not JSON"),
    "sidecar a list": (lambda: dict(data=_gz(_line()), side="[1]"), r"h-generations\.json: the sidecar .* JSON object"),
    "sidecar without rows": (lambda: dict(data=_gz(_line()), side=json.dumps(
        {"sha256": hashlib.sha256(_gz(_line())).hexdigest()})), r"\"rows\" \(an integer >= 0\)"),
    "not gzip": (lambda: dict(data=b"hello"), r"h-generations\.jsonl\.gz: not a valid gzip file"),
    "truncated gzip": (lambda: dict(data=_gz(_line() * 50)[:-30], rows=50), r"h-generations\.jsonl\.gz: not a valid gzip file"),
    "not xz": (lambda: dict(data=b"hello", suffix=".jsonl.xz"), r"h-generations\.jsonl\.xz: not a valid xz file"),
    "truncated xz": (lambda: dict(data=lzma.compress(_line() * 50)[:-30], suffix=".jsonl.xz", rows=50),
                     r"h-generations\.jsonl\.xz: not a valid xz file"),
    "not UTF-8": (lambda: dict(data=_gz(b"\xff\xfe\n")), r"line 1 is not UTF-8 text"),
    "not JSON": (lambda: dict(data=_gz(b"{\n")), r"line 1 is not JSON"),
    "deeply nested JSON": (lambda: dict(data=_gz(b"[" * 200_000 + b"\n")), r"line 1 is not JSON"),
    "a list, not an object": (lambda: dict(data=_gz(b"[1, 2]\n")), r"line 1: a JSON list, not an object"),
    "no key": (lambda: dict(data=_gz(b"{}\n")), r"line 1: no 'key' field"),
    "key not a sha256": (lambda: dict(data=_gz(_line(key="abc"))), r"line 1: key 'abc' is not a 64-digit"),
    "text a list": (lambda: dict(data=_gz(_line(text=["a"]))), r"line 1: text is a JSON list, not a string"),
    "token count text": (lambda: dict(data=_gz(_line(prompt_tokens="1"))), r"line 1: prompt_tokens is '1', not an integer"),
    "token count a bool": (lambda: dict(data=_gz(_line(completion_tokens=True))), r"completion_tokens is 'True'"),
    "extra a list": (lambda: dict(data=_gz(_line(extra=[1]))), r"line 1: extra is a JSON list, not an object"),
    "params a list": (lambda: dict(data=_gz(_line(params=[1]))), r"line 1: params is a JSON list, not an object"),
    "unknown decoding parameter": (lambda: dict(data=_gz(_line(params={"bogus": 1}))),
                                   r"line 1: unknown decoding parameter 'bogus'"),
    "decoding parameter of a wrong type": (lambda: dict(data=_gz(_line(params={"max_new_tokens": "8"}))),
                                           r"line 1: decoding parameter max_new_tokens is '8', not an integer"),
    "stop not strings": (lambda: dict(data=_gz(_line(params={"stop": [1]}))), r"stop is '\[1\]', not a list of strings"),
    "lone surrogate": (lambda: dict(data=_gz(_line(text="\ud800"))), r"line 1: not storable \(UnicodeEncodeError"),
    "key of other content": (lambda: dict(data=_gz(_line(text="x", prompt="other"))), r"line 1: entry .* does not hash"),
    "more rows than the sidecar": (lambda: dict(data=_gz(_line() * 3), rows=1), r"more rows than the 1 its sidecar"),
    "fewer rows than the sidecar": (lambda: dict(data=_gz(_line()), rows=2), r"1 rows, the sidecar says 2"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_bad_prebuilt_file_is_one_data_error_and_imports_nothing(tmp_path, kind):
    make, message = BAD_FILES[kind]
    p = _hostile(tmp_path, **make())
    with pytest.raises(DataError, match=message):
        read_prebuilt(p)
    with GenerationCache(tmp_path / "c.sqlite") as cache:
        with pytest.raises(DataError, match=message):
            import_prebuilt(p, cache)
        assert len(cache) == 0


def test_a_bad_last_row_imports_none_of_the_rows_before_it(tmp_path):
    """Every record is checked before a row is written (the batches are written in one
    transaction): 1,200 good rows then a bad one add nothing."""
    good = b"".join(_line(key=cache_key("upper", "upper-1", DecodingParams(max_new_tokens=8),
                                        [{"role": "user", "content": f"q{i}"}]),
                          prompt=[{"role": "user", "content": f"q{i}"}]) for i in range(1200))
    p = _hostile(tmp_path, _gz(good + _line(text=7)), rows=1201)
    with GenerationCache(tmp_path / "c.sqlite") as cache:
        with pytest.raises(DataError, match=r"line 1201: text is a JSON int"):
            import_prebuilt(p, cache)
        assert len(cache) == 0
    p = _hostile(tmp_path, _gz(good), rows=1200)
    with GenerationCache(tmp_path / "c.sqlite") as cache:
        assert import_prebuilt(p, cache) == 1200 and import_prebuilt(p, cache) == 0


@pytest.mark.parametrize("codec", ["gz", "xz"])
def test_a_line_over_the_cap_is_refused_as_it_is_reached(tmp_path, codec):
    """The reader decompresses a line at a time: a line over MAX_LINE_BYTES is refused when the
    reader reaches it, before the rest of the file is decompressed. Here the rest is a truncated
    stream, which a reader that decompressed the whole file first would stumble on instead."""
    from ltrr.generation.prebuilt import MAX_LINE_BYTES

    assert MAX_LINE_BYTES == 16 * 2**20
    compress = gzip.compress if codec == "gz" else lzma.compress
    body = compress(b"0" * (MAX_LINE_BYTES + 2 * 2**20)) + compress(_line() * 100)[:-40]
    p = _hostile(tmp_path, body, suffix=f".jsonl.{codec}")
    with pytest.raises(DataError, match=rf"h-generations\.jsonl\.{codec}: line 1 is longer than {MAX_LINE_BYTES} bytes"):
        read_prebuilt(p)


def test_an_xz_stream_asking_for_a_dictionary_over_the_memory_limit_is_refused(tmp_path):
    """The xz decoder holds up to a dictionary of output, sized by the file's header: one over
    XZ_MEMLIMIT (here 256 MiB, for 3 bytes of content) is refused before it is decoded."""
    import zlib

    data = lzma.compress(_line(), format=lzma.FORMAT_XZ, filters=[{"id": lzma.FILTER_LZMA2, "dict_size": 2**20}])
    size = (data[12] + 1) * 4  # the block header, after the 12-byte stream header
    header = bytearray(data[12 : 12 + size])
    at = header.index(b"\x21\x01")  # the LZMA2 filter: id, size of its properties, dictionary size code
    header[at + 2] = 32  # 2 ** (32 / 2 + 12) = 256 MiB
    header[-4:] = zlib.crc32(bytes(header[:-4])).to_bytes(4, "little")
    big = data[:12] + bytes(header) + data[12 + size :]
    assert lzma.decompress(big) == _line()  # a valid file
    p = _hostile(tmp_path, big, suffix=".jsonl.xz")
    with pytest.raises(DataError, match=r"h-generations\.jsonl\.xz: not a valid xz file \(Memory usage limit"):
        read_prebuilt(p)


@pytest.mark.parametrize("codec", ["gz", "xz"])
def test_streams_and_lines_across_chunks_read_as_the_whole_file_reader_did(tmp_path, codec):
    """Concatenated streams, a trailing block that is no stream (xz: ignored, as lzma.decompress
    does), a record of 3 MiB spanning the reader's 1 MiB chunks, and a last line without its
    newline read as decompressing the file whole and splitting it did."""
    recs = _records(4)
    first, second, third, last = recs
    recs[second]["extra"] = {"big": "é" * (3 * 2**19)}
    lines = [json.dumps(recs[k], sort_keys=True) + "\n" for k in sorted(recs)]
    compress = gzip.compress if codec == "gz" else lzma.compress
    data = b"".join(compress(line.encode()) for line in lines[:3]) + compress(lines[3].rstrip("\n").encode())
    if codec == "xz":
        data += b"\x00" * 16 + b"not a stream"
    p = _hostile(tmp_path, data, suffix=f".jsonl.{codec}", rows=4)
    whole = (gzip.decompress if codec == "gz" else lzma.decompress)(data)
    assert read_prebuilt(p) == [json.loads(line) for line in whole.decode().splitlines()]
    with GenerationCache(tmp_path / "c.sqlite") as cache:
        assert import_prebuilt(p, cache) == 4
        assert cache.get_many([second])[second].extra == recs[second]["extra"]


def test_an_xz_bomb_of_concatenated_streams_is_refused(tmp_path, capsys):
    """A 64 MiB line of spaces in 16 concatenated xz streams of a few kB (the reviewer's bomb
    expanded to 1.2 GB in memory, and was read as a valid file of 0 rows): refused at 16 MiB,
    in `ltrr cache merge` too, as one error line, writing nothing."""
    from ltrr.cli import main

    stream = lzma.compress(b" " * 4 * 2**20, format=lzma.FORMAT_XZ)
    p = _hostile(tmp_path, stream * 16, suffix=".jsonl.xz", rows=0)
    assert p.stat().st_size < 50_000
    with pytest.raises(DataError, match=r"line 1 is longer than"):
        read_prebuilt(p)
    into = tmp_path / "into.sqlite"
    assert main(["cache", "merge", str(p), "--into", str(into)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "h-generations.jsonl.xz: line 1 is longer than" in err[0] and not into.exists()


@pytest.mark.parametrize("name", ["../../../../tmp/x", "a/b", "/etc/passwd", "..", ".hidden", "", "a\\b", "demo\n"])
def test_a_prebuilt_name_is_a_plain_name(name):
    from ltrr._errors import ConfigError

    with pytest.raises(ConfigError, match=r"\[generation\] prebuilt names a cache packaged in ltrr/prebuilt/"):
        prebuilt_path(name)


def test_prebuilt_names_resolve_inside_the_package():
    import ltrr

    folder = (Path(ltrr.__file__).parent / "prebuilt").resolve()
    for name in ("demo", "demo-smollm2", "demo-agent", "v1.2_x"):
        assert prebuilt_path(name).resolve().parent == folder
    assert prebuilt_path("demo").is_file() and prebuilt_path("demo-smollm2").suffix == ".gz"


@pytest.mark.parametrize("name", ["demo", "demo-smollm2", "demo-agent"])
def test_shipped_caches_read_and_import_as_the_whole_file_reader_did(tmp_path, name):
    """The streaming reader gives the shipped files' records exactly as decompressing them whole
    did, and imports every one, each served back as shipped."""
    path = prebuilt_path(name)
    whole = (lzma.decompress if path.name.endswith(".xz") else gzip.decompress)(path.read_bytes())
    expected = [json.loads(line) for line in whole.decode().splitlines() if line.strip()]
    assert read_prebuilt(path) == expected
    with GenerationCache(tmp_path / "c.sqlite") as cache:
        assert import_prebuilt(path, cache) == len(expected)
        assert cache.check() == {"rows": len(expected), "corrupt": 0, "integrity": "ok"}
        found = cache.get_many([r["key"] for r in expected])
        assert all(found[r["key"]].text == r["text"] and found[r["key"]].extra == (r.get("extra") or {})
                   and found[r["key"]].prompt_tokens == r["prompt_tokens"] for r in expected)
