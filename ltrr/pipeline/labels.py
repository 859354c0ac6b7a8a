"""The label stage, its replicate labels and the export of a run's generations, over a `Run`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ltrr._checks import is_int
from ltrr._errors import ConfigError, DataError, LtrrError, NotBuiltError
from ltrr._log import bar
from ltrr.data.io import write_table_atomic
from ltrr.pipeline._common import input_fingerprint
from ltrr.pipeline.context import RunContext

__all__ = ["label_stage", "label_fingerprint", "label_fresh", "replicate_failed_items", "query_facts", "replicate_queries", "label_replicate",
           "export_generations", "check_label_settings", "check_config_names"]


def _label(run: RunContext, queries: pd.DataFrame, results: pd.DataFrame, *, template, **kwargs):
    """`ltrr.labels.label_queries` with the run's own settings: its seed, the ``[generation]``
    chunk size, prompt-token cap and decoding parameters of ``template``, and every arm of its pool."""
    from ltrr.labels import label_queries

    gcfg = run.config.generation
    kwargs.setdefault("arms", run.pool.arm_names)
    return label_queries(queries, results, template=template, seed=run.config.seed,
                         chunk_size=gcfg.chunk_size, max_prompt_tokens=gcfg.max_prompt_tokens or None,
                         params=template.default_params(max_new_tokens=gcfg.max_new_tokens), **kwargs)


def _progress(run: RunContext, fingerprint: str, phase: str, total: int, *, whole: bool,
              shard: tuple[int, int] | None = None):
    """The label stage's progress snapshot for ``ltrr status`` (`ltrr.progress`): the whole stage's,
    or a ``--shard I/N`` process's own (``ltrr status`` pools the shards'); none for a Dask task
    (many at once, on other machines)."""
    import contextlib

    from ltrr.progress import StageProgress, progress_path

    record = run.stage_record("label")
    if shard is not None:
        return StageProgress(progress_path(record, shard=shard), fingerprint=fingerprint, phase=phase, total=total)
    if not whole:
        return contextlib.nullcontext(None)
    return StageProgress(progress_path(record), fingerprint=fingerprint, phase=phase, total=total)


def _import_prebuilt(run: RunContext, cache) -> None:
    """``[generation] prebuilt`` into ``cache`` (checksummed; rows it holds already are kept)."""
    from ltrr.generation.prebuilt import import_prebuilt, prebuilt_path

    name = run.config.generation.prebuilt
    added = import_prebuilt(prebuilt_path(name), cache)
    run.log(f"[label] prebuilt generation cache {name!r}: sha256 verified, {added} new rows imported")


def _both(update, snap):
    return update if snap is None else (lambda n: (update(n), snap.update(n)))


def label_fingerprint(run: RunContext) -> str:
    """The fingerprint of the label stage's inputs: ``[labels]``, ``[generation]``, the retrieval."""
    lcfg = run.config.labels
    return input_fingerprint({"labels": lcfg.to_dict(), "generation": run.config.generation.to_dict(), "retrieve": run.fingerprint_of("retrieve"),
                              # the replicate's test part follows the protocol's partition
                              "partition": run.config.protocol.design_size if lcfg.replicate_template else None,
                              "queries": query_facts(run.dataset.queries)})


def check_label_settings(run: RunContext) -> None:
    """The label stage's names, checked before any stage runs (``ltrr label``, ``ltrr run``): a
    typo in ``[labels] metric``, ``[generation] template`` or a generator option failed only
    after the index and the retrieval were built.

    Raises
    ------
    ConfigError
        An unknown metric, template or generator option, naming the table.
    """
    from ltrr.config import backend_settings
    from ltrr.generation import check_generator_options, load_template
    from ltrr.metrics import parse_metric, parse_metrics

    lcfg, gcfg = run.config.labels, run.config.generation
    try:
        parse_metric(lcfg.metric)
        if lcfg.extra_metrics:
            parse_metrics(lcfg.extra_metrics)
        if lcfg.replicate_template:
            load_template(lcfg.replicate_template)
    except LtrrError as exc:
        raise ConfigError(f"[labels] {exc}") from None
    try:
        template = load_template(gcfg.template)
        check_generator_options(backend_settings(gcfg))
    except LtrrError as exc:
        raise ConfigError(f"[generation] {exc}") from None
    if lcfg.likelihood and template.answer_format != "plain":
        raise ConfigError(f"[labels] likelihood = true scores the bare gold answer, but [generation] template "
                          f"{gcfg.template!r} asks for a {template.answer_format} answer: use a plain-answer "
                          "template (short_answer, few_shot) or likelihood = false")


