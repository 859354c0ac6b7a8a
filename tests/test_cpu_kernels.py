"""CPU kernels pinned to AVX2 (and MKL's vendor-neutral branch, the default ``portable`` mode) so
torch, numpy, OpenBLAS and faiss numbers agree across x86-64 machines (ltrr._cpu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ltrr._cpu import has_avx2

pytestmark = pytest.mark.skipif(not has_avx2(), reason="pins apply to x86-64 CPUs with AVX2 only")
_PINNED = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "LTRR_CPU_KERNELS",
           "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "FAISS_SIMD_LEVEL")


def _py(code: str, **env) -> str:
    base = {k: v for k, v in os.environ.items() if k not in _PINNED}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-1500:]  # the child's traceback, not only its exit status
    return out.stdout.strip().splitlines()[-1]


_SHOW = "import json, os; {pre}import ltrr; print(json.dumps({{k: os.environ.get(k) for k in {keys}}}))"


def test_import_pins_the_kernels_unless_the_user_or_torch_came_first():
    keys = ["ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR"]
    # the default is portable: MKL's vendor-neutral branch
    assert json.loads(_py(_SHOW.format(pre="", keys=keys))) == dict(zip(keys, ["avx2", "AVX2", "COMPATIBLE"],
                                                                        strict=True))
    # a user's own setting wins; LTRR_CPU_KERNELS=native turns the pins off
    assert json.loads(_py(_SHOW.format(pre="", keys=keys), MKL_CBWR="AVX2"))["MKL_CBWR"] == "AVX2"
    assert json.loads(_py(_SHOW.format(pre="", keys=keys), LTRR_CPU_KERNELS="native")) == dict.fromkeys(keys)
    # torch imported first has chosen its kernels already: nothing is set, and the identity says so
    assert json.loads(_py(_SHOW.format(pre="import torch; ", keys=keys))) == dict.fromkeys(keys)
    shown = _py("import torch, ltrr; from ltrr._cpu import cpu_kernels; print(cpu_kernels())")
    assert shown.startswith("aten=") and shown not in ("avx2", "portable")
    assert _py("import ltrr; from ltrr._cpu import cpu_kernels; print(cpu_kernels())") == "portable"


_KERNELS = "import json; {pre}import ltrr; from ltrr._cpu import numeric_kernels; print(json.dumps(numeric_kernels()))"
_NUMERIC = ["NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "FAISS_SIMD_LEVEL"]


def test_numpy_openblas_and_faiss_are_pinned_only_if_ltrr_loads_first():
    shown = json.loads(_py(_SHOW.format(pre="", keys=_NUMERIC)))
    assert shown == {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Haswell",
                     "FAISS_SIMD_LEVEL": "AVX2"}
    assert json.loads(_py(_KERNELS.format(pre=""))) == {"torch": "portable", "numpy": "avx2", "faiss": "avx2"}
    # numpy imported first keeps its kernels (and OpenBLAS's): only the libraries still unloaded are pinned
    shown = json.loads(_py(_SHOW.format(pre="import numpy; ", keys=_NUMERIC)))
    assert shown == {"NPY_DISABLE_CPU_FEATURES": None, "OPENBLAS_CORETYPE": None, "FAISS_SIMD_LEVEL": "AVX2"}
    assert json.loads(_py(_KERNELS.format(pre="import numpy; "))) == {"torch": "portable", "numpy": "native",
                                                                      "faiss": "avx2"}
    # the user's own value wins, and then the library counts as not pinned; native turns all off
    assert json.loads(_py(_KERNELS.format(pre=""), OPENBLAS_CORETYPE="SkylakeX"))["numpy"] == "native"
    assert json.loads(_py(_KERNELS.format(pre=""), LTRR_CPU_KERNELS="native")) == dict.fromkeys(
        ["torch", "numpy", "faiss"], "native")


def test_avx2_mode_takes_mkls_avx2_branch_for_torch():
    """MKL does not take its AVX2 branch on AMD CPUs, so the default (``portable``) asks for its
    COMPATIBLE one; ``avx2`` asks for the AVX2 branch, the faster one (and ``portable`` spelt out is
    the default)."""
    keys = ["ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR"]
    shown = json.loads(_py(_SHOW.format(pre="", keys=keys), LTRR_CPU_KERNELS="avx2"))
    assert shown == dict(zip(keys, ["avx2", "AVX2", "AVX2"], strict=True))
    assert json.loads(_py(_KERNELS.format(pre=""), LTRR_CPU_KERNELS="avx2")) == {
        "torch": "avx2", "numpy": "avx2", "faiss": "avx2"}
    code = "import ltrr; from ltrr._cpu import cpu_kernels; print(cpu_kernels())"
    assert _py(code, LTRR_CPU_KERNELS="avx2") == "avx2"  # an encoder identity of its own
    assert _py(code, LTRR_CPU_KERNELS="portable") == _py(code) == "portable"
    # a user's own MKL branch still wins over the mode's
    assert json.loads(_py(_KERNELS.format(pre=""), LTRR_CPU_KERNELS="avx2", MKL_CBWR="COMPATIBLE"))["torch"] == \
        "portable"


_LIBM = """
import ltrr, math, sys, numpy as np
x = np.random.default_rng(7).normal(size=100_000) * 5
same_exp = np.array_equal(np.exp(x), np.array([math.exp(v) for v in x]))
same_log = np.array_equal(np.log(np.abs(x)), np.array([math.log(abs(v)) for v in x]))
print(same_exp, same_log)
"""


def test_pinned_numpy_computes_exp_and_log_as_the_c_library_does():
    """On an AVX-512 machine numpy's own float64 exp/log (SVML) differ from the C library in the
    last bit (4.6% of these values on an AMD EPYC); pinned, numpy calls the C library's, which
    every x86-64 machine with the same C library shares."""
    assert _py(_LIBM) == "True True"


def test_pinned_openblas_and_faiss_run_their_avx2_kernels():
    code = ("import ltrr, json, numpy, scipy.linalg, faiss; from threadpoolctl import threadpool_info; "
            "print(json.dumps([sorted({i.get('architecture') for i in threadpool_info() "
            "if i['internal_api'] == 'openblas'}), faiss.SIMDConfig.get_level_name()]))")
    blas, simd = json.loads(_py(code))
    assert blas == ["Haswell"] and simd == "AVX2"


_EMBED = """
import ltrr, sys, numpy as np
from ltrr.embed import get_encoder
x = get_encoder("minilm").encode_queries(["Who wrote War and Peace?", "capital of Australia",
    "in what year was the Eiffel Tower completed?", "rare words keyword query"])
