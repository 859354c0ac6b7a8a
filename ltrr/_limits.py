"""Bounds on what one piece of user input may hold, shared by every reader that takes it.

On the ground floor, so that sibling layers (``ltrr.data``'s line readers and
``ltrr.generation.prebuilt``'s record reader) take the same bound from one place.
"""

from __future__ import annotations

__all__ = ["MAX_LINE_BYTES"]

#: The longest line (in bytes, its newline included) a reader takes: 16 MiB, far above any query,
#: run or qrels line, any passage of a corpus and any record of a prebuilt cache (the longest
#: shipped is about 6 kB), and a bound on what one line can hold in memory (a gzipped or xz file a
#: few hundred KB long can unpack into a single line of gigabytes).
MAX_LINE_BYTES = 16 * 2**20