def check_config_names(run: RunContext, *, labelling: bool = True) -> None:
    """Every name a config gives that a registry or a file of a package above the config
    resolves, checked before any stage runs (``ltrr run``, ``ltrr label``, ``ltrr status``;
    ``ltrr features``, ``eval``, ``train`` and ``protocol`` with ``labelling=False``).

    The sections check ranges and fixed choices when the config loads (`ltrr._sections`); the
    names below live in the packages above the config, so they are looked up here, where a typo
    failed only after retrieval and labelling (hours on a real run). First
    `check_label_settings`; then ``[data] builder``, ``[labels] noise_floor_arm``, ``[features]
    set``, ``[train] ranker``, ``rankers`` and ``params``, ``[protocol] rankers``,
    ``feature_sets`` and ``routers``, ``[eval] splits`` and
    ``retrieval_measures``, ``[policy] params``, ``[agent] reward``, ``metric``,
    ``holdout_arms``, ``sft`` and ``grpo``.

    Parameters
    ----------
    run : RunContext
        The run whose config is checked.
    labelling : bool, default True
        False leaves out `check_label_settings` (the generator, its templates and the label
        metrics), for a command that reads the labels made already and generates nothing.

    Raises
    ------
    ConfigError
        The first unknown name, naming its table and key.
    """
    from ltrr.agent.grpo import GRPOSpec
    from ltrr.agent.reward_options import REWARDS
    from ltrr.agent.sft import SFTSpec
    from ltrr.data.build import BUILDERS
    from ltrr.eval.retrieval import expand_measures, parse_measures
    from ltrr.eval.splits import splitters
    from ltrr.features.spec import load_spec
    from ltrr.metrics import parse_metric
    from ltrr.policy.estimator import BudgetPolicy
    from ltrr.rankers import rankers
    from ltrr.routers import make_router, parse_router_spec

    if labelling:
        check_label_settings(run)
    cfg = run.config

    def named(where: str, check) -> None:
        try:
            check()
        except LtrrError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def one_of(where: str, name: str, known: Sequence[str], what: str) -> None:
        if name not in known:
            raise ConfigError(f"{where}: unknown {what} {name!r}; choose one of: {', '.join(known)}")

    if cfg.data.builder:
        one_of("[data] builder", cfg.data.builder, BUILDERS, "dataset builder")
    arms = [str(a.get("name")) for a in cfg.arms]
    if cfg.labels.noise_floor_arm:
        one_of("[labels] noise_floor_arm", cfg.labels.noise_floor_arm, arms, "arm")
    for i, arm in enumerate(cfg.agent.holdout_arms):
        one_of(f"[agent] holdout_arms[{i}]", arm, arms, "arm")
    named("[features] set", lambda: load_spec(cfg.features.set))
    for i, fs in enumerate(cfg.protocol.feature_sets):
        named(f"[protocol] feature_sets[{i}]", lambda fs=fs: load_spec(fs))
    for where, names in (("[train] ranker", [cfg.train.ranker]), ("[train] rankers", cfg.train.rankers),
                         ("[protocol] rankers", cfg.protocol.rankers)):
        for name in names:
            one_of(where, name, rankers.names(), "ranker")
    run.make_router("ltrr", cfg.train.ranker)  # builds nothing; checks [train] params (`Run.train_params`)
    for i, spec in enumerate(cfg.protocol.routers):
        where = f"[protocol] routers[{i}]"
        named(where, lambda spec=spec: parse_router_spec(spec))
        if parse_router_spec(spec)[0] in ("ltrr", "oracle"):  # as `ltrr.eval.headline` refuses them
            raise ConfigError(f"{where}: {spec!r}: give LTR rankers in [protocol] rankers; the oracle is no "
                              "candidate")
        named(where, lambda spec=spec: make_router(spec))  # an unknown router or parameter
    for name in cfg.eval.splits:
        one_of("[eval] splits", name, splitters.names(), "split family")
    if cfg.eval.retrieval_measures:
        ks = sorted({a["k"] for a in cfg.arms if is_int(a.get("k"))}) or [10]
        named("[eval] retrieval_measures", lambda: parse_measures(expand_measures(cfg.eval.retrieval_measures, ks)))
    # [policy] params go to BudgetPolicy beside the budget, trainer and seed the policy sets itself
    allowed = sorted(set(BudgetPolicy().get_params()) - {"budget", "trainer", "random_state"})
    unknown = sorted(set(cfg.policy.params) - set(allowed))
    if unknown:
        raise ConfigError(f"[policy] params: {unknown[0]!r} is not a BudgetPolicy parameter; its parameters: "
                          f"{', '.join(allowed)}")
    one_of("[agent] reward", cfg.agent.reward, REWARDS.names(), "reward")
    named("[agent] metric", lambda: parse_metric(cfg.agent.metric))
    SFTSpec.from_mapping(cfg.agent.sft)  # their messages name [agent] sft / grpo
    GRPOSpec.from_mapping(cfg.agent.grpo)


