"""`RunContext`: what a stage reads of its run (paths, config sections, dataset, pool, seed).

`ltrr.pipeline.Run` is the one implementation; the stage functions kept in their own modules
(`ltrr.pipeline.labels`) are typed against this protocol, so they need not import `Run`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["RunContext"]


class RunContext(Protocol):
    """The run context a stage executes over (see `ltrr.pipeline.Run` for each member)."""

    config: Any
    log: Callable[[str], None]

    @property
    def workdir(self) -> Path: ...
    @property
    def dataset(self) -> Any: ...
    @property
    def pool(self) -> Any: ...
    @property
    def results_path(self) -> Path: ...
    @property
    def labels_dir(self) -> Path: ...
    @property
    def cache_path(self) -> Path: ...

    def make_generator(self, *, use_cache: bool | None = None) -> Any: ...
    def is_fresh(self, stage: str, fingerprint: str, outputs: list[Path]) -> bool: ...
    def record(self, stage: str, fingerprint: str, seconds: float, **info: Any) -> None: ...
    def need(self, stage: str, path: Path, producer: str) -> None: ...
    def fingerprint_of(self, stage: str) -> str | None: ...