sys.stdout.write(np.asarray(x, dtype=np.float32).tobytes().hex() + "\\n")
"""


@pytest.mark.slow
def test_embeddings_are_the_same_bits_on_an_avx2_only_machine():
    """An AVX2-only CPU is emulated by capping MKL at AVX2 (ATen and oneDNN are pinned already)."""
    here = np.frombuffer(bytes.fromhex(_py(_EMBED)), dtype=np.float32)
    avx2_machine = np.frombuffer(bytes.fromhex(_py(_EMBED, MKL_ENABLE_INSTRUCTIONS="AVX2")), dtype=np.float32)
    native = np.frombuffer(bytes.fromhex(_py(_EMBED, LTRR_CPU_KERNELS="native")), dtype=np.float32)
    assert np.array_equal(here, avx2_machine)
    assert here.shape == (4 * 384,) and np.allclose(here, native, atol=1e-5)


def test_a_library_loaded_before_ltrr_is_named_where_its_kernels_differ():
    """The features stage logs this line: numpy imported first keeps its AVX-512 kernels."""
    note = "import json; {pre}import ltrr; from ltrr._cpu import unpinned_note; print(json.dumps(unpinned_note()))"
    first = json.loads(_py(note.format(pre="import numpy; ")))
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
        avx512 = " avx512f" in fh.read()
    if avx512:
        assert first.startswith("numpy was imported before ltrr, so its own AVX-512 kernels are in effect")
    else:  # an AVX2 machine's native kernels are the pinned ones
        assert first is None
    assert json.loads(_py(note.format(pre=""))) is None
    assert json.loads(_py(note.format(pre="import numpy; "), LTRR_CPU_KERNELS="native")) is None


def test_cpu_vendor_is_read_from_cpuinfo(monkeypatch):
    """``vendor_id`` names the vendor (torch's MKL branches on it); no cpuinfo or no x86-64: None."""
    import ltrr._cpu as cpu

    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    for found, vendor in (("GenuineIntel", "Intel"), ("AuthenticAMD", "AMD"), ("CentaurHauls", "CentaurHauls"),
                          (None, None)):
        monkeypatch.setattr(cpu, "_cpuinfo", lambda field, found=found: found if field == "vendor_id" else None)
        assert cpu.cpu_vendor() == vendor
    monkeypatch.setattr(cpu.platform, "machine", lambda: "arm64")
    assert cpu.cpu_vendor() is None
    assert "vendor" in cpu.machine_record()


def test_reproducibility_note_says_where_figures_reproduce():
    """The headline's last line: same vendor under the avx2 pins, either vendor under portable, the
    CPU itself under native kernels; a record without the fields (an older environment.json): none."""
    from ltrr._cpu import reproducibility_note

    pinned = {"torch": "avx2", "numpy": "avx2", "faiss": "avx2"}
    amd = reproducibility_note({"vendor": "AMD", "kernels": pinned})
    assert amd.startswith("Computed on an AMD CPU with torch's avx2 kernels: another AMD x86-64 CPU")
    assert "LTRR_CPU_KERNELS=portable" in amd
    unknown = reproducibility_note({"vendor": None, "kernels": pinned})
    assert "vendor was not recorded" in unknown and "of the same vendor" in unknown and "None" not in unknown
    portable = reproducibility_note({"vendor": "Intel", "kernels": {**pinned, "torch": "portable"}})
    assert "either vendor" in portable and "except" not in portable
    native = reproducibility_note({"vendor": "Intel", "kernels": {**pinned, "numpy": "native"}})
    assert "native kernels (numpy)" in native
    for old in ({"cpu": "x", "avx512": True}, {"kernels": "avx2"}, {"kernels": {}}):
        assert reproducibility_note(old) is None


@pytest.mark.parametrize("text", [None, "", "{not json", "[1, 2]", '{"cpu": "x"}'])
def test_the_headline_skips_the_note_for_a_missing_or_damaged_environment_record(tmp_path, monkeypatch, text):
    """``headline_text`` reads ``environment.json`` beside the headline; none, unreadable JSON, a
    non-object or an old record without the fields: the headline without the note, no traceback."""
    from types import SimpleNamespace

    from ltrr.pipeline.stages import headline_text

    monkeypatch.setattr("ltrr.eval.headline.protocol_summary", lambda docs: "the summary")
    run = SimpleNamespace(workdir=tmp_path, config=SimpleNamespace(seed=13))
    folder = tmp_path / "protocol" / "seed-13"
    folder.mkdir(parents=True)
    if text is not None:
        (folder / "environment.json").write_text(text)
    assert headline_text(run, {}).endswith("the summary")
    (folder / "environment.json").write_text(json.dumps({"vendor": "AMD", "kernels": {"torch": "avx2"}}))
    assert headline_text(run, {}).endswith("\nComputed on an AMD CPU with torch's avx2 kernels: another AMD x86-64 "
                                           "CPU with AVX2 and these versions should give the same figures to the last "
                                           "digit; MKL takes another branch on the other vendor's CPUs, where they can "
                                           "differ (LTRR_CPU_KERNELS=portable, the default, agrees across vendors; "
                                           "benchmarks/results/cpu_determinism/).")
