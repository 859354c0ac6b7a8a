"""The ground floor's atomic writes: `manifest_last`, the protocol of every folder save whose
manifest is written last (routers, the policy, its head)."""

from __future__ import annotations

import pytest

from ltrr._atomic import manifest_last, write_bytes_atomic, write_json_atomic


def test_the_old_manifest_goes_before_the_parts_and_the_new_one_comes_last(tmp_path):
    folder = tmp_path / "m"
    with manifest_last(folder, "m.json"):
        write_bytes_atomic(folder / "w.bin", b"old")
        write_json_atomic(folder / "m.json", {"v": 1})
    with pytest.raises(OSError), manifest_last(folder, "m.json"):
        assert not (folder / "m.json").exists()  # removed before any part is written
        raise OSError("interrupted")
    assert sorted(p.name for p in folder.iterdir()) == ["w.bin"]  # reads as not built


def test_a_save_that_forgets_its_manifest_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="without writing its manifest m.json"), manifest_last(tmp_path, "m.json"):
        write_bytes_atomic(tmp_path / "w.bin", b"x")
