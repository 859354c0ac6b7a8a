"""Settings every test module shares.

`make test` runs the suite on every core with pytest-xdist (``-n auto --dist loadfile``). Each
module's tests stay on one worker, in their order, so a module's module-scoped fixtures (a run
folder, an index, a fitted model) are built once, by whichever of its tests needs one first,
not once per worker. (``--dist loadgroup`` with our own per-module groups did this until pytest
9.2: xdist 3.8 marks a group by rewriting ``item._nodeid``, which pytest 9.2 no longer reads, so
the groups silently fell apart; tests/test_xdist_order.py now checks the distribution mode.)

No test may rely on an earlier test of its module having run: what a test reads, it makes, or
it requests a fixture that builds it (tests/test_pipeline_e2e.py's ``run_a`` and ``proto`` build
the runs several of its tests read), so any single test passes alone
(``pytest tests/test_x.py::test_y``) and in any selection.

Modules that build on-disk state outside ``tmp_path`` (the demo and its indexes in the shared
data root) build it under `_data_root.data_root_lock`, so two workers never build or replace it at once;
once built it is only read.
"""

from __future__ import annotations

import os

import pytest

# `import ltrr` first, as the `ltrr` command does: it pins numpy's, OpenBLAS's, faiss's and torch's CPU
# kernels (ltrr._cpu), which each library reads when it loads
import ltrr  # noqa: F401

# Under pytest-xdist every core runs a worker; each worker's torch, BLAS and OpenMP pools would
# otherwise start one thread per core too, oversubscribing the machine. Set before any test
# module imports torch (results do not depend on thread counts: tests/test_pipeline_e2e.py and
# tests/test_cpu_kernels.py check that in subprocesses with their own settings).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama built from a config and saved (`_tiny_llm.save_tiny_llm`, seed 0), one per
    module; a module may define its own ``tiny`` instead."""
    from _tiny_llm import save_tiny_llm

    folder = tmp_path_factory.mktemp("tiny-llm")
    save_tiny_llm(folder, seed=0)
    return folder
