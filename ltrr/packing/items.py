"""The items a context is packed from: a `MemoryItem` and its `KINDS`.

A `MemoryItem` is one thing an LLM call may read: a passage, a fact, a plan, a tool result or
an agent's message, with where it came from, the round it was written in, its length in the
generator's own tokens and an embedding. The selectors (`ltrr.packing.select`) choose among
items; the shared memory of the agent loop that holds them is `ltrr.context.memory.Memory`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
        if self.kind not in KINDS:
            raise DataError(f"memory item {self.id!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or self.tokens < 0:
            raise DataError(f"memory item {self.id!r}: tokens must be an integer >= 0, got {self.tokens!r}")
        if not isinstance(self.round, int) or isinstance(self.round, bool) or self.round < 0:
            raise DataError(f"memory item {self.id!r}: round must be an integer >= 0, got {self.round!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: v for k, v in d.items() if v is not None}
