"""Grouped, seeded splits: balanced, leave-one-type-out and k-fold."""

from __future__ import annotations

import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.eval.splits import (
    Split,
    balanced_split,
    grouped_kfold,
    leave_one_type_out,
    make_splits,
    splits_table,
)


def _queries(n_groups: int = 60) -> pd.DataFrame:
    """Groups of 1-3 queries; types uneven (a 50%, b 30%, c 20%); every 10th group mixes types."""
    rows = []
    for g in range(n_groups):
        t = "a" if g % 10 < 5 else ("b" if g % 10 < 8 else "c")
        for j in range(1 + g % 3):
            qt = "c" if (g % 10 == 0 and j == 1) else t
            rows.append(
                {
                    "qid": f"g{g}q{j}",
                    "question": f"question {g} {j}",
                    "answers": ["x"],
                    "qtype": qt,
                    "group": f"g{g}",
                }
            )
    return pd.DataFrame(rows)


@pytest.fixture
def queries() -> pd.DataFrame:
    return _queries()


def _groups(q: pd.DataFrame, qids) -> set[str]:
    return set(q.set_index("qid").loc[list(qids), "group"])


def _assert_grouped(q: pd.DataFrame, s: Split) -> None:
    assert not set(s.train) & set(s.test)
    assert not _groups(q, s.train) & _groups(q, s.test), f"{s.name}: a group is on both sides"


def test_balanced_split_is_grouped_and_keeps_type_shares(queries):
    s = balanced_split(queries, test_size=0.3, random_state=0)
    _assert_grouped(queries, s)
    assert set(s.train) | set(s.test) == set(queries["qid"])
    assert s.n_test / len(queries) == pytest.approx(0.3, abs=0.05)
    share = queries.set_index("qid")["qtype"]
    for side in (s.train, s.test):
        frac = share.loc[list(side)].value_counts(normalize=True)
        overall = share.value_counts(normalize=True)
        for t in overall.index:
            assert frac.get(t, 0.0) == pytest.approx(overall[t], abs=0.08), (t, side is s.test)


def test_balanced_split_is_seeded(queries):
    a = balanced_split(queries, random_state=1)
    assert a == balanced_split(queries, random_state=1)
    assert set(a.test) != set(balanced_split(queries, random_state=2).test)


def test_balanced_split_validates_test_size(queries):
    with pytest.raises(ConfigError, match=r"test_size must be a number in \(0, 1\) \(a fraction\), got 1.5"):
        balanced_split(queries, test_size=1.5)


def test_empty_test_set_raises_naming_the_split():
    one_group = pd.DataFrame({"qid": [f"q{i}" for i in range(10)], "qtype": "a", "group": "g"})
    with pytest.raises(DataError, match="split 'balanced' has an empty test set"):
        balanced_split(one_group)


def test_leave_one_type_out_covers_every_type(queries):
    splits = list(leave_one_type_out(queries))
    assert [s.heldout for s in splits] == ["a", "b", "c"]
    assert [s.name for s in splits] == [
        "leave-one-type-out:a",
        "leave-one-type-out:b",
        "leave-one-type-out:c",
    ]
    qt = queries.set_index("qid")["qtype"]
    for s in splits:
        _assert_grouped(queries, s)
        assert set(qt.loc[list(s.test)]) == {s.heldout}
        assert s.heldout not in set(qt.loc[list(s.train)])
        assert set(s.test) == set(qt.index[qt == s.heldout])


def test_leave_one_type_out_drops_the_other_rows_of_mixed_groups(queries):
    # Group g10 holds g10q0 of type a and g10q1 of type c (see _queries).
    s = {x.heldout: x for x in leave_one_type_out(queries)}["c"]
    assert "g10q1" in s.test
    assert "g10q0" not in s.train and "g10q0" not in s.test


def test_leave_one_type_out_needs_two_types():
    q = pd.DataFrame({"qid": ["q1", "q2"], "qtype": ["a", "a"], "group": ["g1", "g2"]})
    with pytest.raises(DataError, match="split 'leave-one-type-out:a' has an empty train set"):
        list(leave_one_type_out(q))


def test_grouped_kfold_partitions_the_queries(queries):
    folds = list(grouped_kfold(queries, n_folds=5, random_state=0))
    assert [f.name for f in folds] == [f"kfold:{i}" for i in range(5)]
    tested = [qid for f in folds for qid in f.test]
    assert sorted(tested) == sorted(queries["qid"])
    for f in folds:
        _assert_grouped(queries, f)
        assert set(f.train) | set(f.test) == set(queries["qid"])
    assert folds == list(grouped_kfold(queries, n_folds=5, random_state=0))
    assert folds != list(grouped_kfold(queries, n_folds=5, random_state=1))


def test_grouped_kfold_validates(queries):
    with pytest.raises(ConfigError, match="n_folds must be an integer >= 2"):
        list(grouped_kfold(queries, n_folds=1))
    few = queries[queries["group"].isin(["g1", "g2"])]
    with pytest.raises(DataError, match="needs at least n_folds=5 groups"):
        list(grouped_kfold(few, n_folds=5))


def test_make_splits_runs_the_named_families_in_order(queries):
    splits = make_splits(
        queries, ["kfold", "balanced", "leave-one-type-out"], n_folds=3, random_state=4
    )
    assert [s.name for s in splits] == [
        "kfold:0",
        "kfold:1",
        "kfold:2",
        "balanced",
        "leave-one-type-out:a",
        "leave-one-type-out:b",
        "leave-one-type-out:c",
    ]
    assert splits == make_splits(
        queries, ["kfold", "balanced", "leave-one-type-out"], n_folds=3, random_state=4
    )
    with pytest.raises(ConfigError, match="unknown split 'random'"):
        make_splits(queries, ["random"])


def test_missing_type_and_group_default_to_one_type_and_singleton_groups():
    q = pd.DataFrame({"qid": [f"q{i}" for i in range(20)]})
    s = balanced_split(q, test_size=0.25, random_state=0)
    assert s.n_test == 5
    with pytest.raises(DataError, match="duplicate qid 'q1'"):
        balanced_split(pd.DataFrame({"qid": ["q1", "q1", "q2"]}))


def test_splits_table_and_to_dict(queries):
    splits = make_splits(queries, ["balanced"])
    t = splits_table(splits)
    assert list(t.columns) == ["split", "family", "heldout", "qid", "side"]
    assert len(t) == len(queries)
    assert t.groupby("side").size().to_dict() == {
        "test": splits[0].n_test,
        "train": splits[0].n_train,
    }
    d = splits[0].to_dict()
    assert d["name"] == "balanced" and len(d["train"]) == splits[0].n_train
