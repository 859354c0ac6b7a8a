"""Atomic writes: a temporary file in the same folder, then a rename over the target;
`manifest_last`, the protocol of a folder save whose manifest is written last; and
`sha256_file`, the checksum the saved artefacts are checked with.

On the ground floor, so every floor writes its files through it (`ltrr.data.io` re-exports
`write_text_atomic` and `write_table_atomic`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported by the caller that hands over a table
    import pandas as pd

__all__ = [
    "plain_json",
    "sha256_file",
    "atomic_path",
    "manifest_last",
    "write_arrays_atomic",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_table_atomic",
    "write_text_atomic",
]


@contextlib.contextmanager
def atomic_path(path: str | Path, *, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that needs a file name (safetensors,
    Parquet, a figure): renamed onto ``path`` when the block ends, removed if it raises.

    The temporary name is hidden and unique (``.NAME.<uuid>.tmp`` plus ``suffix``, for writers
    that read the format from the extension), so concurrent writers never share one, and the
    folder is created if needed.

    Examples
    --------
    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "out.bin"
    >>> with atomic_path(target) as tmp:
    ...     _ = tmp.write_bytes(b"data")
    >>> target.read_bytes()
    b'data'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def manifest_last(folder: str | Path, manifest: str) -> Iterator[Path]:
    """The folder of a save whose manifest file ``manifest`` is written last, by the block.

    ``folder`` is created and its old manifest removed before the block writes its parts, so a
    save interrupted part-way leaves a folder with no manifest, which its loader reports as not
    built, never an old manifest over new parts. The block writes each part atomically and the
    manifest last (`write_json_atomic`); a block that ends without writing it is a
    `RuntimeError`, the mistake of the save that forgot it.

    Examples
    --------
    >>> import tempfile
    >>> with manifest_last(Path(tempfile.mkdtemp()) / "model", "model.json") as folder:
    ...     _ = write_bytes_atomic(folder / "weights.bin", b"...")
    ...     _ = write_json_atomic(folder / "model.json", {"format": 1})
    >>> sorted(p.name for p in folder.iterdir())
    ['model.json', 'weights.bin']
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / manifest).unlink(missing_ok=True)
    yield folder
    if not (folder / manifest).is_file():
        raise RuntimeError(f"the save into {folder} ended without writing its manifest {manifest}")


def write_arrays_atomic(path: str | Path, arrays: Mapping[str, Any]) -> Path:
    """Write numpy arrays to a safetensors file atomically.

    Each array is made C-contiguous first: safetensors writes an array's buffer as it lies, so a
    transposed or sliced array would come back scrambled.
    """
    import numpy as np
    from safetensors.numpy import save_file

    with atomic_path(path) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp))
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write a binary file atomically (temporary file in the same folder, then rename)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a UTF-8 text file atomically (temporary file in the same folder, then rename)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def plain_json(obj: Any, where: str) -> Any:
    """``obj`` in plain JSON values, checked before a save touches its folder.

    numpy scalars become Python numbers (``np.int64(5)`` -> 5), tuples lists and paths strings; a value JSON
    cannot hold (a ``RandomState``, an object) is a `ConfigError` naming it and ``where``, so a
    save that cannot finish fails before it removes or replaces any file.

    Examples
    --------
    >>> import numpy as np
    >>> plain_json({"k": np.int64(5), "w": (1, 2)}, "KNNRouter params")
    {'k': 5, 'w': [1, 2]}
    >>> plain_json({"random_state": object()}, "params")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ltrr._errors.ConfigError: params: random_state=<object object at ...> cannot be saved as JSON; give a plain value (an int seed, a number, a string)
    """
    from ltrr._errors import ConfigError

    def plain(x: Any, key: str) -> Any:
        if isinstance(x, dict):
            return {str(k): plain(v, str(k)) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v, key) for v in x]
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, os.PathLike):
            return os.fspath(x)
        item = getattr(x, "item", None)  # a numpy scalar (numpy is not imported here for it)
        if callable(item) and type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0:
            return item()
        raise ConfigError(f"{where}: {key}={x!r} cannot be saved as JSON; give a plain value "
                          "(an int seed, a number, a string)")

    return plain(obj, "value")


def write_json_atomic(path: str | Path, obj: Any, **dumps: Any) -> Path:
    """Write ``json.dumps(obj, **dumps)`` to ``path`` atomically."""
    return write_text_atomic(path, json.dumps(obj, **dumps))


def write_table_atomic(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a Parquet table atomically (temporary file, then rename)."""
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return Path(path)


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in blocks (`hashlib.file_digest`), as hex."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
