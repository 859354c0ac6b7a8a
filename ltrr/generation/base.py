"""The generator interface shared by every backend.

A batch of prompts goes in; for each prompt a `Generation` comes out with the text, token counts,
latency and, when the call failed for good, the error (never a silent empty answer).
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "Generation",
    "DecodingParams",
    "Generator",
    "GeneratorWrapper",
    "WrapsGenerator",
    "count_prompt_tokens",
    "cancel_scope",
    "cancel_requested",
    "CANCELLED",
]

#: the error of a generation stopped by its `cancel_scope` (never cached: it failed)
CANCELLED = "cancelled: the request it was made for was abandoned"
_CANCEL = threading.local()


@contextlib.contextmanager
def cancel_scope(event: threading.Event) -> Iterator[None]:
    """Generations on this thread stop at their next token once ``event`` is set.

    A backend that decodes token by token (llama.cpp, transformers) checks `cancel_requested`
    between tokens and returns a failed `Generation` (``error`` `CANCELLED`), which no cache
    stores. The server sets the event when a request times out or its client disconnects, so
    an abandoned request no longer holds the one generator for its whole answer.

    Examples
    --------
    >>> ev = threading.Event()
    >>> with cancel_scope(ev):
    ...     before = cancel_requested()
    ...     ev.set()
    ...     after = cancel_requested()
    >>> before, after, cancel_requested()
    (False, True, False)
    """
    previous = getattr(_CANCEL, "event", None)
    _CANCEL.event = event
    try:
        yield
    finally:
        _CANCEL.event = previous


def cancel_requested() -> bool:
    """Whether the `cancel_scope` of this thread, if any, has been set."""
    event = getattr(_CANCEL, "event", None)
    return event is not None and event.is_set()


@dataclass(frozen=True)
class DecodingParams:
    """Decoding parameters; greedy by default. All of them go into the cache key."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    json_mode: bool = False
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready mapping (``stop`` as a list), as the cache key holds them."""
        # every field is a scalar but ``stop``: a shallow read gives what `dataclasses.asdict`
        # gave at a seventh of its cost (its recursive deep copy was a third of importing the
        # shipped demo cache, which hashes every entry's key again)
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["stop"] = list(self.stop)
        return d


@dataclass
class Generation:
    """One completion.

    ``error`` is None on success. A failed item keeps its error text and ``text=""``; callers
    must record it as failed, never score it.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None
    cached: bool = False
    truncated_passages: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the completion succeeded (``error`` is None)."""
        return self.error is None


class Generator(ABC):
    """A text generator backend.

    Subclasses implement `generate`; `identity` must change whenever the model or backend would
    produce different text for the same prompt (it is part of the cache key).
    """

    backend: str = "abstract"
    #: a tag: `count_tokens` is the model's own tokenizer's count (True), not an estimate
    exact_token_counts: bool = False
    #: a tag: `generate` sends the prompts to an endpoint its settings name, with a key read from
    #: an environment variable they name (True); a saved file may not choose such a backend alone
    remote: bool = False

    @property
    @abstractmethod
    def identity(self) -> str:
        """A stable string naming the backend and model (a file hash or a model id)."""

    @abstractmethod
    def generate(
        self, prompts: Sequence[str | list[dict[str, str]]], params: DecodingParams | None = None
    ) -> list[Generation]:
        """Generate one completion per prompt (a string or a list of chat messages)."""

    def score(
        self, prompts: Sequence[str | list[dict[str, str]]], continuations: Sequence[str]
    ) -> list[Generation]:
        """Teacher-forced log-probabilities of ``continuations[i]`` as the answer to ``prompts[i]``.

        Each result has ``text=""``, ``completion_tokens`` = the continuation's tokens and
        ``extra["token_logprobs"]``, one natural-log probability per continuation token; or
        ``error``. Backends that cannot return log-probabilities raise `ConfigError`.
        """
        from ltrr._errors import ConfigError

        raise ConfigError(
            f"the {self.backend!r} generator backend returns no log-probabilities, which the "
            "likelihood utility needs; use the 'transformers' backend"
        )

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` under this model's tokenizer (a whitespace estimate by default)."""
        return _estimate_tokens(text)

    @property
    def context_length(self) -> int:
        """Maximum prompt + completion tokens the model accepts."""
        return 2048

    def answer_holds(self, generation: Generation, room: int) -> bool:
        """Whether ``generation``, cached for a prompt under this `identity`, is the answer this
        generator would give that prompt now.

        Parameters
        ----------
        generation : Generation
            The cached answer (its ``prompt_tokens`` and ``extra`` as they were recorded).
        room : int
            The tokens kept free beside the prompt when it was made: ``max_new_tokens`` for a
            generation, the continuation's tokens for a likelihood score.

        Returns
        -------
        bool
            True by default: the identity names everything that shapes an answer. A backend
            with a setting outside its identity that can change one overrides it (llama.cpp's
            ``n_ctx`` cuts a prompt that does not fit), and `ltrr.generation.cache.CachedGenerator`
            makes the answer again where it does not hold.
        """
        return True


class WrapsGenerator:
    """Mixin of the classes that wrap one of ltrr's generators (``self.generator``): their
    identity (a part of every cache key) and context length are the wrapped generator's.

    The agent's continuation models use it directly; generator wrappers use `GeneratorWrapper`.
    """

    generator: Any

    @property
    def identity(self) -> str:
        """The wrapped generator's `identity`."""
        return self.generator.identity

    @property
    def context_length(self) -> int:
        """The wrapped generator's `context_length`."""
        return self.generator.context_length

    def answer_holds(self, generation: Generation, room: int) -> bool:
        """The wrapped generator's `Generator.answer_holds`."""
        return self.generator.answer_holds(generation, room)


class GeneratorWrapper(WrapsGenerator, Generator):
    """A `Generator` over another one (a cache, a recorder): backend, identity, context length
    and token counts are the wrapped generator's, so prompts and cache keys are those the
    wrapped generator would make. Subclasses store it as ``self.generator`` and implement
    `generate`.
    """

    @property
    def backend(self) -> str:  # type: ignore[override]
        return self.generator.backend

    @property
    def exact_token_counts(self) -> bool:  # type: ignore[override]
        return self.generator.exact_token_counts

    @property
    def remote(self) -> bool:  # type: ignore[override]
        return self.generator.remote

    def count_tokens(self, text: str) -> int:
        return self.generator.count_tokens(text)

    def count_prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """Tokens of the chat ``messages`` as the wrapped generator's prompt."""
        return count_prompt_tokens(self.generator, messages)


def _estimate_tokens(text: str) -> int:
    return max(1, int(len(text.split()) * 1.3))


def count_prompt_tokens(generator: Generator | None, messages: list[dict[str, str]]) -> int:
    """Tokens of a chat prompt under ``generator`` (exact when the backend can count them).

    Backends that render a chat template expose ``count_prompt_tokens``; otherwise the message
    contents are counted with ``generator.count_tokens`` plus a small per-message overhead.
    """
    if generator is None:
        return sum(_estimate_tokens(m["content"]) + 4 for m in messages)
    exact = getattr(generator, "count_prompt_tokens", None)
    if callable(exact):
        return int(exact(messages))
    return sum(generator.count_tokens(m["content"]) + 4 for m in messages)
