"""Input validation and query-grouping helpers shared by every ranker.

Every ranker (classic and neural) validates its inputs with these functions, so errors read the
same everywhere and the sklearn attributes (``n_features_in_``, ``feature_names_in_``) are set
the same way.

Functions
---------
check_ranking_data(ranker, X, y, qid, *, dtype=np.float64) -> (X, y, qid)
    Validate ``fit`` inputs: ``X`` 2-D numeric (NaN allowed only when the ranker's sklearn tag
    ``input_tags.allow_nan`` is True), ``y`` 1-D finite numbers of the same length, ``qid``
    through `check_qid`. Sets ``n_features_in_`` and, for DataFrames with string column names,
    ``feature_names_in_``. Raises `DataError` (a ``ValueError``).
check_predict_data(ranker, X, *, dtype=np.float64) -> X
    Validate ``predict`` input: ``NotFittedError`` before ``fit``; `DataError` on a feature-count
    or feature-name mismatch, or on NaN when the ranker does not accept it.
check_qid(qid, n_rows, *, ranker=None, required=False) -> ndarray | None
    One query id per row (ints or strings), no missing ids. ``None`` is allowed only when
    ``required`` is False (pointwise rankers).
check_unit_labels(y, *, name) -> y
    Labels must lie in [0, 1] (normalised utility gains).
to_grades(y, n_grades, *, name) -> int32 ndarray
    Quantise gains in [0, 1] to the nearest of ``n_grades`` integer grades ``0..n_grades-1``
    (halves round up), for objectives that need integer relevance degrees.
canonical_order(X, y, qid) -> CanonicalGroups(order, codes, sizes)
    A row order that does not depend on the order rows arrive in: groups sorted by query id,
    rows within a group sorted by their features then label. Training on ``X[order]`` makes a
    model invariant to permutations of groups and of rows within groups, and gives the
    contiguous groups (``sizes``) that XGBoost and LightGBM need.
preference_pairs(y, sizes) -> (hi, lo)
    All within-query pairs of rows with different labels in data laid out in contiguous groups
    of ``sizes``: ``y[hi] > y[lo]`` element-wise.
num_rows(X) -> int | None
    Number of rows of an array-like, or None when it has none (a scalar, a 0-d array).
DataTypeError
    A `DataError` that is also a ``TypeError``: input of a type rankers cannot take (sparse
    matrices, non-numeric cells), raised where sklearn raises ``TypeError``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils import get_tags
from sklearn.utils.validation import check_is_fitted, validate_data

from ltrr._errors import DataError, LtrrError
from ltrr.rankers.registry import rankers

__all__ = [
    "DataTypeError",
    "CanonicalGroups",
    "check_ranking_data",
    "check_predict_data",
    "check_qid",
    "check_unit_labels",
    "to_grades",
    "canonical_order",
    "preference_pairs",
    "num_rows",
]


class DataTypeError(DataError, TypeError):
    """Input of a type a ranker cannot take (sparse matrices, non-numeric cells)."""


class CanonicalGroups(NamedTuple):
    """Result of `canonical_order`.

    Attributes
    ----------
    order : ndarray of int64
        Row permutation: ``X[order]`` is laid out in contiguous, canonically ordered groups.
    codes : ndarray of int64
        Group number of each row of ``X[order]`` (0, 0, 1, 1, 1, 2, ...), non-decreasing.
    sizes : ndarray of int64
        Number of rows of each group, in group-number order.
    """

    order: np.ndarray
    codes: np.ndarray
    sizes: np.ndarray


def _label(ranker: Any) -> str:
    return getattr(ranker, "name", None) or type(ranker).__name__


def _as_data_error(exc: Exception, ranker: Any) -> Exception:
    # NotFittedError is a ValueError too; it must pass through unchanged (sklearn contract).
    if isinstance(exc, (LtrrError, NotFittedError)):
        return exc
    msg = str(exc)
    if "features, but" in msg and "is expecting" in msg:
        msg += (
            " Pass the same feature columns, in the same order, as at fit time (or retrain the "
            "ranker on the new features)."
        )
    if msg.startswith("Input X contains NaN"):
        msg = (
            f"Input X contains NaN. {type(ranker).__name__} does not accept missing feature "
            "values: impute them first (e.g. sklearn.impute.SimpleImputer in a Pipeline), drop "
            f"those rows, or use a ranker that accepts NaN ({', '.join(_nan_rankers())})."
        )
    kind = DataTypeError if isinstance(exc, TypeError) else DataError
    return kind(f"{_label(ranker)}: {msg}")


def _nan_rankers() -> list[str]:
    names = []
    for name in rankers.names():
        try:
            if get_tags(rankers.get(name)()).input_tags.allow_nan:
                names.append(name)
        except Exception:  # a ranker that cannot be built is simply not listed
            continue
    return names


def num_rows(X: Any) -> int | None:
    """Number of rows of ``X`` (array-like, DataFrame or sparse matrix); None if it has none.

    The first entry of ``X.shape`` where ``X`` has one (arrays, DataFrames, sparse matrices),
    else ``len(X)``; None for a scalar, a 0-d array or an object with neither.

    Examples
    --------
    >>> num_rows([[1, 2], [3, 4], [5, 6]]), num_rows(np.float64(1.0)), num_rows("text")
    (3, None, None)
    """
    if isinstance(X, (str, bytes)):
        return None
    shape = getattr(X, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else None
        except TypeError:
            return None
    try:
        return len(X)
    except TypeError:
        return None


def check_qid(
    qid: Any, n_rows: int, *, ranker: Any = None, required: bool = False
) -> np.ndarray | None:
    """Validate query ids: a 1-D sequence with one id per row and no missing ids.

    Parameters
    ----------
    qid : array-like of shape (n_rows,) or None
        Query id of each row; ints or strings. Rows of one query need not be contiguous.
    n_rows : int
        Number of rows of ``X``.
    ranker : object, optional
        Used to name the ranker in error messages.
    required : bool
        Whether ``qid=None`` is an error (rankers that learn from within-query comparisons).

    Returns
    -------
    ndarray or None
    """
    who = _label(ranker) if ranker is not None else "ranker"
    if qid is None:
        if required:
            raise DataError(
                f"{who} learns from rows grouped by query: pass fit(X, y, qid=...) with one "
                "query id per row (for a single query use qid=numpy.zeros(len(X)))"
            )
        return None
    if hasattr(qid, "to_numpy"):  # pandas Series / Index
        qid = qid.to_numpy()
    qid = np.asarray(qid)
    if qid.ndim != 1:
        raise DataError(f"{who}: qid must be 1-D (one id per row); got shape {qid.shape}")
    if len(qid) != n_rows:
        raise DataError(
            f"{who}: qid has {len(qid)} entries but X has {n_rows} rows; pass one query id per row"
        )
    if qid.dtype.kind == "f" and np.isnan(qid).any():
        raise DataError(f"{who}: qid contains NaN; every row needs a query id")
    if qid.dtype.kind == "O" and any(q is None or q != q for q in qid.tolist()):
        raise DataError(f"{who}: qid contains missing values (None/NaN); every row needs one")
    if qid.dtype.kind not in "iufUSOb":
        raise DataError(f"{who}: qid must hold ints or strings; got dtype {qid.dtype}")
    return qid


def check_ranking_data(
    ranker: Any, X: Any, y: Any, qid: Any = None, *, dtype: Any = np.float64
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate ``fit(X, y, qid)`` inputs and set ``n_features_in_``/``feature_names_in_``.

    ``qid`` is required when ``ranker.requires_qid`` is True. NaN in ``X`` is accepted only when
    the ranker's sklearn tag ``input_tags.allow_nan`` is True; labels must always be finite.

    Returns
    -------
    X : ndarray of shape (n_rows, n_features), ``dtype``
    y : ndarray of shape (n_rows,), float64
    qid : ndarray of shape (n_rows,) or None
    """
    allow_nan = get_tags(ranker).input_tags.allow_nan
    try:
        X, y = validate_data(
            ranker,
            X,
            y,
            reset=True,
            dtype=dtype,
            ensure_all_finite="allow-nan" if allow_nan else True,
            y_numeric=True,
        )
    except (ValueError, TypeError) as exc:
        err = _as_data_error(exc, ranker)
        if isinstance(err, DataError) and "Input y contains" in str(exc):
            err = type(err)(f"{err} Labels must be finite numbers: drop or fill unlabelled rows.")
        raise err from exc
    y = np.asarray(y, dtype=np.float64)
    qid = check_qid(qid, X.shape[0], ranker=ranker, required=getattr(ranker, "requires_qid", True))
    return X, y, qid


