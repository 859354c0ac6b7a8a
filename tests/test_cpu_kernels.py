"""CPU kernels pinned to AVX2 so torch numbers agree across x86-64 machines (ltrr._cpu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ltrr._cpu import has_avx2

pytestmark = pytest.mark.skipif(not has_avx2(), reason="pins apply to x86-64 CPUs with AVX2 only")
_PINNED = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "LTRR_CPU_KERNELS")


def _py(code: str, **env) -> str:
    base = {k: v for k, v in os.environ.items() if k not in _PINNED}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


_SHOW = "import json, os; {pre}import ltrr; print(json.dumps({{k: os.environ.get(k) for k in {keys}}}))"


def test_import_pins_the_kernels_unless_the_user_or_torch_came_first():
    keys = ["ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR"]
    assert json.loads(_py(_SHOW.format(pre="", keys=keys))) == dict(zip(keys, ["avx2", "AVX2", "AVX2"], strict=True))
    # a user's own setting wins; LTRR_CPU_KERNELS=native turns the pins off
    assert json.loads(_py(_SHOW.format(pre="", keys=keys), MKL_CBWR="COMPATIBLE"))["MKL_CBWR"] == "COMPATIBLE"
    assert json.loads(_py(_SHOW.format(pre="", keys=keys), LTRR_CPU_KERNELS="native")) == dict.fromkeys(keys)
    # torch imported first has chosen its kernels already: nothing is set, and the identity says so
    assert json.loads(_py(_SHOW.format(pre="import torch; ", keys=keys))) == dict.fromkeys(keys)
    shown = _py("import torch, ltrr; from ltrr._cpu import cpu_kernels; print(cpu_kernels())")
    assert shown.startswith("aten=") and shown != "avx2"
    assert _py("import ltrr; from ltrr._cpu import cpu_kernels; print(cpu_kernels())") == "avx2"


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
