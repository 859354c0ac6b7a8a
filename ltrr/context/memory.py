"""The shared, structured memory of context routing (RCR-Router, Liu et al., 2025).

A `MemoryItem` is one thing an LLM call may read: a passage, a fact, a plan, a tool result or
an agent's message, with where it came from, the round it was written in, its length in the
generator's own tokens and an embedding (`ltrr.packing.items`, below the memory, as the
packing step reads items too). `Memory` holds the items; it round-trips through YAML
(`Memory.to_yaml` / `Memory.from_yaml`) and is updated after each round by `Memory.update`:
near-duplicates (by embedding cosine) are dropped, and a fact with the same ``key`` as an older
one replaces it, the replacement logged in ``Memory.log``.

Token counts come from the generator's tokenizer (`count_tokens`); the ``openai`` backend has no
local tokenizer, so there a count is an estimate (the backend's own ``count_tokens``), and a
budget is then approximate: `Memory.token_source` records which it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ltrr._errors import DataError
from ltrr.packing.items import KINDS, MemoryItem  # below the memory: packing reads items too

__all__ = ["MemoryItem", "Memory", "KINDS"]


@dataclass
class Memory:
    """The shared memory: items in insertion order, and a log of replacements and drops."""

    items: list[MemoryItem] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    token_source: str = "tokenizer"  # or "estimate" (a backend without a local tokenizer)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: MemoryItem) -> None:
        """Append one item as it is: no near-duplicate check, no replacement (see `update`).

        Raises
        ------
        DataError
            When the memory already has an item with the same ``id``.
        """
        if any(it.id == item.id for it in self.items):
            raise DataError(f"memory already has an item with id {item.id!r}")
        self.items.append(item)

    def update(self, new: Iterable[MemoryItem], *, dedup_threshold: float = 0.95) -> list[MemoryItem]:
        """Add a round's items: drop near-duplicates, let newer facts replace older ones of the
        same key. Returns the items actually added.

        The near-duplicate check comes first and leaves out the items the new one would replace
        (same ``kind`` and ``key``): an older keyed item is removed, and its replacement logged,
        only when the new item is actually added, so a dropped item never takes its key's older
        value with it.
        """
        added = []
        for item in new:
            old = [] if item.key is None else [it for it in self.items if it.kind == item.kind and it.key == item.key]
            others = [it for it in self.items if not any(it is o for o in old)]
            dup = self._near_duplicate(item, dedup_threshold, others)
            if dup is not None:
                self.log.append(f"round {item.round}: dropped {item.id} as a near-duplicate of {dup.id}")
                continue
            for it in old:
                if it.text != item.text:
                    self.log.append(f"round {item.round}: {item.kind} {item.key!r} replaced "
                                    f"{it.text!r} ({it.id}) by {item.text!r} ({item.id})")
                self.items.remove(it)
            self.add(item)
            added.append(item)
        return added

    def _near_duplicate(self, item: MemoryItem, threshold: float,
                        among: Sequence[MemoryItem] | None = None) -> MemoryItem | None:
        among = self.items if among is None else among
        if item.embedding is None:
            return next((it for it in among if it.text.strip() == item.text.strip()), None)
        v = np.asarray(item.embedding, dtype=np.float64)
        nv = np.linalg.norm(v)
        for it in among:
            if it.embedding is None or len(it.embedding) != len(v):
                continue
            u = np.asarray(it.embedding, dtype=np.float64)
            denom = nv * np.linalg.norm(u)
            if denom > 0 and float(v @ u) / denom >= threshold:
                return it
        return None

    # ---- YAML --------------------------------------------------------------------------------
    def to_yaml(self) -> str:
        """The memory as YAML: ``token_source``, the items (their ``to_dict``) and the log.

        `from_yaml` reads it back.
        """
        import yaml

        return yaml.safe_dump({"token_source": self.token_source, "items": [it.to_dict() for it in self.items],
                               "log": list(self.log)}, sort_keys=False, allow_unicode=True)

    @classmethod
    def from_yaml(cls, text: str) -> Memory:
        """Parse `to_yaml`'s output; malformed YAML or a bad item is a `DataError` naming it.

        Every item needs ``id``, ``kind``, ``text`` and ``tokens`` (an item without its token
        count would cost nothing against a budget); each field must have its type, checked by
        `MemoryItem`.
        """
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise DataError(f"memory YAML is malformed: {str(exc).splitlines()[0]}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("items", []), list):
            raise DataError("memory YAML must be a mapping with a list under 'items'")
        items = []
        for i, d in enumerate(doc.get("items") or []):
            if not isinstance(d, dict):
                raise DataError(f"memory YAML item {i} is not a mapping")
            unknown = sorted(set(d) - set(MemoryItem.__dataclass_fields__))
            if unknown or "id" not in d or "kind" not in d or "text" not in d:
                raise DataError(f"memory YAML item {i}: needs id, kind and text"
                                + (f"; unknown keys {unknown}" if unknown else ""))
            if "tokens" not in d:  # the dataclass default, 0, would make a hand-written item free
                raise DataError(f"memory YAML item {i} ({d['id']!r}): needs tokens, its length under the "
                                "generator's tokenizer (`to_yaml` always writes it)")
            try:
                items.append(MemoryItem(**d))
            except DataError as exc:
                raise DataError(f"memory YAML item {i}: {exc}") from None
        log = doc.get("log") or []
        if not isinstance(log, list) or not all(isinstance(x, str) for x in log):
            raise DataError(f"memory YAML 'log' must be a list of strings, got {log!r}")
        token_source = doc.get("token_source", "tokenizer")
        if token_source not in ("tokenizer", "estimate"):
            raise DataError(f"memory YAML 'token_source' must be 'tokenizer' or 'estimate', got {token_source!r}")
        mem = cls(log=list(log), token_source=token_source)
        for it in items:
            mem.add(it)
        return mem

    # ---- building items -----------------------------------------------------------------------
    @staticmethod
    def make_items(texts: Sequence[str], *, kind: str, source: str, round: int, count_tokens: Callable[[str], int],
                   embed: Callable[[Sequence[str]], Any] | None = None, prefix: str | None = None,
                   keys: Sequence[str | None] | None = None) -> list[MemoryItem]:
        """Items for ``texts``, with token counts and (if ``embed``) embeddings."""
        emb = np.asarray(embed(list(texts))) if embed is not None and len(texts) else None
        prefix = prefix or f"{source}-r{round}-{kind}"
        return [MemoryItem(id=f"{prefix}-{i}", kind=kind, text=t, source=source, round=round,
                           tokens=int(count_tokens(t)), key=keys[i] if keys else None,
                           embedding=None if emb is None else [float(x) for x in emb[i]])
                for i, t in enumerate(texts)]
