"""The lock that tests building into the shared data root hold (see conftest.py)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


@contextlib.contextmanager
def data_root_lock(data_root: str | os.PathLike | None = None):
    """Hold an exclusive lock on the data root (``$LTRR_DATA_DIR`` or ``./data``) while a test
    builds into it: another xdist worker that builds the same dataset or index waits, then finds
    it up to date."""
    from filelock import FileLock

    root = Path(data_root if data_root is not None else os.environ.get("LTRR_DATA_DIR", "data"))
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".tests-build.lock")):
        yield