def replicate_failed_items(run: RunContext) -> int:
    """The failed items of ``labels/replicate.parquet`` when the config asks for a replicate."""
    path = run.labels_dir / "replicate.parquet"
    if not run.config.labels.replicate_template or not path.exists():
        return 0
    try:
        return int(pd.read_parquet(path, columns=["failed"])["failed"].astype(bool).sum())
    except (OSError, ValueError, KeyError):  # unreadable: not this stage's output, so label again
        return 1


def label_fresh(run: RunContext, fingerprint: str) -> bool:
    """Whether the label stage would skip: its record is of ``fingerprint`` and its tables exist,
    and the replicate labels have no failed item (a record written before their failed items were
    counted, as the main labels' are, vouched for a replicate with holes)."""
    return run.is_fresh("label", fingerprint, [run.labels_dir / "labels.parquet"]) and not replicate_failed_items(run)


def query_facts(queries: pd.DataFrame) -> str:
    """A digest of what the labels and every stage after them read of the queries besides their
    text (the retrieval hashes that): the gold answers the labels score, and the type, group and
    build round the partitions split by. Edited answers relabel; an edited type or group moves
    queries between parts, so every stage after the labels runs again."""
    from ltrr.data.trec import table_digest

    return table_digest(queries, [c for c in ("qid", "answers", "qtype", "group", "build_round") if c in queries])


