"""Utility labels: how much each arm's passages improve the LLM's answer over no retrieval.

For query x, arm i and utility metric mu (``f1`` by default):

- the gain is ``delta_i = mu(G(x_i), y) - mu(G(x), y)``, where ``G(x)`` answers without
  retrieval, so the no-retrieval arm has gain 0;
- gains are min-max normalised per query into [0, 1];
- when all gains of a query are equal, every normalised gain is 0 and the query is a *tie*.

Labelling is the expensive part of the pipeline (one generation per query and arm, plus
fallbacks and judge calls), so every generation goes through the SQLite cache: a re-run after
an interruption only generates what is missing, a warm re-run generates nothing, and the final
table is written atomically and only once everything is labelled.

The noise-floor control labels one extra pseudo-arm: the passages of a reference arm in another
(seeded) order. Utility differences between the two measure how much of the oracle headroom is
generator noise rather than retrieval quality.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ltrr._errors import ConfigError, DataError, GenerationError
from ltrr.data.io import write_table_atomic, write_text_atomic

__all__ = ["normalise_gains", "label_queries", "summarise", "total_failed_items", "LabelRun", "NOISE_SUFFIX"]

NOISE_SUFFIX = "~permuted"
LABEL_COLUMNS = [
    "qid", "arm", "utility", "gain", "norm_gain", "tie", "answer", "raw_output", "used_fallback",
    "failed", "error", "n_passages", "truncated_passages", "prompt_tokens", "completion_tokens",
    "generator", "metric", "template",
]


def normalise_gains(utility: np.ndarray, baseline: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """Gains over the no-retrieval baseline and their per-query min-max normalisation.

    Parameters
    ----------
    utility : array of shape (n_arms,)
        Utility of each arm's answer (the no-retrieval arm included).
    baseline : float
        Utility of the no-retrieval answer.

    Returns
    -------
    gain, norm_gain, tie
        ``norm_gain`` is in [0, 1]; when all gains are equal it is all zeros and ``tie`` is True.

    Examples
    --------
    >>> g, n, tie = normalise_gains(np.array([0.5, 1.0, 0.0]), baseline=0.5)
    >>> g.tolist(), n.tolist(), tie
    ([0.0, 0.5, -0.5], [0.5, 1.0, 0.0], False)
    >>> normalise_gains(np.array([0.2, 0.2]), 0.2)[1:]
    (array([0., 0.]), True)
    """
    utility = np.asarray(utility, dtype=float)
    gain = utility - float(baseline)
    lo, hi = gain.min(), gain.max()
    if np.isclose(hi, lo, rtol=0.0, atol=1e-12):
        return gain, np.zeros_like(gain), True
    return gain, (gain - lo) / (hi - lo), False


def _permute(qid: str, n: int, seed: int) -> list[int]:
    """A seeded permutation of the passages that differs from the identity when n > 1."""
    if n < 2:
        return list(range(n))
    h = int.from_bytes(hashlib.sha256(f"{seed}:{qid}:noise".encode()).digest()[:8], "big")
    perm = list(np.random.default_rng(h).permutation(n))
    if perm == list(range(n)):
        perm = perm[::-1]
    return [int(i) for i in perm]


@dataclass
class LabelRun:
    """What one labelling call produced."""

    labels: pd.DataFrame
    noise: pd.DataFrame
    counters: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def label_queries(
    queries: pd.DataFrame,
    results: pd.DataFrame,
    *,
    arms: Sequence[str],
    no_retrieval: str,
    generator,
    template,
    scorer,
    metric_name: str,
    extra_scorers: dict[str, Any] | None = None,
    noise_arm: str | None = None,
    seed: int = 0,
    chunk_size: int = 8,
    max_prompt_tokens: int | None = None,
    params=None,
    progress: Callable[[int], None] | None = None,
    likelihood: bool = False,
) -> LabelRun:
    """Generate and score an answer for every (query, arm); compute gains.

    Parameters
    ----------
    queries : DataFrame
        ``qid``, ``question``, ``answers`` (non-empty lists of strings).
    results : DataFrame
        The pool's results: ``qid, arm, rank, docid, score, text``.
    arms : sequence of str
        Arms to label, the no-retrieval arm included.
    no_retrieval : str
        Name of the no-retrieval arm (the baseline ``G(x)``).
    generator : Generator
        Usually a `ltrr.generation.CachedGenerator`.
    template : PromptTemplate
        Prompt template (`ltrr.generation.load_template`).
    scorer, extra_scorers
        Bound metric scorers (`ltrr.metrics.Metric.bind`) for the utility and extra columns.
    noise_arm : str, optional
        Reference arm of the noise-floor control (its passages, permuted).
    chunk_size : int
        Queries per generator batch: the cache commits after each, so a kill loses at most one.
    params : DecodingParams, optional
        Decoding parameters (default: the template's; greedy).
    progress : callable, optional
        Called with the number of (query, arm) items finished after each chunk.
    likelihood : bool
        Also score every item by the generator's mean per-token log-probability of the best
        gold alias after the item's prompt (teacher forcing; `Generator.score`, cached): columns
        ``likelihood``, ``likelihood_gain`` (over the no-retrieval prompt) and
        ``likelihood_norm_gain`` (min-max per query, like ``norm_gain``).
    """
    from ltrr.generation import answer_batch

    if no_retrieval not in arms:
        raise ConfigError(f"the no-retrieval arm {no_retrieval!r} must be among the labelled arms")
    if likelihood and template.answer_format != "plain":
        raise ConfigError(f"the likelihood label scores the bare gold answer after the prompt, but the template "
                          f"{template.identity!r} asks for a {template.answer_format} answer (<answer> tags): "
                          "use a plain-answer template (short_answer, few_shot) or likelihood = false")
    if noise_arm is not None and (noise_arm not in arms or noise_arm == no_retrieval):
        raise ConfigError(f"noise-floor arm {noise_arm!r} must be a retrieval arm of the pool")
    for qid, ans in zip(queries["qid"], queries["answers"], strict=True):
        if len(ans) == 0:
            raise DataError(f"query {qid!r} has an empty answer list: labels need gold answers")
    # only the labelled queries' rows: a resumable run labels a few queries per call, and grouping
    # the whole pool's results each time took some 8% of a relabelling core (py-spy, 60 s: llama.cpp's
    # decode held 90% of the samples before, 99% after)
    mine = results[results["qid"].isin(set(queries["qid"]))]
    passages: dict[tuple[str, str], list[str]] = {
        key: grp.sort_values("rank")["text"].tolist() for key, grp in mine.groupby(["qid", "arm"], sort=False)
    }
    t0 = time.perf_counter()
    rows: list[dict] = []
    noise_rows: list[dict] = []
    provenance = {"generator": generator.identity, "metric": metric_name, "template": template.identity}
    qs = queries.reset_index(drop=True)
    for start in range(0, len(qs), chunk_size):
        chunk = qs.iloc[start : start + chunk_size]
        items, keys = [], []
        for qid, question in zip(chunk["qid"], chunk["question"], strict=True):
            for arm in arms:
                docs = None if arm == no_retrieval else passages.get((qid, arm), [])
                items.append((question, docs))
                keys.append((qid, arm, False))
            if noise_arm is not None:
                docs = passages.get((qid, noise_arm), [])
                items.append((question, [docs[i] for i in _permute(qid, len(docs), seed)]))
                keys.append((qid, noise_arm + NOISE_SUFFIX, True))
        answers = answer_batch(generator, template, items, params, max_prompt_tokens=max_prompt_tokens)
        ok = [i for i, a in enumerate(answers) if a.ok]
        ans_by_qid = dict(zip(chunk["qid"], chunk["answers"], strict=True))
        lik, lik_errors = _likelihoods(generator, answers, [list(ans_by_qid[k[0]]) for k in keys]) \
            if likelihood else (None, {})
        q_by_qid = dict(zip(chunk["qid"], chunk["question"], strict=True))
        scores = {name: np.full(len(items), np.nan) for name in ["utility", *(extra_scorers or {})]}
        score_errors: dict[int, str] = {}
        if ok:
            for name, sc in [("utility", scorer), *(extra_scorers or {}).items()]:
                det = sc.score_details(
                    [q_by_qid[keys[i][0]] for i in ok],
                    [answers[i].answer for i in ok],
                    [list(ans_by_qid[keys[i][0]]) for i in ok],
                )
                for j, i in enumerate(ok):
                    scores[name][i] = det.values[j]
                    if det.errors[j] and name == "utility":
                        score_errors[i] = f"metric {metric_name}: {det.errors[j]}"
        for i, ((qid, arm, is_noise), res, (_, docs)) in enumerate(zip(keys, answers, items, strict=True)):
            err = res.error or score_errors.get(i) or lik_errors.get(i)
            row = {
                "qid": qid, "arm": arm, "utility": scores["utility"][i],
                "answer": res.answer if res.answer is not None else "",
                "raw_output": res.raw_output, "used_fallback": bool(res.used_fallback),
                "failed": err is not None, "error": err or "",
                "n_passages": 0 if docs is None else len(docs),
                "truncated_passages": int(res.n_truncated_passages),
                "prompt_tokens": int(res.prompt_tokens), "completion_tokens": int(res.completion_tokens),
                **provenance,
            }
            for name in extra_scorers or {}:
                row[name] = scores[name][i]
            if lik is not None:
                row["likelihood"] = lik[i]
            (noise_rows if is_noise else rows).append(row)
        if progress is not None:
            progress(len(chunk) * len(arms))
    labels = pd.DataFrame(rows)
    labels = _add_gains(labels, no_retrieval)
    cols = LABEL_COLUMNS + [c for c in labels.columns if c not in LABEL_COLUMNS]
    noise = pd.DataFrame(noise_rows)
    return LabelRun(labels=labels[cols], noise=noise, seconds=time.perf_counter() - t0,
                    counters=dict(getattr(generator, "counters", {})))


def _likelihoods(generator, answers, golds: list[list[str]]) -> tuple[np.ndarray, dict[int, str]]:
    """Mean per-token log-probability of the best gold alias after each item's prompt, and the
    items whose scoring failed (item -> error).

    The best is taken over *every* alias or not at all: an item one of whose aliases failed
    (a context overflow, a server error, a cache miss under ``--cache-only``) gets NaN and an
    error, so the item is a failed item (regenerated by the next run), never a maximum over the
    aliases that happened to succeed, which would score long-prompt arms over fewer aliases
    than closed book.
    """
    reqs = [(i, alias) for i, a in enumerate(answers) if a.prompt is not None for alias in golds[i]]
    out = np.full(len(answers), np.nan)
    errors: dict[int, str] = {}
    if not reqs:
        return out, errors
    scored = generator.score([answers[i].prompt.messages for i, _ in reqs], [al for _, al in reqs])
    for (i, alias), g in zip(reqs, scored, strict=True):
        lp = g.extra.get("token_logprobs") if g.ok else None
        if not lp:
            errors.setdefault(i, f"likelihood of the gold answer {alias!r}: {g.error or 'no token log-probabilities'}")
        elif i not in errors:
            out[i] = np.nanmax([out[i], float(np.mean(lp))])
    for i in errors:
        out[i] = np.nan
    return out, errors


def _add_gains(labels: pd.DataFrame, no_retrieval: str) -> pd.DataFrame:
    out = _gains_of(labels, no_retrieval, "utility", ("gain", "norm_gain", "tie"))
    if "likelihood" in labels.columns:
        # `out` is already grouped by qid, so the row order is kept; ties of the likelihood are
        # not a property of the query (the "tie" column stays the utility's)
        out = _gains_of(out, no_retrieval, "likelihood", ("likelihood_gain", "likelihood_norm_gain", "_lik_tie"))
        out = out.drop(columns="_lik_tie")
    return out


def _gains_of(labels: pd.DataFrame, no_retrieval: str, value: str, names: tuple[str, str, str]) -> pd.DataFrame:
    gains, norms, ties = [], [], []
    for _, grp in labels.groupby("qid", sort=False):
        u = grp[value].to_numpy(dtype=float)
        if grp["failed"].any() or np.isnan(u).any():
            gains.append(np.full(len(u), np.nan))
            norms.append(np.full(len(u), np.nan))
            ties.append(np.zeros(len(u), dtype=bool))
            continue
        base = float(grp.loc[grp["arm"] == no_retrieval, value].iloc[0])
        g, n, tie = normalise_gains(u, base)
        gains.append(g)
        norms.append(n)
        ties.append(np.full(len(u), tie))
    order = labels.groupby("qid", sort=False).indices
    idx = np.concatenate([order[q] for q in order]) if order else np.array([], dtype=int)
    out = labels.iloc[idx].reset_index(drop=True)
    out[names[0]] = np.concatenate(gains) if gains else []
    out[names[1]] = np.concatenate(norms) if norms else []
    out[names[2]] = np.concatenate(ties) if ties else []
    return out


def _ci(values: np.ndarray, seed: int, n_resamples: int = 1000) -> tuple[float, float]:
    """Percentile bootstrap 95% CI of the mean (scipy.stats.bootstrap)."""
    from scipy.stats import bootstrap

    values = values[~np.isnan(values)]
    if len(values) < 2 or np.all(values == values[0]):
        m = float(values.mean()) if len(values) else float("nan")
        return m, m
    res = bootstrap((values,), np.mean, n_resamples=n_resamples, confidence_level=0.95,
                    method="percentile", random_state=seed)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarise(labels: pd.DataFrame, noise: pd.DataFrame | None, *, seed: int = 0) -> dict:
    """Per-arm mean utility with 95% CIs, best single arm, oracle, tie rate and noise floor."""
    ok = labels[~labels["failed"]]
    # every arm of the labels, one that failed on every query included: its queries are not complete
    wide = ok.pivot(index="qid", columns="arm", values="utility").reindex(columns=list(pd.unique(labels["arm"])))
    complete = wide.dropna()
    arms = {}
    for arm in wide.columns:
        v = complete[arm].to_numpy(dtype=float)
        lo, hi = _ci(v, seed)
        arms[arm] = {"mean": float(v.mean()) if len(v) else float("nan"), "ci_low": lo, "ci_high": hi}
    measured = [a for a in arms if not np.isnan(arms[a]["mean"])]
    best = max(measured, key=lambda a: arms[a]["mean"]) if measured else None
    oracle = float(complete.max(axis=1).mean()) if len(complete) else float("nan")
    per_q = labels.groupby("qid").agg(tie=("tie", "first"), failed=("failed", "any"))
    out: dict[str, Any] = {
        "queries": int(labels["qid"].nunique()),
        "labelled_queries": int(len(complete)),
        "failed_items": int(labels["failed"].sum()),
        "failed_queries": int(per_q["failed"].sum()),
        "arms": arms,
        "best_single_arm": best,
        "best_single": arms[best]["mean"] if best else float("nan"),
        "oracle": oracle,
        "headroom": oracle - (arms[best]["mean"] if best else float("nan")),
        "tie_rate": float(per_q.loc[~per_q["failed"], "tie"].mean()) if (~per_q["failed"]).any() else float("nan"),
        "fallback_rate": float(labels["used_fallback"].mean()),
        "truncated_items": int((labels["truncated_passages"] > 0).sum()),
        "truncated_passages": int(labels["truncated_passages"].sum()),
    }
    if noise is not None and len(noise):
        ref = noise["arm"].iloc[0].removesuffix(NOISE_SUFFIX)
        pair = noise[~noise["failed"]].set_index("qid")["utility"].rename("perm").to_frame()
        # every item of the reference arm may have failed (a label from the cache alone, say)
        ref_u = wide[ref] if ref in wide.columns else pd.Series(dtype=float)
        pair = pair.join(ref_u.rename("ref"), how="inner").dropna()
        diff = (pair["perm"] - pair["ref"]).abs()
        out["noise_floor"] = {
            "arm": ref,
            "mean_abs_diff": float(diff.mean()) if len(diff) else float("nan"),
            "disagreement_rate": float((diff > 1e-9).mean()) if len(diff) else float("nan"),
            "share_of_headroom": float(diff.mean() / out["headroom"]) if out["headroom"] > 0 else float("nan"),
            "queries": int(len(diff)),
        }
    return out


def total_failed_items(summary: dict) -> int:
    """The failed items of a label summary: the main labels' and, when there are replicate
    labels (``summary["replicate"]``), theirs, which the protocol reads as well.

    Examples
    --------
    >>> total_failed_items({"failed_items": 2, "replicate": {"failed_items": 3}})
    5
    """
    return int(summary.get("failed_items", 0)) + int((summary.get("replicate") or {}).get("failed_items", 0))


def summary_markdown(summary: dict) -> str:
    """The summary as Markdown: per-arm table, then the headline figures.

    With no query labelled (every query has a failed item, as a ``--cache-only`` run with an
    empty cache) there is no best single arm, headroom or noise floor: one line says so instead.
    """
    lines = ["| arm | mean utility | 95% CI |", "|---|---|---|"]
    for arm, s in sorted(summary["arms"].items(), key=lambda kv: -kv[1]["mean"]):
        lines.append(f"| {arm} | {s['mean']:.3f} | [{s['ci_low']:.3f}, {s['ci_high']:.3f}] |")
    lines += [
        "",
        f"- queries labelled: {summary['labelled_queries']} of {summary['queries']} "
        f"({summary['failed_items']} failed items in {summary['failed_queries']} queries)",
    ]
    labelled = summary["labelled_queries"] > 0
    if labelled:
        lines += [
            f"- best single arm: {summary['best_single_arm']} ({summary['best_single']:.3f}); "
            f"oracle: {summary['oracle']:.3f}; headroom: {summary['headroom']:.3f}",
            f"- tie rate (all arms equal): {summary['tie_rate']:.1%}; fallback prompts used: "
            f"{summary['fallback_rate']:.1%}; items with truncated passages: {summary['truncated_items']}",
        ]
    else:
        lines.append("- no query is labelled (each has a failed item): no best single arm, headroom or noise "
                     "floor to report")
    rep = summary.get("replicate")
    if rep:
        # the figures rest on the queries with a pair labelled on both sides (a summary written
        # before "compared_queries" was recorded counted every replicate query)
        compared = rep.get("compared_queries", rep["queries"])
        failed = rep.get("failed_items", 0)
        head = (f"- replicate labels ({rep['template']}, {rep['queries']} queries of the {rep['part']} part"
                + (f"; {failed} failed items in {rep.get('failed_queries', 0)} queries" if failed else "") + ")")
        if not compared:
            lines.append(f"{head}: no (query, arm) pair labelled on both sides to compare")
        else:
            lines.append(f"{head}: mean |diff| {rep['mean_abs_diff']:.3f} per (query, arm)"
                         + (f" on the {compared} queries labelled in both, answers' utility differs on "
                            f"{rep['disagreement_rate']:.1%} of their pairs" if compared != rep["queries"] else
                            f", answers' utility differs on {rep['disagreement_rate']:.1%} of them"))
    if not labelled:
        return "\n".join(lines)
    if not summary["headroom"] > 0:
        lines.append("- no headroom: the best single arm is best on every query (every arm ties, or one "
                     "arm is never beaten), so there is nothing for a router to gain on these labels")
    nf = summary.get("noise_floor")
    if nf:
        share = nf["share_of_headroom"]
        lines.append(
            f"- noise floor ({nf['arm'] if nf['arm'].startswith('every arm') else nf['arm'] + ' vs its passages permuted'}): "
            f"mean |diff| {nf['mean_abs_diff']:.3f}, "
            f"answers differ on {nf['disagreement_rate']:.1%} of queries"
            + (" (no headroom to compare it with)" if share != share else f" = {share:.0%} of the oracle headroom")
        )
        if share == share and share > 1:
            lines.append("  the noise floor is above the headroom: an irrelevant change to the prompt moves the "
                         "answers more than the best routing could gain, so router gains here are noise")
    return "\n".join(lines)


def write_labels(run: LabelRun, summary: dict, folder: Path) -> dict[str, Path]:
    """Write labels, noise rows and summary atomically into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "labels": write_table_atomic(run.labels, folder / "labels.parquet"),
        "noise": write_table_atomic(run.noise if len(run.noise) else pd.DataFrame(columns=["qid", "arm"]), folder / "noise.parquet"),
    }
    for name, text in (("summary.json", json.dumps(summary, indent=2, sort_keys=True)),
                       ("summary.md", summary_markdown(summary) + "\n")):
        paths[name] = write_text_atomic(folder / name, text)
    return paths


def raise_for_failures(summary: dict, tolerate: bool) -> None:
    """Failed items are never scored; unless tolerated they make the command fail (the
    replicate labels' failed items too: `total_failed_items`)."""
    failed = total_failed_items(summary)
    if failed and not tolerate:
        rep = summary.get("replicate") or {}
        where = (f" in {summary['failed_queries']} queries (see the error column of labels.parquet)"
                 if not rep.get("failed_items") else
                 f": {summary['failed_items']} in {summary['failed_queries']} queries of labels.parquet and "
                 f"{rep['failed_items']} in {rep.get('failed_queries', 0)} queries of replicate.parquet (see "
                 "their error column)")
        raise GenerationError(
            f"{failed} (query, arm) items failed{where}; set [labels] tolerate_failures = true or "
            "pass --tolerate-failures to accept them"
        )