def check_predict_data(ranker: Any, X: Any, *, dtype: Any = np.float64) -> np.ndarray:
    """Validate ``predict`` input against the fitted ranker.

    Raises ``NotFittedError`` before ``fit`` and `DataError` on a feature-count or feature-name
    mismatch, or on NaN for rankers that do not accept it.
    """
    check_is_fitted(ranker)
    allow_nan = get_tags(ranker).input_tags.allow_nan
    # Already-valid input (a non-empty float ndarray of the fitted width, fitted without
    # feature names, finite or NaN where allowed) passes as it is: validate_data would return
    # it unchanged at ~0.2 ms a call, which is most of a per-query routing decision. Anything
    # else goes through validate_data and its errors.
    if (
        type(X) is np.ndarray
        and X.dtype == dtype
        and X.ndim == 2
        and X.shape[0] > 0
        and X.shape[1] == getattr(ranker, "n_features_in_", -1)
        and not hasattr(ranker, "feature_names_in_")
        and not (np.isinf(X).any() if allow_nan else not np.isfinite(X).all())
    ):
        return X
    try:
        return validate_data(
            ranker,
            X,
            reset=False,
            dtype=dtype,
            ensure_all_finite="allow-nan" if allow_nan else True,
        )
    except (ValueError, TypeError) as exc:
        raise _as_data_error(exc, ranker) from exc


