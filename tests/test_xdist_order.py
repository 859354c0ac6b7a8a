"""The suite's parallel run keeps a module's tests in one process, in file order.

Many modules build state in an early test or a module fixture that later tests read (a run
folder, an index). `make test` runs pytest-xdist with ``--dist loadfile``; had the distribution
mode spread one module over workers (as ``--dist loadgroup`` silently did under pytest 9.2),
the second test below would run in another process, or first, and see no record.
"""

from __future__ import annotations

import os

_SEEN: list[str] = []


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def test_the_first_test_of_a_module_records_its_process():
    _SEEN.append(f"{_worker()}:{os.getpid()}")


def test_a_later_test_of_the_module_runs_after_it_in_the_same_process():
    assert _SEEN == [f"{_worker()}:{os.getpid()}"], (
        "this module's first test ran in another process or has not run: the parallel run "
        "splits modules (use --dist loadfile)")
