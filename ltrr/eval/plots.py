"""PNG plots of a router evaluation (matplotlib, headless).

Every function draws on a ``matplotlib.figure.Figure`` rendered by the Agg canvas, without
pyplot: nothing touches the global backend of a notebook or GUI session, and no display is
needed. matplotlib is imported inside the functions only. Files are written atomically and each
function returns the path it wrote.

- `plot_utility`: mean utility with 95% CIs per router and split, beside the best single arm and
  the oracle.
- `plot_headroom`: share of the oracle headroom captured, with the noise floor as a band.
- `plot_per_type`: heatmap router x query type of mean utility (or headroom captured) on one
  split, by default `type_split`'s.
- `plot_feature_importance`: the top features of a GBDT ranker.
- `plot_cost_utility`: mean cost against mean utility for every router and single arm, with the
  cost-utility frontier of the single arms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._atomic import atomic_path
from ltrr._errors import DataError

__all__ = [
    "plot_utility",
    "plot_headroom",
    "headroom_axis",
    "plot_per_type",
    "type_split",
    "plot_feature_importance",
    "plot_cost_utility",
]


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path


def _splits(table: pd.DataFrame, splits: Sequence[str] | None) -> list[str]:
    from ltrr.eval.report import table_splits

    names = list(splits) if splits is not None else table_splits(table)
    unknown = [s for s in names if s not in set(table["split"])]
    if unknown:
        raise DataError(
            f"no results for split(s) {', '.join(unknown)}; have {', '.join(dict.fromkeys(table['split']))}"
        )
    return names


def _err(est: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    lo = np.where(np.isnan(low), 0.0, np.clip(est - low, 0, None))
    hi = np.where(np.isnan(high), 0.0, np.clip(high - est, 0, None))
    return np.vstack([lo, hi])


def plot_utility(
    table: pd.DataFrame,
    path: str | Path,
    *,
    splits: Sequence[str] | None = None,
    title: str = "Downstream utility of each router",
) -> Path:
    """Grouped bars: mean utility with 95% CIs per router (groups) and split (colours).

    The first two groups are the references: the best single arm chosen on train and the
    oracle (the best arm of every query).
    """
    names = _splits(table, splits)
    routers = list(dict.fromkeys(table["router"]))
    groups = ["best single arm (train)", "oracle (best arm per query)"] + routers
    # capped: many routers x splits otherwise give a figure too wide to read on a screen
    fig = _figure(min(16.0, max(6.0, 1.1 * len(groups) * max(1, len(names)) ** 0.5 + 2)), 5.5)
    ax = fig.add_subplot()
    width = 0.8 / len(names)
    x = np.arange(len(groups))
    for j, s in enumerate(names):
        sub = table[table["split"] == s].set_index("router")
        first = sub.iloc[0]
        est = [first["best_single_utility"], first["oracle_utility"]]
        lo = [first["best_single_ci_low"], first["oracle_ci_low"]]
        hi = [first["best_single_ci_high"], first["oracle_ci_high"]]
        for r in routers:
            row = sub.loc[r] if r in sub.index else None
            est.append(np.nan if row is None else row["mean_utility"])
            lo.append(np.nan if row is None else row["ci_low"])
            hi.append(np.nan if row is None else row["ci_high"])
        est_a, lo_a, hi_a = (np.asarray(v, dtype=float) for v in (est, lo, hi))
        ax.bar(
            x + (j - (len(names) - 1) / 2) * width,
            np.nan_to_num(est_a),
            width,
            yerr=_err(est_a, lo_a, hi_a),
            capsize=3,
            label=s,
        )
    ax.axvline(1.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xticks(x, groups, rotation=30, ha="right")
    ax.set_ylabel("mean utility on test queries\n(error bars: 95% bootstrap CI)")
    ax.set_xlabel("router (left of the dotted line: reference points)")
    ax.set_title(title)
    ax.legend(title="split", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


#: the headroom plot's y range (percent) when a bar or interval goes beyond it: a split whose
#: oracle barely beats the best arm (0.004 of utility on the demo's cloze split) turns small
#: utility differences into shares of thousands of percent, which would squash every other bar
#: to nothing; such bars are cut at the edge and their value printed there
HEADROOM_AXIS = (-200.0, 200.0)


def headroom_axis(values: np.ndarray, *, limits: tuple[float, float] = HEADROOM_AXIS) -> tuple[float, float]:
    """The headroom plot's y range (percent) for the drawn ``values`` (estimates and interval
    ends; NaN ignored): the data's range with 0 and 100 (the best arm and the oracle) always in
    view, cut to ``limits``, then padded by 5% within them.

    Examples
    --------
    >>> headroom_axis(np.array([-20.0, 35.0]))
    (-26.0, 106.0)
    >>> headroom_axis(np.array([-3350.0, 18.0, np.nan]))
    (-200.0, 115.0)
    """
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    low = max(float(limits[0]), min(0.0, float(v.min(initial=0.0))))
    high = min(float(limits[1]), max(100.0, float(v.max(initial=100.0))))
    pad = 0.05 * (high - low)
    return max(float(limits[0]), low - pad), min(float(limits[1]), high + pad)


def plot_headroom(
    table: pd.DataFrame,
    path: str | Path,
    *,
    splits: Sequence[str] | None = None,
    noise_floor: float | None = None,
    no_retrieval: str | None = None,
    title: str = "Share of the oracle headroom each router captures",
) -> Path:
    """Bars of headroom captured with 95% CIs, and the noise floor.

    The noise floor is one query's label noise as a share of the headroom: a scale, not a
    significance threshold (the p-values are). ``noise_floor`` draws one shaded band; by default
    it is the table's ``noise_floor`` column: a band when every split has the same value, else
    each split's own value in its legend entry (each is a share of that split's headroom).
    A split without headroom draws no bars; its legend entry (and, when no split has any
    headroom, a line across the axes) says why. Each split's legend entry gives its oracle
    headroom in utility, since a share of a tiny headroom swings widely; the y range is
    `headroom_axis`'s, and a bar beyond it is cut at the edge with its value printed there.
    """
    from ltrr.eval.report import no_headroom_text
    names = _splits(table, splits)
    routers = list(dict.fromkeys(table["router"]))
    per_split = {}
    if noise_floor is None:
        per_split = {s: float(v.iloc[0]) for s in names
                     if len(v := table.loc[table["split"] == s, "noise_floor"].dropna())}
        values = set(per_split.values())
        noise_floor = values.pop() if len(values) == 1 else float("nan")
        if not math.isnan(noise_floor):
            per_split = {}
    fig = _figure(min(16.0, max(6.0, 1.0 * len(routers) * max(1, len(names)) ** 0.5 + 2)), 5.5)
    ax = fig.add_subplot()
    width = 0.8 / len(names)
    x = np.arange(len(routers))
    empty, drawn = [], []
    for j, s in enumerate(names):
        sub = table[table["split"] == s].set_index("router").reindex(routers)
        head = sub["headroom"].dropna()
        if len(head) and not float(head.iloc[0]) > 1e-9:
            best = str(sub["best_single_arm"].dropna().iloc[0])
            empty.append(no_headroom_text(best, no_retrieval))
            ax.bar([], [], width, label=f"{s}: {empty[-1]}")
            continue
        est = 100 * sub["headroom_captured"].to_numpy(dtype=float)
        lo = 100 * sub["headroom_ci_low"].to_numpy(dtype=float)
        hi = 100 * sub["headroom_ci_high"].to_numpy(dtype=float)
        at = x + (j - (len(names) - 1) / 2) * width
        ax.bar(
            at,
            np.nan_to_num(est),
            width,
            yerr=_err(est, lo, hi),
            capsize=3,
            label=(f"{s} (headroom {float(head.iloc[0]):.3f}" + (f"; noise floor ±{100 * per_split[s]:.0f}%"
                                                                if s in per_split else "") + ")")
            if len(head) else s,
        )
        drawn.append((at, est, lo, hi))
    ax.axhline(0, color="black", linewidth=0.8)
    if drawn:
        bottom, top = headroom_axis(np.concatenate([np.concatenate(d[1:]) for d in drawn]))
        ax.set_ylim(bottom, top)
        for at, est, _, _ in drawn:
            for xi, e in zip(at, est, strict=True):
                if np.isfinite(e) and not bottom <= e <= top:
                    ax.annotate(f"{e:.0f}%", (xi, bottom if e < bottom else top), rotation=90, fontsize=6,
                                ha="center", va="bottom" if e < bottom else "top", xytext=(0, 2 if e < bottom else -2),
                                textcoords="offset points", bbox={"boxstyle": "round,pad=0.1", "fc": "white",
                                                                  "ec": "none", "alpha": 0.8})
    ax.axhline(100, color="black", linewidth=0.8, linestyle="--", label="oracle (100%)")
    if noise_floor is not None and not math.isnan(noise_floor):
        nf = 100 * float(noise_floor)
        ax.axhspan(
            -nf,
            nf,
            color="red",
            alpha=0.12,
            label=f"noise floor (±{nf:.0f}%): one query's label noise, not a significance threshold",
        )
        ax.axhline(nf, color="red", linewidth=1.0)
    if len(empty) == len(names):
        ax.text(0.5, 0.5, empty[0].replace("on this split", "on any split") if len(set(empty)) == 1
                else "no headroom on any split",
                transform=ax.transAxes, ha="center", va="center", wrap=True)
    ax.set_xticks(x, routers, rotation=30, ha="right")
    ax.set_ylabel("headroom captured (%)\n(router - best single) / (oracle - best single)")
    ax.set_xlabel("router (0% = always the best single arm; a bar cut at the edge is labelled with its value)")
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def type_split(by_type: pd.DataFrame, table: pd.DataFrame | None = None) -> str:
    """The split a per-type plot shows by default: the first split, in the order of
    `ltrr.eval.report.table_splits`, whose test queries hold more than one query type.

    So a k-fold family gives its pooled row, never one fold, and a leave-one-type-out split (one
    type) is passed over. Without ``table`` the order is ``by_type``'s, and a fold is told by its
    ``family`` having a pooled row of the same name (``by_type`` files from before the column:
    the part of the split name before ``:``). With no split of several types, the first split.
    """
    from ltrr.eval.report import table_splits

    if by_type.empty:
        raise DataError("no per-type results: pass queries (with qtype) to evaluate_splits")
    have = list(dict.fromkeys(by_type["split"].astype(str)))
    if table is not None:
        order = [s for s in table_splits(table) if s in have]
    else:
        fam = (by_type["family"].astype(str) if "family" in by_type.columns
               else by_type["split"].astype(str).str.split(":").str[0])
        pooled = set(fam[fam == by_type["split"].astype(str)]) & set(have)
        fold = (fam != by_type["split"].astype(str)) & fam.isin(pooled)
        order = list(dict.fromkeys(by_type.loc[~fold, "split"].astype(str)))
    if not order:
        raise DataError(f"no per-type results for the splits of the table; have {', '.join(have)}")
    n_types = by_type.groupby(by_type["split"].astype(str))["qtype"].nunique()
    return next((s for s in order if n_types.get(s, 0) > 1), order[0])


def plot_per_type(
    by_type: pd.DataFrame,
    path: str | Path,
    *,
    value: str = "mean_utility",
    split: str | None = None,
    title: str | None = None,
) -> Path:
    """Heatmap of ``value`` (mean utility, headroom captured, P@1) per router and query type.

    ``by_type`` is `Evaluation.by_type`; ``split`` picks one split, by default `type_split`'s
    (the first split of the tables with more than one query type: a k-fold family's pooled
    row, not a fold); the title names it. Headroom captured is drawn in percent, and ``n/a``
    where fewer than `ltrr.eval.report.MIN_TYPE_HEADROOM` of the type's queries have headroom,
    as in the report.
    """
    from ltrr.eval.report import MIN_TYPE_HEADROOM

    if by_type.empty:
        raise DataError("no per-type results: pass queries (with qtype) to evaluate_splits")
    if value not in by_type.columns:
        raise DataError(f"per-type results have no column {value!r}")
    split = split if split is not None else type_split(by_type)
    sub = by_type[by_type["split"] == split]
    if sub.empty:
        raise DataError(f"no per-type results for split {split!r}")
    share = value == "headroom_captured"
    if share and "n_headroom" in sub.columns:
        sub = sub.assign(**{value: sub[value].where(sub["n_headroom"] >= MIN_TYPE_HEADROOM)})
    grid = sub.pivot_table(
        index="router", columns="qtype", values=value, aggfunc="first", sort=False, dropna=False
    )
    n_q = sub.groupby("qtype", sort=False)["n"].first()
    data = grid.to_numpy(dtype=float)
    fig = _figure(max(5.0, 1.1 * grid.shape[1] + 3), max(3.0, 0.5 * grid.shape[0] + 2))
    ax = fig.add_subplot()
    masked = np.ma.masked_invalid(data)
    im = ax.imshow(masked, cmap="viridis", aspect="auto")
    label = value.replace("_", " ")
    fig.colorbar(im, ax=ax, label=f"{label} (1 = 100%)" if share else label)
    finite = data[np.isfinite(data)]
    mid = (finite.min() + finite.max()) / 2 if len(finite) else 0.0
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            v = data[i, j]
            txt = "n/a" if not np.isfinite(v) else f"{100 * v:.0f}%" if share else f"{v:.2f}"
            ax.text(
                j,
                i,
                txt,
                ha="center",
                va="center",
                fontsize=8,
                color="black" if np.isfinite(v) and v > mid else "white",
            )
    ax.set_xticks(
        np.arange(grid.shape[1]), [f"{c}\n(n={int(n_q.get(c, 0))})" for c in grid.columns]
    )
    ax.set_yticks(np.arange(grid.shape[0]), list(grid.index))
    ax.set_xlabel("query type (test queries)")
    ax.set_ylabel("router")
    ax.set_title(title or f"{label.capitalize()} per query type (split {split}, {int(n_q.sum())} test queries)")
    return _save(fig, path)


def plot_feature_importance(
    importances: Mapping[str, float],
    path: str | Path,
    *,
    top: int = 20,
    title: str = "Feature importance of the GBDT ranker",
    xlabel: str = "importance (total gain)",
) -> Path:
    """Horizontal bars of the ``top`` most important features (largest at the top)."""
    if not importances:
        raise DataError("no feature importances to plot")
    items = sorted(
        ((str(k), float(v)) for k, v in importances.items()), key=lambda kv: kv[1], reverse=True
    )
    items = items[: int(top)]
    fig = _figure(7.0, max(2.5, 0.3 * len(items) + 1.5))
    ax = fig.add_subplot()
    y = np.arange(len(items))
    ax.barh(y, [v for _, v in items], color="tab:blue")
    ax.set_yticks(y, [k for k, _ in items])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("feature")
    shown = (
        f"top {len(items)} of {len(importances)}"
        if len(importances) > len(items)
        else f"all {len(items)}"
    )
    ax.set_title(f"{title} ({shown} features)")
    return _save(fig, path)


def plot_cost_utility(
    table: pd.DataFrame,
    arms: pd.DataFrame,
    path: str | Path,
    *,
    split: str | None = None,
    title: str = "Cost against downstream utility",
    cost_label: str = "mean cost per query",
) -> Path:
    """Mean cost (x) against mean utility (y) per router and per single arm on one split.

    Single arms are grey points joined by their cost-utility frontier (the arms no cheaper arm
    beats); the best single arm is ringed; routers are coloured markers. ``arms`` is
    `Evaluation.arms`. ``split`` defaults to the first split shown in the tables.
    """
    names = _splits(table, [split] if split is not None else None)
    split = names[0]
    sub = table[table["split"] == split]
    a = arms[arms["split"] == split]
    if a.empty:
        raise DataError(f"no single-arm results for split {split!r}")
    if sub["mean_cost"].isna().all() and a["cost"].isna().all():
        raise DataError("no arm costs: pass costs to evaluate_splits to plot cost against utility")
    fig = _figure(9.0, 5.0)
    ax = fig.add_subplot()
    ax.scatter(a["cost"], a["mean_utility"], color="grey", s=40, zorder=2, label="single arm")
    for _, r in a.iterrows():
        ax.annotate(
            str(r["arm"]),
            (r["cost"], r["mean_utility"]),
            textcoords="offset points",
            xytext=(4, -10),
            fontsize=7,
            color="dimgrey",
        )
    front = a.sort_values(["cost", "mean_utility"], ascending=[True, False])
    keep, best = [], -np.inf
    for _, r in front.iterrows():
        if r["mean_utility"] > best:
            keep.append(r)
            best = r["mean_utility"]
    if len(keep) > 1:
        f = pd.DataFrame(keep)
        ax.plot(
            f["cost"],
            f["mean_utility"],
            color="grey",
            linestyle="--",
            linewidth=1,
            zorder=1,
            label="single-arm frontier",
        )
    bs = a[a["best_single"].astype(bool)]
    if not bs.empty:
        ax.scatter(
            bs["cost"],
            bs["mean_utility"],
            s=160,
            facecolors="none",
            edgecolors="black",
            zorder=3,
            label="best single arm (train)",
        )
    markers = "o^sDvP*Xh<>"
    for i, (_, r) in enumerate(sub.iterrows()):
        ax.scatter(
            [r["mean_cost"]],
            [r["mean_utility"]],
            marker=markers[i % len(markers)],
            s=70,
            zorder=4,
            label=f"router: {r['router']}",
        )
    ax.margins(x=0.12)  # room for the arm labels, which run right of their points
    ax.set_xlabel(cost_label)
    ax.set_ylabel("mean utility on test queries")
    ax.set_title(f"{title} (split {split})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return _save(fig, path)
