"""Rankers under scikit-learn's own estimator checks (``parametrize_with_checks``).

sklearn's checks call ``fit(X, y)`` without query ids and with arbitrary labels;
`sklearn_check_adapter` gives them a ranker that reads a missing ``qid`` as one query and
rescales labels to [0, 1]. ltrr's ranking checks are in `ltrr.rankers.checks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["sklearn_check_adapter"]
_ADAPTERS: dict[type, type] = {}


def _unit_labels(y: Any) -> Any:
    if np.iscomplexobj(y):
        return y  # let the ranker's own validation reject complex labels
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        return y
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all():
        return y
    lo, hi = arr.min(), arr.max()
    if lo >= 0.0 and hi <= 1.0:
        return y
    return (arr - lo) / (hi - lo) if hi > lo else np.zeros_like(arr)


def _adapter_class(cls: Any) -> type:
    from ltrr.rankers._validation import num_rows

    if cls in _ADAPTERS:
        return _ADAPTERS[cls]
    name = f"SingleQuery{cls.__name__}"

    def fit(self, X, y, qid=None):
        if qid is None:
            n = num_rows(X)
            qid = None if n is None else np.zeros(n, dtype=np.int64)
        if y is not None:
            y = _unit_labels(y)
        return cls.fit(self, X, y, qid=qid)

    fit.__doc__ = cls.fit.__doc__
    sub = type(
        name,
        (cls,),
        {
            "fit": fit,
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"{cls.__name__} with a missing qid read as one query (sklearn checks).",
        },
    )
    # Module-level name so sklearn's pickling checks can find the class again.
    globals()[name] = sub
    _ADAPTERS[cls] = sub
    return sub


def sklearn_check_adapter(ranker):
    """An estimator sklearn's ``parametrize_with_checks`` can drive for ``ranker``.

    Pointwise rankers (``requires_qid = False``) are returned unchanged (a clone). A
    query-grouped ranker becomes an instance of a subclass that reads a missing ``qid`` as one
    query and min-max rescales labels outside [0, 1]; its parameters are the ranker's.
    """
    from sklearn.base import clone

    if not getattr(ranker, "requires_qid", True):
        return clone(ranker)
    return _adapter_class(type(ranker))(**ranker.get_params(deep=False))
