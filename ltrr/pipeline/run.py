"""The stages of a run and the main job (`ltrr run`).

Each stage writes its outputs under the run's workdir atomically and records a fingerprint of
its inputs in ``<workdir>/stages/<stage>.json``. A stage whose inputs are unchanged and whose
outputs exist is skipped, and the skip is said; an interrupted stage leaves no stage record, so
the next run redoes (or, for labelling, resumes) it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ltrr._checks import check_int
from ltrr._errors import ConfigError, LtrrError, NotBuiltError
from ltrr._log import logger, progress_enabled
from ltrr.config import Config, backend_settings
from ltrr.data.io import (
    Dataset,
    data_root,
    default_generation_cache,
    load_dataset,
    write_table_atomic,
    write_text_atomic,
)
from ltrr.data.irds import attach_answers, irds_slug, is_irds, load_irds
from ltrr.data.sample import stratified_sample as _stratified_sample
from ltrr.pipeline._common import input_fingerprint
from ltrr.pipeline.evaluate import (
    eval_fingerprint,
    eval_stage,
    fit_router,
)
from ltrr.pipeline.features import (
    features_fingerprint,
    features_fresh,
    features_stage,
    training_inputs,
)
from ltrr.pipeline.ir import retrieval_measures, retrieval_report, write_trec
from ltrr.pipeline.labels import export_generations, label_stage, replicate_queries
from ltrr.pipeline.train import train_fingerprint, train_stage

if TYPE_CHECKING:
    from ltrr.eval.splits import Split
    from ltrr.retrieval import Pool

__all__ = ["Run", "STAGES"]

# the stages with a method here, in run order (`ltrr.pipeline.stages.RUN_ORDER` adds policy and headline)
STAGES = ("data", "index", "retrieve", "label", "features", "eval", "train")


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
        self._pool: Pool | None = None
        self._token_generator: Any = None  # counts a packed arm's tokens (set with the pool)
        self._reads: list[str] | None = None  # the stage records read, inside records_read()

    # ---- paths ---------------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        """The run's folder, `ltrr.config.Config.workdir`: ``[run] workdir`` or ``runs/<name>``."""
        return self.config.workdir

    @property
    def dataset_path(self) -> Path:
        """``[data] dataset`` as a path when it exists or holds a ``/``, else
        ``<data root>/built/<dataset>``; for an ir_datasets id, ``<data root>/irds/<slug>``, which
        is no folder but names its indexes' folder (`index_dir`)."""
        ds = self.config.data.dataset
        if is_irds(ds):  # no folder: the name of its indexes' folder
            return data_root() / "irds" / irds_slug(ds)
        p = Path(ds)
        return p if p.exists() or "/" in ds else data_root() / "built" / ds

    @property
    def index_dir(self) -> Path:
        """``<data root>/indexes/<dataset>``: a built dataset's name, or a folder's name and a digest
        of its path, so two folders of one name (``a/tiny``, ``b/tiny``) never share an index."""
        path = self.dataset_path
        if is_irds(self.config.data.dataset) or path.resolve().parent == (data_root() / "built").resolve():
            return data_root() / "indexes" / path.name
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
        return data_root() / "indexes" / f"{path.name}-{digest}"

    @property
    def results_path(self) -> Path:
        """``<workdir>/retrieval/results.parquet``: every arm's passages for every query."""
        return self.workdir / "retrieval" / "results.parquet"

    def stage_record(self, stage: str) -> Path:
        """``<workdir>/stages/<stage>.json``: the stage's record (input fingerprint, seconds)."""
        return self.workdir / "stages" / f"{stage}.json"

    # ---- stage bookkeeping ---------------------------------------------------------------
    def is_fresh(self, stage: str, fingerprint: str, outputs: list[Path]) -> bool:
        """Whether ``stage`` is up to date and can be skipped.

        Parameters
        ----------
        stage : str
            The stage's record name (`stage_record`).
        fingerprint : str
            The fingerprint of the stage's inputs now.
        outputs : list of Path
            The files or folders the stage writes.

        Returns
        -------
        bool
            True when every output exists and the stage record holds ``fingerprint``; False
            when an output or the record is missing, the record cannot be parsed, or its
            fingerprint differs (the reason is logged at debug level).
        """
        rec = self.stage_record(stage)
        missing = [str(p) for p in outputs if not p.exists()]
        if not rec.exists() or missing:
            logger.debug(f"[{stage}] runs: " + (f"missing output {', '.join(missing)}" if missing else f"no stage record {rec}"))
            return False
        try:
            old = json.loads(rec.read_text()).get("fingerprint")
        except json.JSONDecodeError:
            logger.debug(f"[{stage}] runs: unreadable stage record {rec}")
            return False
        logger.debug(f"[{stage}] input fingerprint {fingerprint}, recorded {old}")
        return old == fingerprint

    def record(self, stage: str, fingerprint: str, seconds: float, **info) -> None:
        """Write ``stage``'s record atomically: ``fingerprint``, ``seconds`` and ``info``'s items.

        A stage calls it once its outputs are written, so an interrupted stage leaves no record.
        """
        write_text_atomic(self.stage_record(stage),
                          json.dumps({"fingerprint": fingerprint, "seconds": round(seconds, 2), **info}, indent=2))

    # ---- inputs --------------------------------------------------------------------------
    @property
    def dataset(self) -> Dataset:
        """The dataset, loaded once: ``[data] answers`` attached, ``exclude_qtypes`` left out and
        ``max_queries`` sampled (as many of each query type, seeded with the run's seed)."""
        if self._dataset is None:
            name, answers = self.config.data.dataset, self.config.data.answers or None
            if is_irds(name):
                if self.config.data.split:
                    raise ConfigError(f"[data] split is for a BEIR folder; an ir_datasets id names its split "
                                      f"itself ({name!r})")
                self._dataset = load_irds(name, answers=answers)
            else:
                self._dataset = load_dataset(self.dataset_path, split=self.config.data.split)
                if answers:
                    self._dataset.queries = attach_answers(self._dataset.queries, answers)
            drop = [str(t) for t in self.config.data.exclude_qtypes]
            if drop:
                q = self._dataset.queries
                have = set(q["qtype"].astype(str)) if "qtype" in q else set()
                unknown = sorted(set(drop) - have)
                if unknown:
                    raise ConfigError(f"[data] exclude_qtypes names {', '.join(map(repr, unknown))}, not a query "
                                      f"type of {self.dataset_path} ({', '.join(sorted(have)) or 'none'})")
                self._dataset.queries = q[~q["qtype"].astype(str).isin(drop)].reset_index(drop=True)
            n = self.config.data.max_queries
            check_int(n, "[data] max_queries (--questions)", low=0, note=" (0: all)")
            if n and n < len(self._dataset.queries):
                self._dataset.queries = _stratified_sample(self._dataset.queries, n, self.config.seed)
        return self._dataset

    @property
    def pool(self) -> Pool:
        """The configured `ltrr.retrieval.Pool`, made on first use (its indexes are not loaded)."""
        if self._pool is None:
            from ltrr.retrieval import Pool

            self._pool = Pool.from_run_config(self.config)
            if any(a.is_packed for a in self._pool.arms):  # packed arms count the run generator's tokens
                self._token_generator = self.make_generator(use_cache=False)
                self._pool.count_tokens = self._token_generator.count_tokens
        return self._pool

    # ---- stages --------------------------------------------------------------------------
    @property
    def dataset_builder(self) -> str | None:
        """The builder the data stage builds ``[data] dataset`` with (``[data] builder``, or the
        dataset's own name when it is a builder's, as ``demo``); None for a folder that exists,
        an ir_datasets dataset, or a name no builder makes (the data stage cannot make it)."""
        from ltrr.data.build import BUILDERS

        ds = self.config.data.dataset
        builder = self.config.data.builder or ds
        return builder if not is_irds(ds) and builder in BUILDERS and not Path(ds).exists() else None

    def stage_data(self, *, force: bool = False) -> Path:
        """Build the dataset when the config names a builder (``demo``) and it is missing."""
        from ltrr.data.build import build_dataset

        ds = self.config.data.dataset
        if is_irds(ds):
            self.log(f"[data] using ir_datasets {ds[len('irds:'):]!r} ({len(self.dataset.queries)} queries, "
                     f"{len(self.dataset.corpus)} documents)")
            return self.dataset_path
        builder = self.dataset_builder
        if builder is not None:
            return build_dataset(
                builder,
                out=self.dataset_path,
                seed=self.config.data.build_seed,
                n_per_type=self.config.data.n_per_type,
                n_noanswer=self.config.data.n_noanswer,
                n_multihop=self.config.data.n_multihop,
                grow_per_type=self.config.data.grow_per_type,
                grow_noanswer=self.config.data.grow_noanswer,
                force=force,
                rebuild_flag=None,  # `ltrr run --force` and the like never rebuild the dataset
                log=self.log,
            )
        if not self.dataset_path.exists():
            raise NotBuiltError(f"stage data: dataset {self.dataset_path} does not exist")
        self.log(f"[data] using dataset {self.dataset_path}")
        return self.dataset_path

    def stage_index(self) -> Path:
        """Build every retriever's index once per dataset (kept when parameters match)."""
        t0 = time.perf_counter()
        self.log(f"[index] start: {len(self.pool.retrievers)} retriever(s) over {len(self.dataset.corpus)} documents")
        self.pool.build(self.dataset.corpus, self.index_dir, show_progress=progress_enabled())
        self.log(f"[index] indexes ready in {self.index_dir} ({time.perf_counter() - t0:.1f}s)")
        return self.index_dir

    def retrieve_fingerprint(self) -> str:
        """The fingerprint of the retrieve stage's inputs: the pool, the seed, the queries, the corpus."""
        ds = self.dataset
        inputs = {
            "pool": self.pool.to_config(),
            "seed": self.config.seed,
            "queries": pd.util.hash_pandas_object(ds.queries[["qid", "question"]], index=False).sum(),
            # by content, never by path: a project cloned or moved elsewhere keeps its fingerprints
            # (the absolute path made headline.json's inputs differ between two clones)
            # the corpus's checksum, not the whole build record: the queries are hashed above, so a
            # query type the run leaves out does not redo retrieval
            "corpus": _read_meta(self.dataset_path).get("tables", {}).get("corpus"),
        }
        if is_irds(self.config.data.dataset) or inputs["corpus"] is None:
            # no build record (ir_datasets, a user's folder, a BEIR folder): the corpus itself is
            # hashed, so an edited document retrieves again
            from ltrr.data.trec import table_digest

            inputs["corpus"] = table_digest(ds.corpus, ["docid", "title", "text"])
        if self._token_generator is not None:  # a packed arm's passages depend on the tokenizer
            inputs["tokenizer"] = self._token_generator.generator.identity
        if any(a.is_packed for a in self.pool.arms):
            # what each packing does, its defaults included, not the keys the config happened to write
            from ltrr.packing import PackSpec

            for arm in inputs["pool"]["arms"]:
                if arm.get("pack") is not None:
                    arm["pack"] = PackSpec.from_mapping(arm["pack"], f"arm {arm['name']!r}.pack").to_dict()
        return input_fingerprint(inputs)

    def stage_retrieve(self, *, force: bool = False) -> Path:
        """Run every arm on every query; write (qid, arm, rank, docid, score, text) as Parquet."""
        ds = self.dataset
        fp = self.retrieve_fingerprint()
        if not force and self.is_fresh("retrieve", fp, [self.results_path]):
            self.log(f"[retrieve] skipped: inputs unchanged, results in {self.results_path}")
            return self.results_path
        t0 = time.perf_counter()
        self.log(f"[retrieve] start: {len(ds.queries)} queries x {len(self.pool.arm_names)} arms")
        self.pool.load(self.index_dir)
        results = self.pool.search(ds.queries, show_progress=progress_enabled())
        write_table_atomic(results, self.results_path)
        self.record("retrieve", fp, time.perf_counter() - t0, rows=len(results))
        self.log(f"[retrieve] {len(results)} rows for {len(ds.queries)} queries x {len(self.pool.arm_names)} arms "
                 f"in {time.perf_counter() - t0:.1f}s -> {self.results_path}")
        return self.results_path

    @property
    def labels_dir(self) -> Path:
        """``<workdir>/labels``: the label stage's tables."""
        return self.workdir / "labels"

    @property
    def cache_path(self) -> Path:
        """The generation cache's file: ``[generation] cache``, or
        ``<data root>/cache/generations.sqlite`` (`ltrr.data.io.default_generation_cache`)."""
        return Path(self.config.generation.cache or default_generation_cache())

    def make_generator(self, *, use_cache: bool | None = None):
        """The configured generator wrapped in the SQLite cache (unless disabled)."""
        from ltrr.generation import make_generator
        from ltrr.generation.cache import CachedGenerator, GenerationCache

        gcfg = backend_settings(self.config.generation)
        try:
            backend = make_generator(gcfg)
        except Exception as exc:
            if isinstance(exc, LtrrError):
                raise type(exc)(f"stage label: [generation] {exc}") from None
            raise
        enabled = self.config.generation.use_cache if use_cache is None else use_cache
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        return CachedGenerator(backend, GenerationCache(self.cache_path), enabled=enabled)

    def stage_label(self, *, force: bool = False, use_cache: bool | None = None,
                    tolerate_failures: bool | None = None, shard: tuple[int, int] | None = None,
                    only: Sequence[str] | None = None, scheduler: str | None = None,
                    scheduler_timeout: float = 30.0, generator=None, cache_only: bool = False) -> Path:
        """Label every (query, arm) with the utility gain of the arm's passages
        (`ltrr.pipeline.labels.label_stage`)."""
        return label_stage(self, force=force, use_cache=use_cache, tolerate_failures=tolerate_failures, shard=shard,
                           only=only, scheduler=scheduler, scheduler_timeout=scheduler_timeout, generator=generator,
                           cache_only=cache_only)

    def replicate_queries(self, queries: pd.DataFrame) -> pd.DataFrame:
        """The queries of the replicate labels: the protocol's test part, or all."""
        return replicate_queries(self, queries)

    def export_generations(self, out: Path) -> dict:
        """Export exactly the generations the labelled run used (with prompts) as a prebuilt cache."""
        return export_generations(self, out)

    @property
    def features_dir(self) -> Path:
        """``features/<run name>`` in the current folder (not the workdir): the feature tables."""
        return Path("features") / self.config.name

    @property
    def reports_dir(self) -> Path:
        """``<workdir>/reports``: the eval stage's reports and plots, and the retrieval report."""
        return self.workdir / "reports"

    def no_retrieval_arms(self) -> list[str]:
        """The names of the pool's no-retrieval arms (the LLM answers without passages)."""
        return [a.name for a in self.pool.arms if a.is_no_retrieval]

    def need(self, stage: str, path: Path, producer: str) -> None:
        """Check that ``stage``'s input ``path``, the output of stage ``producer``, exists.

        Raises
        ------
        NotBuiltError
            When ``path`` does not exist; the message names the stage to run first.
        """
        if not path.exists():
            raise NotBuiltError(f"stage {stage} needs {path}, the output of stage {producer}; run `ltrr run` (or `ltrr {producer}`) first")

    def features_fingerprint(self) -> str:
        """The fingerprint of the features stage's inputs (`ltrr.pipeline.features.features_fingerprint`)."""
        return features_fingerprint(self)

    def features_fresh(self, fingerprint: str) -> bool:
        """Whether ``features/<run>/`` holds this run's tables (`ltrr.pipeline.features.features_fresh`)."""
        return features_fresh(self, fingerprint)

    def stage_features(self, *, force: bool = False) -> Path:
        """Raw routing features of every (query, arm) -> features/<run>/ (`ltrr.pipeline.features.features_stage`)."""
        return features_stage(self, force=force)

    def training_inputs(self, stage: str = "train"):
        """The labels and the raw feature tables a later stage reads (`ltrr.pipeline.features.training_inputs`)."""
        return training_inputs(self, stage)

    def texts(self) -> pd.DataFrame:
        """The texts of every (query, arm) pair, for text-based routers.

        Returns
        -------
        pandas.DataFrame
            One row per query of the dataset and arm of the pool: ``qid``, ``arm``,
            ``arm_text`` (the arm's retrieved passages joined by newlines, ``""`` where it
            retrieved none) and ``query_text`` (the question).
        """
        results = pd.read_parquet(self.results_path)
        t = results.groupby(["qid", "arm"], sort=False)["text"].apply(lambda s: "\n".join(s)).rename("arm_text").reset_index()
        q = self.dataset.queries.set_index("qid")["question"]
        rows = [(qid, arm) for qid in self.dataset.queries["qid"] for arm in self.pool.arm_names]
        full = pd.DataFrame(rows, columns=["qid", "arm"]).merge(t, how="left", on=["qid", "arm"])
        full["arm_text"] = full["arm_text"].fillna("")
        full["query_text"] = full["qid"].map(q)
        return full

    def train_params(self, ranker: str) -> dict:
        """``[train] params`` of ``ranker``, checked: every key names a registered ranker and
        holds a table, and each of its keys is a parameter of that ranker (a typo was silently
        dropped, or a traceback deep in training)."""
        from ltrr.rankers import rankers

        given = self.config.train.params
        for name, table in given.items():
            if name not in rankers:
                raise ConfigError(f"[train] params names {name!r}, not a ranker; rankers: {', '.join(rankers.names())}")
            if not isinstance(table, dict):
                raise ConfigError(f"[train] params.{name} must be a table of the ranker's parameters, got {table!r}")
            known = set(rankers.get(name)().get_params())
            if "random_state" in table:  # one seed, under one name: the ranker takes the run's
                raise ConfigError(f"[train] params.{name}.random_state: the rankers are seeded by [run] seed; "
                                  "set that (or `ltrr protocol`'s [protocol] seeds) instead")
            unknown = sorted(set(table) - known)
            if unknown:
                raise ConfigError(f"[train] params.{name}: {', '.join(unknown)} is not a parameter of {name} "
                                  f"(its parameters: {', '.join(sorted(known))})")
        return dict(given.get(ranker) or {})

    def make_router(self, name: str, ranker: str | None = None):
        """A new, unfitted router for this run.

        Parameters
        ----------
        name : str
            A name in `ltrr.routers.routers`; ignored when ``ranker`` is given. The router gets
            the run's seed as ``random_state`` and, if it takes an ``arm``, the pool's first
            no-retrieval arm.
        ranker : str or None
            A ranker's name: an `ltrr.routers.ltr.LTRRouter` over it instead, with the run's
            checked ``[train] params`` of that ranker (`train_params`), feature set and pool.

        Raises
        ------
        ConfigError
            For an unknown router name or bad ``[train] params``.
        """
        from ltrr.routers import routers

        if ranker is not None:
            from ltrr.routers.ltr import LTRRouter

            params = self.train_params(ranker)
            return LTRRouter(ranker=ranker, ranker_params=params, features=self.config.features.set,
                             pool_config={"retrievers": self.config.retrievers, "rerankers": self.config.rerankers,
                                          "arms": self.config.arms, "seed": self.config.seed},
                             index_dir=str(self.index_dir), random_state=self.config.seed)
        import inspect

        klass = routers.get(name)
        takes = inspect.signature(klass).parameters
        kwargs: dict[str, Any] = {}
        if "random_state" in takes:  # one seed, under one name
            kwargs["random_state"] = self.config.seed
        if "arm" in takes:  # a router fixed on one arm (no-retrieval): this pool's no-retrieval arm
            kwargs["arm"] = self.no_retrieval_arms()[0]
        return klass(**kwargs)

    @contextlib.contextmanager
    def records_read(self) -> Iterator[list[str]]:
        """Collect the names of the stage records `fingerprint_of` reads within the block: the
        earlier stages whose outputs a stage's inputs name (`ltrr.pipeline.stages.stage_status`)."""
        outer, self._reads = self._reads, []
        try:
            yield self._reads
        finally:
            self._reads = outer

    def fingerprint_of(self, stage: str) -> str | None:
        """The input fingerprint ``stage``'s record holds, or None when it has no record.

        Inside `records_read`, the stage's name is also collected.
        """
        if self._reads is not None:
            self._reads.append(stage)
        rec = self.stage_record(stage)
        return json.loads(rec.read_text())["fingerprint"] if rec.exists() else None

    def train_fingerprint(self, ranker: str | None = None) -> str:
        """The fingerprint of the train stage's inputs (`ltrr.pipeline.train.train_fingerprint`)."""
        return train_fingerprint(self, ranker)

    def fit_ltr_router(self, ranker: str, raw, labels: pd.DataFrame, *, texts, stage: str,
                       where: str = "") -> tuple:
        """An LTR router over ``ranker`` fitted on ``raw`` and ``labels``, and the convergence notes
        of its fit (the train and eval stages both train this way).

        Raises
        ------
        LtrrError
            Of the ranker's own type, as ``stage <stage>: router '<ranker>' failed to train<where>``.
        """
        router = self.make_router("ltrr", ranker)
        return router, fit_router(router, raw, labels, texts=texts, stage=stage, ranker=ranker, where=where)

    def protocol_partition(self, *, seed: int | None = None,
                           labels: pd.DataFrame | None = None) -> tuple[Split, bool]:
        """The protocol's design/test partition (an `ltrr.eval.splits.Split`: design = ``train``)
        and whether `ltrr protocol` pre-registered it.

        The partition is `ltrr.eval.protocol.design_test_partition`, seed ``seed`` (default the
        config's), over every query of the dataset. When ``ltrr protocol`` has run (its
        ``preregistration.json``), it is the one the protocol made: with its ``design_size``, and
        the queries without complete labels left out of their part
        (`ltrr.eval.protocol.keep_queries`). Before that, with ``[protocol] design_size``, every
        query kept.
        The one place the protocol's parts are rebuilt (`protocol_part`, context packing).
        ``labels``: the run's labels table when the caller has read it already.
        """
        from ltrr.eval.protocol import design_test_partition, keep_queries

        seed = self.config.seed if seed is None else int(seed)
        q = self.dataset.queries
        design_size = self.config.protocol.design_size
        prereg = self.workdir / "protocol" / f"seed-{seed}" / "preregistration.json"
        made = prereg.is_file()
        if made:
            design_size = json.loads(prereg.read_text())["design_size"]
        part = design_test_partition(q.reset_index(drop=True), design_size=design_size, random_state=seed)
        if made:
            path = self.labels_dir / "labels.parquet"
            if labels is None and path.is_file():
                labels = pd.read_parquet(path)
            if labels is not None:  # the protocol left the incompletely labelled queries out
                from ltrr.eval.routing import utility_matrix

                part = keep_queries(part, utility_matrix(labels).index)
        return part, made

    def protocol_part(self, part: str, *, seed: int | None = None,
                      labels: pd.DataFrame | None = None) -> tuple[set, str]:
        """The qids of the protocol's ``part`` (``"design"`` or ``"test"``) and a phrase naming it
        (`protocol_partition`, which ``labels`` is passed to)."""
        if part not in ("test", "design"):
            raise ConfigError(f"--part must be 'test' or 'design', got {part!r}")
        seed = self.config.seed if seed is None else int(seed)
        split, made = self.protocol_partition(seed=seed, labels=labels)
        source = (f"the protocol's {part} part (seed {seed})" if made
                  else f"the {part} part of the design/test partition (seed {seed}, as `ltrr agent eval`)")
        return set(split.test if part == "test" else split.train), source

    def labelled_with(self) -> dict:
        """The generator whose answers the labels measure: ``[generation]``'s backend settings and
        template, which a trained router records (`ltrr.routers.LTRRouter.save`) and answers with."""
        return {"generation": backend_settings(self.config.generation), "template": str(self.config.generation.template)}

    def stage_train(self, ranker: str | None = None, *, force: bool = False, part: str | None = None,
                    trained_on: str | None = None) -> Path:
        """Fit an LTRRouter on the labelled queries and save it (`ltrr.pipeline.train.train_stage`:
        ``part="design"`` fits on the protocol's design part alone)."""
        return train_stage(self, ranker, force=force, part=part, trained_on=trained_on)

    def example_question(self) -> str:
        """A question of the run's dataset, for the `ltrr route` line printed after training."""
        q = self.dataset.queries
        has_answer = q[q["answers"].map(len) > 0]
        return str((has_answer if len(has_answer) else q)["question"].iloc[0])

    def eval_fingerprint(self) -> str:
        """The fingerprint of the eval stage's inputs (`ltrr.pipeline.evaluate.eval_fingerprint`)."""
        return eval_fingerprint(self)

    def stage_eval(self, *, force: bool = False) -> dict[str, Path]:
        """Train every router on each split's train queries and compare them on its test queries
        (`ltrr.pipeline.evaluate.eval_stage`)."""
        return eval_stage(self, force=force)

    def retrieval_measures(self) -> list[str]:
        """The ``[eval] retrieval_measures`` (`ltrr.pipeline.ir.retrieval_measures`)."""
        return retrieval_measures(self)

    def retrieval_report(self) -> dict[str, pd.DataFrame] | None:
        """ir_measures tables per query type and arm (`ltrr.pipeline.ir.retrieval_report`)."""
        return retrieval_report(self)

    def write_trec(self, folder: str | Path, *, router: str | Path | None = None) -> dict[str, Path]:
        """Every arm's run, and a trained router's routed run, as TREC files (`ltrr.pipeline.ir.write_trec`)."""
        return write_trec(self, folder, router=router)


def _read_meta(folder: Path) -> dict:
    p = folder / "meta.json"
    return json.loads(p.read_text()) if p.exists() else {}
