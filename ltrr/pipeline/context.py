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
    def workdir(self) -> Path:
        """The run's folder; see `ltrr.pipeline.Run.workdir`."""

    @property
    def dataset(self) -> Any:
        """The run's dataset; see `ltrr.pipeline.Run.dataset`."""

    @property
    def pool(self) -> Any:
        """The run's retrieval pool; see `ltrr.pipeline.Run.pool`."""

    @property
    def results_path(self) -> Path:
        """The retrieve stage's results table; see `ltrr.pipeline.Run.results_path`."""

    @property
    def labels_dir(self) -> Path:
        """The label stage's folder; see `ltrr.pipeline.Run.labels_dir`."""

    @property
    def cache_path(self) -> Path:
        """The generation cache's file; see `ltrr.pipeline.Run.cache_path`."""

    @property
    def features_dir(self) -> Path:
        """The features stage's folder; see `ltrr.pipeline.Run.features_dir`."""

    @property
    def index_dir(self) -> Path:
        """The folder of the dataset's indexes; see `ltrr.pipeline.Run.index_dir`."""

    def make_generator(self, *, use_cache: bool | None = None) -> Any:
        """The run's generator in its cache; see `ltrr.pipeline.Run.make_generator`."""

    def is_fresh(self, stage: str, fingerprint: str, outputs: list[Path]) -> bool:
        """Whether ``stage`` can be skipped; see `ltrr.pipeline.Run.is_fresh`."""

    def record(self, stage: str, fingerprint: str, seconds: float, **info: Any) -> None:
        """Write ``stage``'s record; see `ltrr.pipeline.Run.record`."""

    def stage_record(self, stage: str) -> Path:
        """The path of ``stage``'s record; see `ltrr.pipeline.Run.stage_record`."""

    def need(self, stage: str, path: Path, producer: str) -> None:
        """Refuse a missing input with `NotBuiltError`; see `ltrr.pipeline.Run.need`."""

    def fingerprint_of(self, stage: str) -> str | None:
        """The fingerprint ``stage``'s record holds; see `ltrr.pipeline.Run.fingerprint_of`."""

    @property
    def reports_dir(self) -> Path:
        """The reports' folder; see `ltrr.pipeline.Run.reports_dir`."""

    def training_inputs(self, stage: str = "train") -> tuple[Any, Any]:
        """The labels and raw feature tables; see `ltrr.pipeline.Run.training_inputs`."""

    def texts(self) -> Any:
        """The query and arm texts per (query, arm); see `ltrr.pipeline.Run.texts`."""

    def make_router(self, name: str, ranker: str | None = None) -> Any:
        """A new, unfitted router; see `ltrr.pipeline.Run.make_router`."""

    def no_retrieval_arms(self) -> list[str]:
        """The pool's no-retrieval arms; see `ltrr.pipeline.Run.no_retrieval_arms`."""

    def protocol_part(self, part: str, *, seed: int | None = None, labels: Any = None) -> tuple[set[str], str]:
        """The qids of the protocol's ``part`` and where they come from; see
        `ltrr.pipeline.Run.protocol_part`."""

    def labelled_with(self) -> dict:
        """The generator settings and template the labels measure; see
        `ltrr.pipeline.Run.labelled_with`."""

    def fit_ltr_router(self, ranker: str, raw: Any, labels: Any, *, texts: Any, stage: str,
                       where: str = "") -> tuple:
        """An LTR router fitted on ``raw`` and ``labels``, and its fit's notes; see
        `ltrr.pipeline.Run.fit_ltr_router`."""
