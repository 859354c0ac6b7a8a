"""The same numbers on every x86-64 machine: torch's and oneDNN's CPU kernels pinned to AVX2.

torch picks its vectorised kernels (ATen: layer norm, GELU, softmax) and oneDNN its matrix
products by the CPU's instruction set. So the same MiniLM embeds the same text differently in
the last bits on an AVX-512 machine and on an AVX2 one (measured on 300 demo questions: max
difference 1.5e-7 between this machine's default and its AVX2 kernels; thread counts change
nothing). Features, dense rankings and the torch rankers follow, which is how a pre-registered
power figure came out as sd 0.2400 on one machine and 0.2419 on another (issue 25). LightGBM
and XGBoost give identical models for 1, 2 and 8 threads (measured), so the trees are not the
cause.

`pin_cpu_kernels` sets ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2`` and MKL's
conditional numerical reproducibility ``MKL_CBWR=AVX2`` (all three are needed: with the first two
alone, MKL still takes its AVX-512 branch for some products) unless the user set them (every x86-64 CPU of the last decade has AVX2; elsewhere nothing is set). It must
run before torch is imported, so ``import ltrr`` calls it; a process that imported torch first
keeps its own kernels, and `cpu_kernels` (in every encoder's identity, so indexes and features
built under other kernels are rebuilt, not reused) says which are in effect.

`one_blas_thread` runs a block of numpy linear algebra on one BLAS thread. OpenBLAS splits an
SVD's and a matrix product's sums by its thread count, so the query-embedding PCA of the
features came out different in the last bits with 2 threads (a main process) and with 1 (a
joblib worker, which loky limits to cores / n_jobs), and the torch rankers trained on those
features diverged from there: the eval stage's tables differed between ``[eval] n_jobs`` 1 and 2
on the 5,732-query demo (measured in session 23: ffn-pointwise's mean utility 0.3056 against
0.3014 on the balanced split), and would between machines with other core counts.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator

__all__ = ["pin_cpu_kernels", "cpu_kernels", "has_avx2", "one_blas_thread"]

_PINS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"}


def has_avx2() -> bool:
    """Whether this is an x86-64 Linux machine whose CPU has AVX2 (where the pins apply)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            return any(line.startswith("flags") and " avx2" in line for line in fh)
    except OSError:  # not Linux: leave the kernels to torch
        return False


def pin_cpu_kernels() -> dict[str, str]:
    """Pin torch's CPU kernels to AVX2 where torch is not yet imported; returns what was set."""
    if "torch" in sys.modules or os.environ.get("LTRR_CPU_KERNELS") == "native" or not has_avx2():
        return {}
    set_now = {k: v for k, v in _PINS.items() if k not in os.environ}
    os.environ.update(set_now)
    return set_now


def cpu_kernels() -> str:
    """The CPU kernels torch computes with, as a short string for cache identities.

    ``"avx2"`` when the pins are in effect, otherwise the settings as found
    (``"aten=AVX512,onednn=NATIVE,mkl=NATIVE"``). Imports torch.
    """
    import torch

    aten = str(torch.backends.cpu.get_cpu_capability()).upper()
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "native").upper()
    mkl = os.environ.get("MKL_CBWR", "native").upper()
    if (aten, onednn, mkl) == ("AVX2", "AVX2", "AVX2"):
        return "avx2"
    return f"aten={aten},onednn={onednn},mkl={mkl}"


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run a block with numpy's BLAS and LAPACK on one thread, then restore the caller's setting.

    For the small products whose last bits feed a training (the PCA of a few thousand query
    embeddings takes milliseconds either way); not for large products where threads pay.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
