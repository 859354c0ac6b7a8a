"""Line-numbered reading of the text files users bring (JSONL, TREC runs and qrels)."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from ltrr._errors import DataError

__all__ = ["utf8_lines"]


def utf8_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(lineno, line)`` for each non-blank line of a UTF-8 file (gzipped when it ends in
    ``.gz``), numbered from 1.

    A byte-order mark (as Windows editors write) is dropped and ``\\r\\n`` endings are kept
    in ``line`` for the caller's parser to strip.

    Raises
    ------
    DataError
        ``file:line: not UTF-8 text (...)`` for the first line that does not decode.
    """
    path = Path(path)
    import gzip

    # a gzipped file (a run PyTerrier saved as .res.gz, say) reads as its text
    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start} of the "
                                "line); save the file as UTF-8") from None
            if line.strip():
                yield lineno, line
