"""Atomic writes: a temporary file in the same folder, then a rename over the target.

Below every reader and writer of the data floor (`ltrr.data.io` re-exports these, and the
format modules such as `ltrr.data.trec` write through them without importing the loaders).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

__all__ = ["write_table_atomic", "write_text_atomic"]


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a text file atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_table_atomic(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a Parquet table atomically (temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path
