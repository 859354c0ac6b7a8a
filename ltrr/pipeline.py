"""The stages of a run and the main job (`ltrr run`).

Each stage writes its outputs under the run's workdir atomically and records a fingerprint of
its inputs in ``<workdir>/stages/<stage>.json``. A stage whose inputs are unchanged and whose
outputs exist is skipped, and the skip is said; an interrupted stage leaves no stage record, so
the next run redoes (or, for labelling, resumes) it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from ltrr._errors import ConfigError, DataError, LtrrError, NotBuiltError
from ltrr._log import bar, logger, progress_enabled
from ltrr._run_labels import ReplicateAndExport
from ltrr._tables import markdown_table
from ltrr.config import Config
from ltrr.data.io import Dataset, data_root, load_dataset, write_table_atomic, write_text_atomic
from ltrr.data.sample import stratified_sample as _stratified_sample

__all__ = ["Run", "STAGES"]

STAGES = ("data", "index", "retrieve", "label", "features", "eval", "train")

DEFAULT_RANKERS = (
    "lambdamart-listwise", "xgboost-listwise", "xgboost-pairwise", "xgboost-pointwise",
    "svm-pointwise", "svmrank-pairwise", "ffn-pointwise", "ffn-pairwise", "listnet-listwise",
)
TRAIN_FREE = ("overallsim", "avgsim", "maxsim", "varsim", "moran")

_PIPELINE_GEN_KEYS = ("template", "max_new_tokens", "cache", "use_cache", "chunk_size", "max_prompt_tokens", "prebuilt",
                      "context_budget")


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Run(ReplicateAndExport):
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
        self._token_generator = None  # counts a packed arm's tokens (set with the pool)

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

    def _record(self, stage: str, fingerprint: str, seconds: float, **info) -> None:
        write_text_atomic(self.stage_record(stage),
                          json.dumps({"fingerprint": fingerprint, "seconds": round(seconds, 2), **info}, indent=2))

    # ---- inputs --------------------------------------------------------------------------
    @property
    def dataset(self) -> Dataset:
        if self._dataset is None:
            self._dataset = load_dataset(self.dataset_path)
            drop = [str(t) for t in self.config.data.get("exclude_qtypes", [])]
            if drop:
                q = self._dataset.queries
                have = set(q["qtype"].astype(str)) if "qtype" in q else set()
                unknown = sorted(set(drop) - have)
                if unknown:
                    raise ConfigError(f"[data] exclude_qtypes names {', '.join(map(repr, unknown))}, not a query "
                                      f"type of {self.dataset_path} ({', '.join(sorted(have)) or 'none'})")
                self._dataset.queries = q[~q["qtype"].astype(str).isin(drop)].reset_index(drop=True)
            n = self.config.data.get("max_queries", 0)
            if n and n < len(self._dataset.queries):
                self._dataset.queries = _stratified_sample(self._dataset.queries, n, self.config.seed)
        return self._dataset

    @property
    def pool(self):
        if self._pool is None:
            from ltrr.retrieval import Pool

            self._pool = Pool.from_run_config(self.config)
            if any(a.is_packed for a in self._pool.arms):  # packed arms count the run generator's tokens
                self._token_generator = self.make_generator(use_cache=False)
                self._pool.count_tokens = self._token_generator.count_tokens
        return self._pool

    # ---- stages --------------------------------------------------------------------------
    def stage_data(self, *, force: bool = False) -> Path:
        """Build the dataset when the config names a builder (``demo``) and it is missing."""
        from ltrr.data.build import BUILDERS, build_dataset

        ds = self.config.data["dataset"]
        builder = self.config.data["builder"] or ds
        if builder in BUILDERS and not Path(ds).exists():
            return build_dataset(
                builder,
                out=self.dataset_path,
                seed=self.config.data["build_seed"],
                n_per_type=self.config.data["n_per_type"],
                n_noanswer=self.config.data["n_noanswer"],
                n_multihop=self.config.data["n_multihop"],
                grow_per_type=self.config.data["grow_per_type"],
                grow_noanswer=self.config.data["grow_noanswer"],
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
        self.log(f"[index] start: {len(self.pool.retrievers)} retriever(s) over {len(self.dataset.corpus)} documents")
        self.pool.build(self.dataset.corpus, self.index_dir, show_progress=progress_enabled())
        self.log(f"[index] indexes ready in {self.index_dir} ({time.perf_counter() - t0:.1f}s)")
        return self.index_dir

    def stage_retrieve(self, *, force: bool = False) -> Path:
        """Run every arm on every query; write (qid, arm, rank, docid, score, text) as Parquet."""
        ds = self.dataset
        inputs = {
            "pool": self.pool.to_config(),
            "seed": self.config.seed,
            "queries": pd.util.hash_pandas_object(ds.queries[["qid", "question"]], index=False).sum(),
            "dataset": str(self.dataset_path.resolve()),
            # the corpus's checksum, not the whole build record: the queries are hashed above, so a
            # query type the run leaves out does not redo retrieval
            "corpus": _read_meta(self.dataset_path).get("tables", {}).get("corpus"),
        }
        if self._token_generator is not None:  # a packed arm's passages depend on the tokenizer
            inputs["tokenizer"] = self._token_generator.generator.identity
        fp = _hash(inputs)
        if not force and self._fresh("retrieve", fp, [self.results_path]):
            self.log(f"[retrieve] skipped: inputs unchanged, results in {self.results_path}")
            return self.results_path
        t0 = time.perf_counter()
        self.log(f"[retrieve] start: {len(ds.queries)} queries x {len(self.pool.arm_names)} arms")
        self.pool.load(self.index_dir)
        results = self.pool.search(ds.queries, show_progress=progress_enabled())
        write_table_atomic(results, self.results_path)
        self._record("retrieve", fp, time.perf_counter() - t0, rows=len(results))
        self.log(f"[retrieve] {len(results)} rows for {len(ds.queries)} queries x {len(self.pool.arm_names)} arms "
                 f"in {time.perf_counter() - t0:.1f}s -> {self.results_path}")
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
                    tolerate_failures: bool | None = None, shard: tuple[int, int] | None = None,
                    only: Sequence[str] | None = None, scheduler: str | None = None,
                    scheduler_timeout: float = 30.0, generator=None) -> Path:
        """Label every (query, arm) with the utility gain of the arm's passages.

        With ``shard=(i, n)`` only every n-th query (from the i-th) is labelled, and its share of
        the replicate, to fill the shared generation cache from n processes at once; no labels
        table is written then. ``only`` (query ids) does the same for those queries (a Dask
        task). ``scheduler`` (``local[:N]`` or ``tcp://HOST:PORT``) first fills the cache on Dask
        workers (`ltrr.dist.label.fill_cache_on_dask`), then labels from it here. ``generator``
        (a `CachedGenerator`) replaces the configured one (a worker keeps its model loaded).
        """
        from ltrr.generation import load_template
        from ltrr.labels import (
            label_queries,
            raise_for_failures,
            summarise,
            summary_markdown,
            write_labels,
        )
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
        fp = _hash({"labels": lcfg, "generation": gcfg, "retrieve": self._fingerprint_of("retrieve"),
                    # the replicate's test part follows the protocol's partition
                    "partition": self.config.protocol["design_size"] if lcfg["replicate_template"] else None})
        out = self.labels_dir / "labels.parquet"
        if scheduler and shard is None and only is None and (force or not self._fresh("label", fp, [out])):
            from ltrr.dist.label import fill_cache_on_dask

            fill_cache_on_dask(self, scheduler, use_cache=use_cache, timeout=scheduler_timeout)
        if not force and shard is None and only is None and self._fresh("label", fp, [out]):
            self.log(f"[label] skipped: inputs unchanged, labels in {out}")
            return out
        try:
            metric = parse_metric(lcfg["metric"])
            extras = parse_metrics(lcfg["extra_metrics"]) if lcfg["extra_metrics"] else []
        except LtrrError as exc:
            raise ConfigError(f"stage label: [labels] {exc}") from None
        given = generator is not None
        generator = generator if given else self.make_generator(use_cache=use_cache)
        if gcfg["prebuilt"] and generator.enabled and not given:
            from ltrr.generation.prebuilt import import_prebuilt, prebuilt_path

            added = import_prebuilt(prebuilt_path(gcfg["prebuilt"]), generator.cache)
            self.log(f"[label] prebuilt generation cache {gcfg['prebuilt']!r}: sha256 verified, {added} new rows imported")
        judge = None
        if metric.needs_judge or any(m.needs_judge for m in extras):
            if not lcfg["judge"]:
                raise ConfigError("stage label: metric needs a judge; set [labels.judge] (a generator config)")
            from ltrr.generation import make_generator
            from ltrr.generation.cache import CachedGenerator

            judge = CachedGenerator(make_generator(lcfg["judge"]), generator.cache, enabled=generator.enabled)
        scorer = metric.bind(judge=judge)
        extra_scorers = {str(m): m.bind(judge=judge) for m in extras}
        queries = ds.queries
        if shard is not None:
            i, n = shard
            if not (0 <= i < n):
                raise ConfigError(f"--shard must be I/N with 0 <= I < N, got {i}/{n}")
            queries = queries.iloc[i::n].reset_index(drop=True)
        elif only is not None:
            queries = queries[queries["qid"].astype(str).isin(set(map(str, only)))].reset_index(drop=True)
            shard = (0, 1)  # cache only, as a shard
        n_items = len(queries) * len(arms)
        self.log(f"[label] start: {len(queries)} queries x {len(arms)} arms with {generator.identity}, "
                 f"template {template.identity}, metric {metric}; cache {self.cache_path}")
        t0 = time.perf_counter()
        with bar(total=n_items, desc="label", unit="item") as pbar:
            run = label_queries(
                queries, results, arms=arms, no_retrieval=nr[0], generator=generator,
                template=template, scorer=scorer, metric_name=str(metric), extra_scorers=extra_scorers,
                noise_arm=noise_arm, seed=self.config.seed, chunk_size=gcfg["chunk_size"],
                max_prompt_tokens=gcfg["max_prompt_tokens"] or None, progress=pbar.update,
                likelihood=lcfg["likelihood"],
                params=template.default_params(max_new_tokens=gcfg["max_new_tokens"]),
            )
        summary = summarise(run.labels, run.noise, seed=self.config.seed)
        summary["generator_calls"] = generator.generator_calls
        summary["cache_hits"] = generator.hits
        summary["seconds"] = round(time.perf_counter() - t0, 1)
        if shard is not None:
            if lcfg["replicate_template"]:  # the shard's share of the replicate, into the cache only
                self._label_replicate(ds.queries, results, arms, nr[0], generator, scorer, metric, extra_scorers,
                                      run.labels, only=set(queries["qid"].astype(str)))
                summary["generator_calls"] = generator.generator_calls
            self.log(f"[label] shard {shard[0]}/{shard[1]}: {summary['generator_calls']} generator calls "
                     f"in {summary['seconds']:.1f}s; cache {self.cache_path} (no labels table written)")
            return self.cache_path
        if lcfg["replicate_template"]:
            summary["replicate"] = self._label_replicate(queries, results, arms, nr[0], generator, scorer, metric,
                                                         extra_scorers, run.labels)
            if not summary.get("noise_floor"):
                # no permutation control (pointless with k = 1): the replicate measures the noise
                rep = summary["replicate"]
                summary["noise_floor"] = {
                    "arm": f"every arm under {rep['template']}", "mean_abs_diff": rep["mean_abs_diff"],
                    "disagreement_rate": rep["disagreement_rate"],
                    "share_of_headroom": rep["mean_abs_diff"] / summary["headroom"] if summary["headroom"] > 0 else float("nan")}
            summary["generator_calls"], summary["cache_hits"] = generator.generator_calls, generator.hits
        write_labels(run, summary, self.labels_dir)
        self.log(summary_markdown(summary))
        self.log(f"[label] {summary['generator_calls']} generator calls, {summary['cache_hits']} cache hits, "
                 f"{summary['seconds']:.1f}s -> {out}")
        raise_for_failures(summary, tolerate)
        self._record("label", fp, time.perf_counter() - t0, generator_calls=summary["generator_calls"])
        return out

    @property
    def features_dir(self) -> Path:
        return Path("features") / self.config.name

    @property
    def reports_dir(self) -> Path:
        return self.workdir / "reports"

    def _no_retrieval(self) -> list[str]:
        return [a.name for a in self.pool.arms if a.is_no_retrieval]

    def _need(self, stage: str, path: Path, producer: str) -> None:
        if not path.exists():
            raise NotBuiltError(f"stage {stage} needs {path}, the output of stage {producer}; run `ltrr run` (or `ltrr {producer}`) first")

    def stage_features(self, *, force: bool = False) -> Path:
        """Raw routing features of every (query, arm) -> features/<run>/ (Parquet + .npy)."""
        from ltrr.features import extract_raw, write_feature_tables

        self._need("features", self.results_path, "retrieve")
        rec = self.stage_record("retrieve")
        fp = _hash({"retrieve": json.loads(rec.read_text())["fingerprint"] if rec.exists() else None,
                    "features": self.config.features})
        out = self.features_dir / "raw.parquet"
        if not force and self._fresh("features", fp, [out]):
            self.log(f"[features] skipped: inputs unchanged, tables in {self.features_dir}")
            return self.features_dir
        t0 = time.perf_counter()
        self.log(f"[features] start: {len(self.dataset.queries)} queries x {len(self.pool.arm_names)} arms")
        results = pd.read_parquet(self.results_path)
        pool = self.pool.load(self.index_dir)
        raw = extract_raw(self.dataset.queries, results, arms=pool.arm_names, no_retrieval=self._no_retrieval(),
                          embedding_source=pool.embedding_source(), show_progress=progress_enabled())
        write_feature_tables(raw, self.features_dir)
        dt = time.perf_counter() - t0
        self._record("features", fp, dt, rows=len(raw))
        self.log(f"[features] {len(raw)} (query, arm) rows in {dt:.1f}s, loading the indexes and encoding the "
                 f"queries included -> {self.features_dir}")
        return self.features_dir

    def _inputs_for_training(self, stage: str = "train"):
        from ltrr.features import read_feature_tables

        self._need(stage, self.labels_dir / "labels.parquet", "label")
        self._need(stage, self.features_dir / "raw.parquet", "features")
        labels = pd.read_parquet(self.labels_dir / "labels.parquet")
        raw = read_feature_tables(self.features_dir)
        return labels, raw

    def _texts(self) -> pd.DataFrame:
        results = pd.read_parquet(self.results_path)
        t = results.groupby(["qid", "arm"], sort=False)["text"].apply(lambda s: "\n".join(s)).rename("arm_text").reset_index()
        q = self.dataset.queries.set_index("qid")["question"]
        rows = [(qid, arm) for qid in self.dataset.queries["qid"] for arm in self.pool.arm_names]
        full = pd.DataFrame(rows, columns=["qid", "arm"]).merge(t, how="left", on=["qid", "arm"])
        full["arm_text"] = full["arm_text"].fillna("")
        full["query_text"] = full["qid"].map(q)
        return full

    def _router(self, name: str, ranker: str | None = None):
        from ltrr.routers import routers

        if ranker is not None:
            from ltrr.routers.ltr import LTRRouter

            params = self.config.train["params"].get(ranker, {}) if isinstance(self.config.train["params"].get(ranker), dict) else {}
            return LTRRouter(ranker=ranker, ranker_params=params, features=self.config.features["set"],
                             pool_config={"retrievers": self.config.retrievers, "rerankers": self.config.rerankers,
                                          "arms": self.config.arms, "seed": self.config.seed},
                             index_dir=str(self.index_dir), random_state=self.config.seed)
        klass = routers.get(name)
        if name == "random":
            return klass(random_state=self.config.seed)
        if name == "no-retrieval":
            return klass(arm=self._no_retrieval()[0])
        return klass()

    def _fingerprint_of(self, stage: str) -> str | None:
        rec = self.stage_record(stage)
        return json.loads(rec.read_text())["fingerprint"] if rec.exists() else None

    def stage_train(self, ranker: str | None = None, *, force: bool = False) -> Path:
        """Fit an LTRRouter on every labelled query and save it to <workdir>/models/<ranker>.

        ``ranker`` defaults to the config's ``[train] ranker``. It is named by the config, never
        picked from the eval tables, which would choose it on test numbers. Skipped (and said)
        when the labels, features, ranker parameters and seed are unchanged.
        """
        ranker = ranker or self.config.train["ranker"]
        labels, raw = self._inputs_for_training()
        out = self.workdir / "models" / ranker
        fp = _hash({"label": self._fingerprint_of("label"), "features": self._fingerprint_of("features"),
                    "ranker": ranker, "params": self.config.train["params"].get(ranker),
                    "feature_set": self.config.features["set"], "seed": self.config.seed})
        record = f"train-{ranker}"
        if not force and self._fresh(record, fp, [out / "router.json"]):
            self.log(f"[train] skipped: inputs unchanged, router in {out}")
            return out
        from ltrr.rankers.convergence import convergence_notes as _convergence_notes
        from ltrr.rankers.convergence import (
            recorded_convergence_warnings as _recorded_convergence_warnings,
        )

        texts = self._texts() if ranker.startswith("transformer-") else None
        t0 = time.perf_counter()
        self.log(f"[train] start: {ranker} on {labels['qid'].nunique()} labelled queries")
        router = self._router("ltrr", ranker)
        try:
            with _recorded_convergence_warnings() as notes:
                router.fit(raw, labels, texts=texts)
        except LtrrError as exc:
            raise type(exc)(f"stage train: router {ranker!r} failed to train: {exc}") from None
        for note in _convergence_notes(notes, router):
            self.log(f"[train] warning: {ranker}: {note}")
        router.save(out)
        dt = time.perf_counter() - t0
        self._record(record, fp, dt, ranker=ranker, n_train_queries=router.n_train_queries_)
        self.log(f"[train] {ranker} on {router.n_train_queries_} queries in {dt:.1f}s -> {out}")
        return out

    def example_question(self) -> str:
        """A question of the run's dataset, for the `ltrr route` line printed after training."""
        q = self.dataset.queries
        has_answer = q[q["answers"].map(len) > 0]
        return str((has_answer if len(has_answer) else q)["question"].iloc[0])

    def stage_eval(self, *, force: bool = False) -> dict[str, Path]:
        """Train every router on each split's train queries and compare them on its test queries."""
        from ltrr.eval import evaluate_splits, make_splits, plots, write_report
        from ltrr.eval.routing import utility_matrix
        from ltrr.rankers.convergence import convergence_notes as _convergence_notes
        from ltrr.rankers.convergence import (
            recorded_convergence_warnings as _recorded_convergence_warnings,
        )

        labels, raw = self._inputs_for_training("eval")
        ecfg, tcfg = self.config.eval, self.config.train
        rankers = list(tcfg["rankers"] or DEFAULT_RANKERS)
        fp = _hash({"labels": json.loads(self.stage_record("label").read_text())["fingerprint"] if self.stage_record("label").exists() else None,
                    "features": json.loads(self.stage_record("features").read_text())["fingerprint"] if self.stage_record("features").exists() else None,
                    "eval": ecfg, "train": tcfg, "seed": self.config.seed})
        out = self.reports_dir / "results.csv"
        if not force and self._fresh("eval", fp, [out]):
            self.log(f"[eval] skipped: inputs unchanged, report in {self.reports_dir}")
            return {"report": self.reports_dir / "eval.md"}
        t0 = time.perf_counter()
        U = utility_matrix(labels)
        gains = utility_matrix(labels, value="norm_gain")
        queries = self.dataset.queries[self.dataset.queries["qid"].isin(U.index)].reset_index(drop=True)
        if queries.empty:
            raise DataError("stage eval: no query has complete labels")
        try:
            splits = make_splits(queries, names=ecfg["splits"], test_size=ecfg["test_size"],
                                 n_folds=ecfg["n_folds"], random_state=self.config.seed)
        except LtrrError as exc:
            raise type(exc)(f"stage eval: {exc}") from None
        texts = self._texts() if any(r.startswith("transformer-") for r in rankers) else None
        predictions: dict[str, dict] = {}
        importances: dict[str, float] = {}
        lab_idx = labels.set_index("qid")
        n_routers = len(TRAIN_FREE) + 2 + len(rankers)
        self.log(f"[eval] start: {len(splits)} splits x {n_routers} routers on {len(queries)} queries")
        warned: list[str] = []
        for split in bar(splits, desc="eval splits", unit="split"):
            train_raw, test_raw = raw.subset(split.train), raw.subset(split.test)
            train_labels = lab_idx.loc[lab_idx.index.isin(split.train)].reset_index()
            preds = {}
            for name in (*TRAIN_FREE, "random", "no-retrieval"):
                preds[name] = _wide(self._router(name).fit(train_raw, train_labels).route_scores(test_raw))
            for rk in rankers:
                router = self._router("ltrr", rk)
                try:
                    with _recorded_convergence_warnings() as notes:
                        router.fit(train_raw, train_labels, texts=texts)
                except LtrrError as exc:
                    raise type(exc)(f"stage eval: router {rk!r} failed to train on split {split.name!r}: {exc}") from None
                warned += [f"ltrr:{rk}: {note} on split {split.name}" for note in _convergence_notes(notes, router)]
                preds[f"ltrr:{rk}"] = _wide(router.route_scores(test_raw, texts=texts))
                if split.name == "balanced" and rk == "lambdamart-listwise":
                    importances = router.feature_importance()
            predictions[split.name] = preds
        nf = float("nan")
        summary_path = self.labels_dir / "summary.json"
        if summary_path.exists():
            nf = json.loads(summary_path.read_text()).get("noise_floor", {}).get("share_of_headroom", float("nan"))
        ev = evaluate_splits(U, splits, predictions, costs=self.pool.costs, no_retrieval=self._no_retrieval()[0],
                             queries=queries, gains=gains, noise_floor=nf, correction=ecfg["correction"],
                             k=ecfg["k"], n_resamples=ecfg["n_bootstrap"], random_state=self.config.seed)
        ev.meta["warnings"] = warned
        paths = write_report(ev, self.reports_dir)
        pdir = self.reports_dir / "plots"
        paths["plot_utility"] = plots.plot_utility(ev.table, pdir / "utility.png")
        paths["plot_headroom"] = plots.plot_headroom(ev.table, pdir / "headroom.png", no_retrieval=self._no_retrieval()[0])
        if not ev.by_type.empty:
            paths["plot_per_type"] = plots.plot_per_type(ev.by_type, pdir / "per_type.png")
        if importances:
            paths["plot_importance"] = plots.plot_feature_importance(importances, pdir / "feature_importance.png")
        paths["plot_cost"] = plots.plot_cost_utility(ev.table, ev.arms, pdir / "cost_utility.png")
        self._record("eval", fp, time.perf_counter() - t0)
        self.log(f"[eval] {len(splits)} splits x {len(predictions[splits[0].name])} routers in {time.perf_counter() - t0:.1f}s")
        return paths

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


def _wide(scores: pd.DataFrame) -> pd.DataFrame:
    """Router scores (qid, arm, score) as a qid x arm matrix."""
    return scores.pivot(index="qid", columns="arm", values="score")


def _read_meta(folder: Path) -> dict:
    p = folder / "meta.json"
    return json.loads(p.read_text()) if p.exists() else {}