def check_unit_labels(y: np.ndarray, *, name: str) -> np.ndarray:
    """Check that labels are graded gains in [0, 1]; return them unchanged."""
    y = np.asarray(y, dtype=np.float64)
    if y.size and (y.min() < 0.0 or y.max() > 1.0):
        raise DataError(
            f"{name}: labels must be graded gains in [0, 1] (got min {y.min():.4g}, max "
            f"{y.max():.4g}); rescale them, e.g. divide non-negative utilities by their maximum"
        )
    return y


def to_grades(y: np.ndarray, n_grades: int, *, name: str) -> np.ndarray:
    """Quantise gains in [0, 1] to integer grades ``0 .. n_grades - 1`` (nearest, halves up).

    LambdaMART objectives (XGBoost ``rank:ndcg``, LightGBM ``lambdarank``) need integer
    relevance degrees; grade ``g`` stands for the gain ``g / (n_grades - 1)``.

    Examples
    --------
    >>> to_grades(np.array([0.0, 0.1, 0.125, 0.5, 1.0]), 5, name="demo").tolist()
    [0, 0, 1, 2, 4]
    """
    y = check_unit_labels(y, name=name)
    return np.floor(y * (n_grades - 1) + 0.5).astype(np.int32)


def _qid_codes(qid: np.ndarray | None, n_rows: int) -> np.ndarray:
    if qid is None:
        return np.zeros(n_rows, dtype=np.int64)
    try:
        _, codes = np.unique(qid, return_inverse=True)
    except TypeError:
        # Mixed id types (e.g. ints and strings in an object array) do not sort; order them by
        # type name then text, which is still independent of row order.
        uniq = sorted(set(qid.tolist()), key=lambda v: (type(v).__name__, repr(v)))
        index = {v: i for i, v in enumerate(uniq)}
        codes = np.fromiter((index[v] for v in qid.tolist()), dtype=np.int64, count=len(qid))
    return np.asarray(codes, dtype=np.int64).reshape(-1)


def canonical_order(X: np.ndarray, y: np.ndarray, qid: np.ndarray | None) -> CanonicalGroups:
    """A row order independent of the order in which rows and groups arrive.

    Groups are sorted by query id (``qid=None`` is one group); rows within a group by their
    feature values (column 0 first), then label. Identical rows are interchangeable, so any
    permutation of the input gives the same ``X[order]``.
    """
    X = np.asarray(X)
    n = X.shape[0]
    codes = _qid_codes(qid, n)
    # np.lexsort sorts by the last key first.
    keys = (np.asarray(y), *X.T[::-1], codes)
    order = np.lexsort(keys).astype(np.int64)
    sorted_codes = codes[order]
    sizes = np.bincount(sorted_codes).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
    return CanonicalGroups(order=order, codes=sorted_codes, sizes=sizes)


def preference_pairs(y: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Within-query preference pairs of data laid out in contiguous groups.

    Parameters
    ----------
    y : ndarray of shape (n_rows,)
        Labels, rows in contiguous groups (e.g. ``y[canonical_order(...).order]``).
    sizes : ndarray
        Rows per group, in layout order.

    Returns
    -------
    hi, lo : ndarray of int64
        Row positions with ``y[hi] > y[lo]`` and both rows in the same group; pairs with equal
        labels are left out. The order is deterministic (by group size, group, then position).

    Examples
    --------
    >>> hi, lo = preference_pairs(np.array([0.0, 1.0, 0.5, 0.2, 0.2]), np.array([3, 2]))
    >>> list(zip(hi.tolist(), lo.tolist()))
    [(1, 0), (2, 0), (1, 2)]
    """
    y = np.asarray(y)
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    his, los = [], []
    # Bucketing groups by size vectorises pair enumeration without a Python loop per query.
    for m in np.unique(sizes):
        if m < 2:
            continue
        s = starts[sizes == m]
        a, b = np.triu_indices(int(m), 1)
        i = (s[:, None] + a[None, :]).ravel()
        j = (s[:, None] + b[None, :]).ravel()
        yi, yj = y[i], y[j]
        keep = yi != yj
        i, j, first = i[keep], j[keep], (yi > yj)[keep]
        his.append(np.where(first, i, j))
        los.append(np.where(first, j, i))
    if not his:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(his).astype(np.int64), np.concatenate(los).astype(np.int64)
