"""Result tables in the shape of the paper's Table 1, written as Markdown, CSV and JSON.

Rows are routers (plus two reference rows, the best single arm chosen on train and the oracle),
columns are splits. The main table shows mean downstream utility with its 95% bootstrap CI,
marked ▲ / ▼ where the router is significantly better / worse than the best single arm (paired
Wilcoxon, corrected across the routers of the split; ◇ where the test rejects but its signed
ranks and the mean difference take opposite sides). Companion tables: headroom captured
(with the oracle headroom, the queries it rests on and the noise floor as the last rows),
corrected p-values, improved/degraded query counts, ranking quality (Kendall tau, P@1, nDCG@k)
and retrieval necessity (all over the informative queries) and cost, and a per-type breakdown
(headroom captured only where at least `MIN_TYPE_HEADROOM` queries of the type have headroom).
The folds of a k-fold family appear only through their pooled column.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._atomic import atomic_path, write_text_atomic
from ltrr._errors import DataError
from ltrr._tables import markdown_table
from ltrr.eval.routing import ATOL, RESULT_COLUMNS, Evaluation

__all__ = [
    "markdown_table",  # re-exported: the tables' Markdown, for scripts that write their own
    "format_ci",
    "table_splits",
    "utility_table",
    "headroom_table",
    "no_headroom_text",
    "report_notes",
    "pvalue_table",
    "counts_table",
    "ranking_table",
    "per_type_table",
    "per_type_headroom_table",
    "correction_text",
    "report_markdown",
    "write_report",
    "BETTER",
    "SPLIT",
    "WORSE",
    "MIN_TYPE_HEADROOM",
]

BETTER = "▲"
WORSE = "▼"
#: Significant, but the signed ranks and the mean difference take opposite sides.
SPLIT = "◇"
BEST_SINGLE_ROW = "best single arm (train)"
ORACLE_ROW = "oracle"
#: The fewest queries of a type with headroom (oracle above the best single arm) for the per-type
#: table to give the type's headroom captured: a share of the headroom of one or two queries
#: swings by thousands of percent (the demo's cloze type: one query, -1700%).
MIN_TYPE_HEADROOM = 5
HEADROOM_QUERIES_ROW = "test queries with headroom"
TYPE_COUNT_ROW = "test queries (with headroom)"


def _isnan(x) -> bool:
    return x is None or (isinstance(x, (float, np.floating)) and math.isnan(x))


def _num(x, digits: int = 3, percent: bool = False) -> str:
    if _isnan(x):
        return "n/a"
    return f"{100 * x:.0f}%" if percent else f"{x:.{digits}f}"


def format_ci(
    estimate: float, low: float, high: float, digits: int = 3, percent: bool = False
) -> str:
    """``0.412 [0.390, 0.430]``; percentages as ``41% [39%, 43%]``; ``n/a`` for NaN.

    An estimate without its interval (``low`` or ``high`` NaN: e.g. the headroom captured when
    more than half of the bootstrap resamples hold no headroom) says so: ``41% (CI n/a)``.

    Examples
    --------
    >>> format_ci(0.4123, 0.39, 0.43)
    '0.412 [0.390, 0.430]'
    >>> format_ci(0.5, 0.25, 0.75, percent=True)
    '50% [25%, 75%]'
    >>> format_ci(0.5, float("nan"), float("nan"), percent=True)
    '50% (CI n/a)'
    """
    if _isnan(estimate):
        return "n/a"
    if _isnan(low) or _isnan(high):
        return f"{_num(estimate, digits, percent)} (CI n/a)"
    return f"{_num(estimate, digits, percent)} [{_num(low, digits, percent)}, {_num(high, digits, percent)}]"


def _check(table: pd.DataFrame) -> None:
    if not isinstance(table, pd.DataFrame):
        raise DataError(f"expected the results table (a DataFrame), got {type(table).__name__}")
    missing = [c for c in ("split", "family", "pooled", "router") if c not in table.columns]
    if missing:
        raise DataError(
            f"results table is missing column(s) {', '.join(missing)}; "
            "pass Evaluation.table from ltrr.eval.evaluate_splits"
        )
    if table.empty:
        raise DataError("results table is empty: nothing to report")


def table_splits(table: pd.DataFrame) -> list[str]:
    """The splits shown as columns, in order: every split except the folds of a pooled family."""
    _check(table)
    pooled_fams = set(table.loc[table["pooled"].astype(bool), "family"])
    keep = table[table["pooled"].astype(bool) | ~table["family"].isin(pooled_fams)]
    return list(dict.fromkeys(keep["split"]))


def _grid(table: pd.DataFrame, cell, splits: Sequence[str] | None) -> pd.DataFrame:
    splits = list(splits) if splits is not None else table_splits(table)
    routers = list(dict.fromkeys(table["router"]))
    out = pd.DataFrame("", index=pd.Index(routers, name="router"), columns=splits, dtype=object)
    for _, r in table[table["split"].isin(splits)].iterrows():
        out.loc[r["router"], r["split"]] = cell(r)
    return out


def _mark(r) -> str:
    """▲ / ▼ when the test is significant and the signed ranks and the mean agree on the side;
    ◇ when they disagree (the test rejects, but for the side the mean does not take)."""
    if not bool(r["significant"]):
        return ""
    up, down = r["mean_utility"] > r["best_single_utility"], r["mean_utility"] < r["best_single_utility"]
    side = r.get("direction")
    if side is None or (isinstance(side, float) and math.isnan(side)):  # a table from before the column
        side = 1 if up else -1
    if side > 0 and up:
        return f" {BETTER}"
    if side < 0 and down:
        return f" {WORSE}"
    return f" {SPLIT}"


def utility_table(
    table: pd.DataFrame, splits: Sequence[str] | None = None, digits: int = 3
) -> pd.DataFrame:
    """Table 1: mean utility [95% CI] per router and split, with reference rows.

    Cells of routers significantly better / worse than the best single arm carry ▲ / ▼.
    """
    _check(table)
    out = _grid(
        table,
        lambda r: format_ci(r["mean_utility"], r["ci_low"], r["ci_high"], digits) + _mark(r),
        splits,
    )
    first = table.drop_duplicates("split").set_index("split")
    best = {
        s: f"{format_ci(first.loc[s, 'best_single_utility'], first.loc[s, 'best_single_ci_low'], first.loc[s, 'best_single_ci_high'], digits)} ({first.loc[s, 'best_single_arm']})"
        for s in out.columns
    }
    orac = {
        s: format_ci(
            first.loc[s, "oracle_utility"],
            first.loc[s, "oracle_ci_low"],
            first.loc[s, "oracle_ci_high"],
            digits,
        )
        for s in out.columns
    }
    out.loc[BEST_SINGLE_ROW] = pd.Series(best)
    out.loc[ORACLE_ROW] = pd.Series(orac)
    return out


def no_headroom_text(best_arm: str, no_retrieval: str | None = None) -> str:
    """What a split without headroom says instead of a ratio of zeros.

    Examples
    --------
    >>> no_headroom_text("none", "none")
    'no headroom on this split: every arm ties or closed-book is best'
    """
    who = "closed-book" if best_arm == no_retrieval else f"{best_arm!r}"
    return f"no headroom on this split: every arm ties or {who} is best"


def _no_headroom(first: pd.DataFrame, split: str) -> bool:
    return not float(first.loc[split, "headroom"]) > ATOL


def headroom_table(
    table: pd.DataFrame, splits: Sequence[str] | None = None, *, no_retrieval: str | None = None
) -> pd.DataFrame:
    """Share of the oracle headroom captured [95% CI] per router and split; last rows the oracle
    headroom in utility, the test queries with headroom, and the noise floor.

    A split without headroom (the best single arm is already best on every test query) says
    so in words: ``no headroom`` in its router cells and the reason in its headroom row. A cell
    whose interval the bootstrap could not give (most resamples without headroom) reads
    ``CI n/a``; the row ``test queries with headroom`` (from the table's ``n_headroom``, left
    out for a table from before that column) says how many queries the share rests on.
    """
    _check(table)
    out = _grid(
        table,
        lambda r: format_ci(
            r["headroom_captured"], r["headroom_ci_low"], r["headroom_ci_high"], percent=True
        ) if float(r["headroom"]) > ATOL else "no headroom",
        splits,
    )
    first = table.drop_duplicates("split").set_index("split")
    out.loc["oracle headroom (utility)"] = pd.Series(
        {
            s: f"{first.loc[s, 'headroom']:.3f}"
            + (
                f" ({no_headroom_text(first.loc[s, 'best_single_arm'], no_retrieval)})"
                if _no_headroom(first, s)
                else ""
            )
            for s in out.columns
        }
    )
    if "n_headroom" in first.columns:
        out.loc[HEADROOM_QUERIES_ROW] = pd.Series(
            {s: f"{int(first.loc[s, 'n_headroom'])} of {int(first.loc[s, 'n_test'])}" for s in out.columns}
        )
    out.loc["noise floor"] = pd.Series(
        {s: _num(first.loc[s, "noise_floor"], percent=True) for s in out.columns}
    )
    return out


def report_notes(ev: Evaluation) -> list[str]:
    """The lines printed under the tables: splits without headroom, a noise floor above the
    headroom, and solver warnings recorded while training the routers."""
    table = ev.table
    first = table.drop_duplicates("split").set_index("split")
    notes = []
    empty: dict[str, list[str]] = {}
    for s in table_splits(table):
        if _no_headroom(first, s):
            text = no_headroom_text(first.loc[s, "best_single_arm"], ev.meta.get("no_retrieval"))
            empty.setdefault(text, []).append(s)
    for text, names in empty.items():
        notes.append(f"{text} ({', '.join(names)}).")
    above = [s for s in table_splits(table) if float(first.loc[s, "noise_floor"]) > 1.0]
    if above:
        nf = {s: float(first.loc[s, "noise_floor"]) for s in above}
        said = ", ".join(f"{s} {100 * v:.0f}%" for s, v in nf.items())
        notes.append(
            f"The noise floor exceeds the headroom on {said}: there, one query's answer changes "
            "under generator noise alone by more than the oracle gains over the best single arm on "
            "average, so a router's gain needs many queries (its p-value) to be told from noise."
        )
    if tied := ev.meta.get("tie_only"):
        chosen = ev.per_query.loc[ev.per_query["router"].isin(tied), "chosen"].astype(str).unique().tolist()
        arms = f"{chosen[0]} on every query" if len(chosen) == 1 else f"arms {_names(sorted(chosen))}"
        notes.append(
            f"{_names(tied)} {'scores' if len(tied) == 1 else 'score'} every arm of each test query alike on "
            f"every split, so the tie-break alone chooses ({arms}): read those rows as the tie-break's, "
            "not as a test of the router (a train-free router's feature is constant within a query "
            "when, say, each arm passes one passage: VarSim is then 0 and Moran's I 0)."
        )
    for group in ev.meta.get("same_choices", []):
        notes.append(f"{_names(group)} choose the same arm on every test query of every split: their "
                     "rows are one router's.")
    notes += [f"warning: {w}" for w in ev.meta.get("warnings", [])]
    return notes


def _names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    names = [str(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def pvalue_table(table: pd.DataFrame, splits: Sequence[str] | None = None) -> pd.DataFrame:
    """Corrected p-values of the Wilcoxon test against the best single arm (raw in parentheses)."""
    _check(table)

    def cell(r) -> str:
        mark = _mark(r).strip()
        return f"{r['p_adjusted']:.3g} (raw {r['p_value']:.3g})" + (f" {mark}" if mark else "")

    return _grid(table, cell, splits)


def counts_table(table: pd.DataFrame, splits: Sequence[str] | None = None) -> pd.DataFrame:
    """Test queries improved / degraded / equal versus the best single arm (``+a / -b / =c``)."""
    _check(table)
    return _grid(
        table,
        lambda r: f"+{int(r['improved'])} / -{int(r['degraded'])} / ={int(r['equal'])}",
        splits,
    )


def ranking_table(table: pd.DataFrame, splits: Sequence[str] | None = None) -> pd.DataFrame:
    """Long table of ranking quality, retrieval necessity and cost per (split, router)."""
    _check(table)
    splits = list(splits) if splits is not None else table_splits(table)
    cols = [
        "split",
        "router",
        "kendall_tau",
        "p_at_1",
        "ndcg_at_k",
        "necessity_accuracy",
        "retrieval_rate",
        "mean_cost",
        "n_test",
        "n_informative",
    ]
    sub = table[table["split"].isin(splits)][cols]
    k = int(table["k"].iloc[0]) if "k" in table.columns else 0
    return sub.rename(columns={"ndcg_at_k": f"ndcg@{k}", "p_at_1": "P@1"}).set_index(
        ["split", "router"]
    )


def per_type_table(
    by_type: pd.DataFrame, value: str = "mean_utility", split: str | None = None
) -> pd.DataFrame:
    """Per-type breakdown: rows router (and split), columns qtype, cells ``value``.

    ``value`` is a column of `Evaluation.by_type` (``mean_utility``, ``headroom_captured``,
    ``p_at_1``, ...). With ``split`` only that split's rows.
    """
    if value not in by_type.columns:
        raise DataError(
            f"per-type table has no column {value!r}; choose one of: "
            f"{', '.join(c for c in by_type.columns if c not in ('split', 'router', 'qtype'))}"
        )
    df = by_type if split is None else by_type[by_type["split"] == split]
    if df.empty:
        return pd.DataFrame()
    index = ["router"] if split is not None else ["split", "router"]
    out = df.pivot_table(
        index=index, columns="qtype", values=value, aggfunc="first", sort=False, dropna=False
    )
    out.columns.name = None
    return out


def per_type_headroom_table(
    by_type: pd.DataFrame,
    splits: Sequence[str] | None = None,
    *,
    min_headroom: int = MIN_TYPE_HEADROOM,
) -> pd.DataFrame:
    """Per-type headroom captured, in percent as in `headroom_table`, with the queries behind it.

    Rows (split, router), columns qtype. Each split starts with a row ``test queries (with
    headroom)``: the type's test queries and, in parentheses, how many of them have headroom
    (the oracle beats the best single arm). A router's cell is ``n/a`` where fewer than
    ``min_headroom`` of the type's queries have headroom (or the split has none of the type):
    the share of so small a headroom is noise.

    Examples
    --------
    >>> bt = pd.DataFrame({"split": "s", "router": "r", "qtype": ["a", "b"], "n": [40, 30],
    ...                    "n_headroom": [12, 1], "headroom_captured": [0.3125, -17.0]})
    >>> per_type_headroom_table(bt).to_dict("index")[("s", "r")]
    {'a': '31%', 'b': 'n/a'}
    """
    missing = [c for c in ("split", "router", "qtype", "n", "n_headroom", "headroom_captured")
               if c not in by_type.columns]
    if missing:
        raise DataError(
            f"per-type results lack column(s) {', '.join(missing)}; pass Evaluation.by_type "
            "from ltrr.eval.evaluate_splits"
        )
    names = list(splits) if splits is not None else list(dict.fromkeys(by_type["split"]))
    df = by_type[by_type["split"].isin(names)]
    qtypes = list(dict.fromkeys(df["qtype"]))
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for s in names:
        sub = df[df["split"] == s]
        if sub.empty:
            continue
        counts = sub.drop_duplicates("qtype").set_index("qtype")
        rows[(s, TYPE_COUNT_ROW)] = {
            t: f"{int(counts.loc[t, 'n'])} ({int(counts.loc[t, 'n_headroom'])})" if t in counts.index else "0"
            for t in qtypes
        }
        for router, part in sub.groupby("router", sort=False):
            cells = part.set_index("qtype")
            rows[(s, str(router))] = {
                t: _num(cells.loc[t, "headroom_captured"], percent=True)
                if t in cells.index and int(cells.loc[t, "n_headroom"]) >= min_headroom
                else "n/a"
                for t in qtypes
            }
    index = pd.MultiIndex.from_tuples(list(rows), names=["split", "router"])
    return pd.DataFrame(list(rows.values()), index=index, columns=qtypes, dtype=object)


def correction_text(table: pd.DataFrame, correction: str, splits: Sequence[str] | None = None) -> str:
    """The family the p-values were corrected over, with its size m read from ``table``.

    Examples
    --------
    >>> t = pd.DataFrame({"split": ["a", "a", "a"], "family": "a", "pooled": False,
    ...                   "router": ["x", "y", "z"], "p_value": [0.01, 0.2, 1.0]})
    >>> correction_text(t, "holm")
    "Holm's step-down correction over the m = 3 routers of each split"
    """
    _check(table)
    splits = list(splits) if splits is not None else table_splits(table)
    sizes = table[table["split"].isin(splits)].groupby("split")["p_value"].count()
    lo, hi = (int(sizes.min()), int(sizes.max())) if len(sizes) else (0, 0)
    m = f"m = {lo}" if lo == hi else f"m = {lo} to {hi}"
    if correction == "bonferroni":
        return (f"Bonferroni correction over the {m} routers of each split, baselines included; "
                "`[eval] correction = \"holm\"` gives Holm's step-down correction, never less powerful")
    if correction == "holm":
        return f"Holm's step-down correction over the {m} routers of each split"
    return (f"no correction for the {m} routers compared in each split; `[eval] correction = "
            "\"bonferroni\"` or `\"holm\"` controls the family-wise error")


def _md(df: pd.DataFrame) -> str:
    if isinstance(df.index, pd.MultiIndex):
        df = df.reset_index(level=list(range(1, df.index.nlevels)))
    df = df.astype(object).map(lambda v: "n/a" if isinstance(v, float) and math.isnan(v) else v)
    return markdown_table(df)


def report_markdown(ev: Evaluation, title: str = "Router evaluation") -> str:
    """The whole report as Markdown: Table 1, headroom, p-values, counts, ranking, per type."""
    table = ev.table
    _check(table)
    meta = ev.meta
    corr = meta.get("correction", table["correction"].iloc[0])
    alpha = meta.get("alpha", 0.05)
    conf = meta.get("confidence", 0.95)
    splits = table_splits(table)
    n_test = table.drop_duplicates("split").set_index("split")["n_test"]
    parts = [
        f"# {title}",
        "",
        f"Splits (test queries): {', '.join(f'{s} ({int(n_test[s])})' for s in splits)}. "
        f"Arms: {', '.join(meta.get('arms', []))}; no-retrieval arm: {meta.get('no_retrieval', '?')}.",
        "",
        *([str(meta["scope"]), ""] if meta.get("scope") else []),
        f"## Downstream utility (mean [{conf:.0%} bootstrap CI])",
        "",
        _md(utility_table(table, splits)),
        "",
        f"{BETTER} / {WORSE}: significantly better / worse than the best single arm chosen on the "
        f"training queries (paired two-sided Wilcoxon signed-rank test at alpha = {alpha}, "
        f"{correction_text(table, corr, splits)}). {SPLIT}: the test rejects, but its signed "
        "ranks and the mean difference take opposite sides (many small gains against a few large "
        "losses, or the reverse): read the improved / degraded counts.",
        "",
        "## Oracle headroom captured",
        "",
        _md(headroom_table(table, splits, no_retrieval=meta.get("no_retrieval"))),
        "",
        "(router - best single) / (oracle - best single) on the test queries: 100% is the oracle, "
        "0% the best single arm, n/a when the oracle equals the best single arm; CI n/a where more "
        "than half of the bootstrap resamples hold no headroom, as when very few test queries have "
        f"any (the row '{HEADROOM_QUERIES_ROW}' counts them). The noise floor "
        "is the mean per-query change that generator noise alone makes"
        + (f" ({meta['noise_source']})" if meta.get("noise_source") else "")
        + ", as a share of each split's headroom: a scale of how noisy one query's "
        "label is, not a test (noise in a mean shrinks with the number of queries; the p-values "
        "below are the test).",
        "",
        f"## p-values vs the best single arm ({corr}-corrected)",
        "",
        _md(pvalue_table(table, splits)),
        "",
        "## Test queries improved / degraded / equal vs the best single arm",
        "",
        _md(counts_table(table, splits)),
        "",
        "## Ranking quality, retrieval necessity and cost",
        "",
        _md(ranking_table(table, splits)),
        "",
        "Kendall tau and P@1 against the gold arm ranking (arms ranked by utility) and nDCG "
        "against the normalised gains, over informative queries only (not all arms equal); "
        "routers that only choose an arm have no tau or nDCG. Necessity accuracy, over the same "
        "informative queries: the router retrieved if and only if some retrieval arm beat no "
        "retrieval (on a tie retrieving cannot help, so counting it wrong there would favour "
        "never retrieving).",
    ]
    notes = report_notes(ev)
    if notes:
        parts += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    shown = ev.by_type[ev.by_type["split"].isin(splits)] if not ev.by_type.empty else ev.by_type
    if not shown.empty:
        parts += ["", "## Per query type: mean utility", "", _md(per_type_table(shown, "mean_utility"))]
        if {"n", "n_headroom"} <= set(shown.columns):  # a by_type from before n_headroom: no table
            parts += [
                "",
                "## Per query type: headroom captured",
                "",
                _md(per_type_headroom_table(shown, splits)),
            ]
        parts += [
            "",
            "Only the test queries of each type; n/a where a split has no test queries of the "
            "type. Headroom captured in percent as in the headroom table (no CI); each split's "
            f"row '{TYPE_COUNT_ROW}' gives the type's test queries and, in parentheses, those "
            "whose oracle beats the best single arm; n/a where fewer than "
            f"{MIN_TYPE_HEADROOM} of them do (a share of the headroom of a query or two is noise).",
        ]
    return "\n".join(parts) + "\n"


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if math.isnan(obj) or math.isinf(obj) else float(obj)
    if obj is pd.NA:
        return None
    return obj


def _write_text(path: Path, text: str) -> Path:
    return write_text_atomic(path, text)


def _write_csv(df: pd.DataFrame, path: Path, index: bool) -> Path:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=index, encoding="utf-8")
    return path


def write_report(
    ev: Evaluation, folder: str | Path, *, title: str = "Router evaluation"
) -> dict[str, Path]:
    """Write the report files atomically into ``folder``; returns name -> path.

    Files: ``eval.md`` (the Markdown report), ``results.csv`` and ``results.json`` (the tidy
    table, every column; the JSON also holds the settings and the formatted tables),
    ``table1.csv``, ``headroom.csv``, ``pvalues.csv``, ``by_type.csv``, ``arms.csv`` (the single
    arms' test utility and cost per split) and ``per_query.parquet``.
    """
    from ltrr.data.io import write_table_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = ev.table
    _check(table)
    splits = table_splits(table)
    t1, hr, pv = (
        utility_table(table, splits),
        headroom_table(table, splits, no_retrieval=ev.meta.get("no_retrieval")),
        pvalue_table(table, splits),
    )
    paths = {
        "eval.md": _write_text(folder / "eval.md", report_markdown(ev, title)),
        "results.csv": _write_csv(table[RESULT_COLUMNS], folder / "results.csv", index=False),
        "table1.csv": _write_csv(t1, folder / "table1.csv", index=True),
        "headroom.csv": _write_csv(hr, folder / "headroom.csv", index=True),
        "pvalues.csv": _write_csv(pv, folder / "pvalues.csv", index=True),
        "by_type.csv": _write_csv(ev.by_type, folder / "by_type.csv", index=False),
        "arms.csv": _write_csv(ev.arms, folder / "arms.csv", index=False),
    }
    doc = {
        "meta": ev.meta,
        "splits": splits,
        "results": table[RESULT_COLUMNS].to_dict(orient="records"),
        "arms": ev.arms.to_dict(orient="records"),
        "by_type": ev.by_type.to_dict(orient="records"),
        "table1": t1.to_dict(orient="index"),
        "headroom": hr.to_dict(orient="index"),
        "pvalues": pv.to_dict(orient="index"),
        "notes": report_notes(ev),
    }
    paths["results.json"] = _write_text(
        folder / "results.json", json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n"
    )
    paths["per_query.parquet"] = write_table_atomic(ev.per_query, folder / "per_query.parquet")
    return paths
