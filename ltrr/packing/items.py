"""The items a context is packed from: a `MemoryItem` and its `KINDS`.

A `MemoryItem` is one thing an LLM call may read: a passage, a fact, a plan, a tool result or
an agent's message, with where it came from, the round it was written in, its length in the
generator's own tokens and an embedding. The selectors (`ltrr.packing.select`) choose among
items; the shared memory of the agent loop that holds them is `ltrr.context.memory.Memory`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ltrr._checks import check_int
from ltrr._errors import DataError

__all__ = ["MemoryItem", "KINDS"]

KINDS = ("passage", "fact", "plan", "tool_result", "message")


@dataclass
class MemoryItem:
    """One entry of the shared memory.

    ``tokens`` is its length under the generator's tokenizer; ``key`` (facts) names what the fact
    is about, so a newer value of the same key replaces an older one.
    """

    id: str
    kind: str
    text: str
    source: str = ""
    round: int = 0
    tokens: int = 0
    embedding: list[float] | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise DataError(f"memory item id must be a non-empty string, got {self.id!r}")
        for name in ("text", "source"):
            v = getattr(self, name)
            if not isinstance(v, str):
                raise DataError(f"memory item {self.id!r}: {name} must be a string, got {type(v).__name__} {v!r}")
        if self.key is not None and not isinstance(self.key, str):
            raise DataError(f"memory item {self.id!r}: key must be a string or absent, got "
                            f"{type(self.key).__name__} {self.key!r}")
        if self.embedding is not None:
            e = self.embedding
            # one numpy conversion, not a Python loop per number: packing builds many items
            a = np.asarray(e) if isinstance(e, (list, tuple)) else None
            if a is None or a.ndim != 1 or not len(a) or a.dtype.kind not in "iuf" or not np.isfinite(a).all():
                shown = repr(e) if len(repr(e)) <= 80 else repr(e)[:77] + "..."
                raise DataError(f"memory item {self.id!r}: embedding must be a non-empty list of finite numbers, "
                                f"got {shown}")
        if self.kind not in KINDS:
            raise DataError(f"memory item {self.id!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        check_int(self.tokens, f"memory item {self.id!r}: tokens", low=0, error=DataError)
        check_int(self.round, f"memory item {self.id!r}: round", low=0, error=DataError)

    def to_dict(self) -> dict:
        """The fields as a plain mapping, those that are None (``embedding``, ``key``) left out."""
        d = asdict(self)
        return {k: v for k, v in d.items() if v is not None}
