"""Atomic writes: a temporary file in the same folder, then a rename over the target.

Below every reader and writer of the data floor (`ltrr.data.io` re-exports these, and the
format modules such as `ltrr.data.trec` write through them without importing the loaders).
The implementation is `ltrr._atomic`, on the ground floor, so that the floors beside data
(generation) write through the same helpers.
"""

from __future__ import annotations

from ltrr._atomic import (
    atomic_path,
    write_bytes_atomic,
    write_json_atomic,
    write_table_atomic,
    write_text_atomic,
)

__all__ = [
    "atomic_path",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_table_atomic",
    "write_text_atomic",
]
