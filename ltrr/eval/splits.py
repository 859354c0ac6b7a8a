"""Train/test splits of a queries table, grouped by ``group`` and seeded.

Related queries (paraphrases, sub-questions of one question) share a ``group``; every split
keeps a group on one side, so a router is never tested on a query whose sibling it trained on.

Registered split families (``[eval] splits`` in a config):

- ``balanced``: one grouped random split whose test side holds about ``test_size`` of each query
  type's queries (`balanced_split`).
- ``leave-one-type-out``: one split per query type; it trains without that type and tests only on
  it (`leave_one_type_out`).
- ``kfold``: grouped, type-stratified k-fold cross-validation (`grouped_kfold`); every query is
  tested exactly once across the folds.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError, DataError
from ltrr._registry import Registry

__all__ = [
    "Split",
    "splitters",
    "balanced_split",
    "leave_one_type_out",
    "grouped_kfold",
    "make_splits",
    "splits_table",
]

splitters: Registry = Registry("split")
"""Split families by name; each is ``f(queries, *, test_size, n_folds, random_state) -> list[Split]``."""


@dataclass(frozen=True)
class Split:
    """One train/test partition of query ids.

    Parameters
    ----------
    name : str
        Unique name used in result tables: ``balanced``, ``leave-one-type-out:<qtype>``,
        ``kfold:<i>``.
    family : str
        The registered family that made it (``balanced``, ``leave-one-type-out``, ``kfold``).
    train, test : tuple of str
        Query ids; disjoint, and no group has queries on both sides.
    heldout : str or None
        The held-out query type of a leave-one-type-out split.

    Examples
    --------
    >>> s = Split("balanced", "balanced", ("q1", "q2"), ("q3",))
    >>> s.n_train, s.n_test
    (2, 1)
    """

    name: str
    family: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    heldout: str | None = None

    @property
    def n_train(self) -> int:
        """How many query ids ``train`` holds."""
        return len(self.train)

    @property
    def n_test(self) -> int:
        """How many query ids ``test`` holds."""
        return len(self.test)

    def to_dict(self) -> dict:
        """A JSON-ready dict (lists of qids)."""
        return {
            "name": self.name,
            "family": self.family,
            "heldout": self.heldout,
            "train": list(self.train),
            "test": list(self.test),
        }


def _queries(queries: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(queries, pd.DataFrame):
        raise DataError(f"queries must be a pandas DataFrame, got {type(queries).__name__}")
    if "qid" not in queries.columns:
        raise DataError("queries table is missing column qid")
    q = pd.DataFrame({"qid": queries["qid"].astype(str)})
    # Same defaults as ltrr.data.schema.validate_queries: one type, each query its own group.
    q["qtype"] = (
        queries["qtype"].astype(str).to_numpy() if "qtype" in queries.columns else "unknown"
    )
    q["group"] = queries["group"].astype(str).to_numpy() if "group" in queries.columns else q["qid"]
    dup = q["qid"][q["qid"].duplicated()]
    if len(dup):
        raise DataError(f"queries: duplicate qid {dup.iloc[0]!r}; qids must be unique to split")
    if len(q) == 0:
        raise DataError("queries table is empty: nothing to split")
    return q.reset_index(drop=True)


def _make(
    name: str,
    family: str,
    q: pd.DataFrame,
    test_mask: np.ndarray,
    train_mask: np.ndarray | None = None,
    heldout: str | None = None,
    hint: str = "",
) -> Split:
    train_mask = ~test_mask if train_mask is None else train_mask
    train = tuple(q.loc[train_mask, "qid"])
    test = tuple(q.loc[test_mask, "qid"])
    for side, ids in (("train", train), ("test", test)):
        if not ids:
            raise DataError(
                f"split {name!r} has an empty {side} set ({len(q)} queries, "
                f"{q['group'].nunique()} groups, {q['qtype'].nunique()} query types){hint}"
            )
    return Split(name, family, train, test, heldout)


def _majority_type(q: pd.DataFrame) -> pd.Series:
    """Each group's most common query type (ties: the alphabetically first)."""
    counts = q.groupby(["group", "qtype"]).size().rename("n").reset_index()
    counts = counts.sort_values(["group", "n", "qtype"], ascending=[True, False, True])
    return counts.drop_duplicates("group").set_index("group")["qtype"]


