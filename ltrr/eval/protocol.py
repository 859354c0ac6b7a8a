"""A pre-registered protocol: a design part for every choice, a test part looked at once.

The routing-signal question (does a learned router beat the best single arm?) is answered on
queries that no design choice ever saw:

1. `design_test_partition` splits the queries by ``group`` into a design part (about 70%) and
   a test part, stratified by query type and seeded. Every query type must appear in the test
   part, or the partition is refused.
2. Every choice (k, template, label, metric, features, ranker) is made on the design part by
   grouped cross-validation; a fixed, type-stratified `design_sample` keeps the expensive
   generation-changing options cheap.
3. Before the test part is looked at, `power_analysis` states the smallest gain the test part
   can detect, from the design part's per-query spread.
4. One router and the best single arm, both chosen on design, are compared once on test.

`noise_corrected_headroom` takes the oracle arm chosen on one replicate of the labels and scores
it on an independent replicate: the headroom that retrieval choice, not generator noise, can
deliver.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ltrr._checks import check_int, check_number
from ltrr._errors import DataError
from ltrr.eval.splits import Split, balanced_split

__all__ = [
    "design_test_partition",
    "keep_queries",
    "design_sample",
    "power_analysis",
    "noise_corrected_headroom",
    "oracle_choice",
]


def design_test_partition(
    queries: pd.DataFrame, *, design_size: float = 0.7, random_state: int = 0
) -> Split:
    """Split queries by group into a design part (``train``) and a test part (``test``).

    The split is `balanced_split` (grouped, stratified by query type) with test share
    ``1 - design_size``; it is named ``design-test``.

    A dataset grown in rounds (a ``build_round`` column, as `ltrr.data.demo.generate_demo`
    writes) is split round by round, so growth moves no earlier query between the parts: the
    first round is split as it was alone; a later round's query whose group an earlier round
    holds goes where that group went, and its new groups get their own `balanced_split`.

    Raises
    ------
    ConfigError
        ``design_size`` outside (0, 1).
    DataError
        The test part lacks a query type that the queries have: the headline would say nothing
        about that type. Choose another seed or a smaller ``design_size``.

    Examples
    --------
    >>> q = pd.DataFrame({"qid": [f"q{i}" for i in range(20)], "qtype": ["a", "b"] * 10})
    >>> p = design_test_partition(q, random_state=0)
    >>> p.name, p.n_train, p.n_test
    ('design-test', 14, 6)
    """
    design_size = check_number(design_size, "design_size", low=0, high=1, low_open=True, high_open=True)
    split = _partition_by_round(queries, test_size=1.0 - design_size, random_state=random_state)
    qtype = queries.set_index(queries["qid"].astype(str))["qtype"].astype(str) if "qtype" in queries else None
    if qtype is not None:
        missing = sorted(set(qtype) - set(qtype.reindex(list(split.test))))
        if missing:
            raise DataError(
                f"the design/test partition (seed {random_state}, design_size {design_size}) leaves "
                f"the test part without query type(s) {', '.join(missing)}; pick another seed or "
                "a smaller design_size"
            )
    return Split(name="design-test", family="design-test", train=split.train, test=split.test)


def keep_queries(part: Split, keep) -> Split:
    """``part`` with only the queries of ``keep``, each in the part it was in.

    The protocol partitions every query of the dataset and then leaves out those without
    complete labels (a failed item) this way, so a failure moves no other query between the
    design and test parts (a partition of the complete queries alone would).

    Examples
    --------
    >>> p = Split(name="design-test", family="design-test", train=("a", "b", "c"), test=("d", "e"))
    >>> kept = keep_queries(p, {"a", "c", "e"})
    >>> kept.train, kept.test
    (('a', 'c'), ('e',))
    """
    keep = set(map(str, keep))
    return Split(name=part.name, family=part.family, train=tuple(q for q in part.train if q in keep),
                 test=tuple(q for q in part.test if q in keep))


def _partition_by_round(queries: pd.DataFrame, *, test_size: float, random_state: int) -> Split:
    """`balanced_split`, one build round at a time (see `design_test_partition`)."""
    if "build_round" not in queries.columns or queries["build_round"].nunique() <= 1:
        return balanced_split(queries, test_size=test_size, random_state=random_state)
    qid = queries["qid"].astype(str).to_numpy()
    group = (queries["group"] if "group" in queries.columns else queries["qid"]).astype(str).to_numpy()
    rounds = queries["build_round"].to_numpy()
    side: dict[str, bool] = {}  # group -> in the test part
    for r in sorted(set(rounds.tolist())):
        new = (rounds == r) & ~np.isin(group, list(side))
        if new.any():
            part = balanced_split(queries[new], test_size=test_size, random_state=random_state)
            test = set(part.test)
            side.update({g: q in test for q, g in zip(qid[new], group[new], strict=True)})
    in_test = np.array([side[g] for g in group], dtype=bool)
    return Split(name="balanced", family="balanced", train=tuple(qid[~in_test]), test=tuple(qid[in_test]))


def design_sample(
    queries: pd.DataFrame, design: Split, *, n: int = 150, random_state: int = 0
) -> list[str]:
    """A fixed, seeded sample of about ``n`` design queries, the same number per query type.

    Types with fewer design queries than their share give all they have. The sample depends on
    the query ids only, not on the table's row order; it is returned in the table's order. A
    dataset grown in rounds (``build_round``) samples its first round only, so growth keeps
    the sample.
    """
    check_int(n, "the design sample size", low=1)
    q = queries[queries["qid"].astype(str).isin(set(design.train))]
    if "build_round" in q.columns and len(q):
        q = q[q["build_round"] == q["build_round"].min()]
    types = sorted(q["qtype"].astype(str).unique())
    per = max(1, n // max(1, len(types)))
    rng = np.random.default_rng(random_state)
    keep: set[str] = set()
    for t in types:
        ids = np.sort(q.loc[q["qtype"].astype(str) == t, "qid"].astype(str).to_numpy())
        keep |= set(rng.permutation(ids)[: min(per, len(ids))].tolist())
    return [x for x in queries["qid"].astype(str) if x in keep]


def power_analysis(
    differences: np.ndarray, n_test: int, *, alpha: float = 0.05, power: float = 0.8
) -> dict:
    """The smallest mean per-query gain a paired test on ``n_test`` queries detects.

    ``differences`` are per-query utility differences (router minus best single arm) measured
    on the design part, by cross-validation. Their standard deviation sigma gives the minimum
    detectable effect of a two-sided paired test, ``(z_{1-alpha/2} + z_{power}) * sigma /
    sqrt(n_test)``; the Wilcoxon signed-rank test has asymptotic relative efficiency >= 0.864
    against the t test, so the figure is also given divided by sqrt(0.864), its worst case.

    Returns
    -------
    dict
        ``sd``, ``n_test``, ``alpha``, ``power``, ``mde`` (normal approximation) and
        ``mde_wilcoxon_worst`` (the same, for the Wilcoxon test's worst efficiency).

    Examples
    --------
    >>> r = power_analysis(np.array([0.0, 1.0] * 50), 400)
    >>> round(r["sd"], 4), round(r["mde"], 4)
    (0.5025, 0.0704)
    """
    from scipy.stats import norm

    d = np.asarray(differences, dtype=float)
    d = d[~np.isnan(d)]
    if len(d) < 2:
        raise DataError(f"power analysis needs at least 2 design differences, got {len(d)}")
    check_int(n_test, "n_test", low=2)
    sd = float(np.std(d, ddof=1))
    z = float(norm.ppf(1 - alpha / 2) + norm.ppf(power))
    mde = z * sd / math.sqrt(n_test)
    return {"sd": sd, "n_test": int(n_test), "alpha": alpha, "power": power, "mde": mde,
            "mde_wilcoxon_worst": mde / math.sqrt(0.864), "n_design": int(len(d))}


def oracle_choice(A: np.ndarray, arms: list[str], best_single: str) -> np.ndarray:
    """The column of each row's best arm in ``A`` (queries x arms); ties go to the best single
    arm, then to the arm with the higher mean. A missing utility (NaN) is a `DataError`: argmax
    would take it for the best."""
    A = np.asarray(A, dtype=float)
    if np.isnan(A).any():
        raise DataError(f"oracle_choice: {int(np.isnan(A).any(axis=1).sum())} queries have a missing utility (NaN); "
                        "give complete label matrices (ltrr.eval.routing.utility_matrix keeps complete queries only)")
    order = sorted(range(len(arms)), key=lambda j: (arms[j] != best_single, -A[:, j].mean()))
    return np.array(order)[np.argmax(A[:, order], axis=1)]


def noise_corrected_headroom(
    U_a: pd.DataFrame, U_b: pd.DataFrame, best_single: str
) -> dict:
    """Oracle headroom without the generator's noise: choose on replicate A, score on B.

    ``U_a`` and ``U_b`` are (qid x arm) utilities of two independent replicates of the same
    labels (e.g. the same prompts under two equivalent wordings). The raw oracle takes the best
    arm of each query on B and scores it on B, so it profits from B's noise; the corrected
    oracle takes the best arm on A and scores it on B. Ties on A go to the arm that is best on
    average (the best single arm first).

    Returns
    -------
    dict
        ``best_single`` (its mean utility on B), ``oracle_raw``, ``oracle_corrected``,
        ``headroom_raw``, ``headroom_corrected`` and ``n`` (queries in both replicates).
    """
    common = U_a.index.intersection(U_b.index)
    arms = [a for a in U_a.columns if a in U_b.columns]
    if best_single not in arms:
        raise DataError(f"best single arm {best_single!r} is not an arm of both replicates")
    if len(common) == 0:
        raise DataError("the two replicates share no query")
    A = U_a.loc[common, arms].to_numpy(dtype=float)
    B = U_b.loc[common, arms].to_numpy(dtype=float)
    if np.isnan(B).any():
        raise DataError(f"noise_corrected_headroom: {int(np.isnan(B).any(axis=1).sum())} queries of replicate B have a "
                        "missing utility (NaN); give complete label matrices (utility_matrix)")
    pick = oracle_choice(A, arms, best_single)
    b = B[:, arms.index(best_single)]
    corrected = B[np.arange(len(common)), pick]
    raw = B.max(axis=1)
    return {
        "n": int(len(common)),
        "best_single": float(b.mean()),
        "oracle_raw": float(raw.mean()),
        "oracle_corrected": float(corrected.mean()),
        "headroom_raw": float(raw.mean() - b.mean()),
        "headroom_corrected": float(corrected.mean() - b.mean()),
    }
