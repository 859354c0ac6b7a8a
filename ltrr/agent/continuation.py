"""What a continuation call returns (`Continuation`) and why it ended (`finish_reason`).

The model backends (`ltrr.agent.backends`) and the batched decoder (`ltrr.agent.batching`)
both build continuations; this module sits below both, so neither imports the other to get them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Continuation", "finish_reason"]


@dataclass
class Continuation:
    """What one continuation call produced.

    Attributes
    ----------
    text : str
        The new text, the stop string included when one ended it.
    ids : list of int
        The new token ids, exactly (token-level backends; empty for text-level ones).
    n_tokens : int
        New tokens (``len(ids)`` at token level; the server's or the local count otherwise).
    finish : {"stop", "eos", "length", "error"}
        A stop string, the end of sequence, the token cap, or a failed call.
    error : str or None
        Why the call failed.
    """

    text: str
    ids: list[int] = field(default_factory=list)
    n_tokens: int = 0
    finish: str = "stop"
    error: str | None = None
    latency_s: float = 0.0
    cached: bool = False


def finish_reason(text: str, new_ids: Sequence[int], eos: int | None, stops: Sequence[str]) -> str:
    """Why a continuation ended: ``"stop"`` (a stop string is in ``text``), ``"eos"`` (the
    end-of-sequence id is among ``new_ids``) or ``"length"`` (the token cap)."""
    if any(s in text for s in stops):
        return "stop"
    return "eos" if eos is not None and eos in new_ids else "length"