def balanced_split(queries: pd.DataFrame, test_size: float = 0.3, random_state: int = 0) -> Split:
    """A grouped random split with each query type's share about equal on both sides.

    Each group is assigned to its majority query type (the stratum). Within each stratum the
    groups are shuffled (seeded) and taken into the test side while that brings the stratum's
    test share closer to ``test_size``; so every type has about ``test_size`` of its queries
    in test, and no group is split. A stratum holding a single group goes to whichever side
    its size fits best (usually train).

    scikit-learn offers ``StratifiedGroupKFold`` (test share fixed at 1/k) and
    ``GroupShuffleSplit`` (not stratified) but no stratified group shuffle split of any
    ``test_size``, hence this short greedy procedure.

    Raises
    ------
    DataError
        When the train or test side comes out empty (too few groups).

    Examples
    --------
    >>> q = pd.DataFrame({"qid": [f"q{i}" for i in range(10)], "qtype": ["a", "b"] * 5,
    ...                   "group": [f"g{i // 2}" for i in range(10)]})
    >>> s = balanced_split(q, test_size=0.4, random_state=0)
    >>> s.n_train + s.n_test
    10
    """
    test_size = check_number(test_size, "test_size", low=0, high=1, low_open=True, high_open=True,
                             note=" (a fraction)")
    q = _queries(queries)
    rng = np.random.default_rng(random_state)
    sizes = q.groupby("group").size()
    stratum = _majority_type(q)
    test_groups: set[str] = set()
    for _, groups in stratum.groupby(stratum, sort=True):
        names = sorted(groups.index)
        target = float(test_size) * float(sizes[names].sum())
        taken = 0
        for i in rng.permutation(len(names)):
            g = names[i]
            if abs(taken + sizes[g] - target) < abs(taken - target):
                test_groups.add(g)
                taken += int(sizes[g])
    mask = q["group"].isin(test_groups).to_numpy()
    return _make(
        "balanced", "balanced", q, mask, hint="; add queries or groups, or change test_size"
    )


def leave_one_type_out(queries: pd.DataFrame) -> Iterator[Split]:
    """One split per query type: train without the type, test only on it.

    A group that mixes types: its queries of the held-out type are tested, and its queries of
    other types are dropped from train (and are not tested either), so nothing of a tested
    group leaks into training.

    Yields
    ------
    Split
        Named ``leave-one-type-out:<qtype>``, in sorted type order.

    Raises
    ------
    DataError
        When there is only one query type (train would be empty).

    Examples
    --------
    >>> q = pd.DataFrame({"qid": ["a1", "a2", "b1"], "qtype": ["a", "a", "b"],
    ...                   "group": ["g1", "g2", "g3"]})
    >>> [(s.heldout, s.test) for s in leave_one_type_out(q)]
    [('a', ('a1', 'a2')), ('b', ('b1',))]
    """
    q = _queries(queries)
    types = sorted(q["qtype"].unique())
    for t in types:
        test = (q["qtype"] == t).to_numpy()
        tested_groups = set(q.loc[test, "group"])
        train = ~q["group"].isin(tested_groups).to_numpy()
        yield _make(
            f"leave-one-type-out:{t}",
            "leave-one-type-out",
            q,
            test,
            train,
            heldout=t,
            hint="; leave-one-type-out needs at least two query types (qtype) whose "
            "groups do not all mix them; drop it from [eval] splits otherwise",
        )