def label_stage(run: RunContext, *, force: bool = False, use_cache: bool | None = None,
                tolerate_failures: bool | None = None, shard: tuple[int, int] | None = None,
                only: Sequence[str] | None = None, scheduler: str | None = None,
                scheduler_timeout: float = 30.0, generator=None, cache_only: bool = False) -> Path:
    """Label every (query, arm) with the utility gain of the arm's passages.

    With ``shard=(i, n)`` only every n-th query (from the i-th) is labelled, and its share of
    the replicate, to fill the shared generation cache from n processes at once; no labels
    table is written then. ``only`` (query ids) does the same for those queries (a Dask
    task). ``scheduler`` (``local[:N]`` or ``tcp://HOST:PORT``) first fills the cache on Dask
    workers (`ltrr.dist.label.fill_cache_on_dask`), then labels from it here. ``generator``
    (a `CachedGenerator`) replaces the configured one (a worker keeps its model loaded).
    ``cache_only`` labels from the generation cache alone (after the prebuilt import): nothing
    is generated, an item not in the cache is a failed item (tolerated), and the record says so,
    so the next run without it generates just those (a long labelling's finished part, e.g. its
    design part, can be labelled and pre-registered while the rest is still being generated).
    """
    from ltrr.generation import load_template
    from ltrr.labels import (
        raise_for_failures,
        summarise,
        summary_markdown,
        total_failed_items,
        write_labels,
    )
    from ltrr.metrics import parse_metric, parse_metrics

    lcfg, gcfg = run.config.labels, run.config.generation
    tolerate = lcfg.tolerate_failures if tolerate_failures is None else tolerate_failures
    ds = run.dataset
    if not ds.queries["answers"].map(len).any():
        raise DataError(f"stage label: the queries of {run.config.data.dataset} have no answers, so they can be "
                        "retrieved and evaluated for retrieval (ltrr retrieve) but not labelled; give [data] answers = "
                        "a JSONL/Parquet table of qid and answers")
    if not run.results_path.exists():
        raise NotBuiltError(f"stage label needs the retrieval results {run.results_path}; run the retrieve stage (ltrr run)")
    results = pd.read_parquet(run.results_path)
    pool = run.pool
    arms = pool.arm_names
    nr = [a.name for a in pool.arms if a.is_no_retrieval]
    if not nr:
        raise ConfigError("stage label: the pool needs a no-retrieval arm (retriever = \"none\"): gains are measured against it")
    noise_arm = None
    if lcfg.noise_floor:
        noise_arm = lcfg.noise_floor_arm or next(a.name for a in pool.arms if not a.is_no_retrieval)
    template = load_template(gcfg.template)
    fp = label_fingerprint(run)
    out = run.labels_dir / "labels.parquet"
    if cache_only and (scheduler or generator is not None or use_cache is False):
        raise ConfigError("stage label: cache only labels from the generation cache here: not with a scheduler, "
                          "another generator or the cache off")
    if scheduler and shard is None and only is None and (force or not label_fresh(run, fp)):
        from ltrr.dist.label import fill_cache_on_dask

        if gcfg.prebuilt and (gcfg.use_cache if use_cache is None else use_cache):
            from ltrr.generation.cache import GenerationCache

            with GenerationCache(run.cache_path) as cache:  # first, so the workers generate only what it lacks
                _import_prebuilt(run, cache)
        fill_cache_on_dask(run, scheduler, use_cache=use_cache, timeout=scheduler_timeout)
    if not force and shard is None and only is None and label_fresh(run, fp):
        run.log(f"[label] skipped: inputs unchanged, labels in {out}")
        return out
    retry = run.fingerprint_of("label") or ""
    if not force and shard is None and only is None and retry.startswith(f"{fp}:failed-"):
        run.log(f"[label] {retry.rsplit('-', 1)[1]} items failed last time: labelling again (they are "
                "generated again; every other item comes from the cache)")
    elif not force and shard is None and only is None and retry == fp and out.exists():
        run.log(f"[label] {replicate_failed_items(run)} replicate items failed last time (an older ltrr did not "
                "count them): labelling again (they are generated again; every other item comes from the cache)")
    try:
        metric = parse_metric(lcfg.metric)
        extras = parse_metrics(lcfg.extra_metrics) if lcfg.extra_metrics else []
    except LtrrError as exc:
        raise ConfigError(f"stage label: [labels] {exc}") from None
    given = generator is not None
    generator = generator if given else run.make_generator(use_cache=use_cache)
    if gcfg.prebuilt and generator.enabled and not given:
        _import_prebuilt(run, generator.cache)
    if cache_only:
        from ltrr.generation.cache import CachedGenerator

        generator = CachedGenerator(generator.generator, generator.cache, offline=True)
        tolerate = True
    judge = None
    if metric.needs_judge or any(m.needs_judge for m in extras):
        if not lcfg.judge:
            raise ConfigError("stage label: metric needs a judge; set [labels.judge] (a generator config)")
        from ltrr.generation import make_generator
        from ltrr.generation.cache import CachedGenerator

        judge = CachedGenerator(make_generator(lcfg.judge), generator.cache, enabled=generator.enabled)
    scorer = metric.bind(judge=judge)
    extra_scorers = {str(m): m.bind(judge=judge) for m in extras}
    queries = ds.queries
    own_shard = shard  # a --shard process (its own progress snapshot); not the Dask tasks' `only`
    if shard is not None:
        i, n = shard
        if not (0 <= i < n):
            raise ConfigError(f"--shard must be I/N with 0 <= I < N, got {i}/{n}")
        queries = queries.iloc[i::n].reset_index(drop=True)
    elif only is not None:
        queries = queries[queries["qid"].astype(str).isin(set(map(str, only)))].reset_index(drop=True)
        shard = (0, 1)  # cache only, as a shard
    n_items = len(queries) * len(arms)
    run.log(f"[label] start: {len(queries)} queries x {len(arms)} arms with {generator.identity}, "
             f"template {template.identity}, metric {metric}; cache {run.cache_path}")
    t0 = time.perf_counter()
    with bar(total=n_items, desc="label", unit="item") as pbar, \
            _progress(run, fp, "label", n_items, whole=shard is None, shard=own_shard) as snap:
        labelled = _label(
            run, queries, results, arms=arms, no_retrieval=nr[0], generator=generator,
            template=template, scorer=scorer, metric_name=str(metric), extra_scorers=extra_scorers,
            noise_arm=noise_arm, progress=_both(pbar.update, snap), likelihood=lcfg.likelihood,
        )
    summary = summarise(labelled.labels, labelled.noise, seed=run.config.seed)
    summary["generator_calls"] = generator.generator_calls
    summary["cache_hits"] = generator.hits
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    if shard is not None:
        if lcfg.replicate_template:  # the shard's share of the replicate, into the cache only
            label_replicate(run, ds.queries, results, arms, nr[0], generator, scorer, metric, extra_scorers,
                                  labelled.labels, only=set(queries["qid"].astype(str)), shard=own_shard)
            summary["generator_calls"] = generator.generator_calls
        run.log(f"[label] shard {shard[0]}/{shard[1]}: {summary['generator_calls']} generator calls "
                 f"in {summary['seconds']:.1f}s; cache {run.cache_path} (no labels table written)")
        return run.cache_path
    if lcfg.replicate_template:
        summary["replicate"] = label_replicate(run, queries, results, arms, nr[0], generator, scorer, metric,
                                                     extra_scorers, labelled.labels)
        if not summary.get("noise_floor"):
            # no permutation control (pointless with k = 1): the replicate measures the noise
            rep = summary["replicate"]
            summary["noise_floor"] = {
                "arm": f"every arm under {rep['template']}", "mean_abs_diff": rep["mean_abs_diff"],
                "disagreement_rate": rep["disagreement_rate"], "queries": rep["compared_queries"],
                "share_of_headroom": rep["mean_abs_diff"] / summary["headroom"] if summary["headroom"] > 0 else float("nan")}
        summary["generator_calls"], summary["cache_hits"] = generator.generator_calls, generator.hits
    run.stage_record("label").unlink(missing_ok=True)  # an older record never vouches for the tables below
    write_labels(labelled, summary, run.labels_dir)
    run.log(summary_markdown(summary))
    run.log(f"[label] {summary['generator_calls']} generator calls, {summary['cache_hits']} cache hits, "
             f"{summary['seconds']:.1f}s -> {out}")
    # the replicate's failed items count as the main labels' do: the protocol reads both
    failed = total_failed_items(summary)
    if cache_only and failed:
        rep_failed = failed - int(summary.get("failed_items", 0))
        run.log(f"[label] cache only: {failed} items are not served from the cache "
                "(missing, or cached in another context: failed items)"
                + (f", {rep_failed} of them replicate items" if rep_failed else "")
                + "; `ltrr label` without --cache-only generates them")
    # A failure does not make the stage fresh: it is recorded under another fingerprint, so the
    # next run labels again (retrying the failed items, the rest from the cache), and once they
    # succeed, the stages after it see the label fingerprint change and run again too. It is
    # recorded before an untolerated failure raises: the tables above are already this config's,
    # so a record of other inputs must not vouch for them.
    run.record("label", f"{fp}:failed-{failed}" if failed else fp, time.perf_counter() - t0,
               generator_calls=summary["generator_calls"])
    raise_for_failures(summary, tolerate)
    return out


