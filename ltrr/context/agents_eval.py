"""`ltrr context run`: the agent loop's context strategies compared on a run's questions.

`run_context_agents` loads a run and a router of its ``[train] ranker`` (see below), takes the first ``N`` questions by qid of the protocol's test part
(`ltrr.pipeline.Run.protocol_partition`: the one ``ltrr protocol`` pre-registered when it has
run, else the same partition of every query; optionally of one query type), and answers each
with the agent loop (`ltrr.context.agents.ContextLoop`) under every strategy, plus a closed-book
baseline (the generator alone, no context). The Searcher routes with the router fitted on the
protocol's design part alone (``router_part="design"``, the default: ``<workdir>/models/<ranker>-design``,
which `ltrr.pipeline.Run.stage_train` fits here when it is missing or stale, as ``ltrr train --part
design`` does), so it has seen no label of a test question. ``router_part="all"``
(``--router-part all``) routes with the router ``ltrr train`` fits on every labelled query, the test
part included: in-sample for every test question, a comparison between strategies that share it
and not a held-out measure (how session 11's SmolLM2 figures were made).

Per question and strategy (`compare_strategies`): prompt tokens per agent and in total (the
generator's own counts), ``generation_s`` (the generator's recorded seconds over every call,
cache hits counted at the latency of the call they replay, which compares strategies fairly),
rounds, the empty contexts a budget caused, and the final answer's ``contains``, ``f1`` and
``em`` against the gold answers, plus ``utility`` (the ``[labels] metric``) and ``aqs`` only
when ``[labels.judge]`` is configured.

The tables hold no wall time: the same config and seed give identical tables. Wall time
(``runtime_s``, with the generation cache, so a strategy replaying calls an earlier one made is
faster than it would be alone) goes to ``agents_timings.json`` beside them (per strategy, per
question, and the whole run). ``generation_s`` stays in the tables because it is read from the
generation records: a warm cache replays the same seconds on every run; only the run that
makes a call records its seconds, as it records the call's text.

Per strategy (`summarise`): the means, the relative token saving against ``full-context``
(``1 - tokens / full-context tokens`` on the same questions), and two paired tests on
``utility``:

- does ``full-context`` beat closed-book? (`ltrr.eval.stats.paired_wilcoxon`, two-sided, and a
  higher mean); if not (p >= 0.05), the loop's context does not measurably help on these
  questions, and the non-inferiority comparison below is labelled ``inconclusive``;
- is ``rcr-iterative`` non-inferior to ``full-context`` within a margin of 0.02? A one-sided
  paired t-test of ``rcr - full + 0.02 > 0`` (``scipy.stats.ttest_rel``, ``alternative =
  "greater"``); ``non-inferior`` when p < 0.05, else ``not non-inferior``.

Outputs (atomic): ``<workdir>/context/agents_per_query.parquet``, ``agents.csv`` and
``agents_timings.json``; on the
design part (``part="design"``, where budgets and rounds are chosen) under
``<workdir>/context/design-B<base budget>-T<rounds>/``.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr.context.agents import ContextLoop
from ltrr.packing.strategies import AGENTS, MAX_ROUNDS, LoopSpec, strategies

__all__ = ["CLOSED_BOOK", "MARGIN", "ROUTER_PARTS", "agent_questions", "agents_text", "compare_strategies", "run_context_agents", "score_answers",
           "summarise", "timings_doc"]

CLOSED_BOOK = "closed-book"
MARGIN = 0.02  # the non-inferiority margin of rcr-iterative against full-context, in utility
ROUTER_PARTS = ("design", "all")  # the part the Searcher's router is fitted on: the design part, or every query
ALPHA = 0.05
LEXICAL = ("contains", "f1", "em")


def compare_strategies(questions: pd.DataFrame, *, generator, search, spec: LoopSpec | None = None,
                       strategy_names: Sequence[str] | None = None, template="short_answer", params=None,
                       embedder=None, max_prompt_tokens: int | None = None, closed_book: bool = True,
                       progress: bool = False, return_timings: bool = False):
    """Answer every question with every strategy (and closed-book): one row per pair.

    ``questions`` has ``qid`` and ``question`` (and optionally ``qtype``); the other arguments
    are those of `ContextLoop`. Strategies not in ``spec.strategies`` may be named in
    ``strategy_names`` (the command line's ``--strategies``).

    Returns the table, the same for the same inputs and generation cache; with
    ``return_timings=True``, ``(table, timings)``, where ``timings`` holds each row's wall time
    (``qid``, ``strategy``, ``runtime_s``), kept out of the table because it differs between runs.
    """
    from ltrr._log import bar
    from ltrr.generation import answer_with_fallback, load_template

    spec = (spec or LoopSpec()).validate()
    names = list(strategy_names or spec.strategies)
    for n in names:
        strategies.get(n)
    for col in ("qid", "question"):
        if col not in questions.columns:
            raise DataError(f"questions table has no column {col!r}; it has {', '.join(map(str, questions.columns))}")
    template = load_template(template)
    params = params or template.default_params()
    loops = {n: ContextLoop(generator, search=search, strategy=n, spec=spec, template=template, params=params,
                            embedder=embedder, max_prompt_tokens=max_prompt_tokens) for n in names}
    rows, times = [], []
    for q in bar(list(questions.itertuples(index=False)), desc="context run", unit="question", disable=not progress):
        base = {"qid": str(q.qid), "question": str(q.question)}
        if "qtype" in questions.columns:
            base["qtype"] = str(q.qtype)
        if closed_book:
            t0 = time.perf_counter()
            res = answer_with_fallback(generator, template, str(q.question), None, params,
                                       max_prompt_tokens=max_prompt_tokens)
            rows.append({**base, "strategy": CLOSED_BOOK, "rounds": 0, "answer": res.answer, "error": res.error,
                         **{f"prompt_tokens_{a}": np.nan for a in AGENTS}, "prompt_tokens": res.prompt_tokens,
                         "generation_s": float(sum(g.latency_s for g in res.generations)), "subquestions": "",
                         "arms": "", "empty_contexts": 0, "empty_note": "", "memory_items": 0, "memory_log": "",
                         "turns": "[]"})
            times.append({"qid": base["qid"], "strategy": CLOSED_BOOK, "runtime_s": time.perf_counter() - t0})
        for loop in loops.values():
            result = loop.answer(str(q.question))
            rows.append({**base, **result.to_row()})
            times.append({"qid": base["qid"], "strategy": result.strategy, "runtime_s": float(result.runtime_s)})
    table = pd.DataFrame(rows)
    if return_timings:
        return table, pd.DataFrame(times, columns=["qid", "strategy", "runtime_s"])
    return table


def timings_doc(timings: pd.DataFrame, total_s: float | None = None) -> dict:
    """``agents_timings.json``: wall time per strategy (mean ``runtime_s`` over its questions) and
    per (question, strategy) row, apart from the tables because it differs between runs."""
    per_strategy = [{"strategy": str(s), "questions": int(len(g)), "runtime_s": float(g["runtime_s"].mean())}
                    for s, g in timings.groupby("strategy", sort=False)]
    doc: dict[str, Any] = {
        "note": "wall-clock seconds with the generation cache (a replayed call is fast); not part of the "
                "tables, which are the same on every run of the same config and seed",
        "per_strategy": per_strategy,
        "per_query": [{"qid": str(r.qid), "strategy": str(r.strategy), "runtime_s": float(r.runtime_s)}
                      for r in timings.itertuples(index=False)]}
    if total_s is not None:
        doc["total_s"] = float(total_s)
    return doc


def score_answers(per_query: pd.DataFrame, golds: Mapping[str, Sequence[str]], *, metric: str = "f1",
                  judge=None) -> pd.DataFrame:
    """Add ``contains``, ``f1``, ``em``, ``utility`` (``metric``) and, with a judge, ``aqs``.

    A failed answer (None) is not scored: its values are NaN.
    """
    from ltrr.metrics import parse_metric

    m = parse_metric(metric)
    if m.needs_judge and judge is None:
        raise ConfigError(f"metric {m} needs an LLM judge; set [labels.judge] (a generator config)")
    out = per_query.copy()
    ok = out["answer"].map(lambda a: isinstance(a, str)).to_numpy()
    qs = out.loc[ok, "question"].astype(str).tolist()
    preds = out.loc[ok, "answer"].tolist()
    refs = []
    for qid in out.loc[ok, "qid"]:
        gold = golds.get(str(qid))
        if gold is None or len(gold) == 0:
            raise DataError(f"query {qid!r} has no gold answers to score against")
        refs.append([str(a) for a in gold])
    scorers = {name: parse_metric(name).bind(judge=None) for name in LEXICAL}
    if str(m) not in LEXICAL:
        scorers["utility"] = m.bind(judge=judge)
    if judge is not None:
        scorers["aqs"] = parse_metric("aqs").bind(judge=judge)
    for name, scorer in scorers.items():
        col = np.full(len(out), np.nan)
        if qs:
            col[ok] = scorer.score_details(qs, preds, refs).values
        out[name] = col
    if str(m) in LEXICAL:
        out["utility"] = out[str(m)]
    return out


def _ttest_greater(d: np.ndarray) -> float:
    """One-sided paired t-test p of mean(d) > 0 (``d`` already holds rcr - full + margin)."""
    from scipy.stats import ttest_rel

    if len(d) < 2:
        return float("nan")
    if np.ptp(d) == 0:  # no variance: the sign of the constant difference decides
        return 0.0 if d[0] > 0 else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_rel(d, np.zeros_like(d), alternative="greater").pvalue)


def summarise(per_query: pd.DataFrame, *, margin: float = MARGIN, alpha: float = ALPHA) -> pd.DataFrame:
    """One row per strategy: means, token saving against full-context, the paired comparisons."""
    from ltrr.eval.stats import paired_wilcoxon

    cols = ["rounds", "prompt_tokens", *[f"prompt_tokens_{a}" for a in AGENTS],
            *[c for c in ("generation_s", *LEXICAL, "aqs", "utility") if c in per_query.columns]]
    wide = {s: g.set_index("qid") for s, g in per_query.groupby("strategy", sort=False)}
    full = wide.get("full-context")
    closed = wide.get(CLOSED_BOOK)
    beats = None
    p_closed = float("nan")
    if full is not None and closed is not None and "utility" in per_query.columns:
        pair = pd.concat([full["utility"], closed["utility"].reindex(full.index)], axis=1).dropna()
        if len(pair):
            f, c = pair.iloc[:, 0].to_numpy(float), pair.iloc[:, 1].to_numpy(float)
            w = paired_wilcoxon(f, c)
            p_closed = w.pvalue
            # the test's side (its signed ranks) and the mean must both favour full-context
            beats = bool(p_closed < alpha and w.direction > 0 and f.mean() > c.mean())
    rows = []
    for s, g in wide.items():
        row = {"strategy": s, "questions": len(g), **{c: float(g[c].mean()) for c in cols},
               "empty_contexts": int(g["empty_contexts"].sum()), "failed": int(g["error"].notna().sum())}
        if full is not None:
            tok = pd.concat([g["prompt_tokens"], full["prompt_tokens"].reindex(g.index)], axis=1).dropna()
            denom = float(tok.iloc[:, 1].mean()) if len(tok) else float("nan")
            row["token_saving"] = 1.0 - float(tok.iloc[:, 0].mean()) / denom if denom else float("nan")
            if "utility" in g:
                u = pd.concat([g["utility"], full["utility"].reindex(g.index)], axis=1).dropna()
                row["delta_utility"] = float((u.iloc[:, 0] - u.iloc[:, 1]).mean()) if len(u) else float("nan")
        row["p_vs_closed_book"] = p_closed if s == "full-context" else float("nan")
        row["p_noninferior"] = float("nan")
        row["comparison"] = ""
        if s == "full-context" and beats is not None:
            row["comparison"] = "beats closed-book" if beats else "inconclusive"
        if s == "rcr-iterative" and full is not None and "utility" in g:
            u = pd.concat([g["utility"], full["utility"].reindex(g.index)], axis=1).dropna()
            row["p_noninferior"] = _ttest_greater((u.iloc[:, 0] - u.iloc[:, 1]).to_numpy(float) + margin)
            if beats is False:
                row["comparison"] = "inconclusive"
            elif np.isfinite(row["p_noninferior"]):
                row["comparison"] = "non-inferior" if row["p_noninferior"] < alpha else "not non-inferior"
        rows.append(row)
    return pd.DataFrame(rows)


def agent_questions(run, n: int = 60, *, qtype: str | None = None, seed: int | None = None,
                    part: str = "test") -> tuple[pd.DataFrame, str]:
    """The questions of `run_context_agents` and where they come from (see the module docstring).

    ``part`` is ``"test"`` (where strategies are measured) or ``"design"`` (where settings such
    as the budgets are chosen). The partition is the protocol's (`ltrr.eval.protocol.
    design_test_partition` of every query, ``[protocol] design_size``, seed ``seed``; the
    queries without complete labels left out once `ltrr protocol` has run): the one it
    pre-registered, and the multi-round router's (`ltrr agent eval`) before it has run.
    """
    check_int(n, "--questions", low=1)
    qids, source = run.protocol_part(part, seed=seed)
    q = run.dataset.queries
    q = q[q["qid"].isin(qids)]
    q = q[q["answers"].map(len) > 0]
    if qtype is not None:
        types = sorted(set(q["qtype"].astype(str))) if "qtype" in q.columns else []
        if qtype not in types:
            raise ConfigError(f"--qtype: no question of type {qtype!r}; types: {', '.join(types) or 'none'}")
        q = q[q["qtype"].astype(str) == qtype]
        source += f", type {qtype}"
    q = q.sort_values("qid", kind="stable").head(n).reset_index(drop=True)
    if q.empty:
        raise DataError(f"no question with gold answers in {source}")
    return q, source


def agents_text(doc: dict) -> str:
    """What `ltrr context run` prints of a `run_context_agents` result: its questions, router and
    utility, the strategies' table and where the tables are."""
    return (f"questions: {doc['source']}; router {doc['router']}; utility = {doc['metric']}\n"
            + doc["table"].to_string(index=False, float_format=lambda x: f"{x:.4g}") + f"\n\ntables: {doc['out']}")


def run_context_agents(run, *, strategy_names: Sequence[str] | None = None, n_questions: int = 60,
                       rounds: int | None = None, budget: int | None = None, qtype: str | None = None,
                       part: str = "test", out_dir: str | Path | None = None,
                       router_part: str = "design") -> dict:
    """Compare the strategies on a run (see the module docstring).

    Returns ``{"per_query", "table", "timings", "source", "metric", "router", "out"}`` and writes
    ``agents_per_query.parquet``, ``agents.csv`` and ``agents_timings.json`` (wall time, apart
    from the tables) under ``<workdir>/context/``.
    """
    from dataclasses import replace

    from ltrr._log import progress_enabled
    from ltrr.context.agents import RoutedSearch, pool_embedder
    from ltrr.data.io import write_table_atomic, write_text_atomic
    from ltrr.generation import load_template
    from ltrr.routers.ltr import LTRRouter
    from ltrr.routers.pipeline import RoutedPipeline

    spec = LoopSpec.from_mapping(run.config.context)
    for flag, v, lo, hi in (("--rounds", rounds, 1, MAX_ROUNDS), ("--token-budget", budget, 0, None)):
        if v is not None:
            check_int(v, flag, low=lo, high=hi)
    if rounds is not None:
        spec = replace(spec, rounds=rounds)
    if budget is not None:
        spec = replace(spec, base_budget=budget)
    if strategy_names is not None:
        spec = replace(spec, strategies=tuple(strategy_names))
    spec = spec.validate()
    ranker = run.config.train.ranker
    if router_part not in ROUTER_PARTS:
        raise ConfigError(f"--router-part must be one of {', '.join(ROUTER_PARTS)}, got {router_part!r}")
    if router_part == "design":  # held out from every test question; fitted once, then skipped
        model = run.stage_train(ranker, part="design")
    else:
        model = run.workdir / "models" / ranker
        if not (model / "router.json").is_file():
            raise NotBuiltError(f"no trained router at {model}: run `ltrr train {run.config.source or 'CONFIG'}` "
                                "first (with --router-part all the Searcher routes with it)")
    questions, source = agent_questions(run, n_questions, qtype=qtype, part=part)
    router = LTRRouter.load(model)
    gcfg, lcfg = run.config.generation, run.config.labels
    generator = run.make_generator()
    pipeline = RoutedPipeline.from_router(router)
    pool = pipeline.pool
    if any(a.is_packed for a in pool.arms):  # packed arms count the run generator's tokens
        pool.count_tokens = generator.count_tokens
    embedder = pool_embedder(pool)
    template = load_template(gcfg.template)
    params = template.default_params(max_new_tokens=gcfg.max_new_tokens)
    judge = None
    if lcfg.judge:
        from ltrr.generation import make_generator
        from ltrr.generation.cache import CachedGenerator

        judge = CachedGenerator(make_generator(lcfg.judge), generator.cache, enabled=generator.enabled)
    search = RoutedSearch(pipeline)
    first = str(questions["question"].iloc[0])
    search(first)  # load what the first route and embedding load, before any runtime is measured
    if embedder is not None:
        embedder.texts([first])
    t0 = time.perf_counter()
    run.log(f"[context] start: {len(questions)} questions from {source}, strategies {', '.join(spec.strategies)} "
            f"and closed-book, {spec.rounds} round(s), base budget {spec.base_budget}, router {model.name}, "
            f"{generator.identity}")
    per_query, timings = compare_strategies(questions, generator=generator, search=search, spec=spec,
                                            template=template, params=params, embedder=embedder,
                                            max_prompt_tokens=gcfg.max_prompt_tokens or None,
                                            progress=progress_enabled(), return_timings=True)
    golds = {str(k): list(v) for k, v in zip(questions["qid"], questions["answers"], strict=True)}
    per_query = score_answers(per_query, golds, metric=lcfg.metric, judge=judge)
    table = summarise(per_query)
    out = Path(out_dir) if out_dir else run.workdir / "context"
    if part == "design" and not out_dir:  # one folder per setting tried on design questions
        out = out / f"design-B{spec.base_budget}-T{spec.rounds}"
    total_s = time.perf_counter() - t0
    write_table_atomic(per_query, out / "agents_per_query.parquet")
    write_text_atomic(out / "agents.csv", table.to_csv(index=False))
    write_text_atomic(out / "agents_timings.json", json.dumps(timings_doc(timings, total_s), indent=1) + "\n")
    run.log(f"[context] {len(per_query)} (question, strategy) rows in {total_s:.1f}s, "
            f"{generator.generator_calls} generator calls, {generator.hits} cache hits -> {out / 'agents.csv'}")
    return {"per_query": per_query, "table": table, "timings": timings, "source": source, "metric": str(lcfg.metric),
            "router": model.name, "out": out}