def grouped_kfold(
    queries: pd.DataFrame, n_folds: int = 5, random_state: int = 0
) -> Iterator[Split]:
    """Grouped k-fold cross-validation stratified by query type (scikit-learn's
    ``StratifiedGroupKFold`` with ``shuffle=True``).

    Yields
    ------
    Split
        Named ``kfold:0`` ... ``kfold:<n_folds - 1>``; the test sets partition the queries.

    Examples
    --------
    >>> q = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "qtype": ["a", "b"] * 3})
    >>> [s.n_test for s in grouped_kfold(q, n_folds=3)]
    [2, 2, 2]
    """
    from sklearn.model_selection import StratifiedGroupKFold

    check_int(n_folds, "n_folds", low=2)
    q = _queries(queries)
    n_groups = q["group"].nunique()
    if n_groups < n_folds:
        raise DataError(
            f"split 'kfold' needs at least n_folds={n_folds} groups, the queries have "
            f"{n_groups}; lower [eval] n_folds"
        )
    cv = StratifiedGroupKFold(n_splits=int(n_folds), shuffle=True, random_state=random_state)
    with warnings.catch_warnings():
        # Stratification is best effort: a type rarer than n_folds still splits by group, and
        # scikit-learn's warning about it would only alarm.
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        folds = list(cv.split(np.zeros(len(q)), q["qtype"].to_numpy(), q["group"].to_numpy()))
    for i, (_, test_idx) in enumerate(folds):
        mask = np.zeros(len(q), dtype=bool)
        mask[test_idx] = True
        yield _make(f"kfold:{i}", "kfold", q, mask)


def make_splits(
    queries: pd.DataFrame,
    names: Sequence[str] = ("balanced", "leave-one-type-out", "kfold"),
    *,
    test_size: float = 0.3,
    n_folds: int = 5,
    random_state: int = 0,
) -> list[Split]:
    """All splits of the named families, in the order given.

    Parameters
    ----------
    queries : DataFrame
        ``qid``, ``qtype`` and ``group`` (missing ``qtype``/``group`` default as in
        `ltrr.data.schema.validate_queries`).
    names : sequence of str
        Registered families: ``balanced``, ``leave-one-type-out``, ``kfold``.
    test_size, n_folds, random_state
        Passed to the families that take them.

    Examples
    --------
    >>> q = pd.DataFrame({"qid": [f"q{i}" for i in range(8)], "qtype": ["a", "b"] * 4})
    >>> [s.name for s in make_splits(q, ["leave-one-type-out"])]
    ['leave-one-type-out:a', 'leave-one-type-out:b']
    """
    if isinstance(names, str):
        names = [names]
    if not names:
        raise ConfigError(f"no split families named; choose from: {', '.join(splitters.names())}")
    out: list[Split] = []
    for name in names:
        out.extend(
            splitters.get(name)(
                queries, test_size=test_size, n_folds=n_folds, random_state=random_state
            )
        )
    seen = [s.name for s in out]
    if len(set(seen)) != len(seen):
        raise ConfigError(f"split families named twice: {', '.join(names)}")
    return out


# Every family is registered with one signature, so make_splits (and a user's own family)
# need not know which parameters each one takes.
splitters.register(
    "balanced",
    lambda queries, *, test_size, n_folds, random_state: [
        balanced_split(queries, test_size=test_size, random_state=random_state)
    ],
)
splitters.register(
    "leave-one-type-out",
    lambda queries, *, test_size, n_folds, random_state: list(leave_one_type_out(queries)),
)
splitters.register(
    "kfold",
    lambda queries, *, test_size, n_folds, random_state: list(
        grouped_kfold(queries, n_folds=n_folds, random_state=random_state)
    ),
)


def splits_table(splits: Sequence[Split]) -> pd.DataFrame:
    """Splits as a long table ``split, family, heldout, qid, side`` (for a Parquet file)."""
    rows = [
        (s.name, s.family, s.heldout or "", qid, side)
        for s in splits
        for side, ids in (("train", s.train), ("test", s.test))
        for qid in ids
    ]
    return pd.DataFrame(rows, columns=["split", "family", "heldout", "qid", "side"])