def replicate_queries(run: RunContext, queries: pd.DataFrame) -> pd.DataFrame:
    """The queries of the replicate labels: the protocol's test part, or all."""
    lcfg = run.config.labels
    if lcfg.replicate == "all":
        return queries.reset_index(drop=True)
    if lcfg.replicate != "test":
        raise ConfigError(f"[labels] replicate must be 'test' or 'all', got {lcfg.replicate!r}")
    from ltrr.eval.protocol import design_test_partition

    part = design_test_partition(queries, design_size=run.config.protocol.design_size,
                                 random_state=run.config.seed)
    return queries[queries["qid"].astype(str).isin(set(part.test))].reset_index(drop=True)


def label_replicate(run: RunContext, queries, results, arms, no_retrieval, generator, scorer, metric, extra_scorers,
                     main: pd.DataFrame, only: set[str] | None = None,
                     shard: tuple[int, int] | None = None) -> dict:
    """Label ``arms`` again under ``[labels] replicate_template`` -> labels/replicate.parquet.

    ``only`` (a shard's query ids) labels just those replicate queries, to fill the cache:
    nothing is written then. ``shard`` (a ``--shard I/N`` process) writes that shard's progress
    snapshot.
    """
    from ltrr.generation import load_template

    lcfg = run.config.labels
    template = load_template(lcfg.replicate_template)
    sub = replicate_queries(run, queries)
    if only is not None:
        sub = sub[sub["qid"].astype(str).isin(only)].reset_index(drop=True)
        if sub.empty:  # a shard or chunk of design queries only: nothing of the replicate
            return {}
    run.log(f"[label] replicate: {len(sub)} queries x {len(arms)} arms with template {template.identity}")
    t0 = time.perf_counter()
    with bar(total=len(sub) * len(arms), desc="replicate", unit="item") as pbar, \
            _progress(run, label_fingerprint(run), "replicate", len(sub) * len(arms), whole=only is None,
                      shard=shard) as snap:
        rep = _label(run, sub, results, arms=arms, no_retrieval=no_retrieval, generator=generator,
                     template=template, scorer=scorer, metric_name=str(metric), extra_scorers=extra_scorers,
                     progress=_both(pbar.update, snap))
    if only is not None:
        return {}
    write_table_atomic(rep.labels, run.labels_dir / "replicate.parquet")
    # only the (query, arm) pairs labelled on both sides are compared: a failed item (a
    # `--cache-only` miss) has no utility, and the figures say how many queries they rest on
    ok_main = main.loc[~main["failed"].astype(bool), ["qid", "arm", "utility"]]
    ok_rep = rep.labels.loc[~rep.labels["failed"].astype(bool), ["qid", "arm", "utility"]]
    both = ok_main.merge(ok_rep, on=["qid", "arm"], suffixes=("", "_rep")).dropna(subset=["utility", "utility_rep"])
    diff = (both["utility"] - both["utility_rep"]).abs()
    failed = rep.labels["failed"].astype(bool)
    return {"template": template.identity, "queries": int(len(sub)), "part": lcfg.replicate,
            "compared_queries": int(both["qid"].nunique()),
            "failed_items": int(failed.sum()),
            "failed_queries": int(rep.labels.loc[failed, "qid"].nunique()),
            "mean_abs_diff": float(diff.mean()) if len(diff) else float("nan"),
            "disagreement_rate": float((diff > 1e-9).mean()) if len(diff) else float("nan"),
            "seconds": round(time.perf_counter() - t0, 1)}


