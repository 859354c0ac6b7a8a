"""Line-numbered reading of the text files users bring (JSONL, TREC runs and qrels)."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from ltrr._errors import DataError
from ltrr._limits import MAX_LINE_BYTES

__all__ = ["utf8_lines", "MAX_LINE_BYTES"]


def utf8_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(lineno, line)`` for each non-blank line of a UTF-8 file (gzipped when it ends in
    ``.gz``), numbered from 1.

    A byte-order mark (as Windows editors write) is dropped and ``\\r\\n`` endings are kept
    in ``line`` for the caller's parser to strip. A line is read up to `MAX_LINE_BYTES`, so a
    longer one is refused without being held whole in memory.

    Raises
    ------
    DataError
        ``file:line: not UTF-8 text (...)`` for the first line that does not decode, and
        ``file:line: ...`` for the first line longer than `MAX_LINE_BYTES`.
    """
    path = Path(path)
    import gzip

    cap = MAX_LINE_BYTES  # read once: a line's bound does not change while the file is read
    # a gzipped file (a run PyTerrier saved as .res.gz, say) reads as its text
    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as fh:
        lineno = 0
        while raw := fh.readline(cap + 1):
            lineno += 1
            if len(raw) > cap:
                raise DataError(f"{path}:{lineno}: the line is longer than {_size(cap)}, the most a line "
                                "may hold; is this the right file?")
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start} of the "
                                "line); save the file as UTF-8") from None
            if line.strip():
                yield lineno, line


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n:,} bytes"
