"""Seeded, type-stratified samples of a queries table."""

from __future__ import annotations

import pandas as pd

__all__ = ["stratified_sample"]


def stratified_sample(queries: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """A seeded sample of about ``n`` queries, the same number of each query type.

    Types with fewer queries than their share give all they have, and the rest is spread over
    the other types, so that every type can be held out with a test set of useful size.
    """
    groups = {t: g for t, g in queries.groupby("qtype", sort=True)}
    quota = dict.fromkeys(groups, 0)
    left = n
    while left > 0:
        open_types = [t for t in groups if quota[t] < len(groups[t])]
        if not open_types:
            break
        share = max(1, left // len(open_types))
        for t in open_types:
            add = min(share, len(groups[t]) - quota[t], left)
            quota[t] += add
            left -= add
            if left == 0:
                break
    parts = [groups[t].sample(n=quota[t], random_state=seed) for t in groups if quota[t]]
    return pd.concat(parts).sort_values("qid").reset_index(drop=True)
