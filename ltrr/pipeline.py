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

from ltrr._errors import ConfigError, LtrrError, NotBuiltError
from ltrr._tables import markdown_table
from ltrr.config import Config
from ltrr.data.io import Dataset, data_root, load_dataset, write_table_atomic

__all__ = ["Run", "STAGES"]

STAGES = ("data", "index", "retrieve", "label")

_PIPELINE_GEN_KEYS = ("template", "max_new_tokens", "cache", "use_cache", "chunk_size", "max_prompt_tokens")


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

    @property
    def labels_dir(self) -> Path:
        return self.workdir / "labels"

    @property
    def cache_path(self) -> Path:
        return Path(self.config.generation.get("cache") or data_root() / "cache" / "generations.sqlite")

    def make_generator(self, *, use_cache: bool | None = None):
        """The configured generator wrapped in the SQLite cache (unless disabled)."""
        from ltrr.generation import make_generator
        from ltrr.generation.cache import CachedGenerator, GenerationCache

        gcfg = {k: v for k, v in self.config.generation.items() if k not in _PIPELINE_GEN_KEYS}
        try:
            backend = make_generator(gcfg)
        except Exception as exc:
            if isinstance(exc, LtrrError):
                raise type(exc)(f"stage label: [generation] {exc}") from None
            raise
        enabled = self.config.generation["use_cache"] if use_cache is None else use_cache
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        return CachedGenerator(backend, GenerationCache(self.cache_path), enabled=enabled)

    def stage_label(self, *, force: bool = False, use_cache: bool | None = None,
                    tolerate_failures: bool | None = None) -> Path:
        """Label every (query, arm) with the utility gain of the arm's passages."""
        from tqdm.auto import tqdm

        from ltrr.generation import DecodingParams, load_template
        from ltrr.labels import label_queries, raise_for_failures, summarise, summary_markdown, write_labels
        from ltrr.metrics import parse_metric, parse_metrics

        lcfg, gcfg = self.config.labels, self.config.generation
        tolerate = lcfg["tolerate_failures"] if tolerate_failures is None else tolerate_failures
        ds = self.dataset
        if not self.results_path.exists():
            raise NotBuiltError(f"stage label needs the retrieval results {self.results_path}; run the retrieve stage (ltrr run)")
        results = pd.read_parquet(self.results_path)
        pool = self.pool
        arms = pool.arm_names
        nr = [a.name for a in pool.arms if a.is_no_retrieval]
        if not nr:
            raise ConfigError("stage label: the pool needs a no-retrieval arm (retriever = \"none\"): gains are measured against it")
        noise_arm = None
        if lcfg["noise_floor"]:
            noise_arm = lcfg["noise_floor_arm"] or next(a.name for a in pool.arms if not a.is_no_retrieval)
        template = load_template(gcfg["template"])
        fp = _hash({"labels": lcfg, "generation": gcfg, "retrieve": json.loads(self.stage_record("retrieve").read_text())["fingerprint"] if self.stage_record("retrieve").exists() else None})
        out = self.labels_dir / "labels.parquet"
        if not force and self._fresh("label", fp, [out]):
            self.log(f"[label] skipped: inputs unchanged, labels in {out}")
            return out
        try:
            metric = parse_metric(lcfg["metric"])
            extras = parse_metrics(lcfg["extra_metrics"]) if lcfg["extra_metrics"] else []
        except LtrrError as exc:
            raise ConfigError(f"stage label: [labels] {exc}") from None
        generator = self.make_generator(use_cache=use_cache)
        judge = None
        if metric.needs_judge or any(m.needs_judge for m in extras):
            if not lcfg["judge"]:
                raise ConfigError("stage label: metric needs a judge; set [labels.judge] (a generator config)")
            from ltrr.generation import make_generator
            from ltrr.generation.cache import CachedGenerator

            judge = CachedGenerator(make_generator(lcfg["judge"]), generator.cache, enabled=generator.enabled)
        scorer = metric.bind(judge=judge)
        extra_scorers = {str(m): m.bind(judge=judge) for m in extras}
        n_items = len(ds.queries) * len(arms)
        self.log(f"[label] {len(ds.queries)} queries x {len(arms)} arms with {generator.identity}, "
                 f"template {template.identity}, metric {metric}; cache {self.cache_path}")
        t0 = time.perf_counter()
        with tqdm(total=n_items, desc="label", unit="item", dynamic_ncols=True) as bar:
            run = label_queries(
                ds.queries, results, arms=arms, no_retrieval=nr[0], generator=generator,
                template=template, scorer=scorer, metric_name=str(metric), extra_scorers=extra_scorers,
                noise_arm=noise_arm, seed=self.config.seed, chunk_size=gcfg["chunk_size"],
                max_prompt_tokens=gcfg["max_prompt_tokens"] or None, progress=bar.update,
            )
        summary = summarise(run.labels, run.noise, seed=self.config.seed)
        summary["generator_calls"] = generator.generator_calls
        summary["cache_hits"] = generator.hits
        summary["seconds"] = round(time.perf_counter() - t0, 1)
        write_labels(run, summary, self.labels_dir)
        self.log(summary_markdown(summary))
        self.log(f"[label] {summary['generator_calls']} generator calls, {summary['cache_hits']} cache hits, "
                 f"{summary['seconds']:.1f}s -> {out}")
        raise_for_failures(summary, tolerate)
        self._record("label", fp, time.perf_counter() - t0, generator_calls=summary["generator_calls"])
        del DecodingParams
        return out

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
