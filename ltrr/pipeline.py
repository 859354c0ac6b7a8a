"""The stages of a run and the main job (`ltrr run`).

Each stage writes its outputs under the run's workdir atomically and records a fingerprint of
its inputs in ``<workdir>/stages/<stage>.json``. A stage whose inputs are unchanged and whose
outputs exist is skipped, and the skip is said; an interrupted stage leaves no stage record, so
the next run redoes (or, for labelling, resumes) it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ltrr._errors import NotBuiltError
from ltrr._tables import markdown_table
from ltrr.config import Config
from ltrr.data.io import Dataset, data_root, load_dataset, write_table_atomic

__all__ = ["Run", "STAGES"]

STAGES = ("data", "index", "retrieve")


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Run:
    """One configured run: resolves paths, runs stages, skips up-to-date ones.

    Parameters
    ----------
    config : Config
        A validated config (`ltrr.config.load_config`).
    log : callable
        Where progress lines go (``print`` by default).
    """

    def __init__(self, config: Config, *, log: Callable[[str], None] = print):
        self.config = config
        self.log = log
        self._dataset: Dataset | None = None
        self._pool = None

    # ---- paths ---------------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        return self.config.workdir

    @property
    def dataset_path(self) -> Path:
        ds = self.config.data["dataset"]
        p = Path(ds)
        return p if p.exists() or "/" in ds else data_root() / "built" / ds

    @property
    def index_dir(self) -> Path:
        return data_root() / "indexes" / self.dataset_path.name

    @property
    def results_path(self) -> Path:
        return self.workdir / "retrieval" / "results.parquet"

    def stage_record(self, stage: str) -> Path:
        return self.workdir / "stages" / f"{stage}.json"

    # ---- stage bookkeeping ---------------------------------------------------------------
    def _fresh(self, stage: str, fingerprint: str, outputs: list[Path]) -> bool:
        rec = self.stage_record(stage)
        if not rec.exists() or not all(p.exists() for p in outputs):
            return False
        try:
            return json.loads(rec.read_text()).get("fingerprint") == fingerprint
        except json.JSONDecodeError:
            return False

    def _record(self, stage: str, fingerprint: str, seconds: float, **info) -> None:
        rec = self.stage_record(stage)
        rec.parent.mkdir(parents=True, exist_ok=True)
        tmp = rec.with_name(rec.name + ".tmp")
        tmp.write_text(json.dumps({"fingerprint": fingerprint, "seconds": round(seconds, 2), **info}, indent=2))
        os.replace(tmp, rec)

    # ---- inputs --------------------------------------------------------------------------
    @property
    def dataset(self) -> Dataset:
        if self._dataset is None:
            self._dataset = load_dataset(self.dataset_path)
            n = self.config.data.get("max_queries", 0)
            if n and n < len(self._dataset.queries):
                self._dataset.queries = _stratified_sample(self._dataset.queries, n, self.config.seed)
        return self._dataset

    @property
    def pool(self):
        if self._pool is None:
            self._pool = self.config.make_pool()
        return self._pool

    # ---- stages --------------------------------------------------------------------------
    def stage_data(self, *, force: bool = False) -> Path:
        """Build the dataset when the config names a builder (``demo``) and it is missing."""
        from ltrr.data.build import BUILDERS, build_dataset

        ds = self.config.data["dataset"]
        if ds in BUILDERS and not Path(ds).exists():
            return build_dataset(
                ds,
                seed=self.config.data["build_seed"],
                n_per_type=self.config.data["n_per_type"],
                n_noanswer=self.config.data["n_noanswer"],
                force=force,
                log=self.log,
            )
        if not self.dataset_path.exists():
            raise NotBuiltError(f"stage data: dataset {self.dataset_path} does not exist")
        self.log(f"[data] using dataset {self.dataset_path}")
        return self.dataset_path

    def stage_index(self) -> Path:
        """Build every retriever's index once per dataset (kept when parameters match)."""
        t0 = time.perf_counter()
        self.pool.build(self.dataset.corpus, self.index_dir, show_progress=True)
        self.log(f"[index] indexes ready in {self.index_dir} ({time.perf_counter() - t0:.1f}s)")
        return self.index_dir

    def stage_retrieve(self, *, force: bool = False) -> Path:
        """Run every arm on every query; write (qid, arm, rank, docid, score, text) as Parquet."""
        ds = self.dataset
        fp = _hash(
            {
                "pool": self.pool.to_config(),
                "seed": self.config.seed,
                "queries": pd.util.hash_pandas_object(ds.queries[["qid", "question"]], index=False).sum(),
                "dataset": str(self.dataset_path.resolve()),
                "meta": _read_meta(self.dataset_path),
            }
        )
        if not force and self._fresh("retrieve", fp, [self.results_path]):
            self.log(f"[retrieve] skipped: inputs unchanged, results in {self.results_path}")
            return self.results_path
        t0 = time.perf_counter()
        self.pool.load(self.index_dir)
        results = self.pool.search(ds.queries, show_progress=True)
        write_table_atomic(results, self.results_path)
        self._record("retrieve", fp, time.perf_counter() - t0, rows=len(results))
        self.log(f"[retrieve] {len(results)} rows for {len(ds.queries)} queries x {len(self.pool.arm_names)} arms -> {self.results_path}")
        return self.results_path

    def retrieval_report(self) -> pd.DataFrame | None:
        """Recall@k per query type and arm (needs qrels); written as Markdown and CSV."""
        from ltrr.data.datasheet import recall_table

        ds = self.dataset
        if ds.qrels is None:
            self.log("[report] the dataset has no qrels: no recall table")
            return None
        results = pd.read_parquet(self.results_path)
        table = recall_table(results, ds.queries, ds.qrels)
        out = self.workdir / "reports"
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "retrieval_recall.csv")
        table.index.name = "qtype"
        (out / "retrieval_recall.md").write_text(markdown_table(table) + "\n")
        return table

    def run_all(self, *, force: bool = False) -> dict[str, Path]:
        """Run the stages in order; returns the paths of the outputs."""
        out = {"data": self.stage_data(force=False)}
        out["index"] = self.stage_index()
        out["retrieve"] = self.stage_retrieve(force=force)
        return out


def _read_meta(folder: Path) -> dict:
    p = folder / "meta.json"
    return json.loads(p.read_text()) if p.exists() else {}


def _stratified_sample(queries: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """A seeded sample of ``n`` queries with every query type in proportion."""
    frac = n / len(queries)
    parts = [g.sample(n=max(1, round(len(g) * frac)), random_state=seed) for _, g in queries.groupby("qtype", sort=True)]
    return pd.concat(parts).sort_values("qid").reset_index(drop=True)