def export_generations(run: RunContext, out: Path) -> dict:
    """Export exactly the generations the labelled run used (with prompts) as a prebuilt cache."""
    from ltrr.generation import load_template
    from ltrr.generation.prebuilt import RecordingGenerator, write_prebuilt
    from ltrr.metrics import parse_metric

    run.need("cache export", run.labels_dir / "labels.parquet", "label")
    lcfg, gcfg = run.config.labels, run.config.generation
    cached = run.make_generator(use_cache=True)
    rec = RecordingGenerator(cached.generator, cached.cache)
    pool = run.pool
    nr = [a.name for a in pool.arms if a.is_no_retrieval]
    noise_arm = (lcfg.noise_floor_arm or next(a.name for a in pool.arms if not a.is_no_retrieval)) if lcfg.noise_floor else None
    template = load_template(gcfg.template)
    results = pd.read_parquet(run.results_path)
    _label(run, run.dataset.queries, results, no_retrieval=nr[0], generator=rec, template=template,
           scorer=parse_metric("em").bind(), metric_name="em", noise_arm=noise_arm, likelihood=lcfg.likelihood)
    if lcfg.replicate_template:
        _label(run, replicate_queries(run, run.dataset.queries), results, no_retrieval=nr[0], generator=rec,
               template=load_template(lcfg.replicate_template), scorer=parse_metric("em").bind(), metric_name="em")
    from ltrr._version import __version__

    return write_prebuilt(rec.records, out, meta={"made_by": "ltrr label", "ltrr_version": __version__,
                                                  "config": run.config.source, "generator": rec.identity,
                                                  "template": template.identity, "queries": len(run.dataset.queries)})

