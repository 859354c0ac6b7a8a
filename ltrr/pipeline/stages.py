"""The registry of a run's stages, and the runner of `ltrr run`.

A `Stage` has a name, the fingerprint of its inputs, its outputs and ``execute(run, options)`` over the typed run context (`ltrr.pipeline.Run`). `run_stages` runs
the registered stages of a config in `RUN_ORDER` and prints what each stage reports; every
stage is also a command of its own (`Stage.command`, e.g. ``ltrr retrieve CONFIG``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ltrr._registry import Registry
from ltrr.pipeline.labels import label_fingerprint, label_fresh, replicate_failed_items
from ltrr.pipeline.run import Run

__all__ = ["Stage", "StageOptions", "stages", "RUN_ORDER", "run_stages", "stage_status", "protocol_docs",
           "route_hint", "results_notes", "headline_text"]

stages: Registry = Registry("stage")

# the order `ltrr run` runs them in
RUN_ORDER = ("data", "index", "retrieve", "label", "features", "eval", "train", "policy", "context", "agent",
             "headline")


@dataclass(frozen=True)
class StageOptions:
    """How `run_stages` runs each stage.

    Attributes
    ----------
    force : bool
        Redo a stage even when its inputs are unchanged.
    tolerate_failures : bool or None
        Label: go on when some generations failed (None: ``[labels] tolerate_failures``).
    """

    force: bool = False
    tolerate_failures: bool | None = None


@dataclass(frozen=True)
class Stage:
    """One stage of a run.

    Attributes
    ----------
    name : str
        The stage's name (its stage record is ``<workdir>/stages/<name>.json``).
    command : str
        The CLI command that runs this stage alone (``ltrr <command> CONFIG``).
    execute : callable
        ``execute(run, options) -> output``; skips itself when its inputs are unchanged.
    outputs : callable
        ``outputs(run) -> [Path, ...]``: what the stage writes.
    report : callable, optional
        ``report(run, outputs) -> str | None``: what `run_stages` prints after it; ``outputs``
        maps each stage run so far to its output.
    preamble : callable, optional
        ``preamble(run, outputs) -> str | None``: what `run_stages` prints before it.
    configured : callable, optional
        ``configured(run) -> bool``: whether the config asks for the stage (default: always).
    inputs : callable, optional
        ``inputs(run) -> str``: the fingerprint of the stage's inputs as they are now, which its
        stage record keeps; None for the stages that check their inputs themselves (data and
        index compare build parameters, the headline its protocol's inputs).
    record : callable, optional
        ``record(run) -> str``: the name of its stage record (default: the stage's name).
    fresh : callable, optional
        ``fresh(run, fingerprint) -> bool``: the stage's own test of `is_fresh`, for a stage whose
        outputs can be stale beyond its record (the features, shared by a config name).
    """

    name: str
    command: str
    execute: Callable[[Run, StageOptions], Any]
    outputs: Callable[[Run], list[Path]]
    report: Callable[[Run, dict], str | None] | None = None
    configured: Callable[[Run], bool] | None = None
    inputs: Callable[[Run], str] | None = None
    record: Callable[[Run], str] | None = None
    preamble: Callable[[Run, dict], str | None] | None = None
    fresh: Callable[[Run, str], bool] | None = None

    def fingerprint(self, run: Run) -> str | None:
        """The fingerprint of the stage's inputs now (None when the stage checks them itself)."""
        return None if self.inputs is None else self.inputs(run)

    def record_name(self, run: Run) -> str:
        """The name of the stage's record in ``run``: ``record(run)``, or the stage's name."""
        return self.name if self.record is None else self.record(run)

    def is_fresh(self, run: Run, fingerprint: str | None = None) -> bool:
        """Whether `execute` would skip: its inputs are those of its stage record and its outputs
        exist. ``fingerprint``: the stage's `fingerprint` when the caller has it already."""
        fp = self.fingerprint(run) if fingerprint is None else fingerprint
        if fp is None:
            return False
        if self.fresh is not None:
            return bool(self.fresh(run, fp))
        return run.is_fresh(self.record_name(run), fp, self.outputs(run))

    def is_configured(self, run: Run) -> bool:
        """Whether ``run``'s config asks for this stage (always, when ``configured`` is None)."""
        return True if self.configured is None else bool(self.configured(run))


def _register(stage: Stage) -> Stage:
    return stages.register(stage.name, stage)


def run_stages(run: Run, *, until: str | None = None, options: StageOptions = StageOptions(),
               out: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the configured stages in `RUN_ORDER` (up to and including ``until``), printing each
    stage's report with ``out``; returns each stage's output by name."""
    if until is not None:
        stages.get(until)  # an unknown name -> one clear error
    done: dict[str, Any] = {}
    for name in RUN_ORDER:
        stage = stages.get(name)
        if stage.is_configured(run):
            _say(out, stage.preamble, run, done)
            done[name] = stage.execute(run, options)
            _say(out, stage.report, run, done)
        if name == until:
            break
    return done


def stage_status(run: Run) -> list[dict[str, str]]:
    """Where each stage of `RUN_ORDER` stands, running none of them (``ltrr status``).

    One ``{"stage", "state", "detail"}`` per stage, ``state`` one of:

    - ``up to date``: `ltrr run` would skip it (`Stage.is_fresh`);
    - ``to run``: never run, an output is missing, or its inputs changed since its record (a long
      stage stopped part way says how far it got, `ltrr.progress`);
    - ``running``: a long stage (the labelling, the agent's eval) is running now, with how far it got and about how
      long is left (its progress snapshot);
    - ``waits``: an earlier stage whose record its inputs name is to run (`Run.records_read`),
      so whether it runs again is known only after that one;
    - ``built`` / ``to build`` for the data and index (they compare their build parameters when
      they run; every later stage waits on them), ``written`` / ``to run`` for the stages that
      check their own inputs when they run (the context and agent loops, the headline's
      protocol; each waits on any earlier stage to run);
    - ``not configured``: the config does not ask for it;
    - ``missing`` for the data when ``[data] dataset`` is no folder that exists and no builder
      makes it: `ltrr run` would fail at its first stage.

    Fingerprints only hash what the stages read (the queries, the records); nothing is computed.
    """
    from ltrr._errors import LtrrError
    from ltrr.data.irds import is_irds
    from ltrr.progress import describe_progress, describe_shards, progress_path, read_progress
    from ltrr.retrieval import Pool

    Pool.from_run_config(run.config)  # a bad pool (k = -3) is the error every stage would give, not "ready"
    rows: list[dict[str, str]] = []
    todo: list[str] = []  # the stages `ltrr run` would run, in order
    for name in RUN_ORDER:
        stage = stages.get(name)
        if not stage.is_configured(run):
            rows.append({"stage": name, "state": "not configured", "detail": ""})
            continue
        missing = [str(p) for p in stage.outputs(run) if not p.exists()]
        record = run.stage_record(stage.record_name(run))
        built = [t for t in todo if t in ("data", "index")]
        # the snapshot of a long stage checking its own inputs (the agent's eval names its folder)
        own = describe_progress(read_progress(progress_path(record))) if stage.inputs is None else None
        if name == "data" and missing and run.dataset_builder is None and not is_irds(run.config.data.dataset):
            # a folder that is not there and no builder to make it: the data stage would fail
            state, detail = "missing", f"no {missing[0]}, and no [data] builder to build it"
        elif name in ("data", "index"):
            state, detail = ("built", str(stage.outputs(run)[0])) if not missing else ("to build", f"no {missing[0]}")
        elif stage.inputs is None and own is not None and own[0] == "running":  # whatever the stages before say
            state, detail = own
        elif built or (stage.inputs is None and todo):
            state, detail = "waits", f"on {(built or todo)[0]}"
        elif stage.inputs is None:  # context, agent, headline: they check their inputs when they run
            state, detail = ("written", str(stage.outputs(run)[0])) if not missing else ("to run", f"no {missing[0]}")
            if own is not None and state == "to run":  # stopped part way: how far it got
                detail = own[1]
        else:
            fp = None
            with run.records_read() as reads:
                try:
                    fp = stage.fingerprint(run)
                    fresh = stage.is_fresh(run, fp)
                except LtrrError as exc:
                    fresh, missing = False, [str(exc)]
            upstream = [r for r in reads if r in todo]
            snap = describe_progress(read_progress(progress_path(record)), fp)  # a long stage's own snapshot
            if snap is None or snap[0] != "running":  # or its --shard processes' (ltrr label --shard I/N)
                snap = describe_shards(record, fp) or snap
            if upstream:
                state, detail = "waits", f"on {upstream[0]}"
            elif snap is not None and snap[0] == "running":  # even over a fresh record: ltrr label --force
                state, detail = snap
            elif fresh:
                state, detail = "up to date", _recorded(record)
            else:
                state = "to run"
                detail = _why_to_run(run, name, stage, record, fp, missing)
                if snap is not None:  # stopped part way: how far it got
                    detail = snap[1]
        if state in ("to run", "to build", "waits", "running", "missing"):
            todo.append(name)
        rows.append({"stage": name, "state": state, "detail": detail})
    return rows


def _why_to_run(run: Run, name: str, stage: Stage, record: Path, fp: str | None, missing: list[str]) -> str:
    """Why a stage that is not fresh would run: the status table's detail."""
    if not record.exists():
        return "never ran"
    if missing:
        return f"no {missing[0]}"
    recorded = run.fingerprint_of(stage.record_name(run)) or ""
    if fp is not None and recorded.startswith(f"{fp}:failed-"):  # the label stage records its failed items
        return f"{recorded.rsplit('-', 1)[1]} items failed when it ran ({_recorded(record)}); the next run generates them"
    if recorded != fp:
        return f"its inputs changed since it ran ({_recorded(record)})"
    failed = replicate_failed_items(run) if name == "label" else 0
    if failed:
        return f"{failed} replicate items failed when it ran ({_recorded(record)}); the next run generates them"
    return "its outputs were made of other inputs (another workdir of this config name, or an older ltrr)"


def check_inputs_current(run: Run, name: str) -> None:
    """Raise `NotBuiltError` when a stage whose record stage ``name`` reads is not up to date.

    One stage run alone (``ltrr train``, ``ltrr eval``) reads the outputs in the workdir as they
    are; when the labels there were made from other inputs (another config sharing the workdir,
    edited data), it would train on them and say "inputs unchanged". `ltrr run` needs no check:
    it runs the earlier stages first.
    """
    from ltrr._errors import NotBuiltError

    with run.records_read() as reads:
        stages.get(name).fingerprint(run)
    # a stage that never ran here is left to the stage itself, whose error names the file it needs
    recorded = [r for r in dict.fromkeys(reads) if run.stage_record(r).exists()]
    if not recorded:
        return
    rows = {r["stage"]: r for r in stage_status(run)}
    for read in recorded:
        row = rows.get(read)
        if row is not None and row["state"] in ("to run", "to build", "waits", "missing"):
            state = "waits" if row["state"] == "waits" else f"is {row['state']}"  # "label waits (on retrieve)"
            raise NotBuiltError(f"stage {name} reads the {read} stage's outputs in {run.workdir}, and {read} {state} "
                                f"({row['detail']}): they are not this config's; run `ltrr run CONFIG` "
                                f"(or `ltrr {read} CONFIG`) first")


def _recorded(record: Path) -> str:
    import time

    try:
        seconds = json.loads(record.read_text()).get("seconds")
    except (OSError, json.JSONDecodeError):
        return ""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.stat().st_mtime))
    return f"ran {when}" + (f", {seconds:g} s" if isinstance(seconds, (int, float)) else "")


def _say(out: Callable[[str], None], report: Callable[[Run, dict], str | None] | None, run: Run, done: dict) -> None:
    text = report(run, done) if report is not None else None
    if text is not None:
        out(text)


# ---- reports ------------------------------------------------------------------------------------
def route_hint(run: Run, model_dir: Path) -> str:
    """The trained router's folder and an `ltrr route` line to try it."""
    import shlex

    return (f"model: {model_dir}\n"
            f"try:   ltrr route {shlex.quote(str(model_dir))} {shlex.quote(run.example_question())}")


def results_notes(run: Run, paths: dict) -> str:
    """Where the full evaluation is: the tables and plots, not their cells."""
    results = run.reports_dir / "results.json"
    notes = json.loads(results.read_text()).get("notes", []) if results.exists() else []
    lines = [f"note: {note}" for note in notes]
    lines.append(f"\nfull tables (every router x split, Wilcoxon tests, headroom): {run.reports_dir / 'eval.md'}")
    lines += [f"plot:   {v}" for k, v in sorted(paths.items()) if k.startswith("plot_")]
    return "\n".join(lines)


def protocol_docs(run: Run, seeds: Sequence[int], *, force: bool = False, n_jobs: int | None = None) -> list[dict]:
    """`ltrr.eval.headline.run_protocol` for each seed (the replicate, when labelled, on the
    first), as `ltrr protocol` does."""
    from ltrr.eval.headline import run_protocol

    p = run.config.protocol
    rep_path = run.labels_dir / "replicate.parquet"
    replicate = None
    if rep_path.exists():
        import pandas as pd

        replicate = pd.read_parquet(rep_path)
    docs = []
    for seed in seeds:
        run.log(f"[protocol] seed {seed}: choosing on the design part ({p.design_size:.0%}) by {p.n_folds}-fold CV")
        docs.append(run_protocol(run, design_size=p.design_size, seed=seed, rankers=p.rankers,
                                 train_labels=p.train_labels, feature_sets=p.feature_sets or None,
                                 n_folds=p.n_folds, routers=p.routers, n_jobs=n_jobs or p.n_jobs,
                                 replicate=replicate if seed == run.config.seed else None, force=force))
    return docs


def headline_text(run: Run, doc: dict) -> str:
    """The main job's headline: the protocol on the config's seed."""
    import json

    from ltrr._cpu import reproducibility_note
    from ltrr.eval.headline import protocol_summary

    folder = run.workdir / "protocol" / f"seed-{run.config.seed}"
    text = f"\nHeadline ({folder}):\n" + protocol_summary([doc])
    try:  # where the figures were computed (the protocol writes it beside them)
        note = reproducibility_note(json.loads((folder / "environment.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        note = None
    return text + (f"\n{note}" if note else "")


def _recall_report(run: Run, done: dict) -> str | None:
    """The retrieval stage's tables, short: every measure over all judged queries, then the
    first per query type; every measure per type is in ``reports/retrieval.md``."""
    from ltrr._tables import markdown_table
    from ltrr.eval.retrieval import overview_table

    tables = run.retrieval_report()
    if tables is None:
        return None
    first, per_type = next(iter(tables.items()))
    return (f"\nRetrieval effectiveness of each arm (ir_measures, all judged queries):\n"
            f"{markdown_table(overview_table(tables))}\n"
            f"\n{first} per query type:\n{markdown_table(per_type)}\n"
            f"every measure per query type: {run.reports_dir / 'retrieval.md'}\n")


def _policy_report(run: Run, done: dict) -> str | None:
    from ltrr.policy.evaluate import budgets_markdown

    if done.get("policy") is None:
        return None
    return ("\nBudgeted routing policy (trained on the design part, measured on the test part):\n"
            + budgets_markdown(done["policy"], run.config.policy.trainers))


def _train_hint(run: Run, done: dict) -> str | None:
    # said before the headline's protocol runs, after the policy's table
    return route_hint(run, done["train"]) if "train" in done else None


def _headline_report(run: Run, done: dict) -> str:
    # the headline, then where the evaluation's tables are
    parts = [headline_text(run, done["headline"])]
    if "eval" in done:
        parts.append(results_notes(run, done["eval"]))
    return "\n".join(parts)


def _policy_enabled(run: Run) -> bool:
    return bool(run.config.policy.enabled)


def _stage_policy(run: Run, options: StageOptions) -> dict | None:
    from ltrr.policy.run import stage_policy

    return stage_policy(run, force=options.force)


def _policy_fingerprint(run: Run) -> str:
    from ltrr.policy.run import policy_fingerprint

    return policy_fingerprint(run)


def _policy_outputs(run: Run) -> list[Path]:
    from ltrr.policy.run import policy_outputs

    # eval.json and the saved policy's files (`ltrr route` / `ltrr serve` read them): a deleted
    # policy folder makes the stage run again
    return policy_outputs(run)


def _stage_context(run: Run, options: StageOptions) -> dict:
    from ltrr.context.agents_eval import run_context_agents

    return run_context_agents(run)


def _context_report(run: Run, done: dict) -> str:
    from ltrr.context.agents_eval import agents_text

    return "\nMulti-agent context loop:\n" + agents_text(done["context"])


def _stage_agent(run: Run, options: StageOptions) -> dict:
    from ltrr._log import progress_enabled
    from ltrr.agent.evaluate import evaluate_agent
    from ltrr.agent.stage import sft_policy

    policy: str | Path = run.config.agent.policy
    if not policy:
        policy, _ = sft_policy(run, force=options.force, log=run.log, show_progress=progress_enabled())
    return evaluate_agent(run, policy=str(policy), show_progress=progress_enabled())


def _agent_report(run: Run, done: dict) -> str:
    from ltrr.agent.evaluate import eval_markdown

    doc = done["agent"]
    return f"\nMulti-round router (its policy against the baselines, test part):\n{eval_markdown(doc)}\nreport: {doc['folder']}/eval.md"


# ---- the stages, in run order --------------------------------------------------------------------
_register(Stage("data", "data build", lambda run, o: run.stage_data(force=False), lambda run: [run.dataset_path]))
_register(Stage("index", "index", lambda run, o: run.stage_index(), lambda run: [run.index_dir]))
_register(Stage("retrieve", "retrieve", lambda run, o: run.stage_retrieve(force=o.force),
                lambda run: [run.results_path], report=_recall_report, inputs=lambda run: run.retrieve_fingerprint()))
_register(Stage("label", "label", lambda run, o: run.stage_label(force=o.force, tolerate_failures=o.tolerate_failures),
                lambda run: [run.labels_dir / "labels.parquet"], inputs=label_fingerprint, fresh=label_fresh))
_register(Stage("features", "features", lambda run, o: run.stage_features(force=o.force),
                lambda run: [run.features_dir / "raw.parquet"], inputs=lambda run: run.features_fingerprint(),
                fresh=lambda run, fp: run.features_fresh(fp)))
_register(Stage("eval", "eval", lambda run, o: run.stage_eval(force=o.force), lambda run: [run.reports_dir / "results.csv"],
                inputs=lambda run: run.eval_fingerprint()))
_register(Stage("train", "train", lambda run, o: run.stage_train(force=o.force),
                lambda run: [run.workdir / "models" / run.config.train.ranker / f for f in ("router.json", "generator.json")],
                inputs=lambda run: run.train_fingerprint(), record=lambda run: f"train-{run.config.train.ranker}"))
_register(Stage("policy", "policy train", _stage_policy, _policy_outputs, report=_policy_report,
                configured=_policy_enabled, inputs=_policy_fingerprint))
_register(Stage("context", "context run", _stage_context, lambda run: [run.workdir / "context" / "agents.csv"],
                report=_context_report, configured=lambda run: bool(run.config.context.enabled)))


def _agent_outputs(run: Run) -> list[Path]:
    policy = run.config.agent.policy
    return [run.workdir / "agent" / f"eval-{Path(policy).name if policy else 'sft'}" / "eval.json"]


_register(Stage("agent", "agent sft + agent eval", _stage_agent, _agent_outputs, report=_agent_report,
                configured=lambda run: bool(run.config.agent.enabled)))
_register(Stage("headline", "protocol",
                lambda run, o: protocol_docs(run, [run.config.seed], force=o.force)[0],
                lambda run: [run.workdir / "protocol" / f"seed-{run.config.seed}" / "headline.json"],
                report=_headline_report, preamble=_train_hint))
