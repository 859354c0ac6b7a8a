"""The ranker contract shared by every learning-to-rank model.

Rankers follow the scikit-learn estimator contract (``__init__`` stores hyper-parameters only;
``fit`` validates, learns, sets trailing-underscore state and returns ``self``) with query
grouping passed as data, as in LightGBM's ``LGBMRanker``: ``fit(X, y, qid=...)``.

- ``X``: a 2-D numeric array or a DataFrame (text rankers read named text columns).
- ``y``: graded relevance per row (here: normalised utility gains in [0, 1]).
- ``qid``: one query id per row; rows of one query need not be contiguous. Rankers that learn
  from within-query comparisons (``requires_qid = True``, the default) raise `DataError`
  without it; pointwise rankers accept ``qid=None``.
- ``predict(X)`` returns one score per row; higher is better.
- ``rank(X, qid)`` returns, per query, the row indices ordered best first.
- ``save(path)`` / ``load(path)`` use JSON for parameters plus the libraries' own model formats
  (XGBoost JSON, LightGBM text, ``.npy``, safetensors); never pickle.

Saved folder layout: ``ranker.json`` (ranker name, class, ltrr and format versions,
constructor parameters, ``n_features_in_``/``feature_names_in_``, the state returned by
``_save`` and the SHA-256 of every file ``_save`` wrote) plus those model files. ``load``
refuses a folder whose format version, ranker class or file checksums do not match.

Parameter constraints are declared once per class in ``param_constraints`` and checked at
``fit`` by `ltrr.rankers.params.checked_fit`; a violation raises `RankerParameterError` (a
`ConfigError`) with a message worded as sklearn's, naming parameter, class, allowed and
received values.

``qid`` is requested by default for metadata routing, so ``GridSearchCV(...).fit(X, y,
qid=qid, groups=qid)`` routes it to ``fit`` and to `ndcg_scorer` once routing is enabled
(``sklearn.set_config(enable_metadata_routing=True)``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from ltrr._atomic import plain_json, sha256_file, write_json_atomic
from ltrr._errors import ConfigError, DataError, LtrrError, NotBuiltError
from ltrr._version import __version__
from ltrr.rankers._validation import check_qid
from ltrr.rankers.params import check_constraints, check_params
from ltrr.rankers.registry import rankers

__all__ = ["BaseRanker", "rankers", "group_slices", "mean_ndcg", "ndcg_scorer"]

FORMAT_VERSION = 1
META_FILE = "ranker.json"


def group_slices(qid: np.ndarray) -> dict[Any, np.ndarray]:
    """Map each query id to the row indices that carry it, in order of first appearance."""
    qid = np.asarray(qid)
    order: dict[Any, list[int]] = {}
    for i, q in enumerate(qid.tolist()):
        order.setdefault(q, []).append(i)
    return {q: np.asarray(ix, dtype=np.int64) for q, ix in order.items()}


class BaseRanker(BaseEstimator):
    """Base class of all rankers; subclasses implement ``fit``, ``predict``, ``_save``, ``_load``.

    Subclasses register themselves with ``@rankers.register("<name>")``, set the class
    attribute ``name`` to the same string, declare ``param_constraints`` (checked when the class
    is defined) and decorate ``fit`` with `ltrr.rankers.params.checked_fit`. Inputs are
    validated with the helpers of ``ltrr.rankers._validation``.

    Examples
    --------
    >>> import numpy as np
    >>> from ltrr.rankers import rankers
    >>> X = np.array([[0.0], [1.0], [2.0], [0.5], [1.5], [0.2]])
    >>> y = np.array([0.0, 0.5, 1.0, 0.2, 1.0, 0.0])
    >>> qid = np.array([1, 1, 1, 2, 2, 2])
    >>> ranker = rankers.get("svmrank-pairwise")(random_state=0).fit(X, y, qid=qid)
    >>> {q: ix.tolist() for q, ix in ranker.rank(X, qid).items()}
    {1: [2, 1, 0], 2: [4, 3, 5]}
    """

    #: registry name, set by subclasses
    name: ClassVar[str] = "abstract"
    #: whether ``fit`` needs ``qid`` (False for pointwise rankers, which ignore it)
    requires_qid: ClassVar[bool] = True
    #: whether ``fit``/``predict`` read text columns (``query_text``, ``arm_text``) beside
    #: the numeric features (see `ltrr.rankers.ranker_tags`)
    needs_text: ClassVar[bool] = False
    #: whether NaN features are accepted (with the default parameters)
    allows_nan: ClassVar[bool] = False
    #: whether the ranker learns its own value for NaN features instead of needing them imputed
    learns_missing: ClassVar[bool] = False
    #: whether the ranker trains a torch module (imports torch in fit and load)
    torch_based: ClassVar[bool] = False
    #: whether ``fit`` trains on the Dask cluster of `ltrr.dist.rankers.dask_training`
    trains_on_dask: ClassVar[bool] = False
    #: parameter constraints (`ltrr.rankers.params`): {param: [constraint, ...]}; unlisted
    #: params are unchecked
    param_constraints: ClassVar[dict] = {}
    # qid is data that belongs to fit: request it by default for sklearn's metadata routing,
    # as sklearn's group splitters do for ``groups``.
    __metadata_request__fit: ClassVar[dict] = {"qid": True}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_constraints(cls.__name__, cls.param_constraints)

    def rank(self, X, qid) -> dict[Any, np.ndarray]:
        """Return, for each query id, the row indices of ``X`` ordered by descending score.

        Ties are broken by row order (stable sort), so the result is deterministic. Query ids
        need not have been seen at fit time.
        """
        if qid is None:
            raise DataError(f"{self.name}: rank(X, qid) needs one query id per row of X")
        scores = np.asarray(self.predict(X), dtype=float)
        qid = check_qid(qid, len(scores), ranker=self)
        return {
            q: ix[np.argsort(-scores[ix], kind="stable")] for q, ix in group_slices(qid).items()
        }

    # ---- persistence -------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save the fitted ranker into folder ``path`` (created); returns the folder.

        ``_save`` writes into a staging folder; its files are then moved into ``path`` and
        ``ranker.json`` is written last, so an interrupted save leaves no loadable half-model.
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise DataError(f"{path} is a file; save a ranker into a folder")
        params = plain_json(self.get_params(deep=False), f"{type(self).__name__} params")  # before any file moves
        path.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".ranker-", dir=path))
        try:
            state = self._save(stage)
            files = {
                f.relative_to(stage).as_posix(): sha256_file(f)
                for f in sorted(stage.rglob("*"))
                if f.is_file()
            }
            if META_FILE in files:
                raise RuntimeError(f"{type(self).__name__}._save must not write {META_FILE}")
            (path / META_FILE).unlink(missing_ok=True)
            for rel in files:
                dest = path / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / rel, dest)
            fitted: dict[str, Any] = {}
            if hasattr(self, "n_features_in_"):
                fitted["n_features_in_"] = int(self.n_features_in_)
            if hasattr(self, "feature_names_in_"):
                fitted["feature_names_in_"] = [str(c) for c in self.feature_names_in_]
            meta = {
                "ranker": self.name,
                "class": type(self).__name__,
                "ltrr_version": __version__,
                "format_version": FORMAT_VERSION,
                "params": params,
                "fitted": fitted,
                "state": state,
                "files": files,
            }
            write_json_atomic(path / META_FILE, meta, indent=2, sort_keys=True)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> BaseRanker:
        """Load a ranker saved by `save`; the concrete class is read from the folder.

        Called on a subclass (``XGBoostListwiseRanker.load(p)``), the folder must hold that
        ranker; ``BaseRanker.load(p)`` loads any registered ranker.
        """
        path = Path(path)
        if not path.exists():
            raise NotBuiltError(f"{path}: no such folder; train and save a ranker there first")
        meta_file = path / META_FILE
        if not meta_file.is_file():
            raise DataError(f"{path}: no {META_FILE}; not a saved ltrr ranker")
        try:
            meta = json.loads(meta_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataError(f"{meta_file}: not valid JSON ({exc}); the file is damaged") from None
        if not isinstance(meta, dict):
            raise DataError(f"{meta_file}: expected a JSON object; the file is damaged")
        if meta.get("format_version") != FORMAT_VERSION:
            raise DataError(
                f"{path}: ranker saved with format version {meta.get('format_version')} "
                f"(ltrr {meta.get('ltrr_version')}); this ltrr ({__version__}) reads version "
                f"{FORMAT_VERSION}. Retrain with `ltrr train`."
            )
        for key, kind in (("ranker", str), ("params", dict), ("files", dict), ("fitted", dict)):
            if not isinstance(meta.get(key), kind):
                raise DataError(
                    f"{meta_file}: missing or malformed key {key!r} (expected {kind.__name__}); "
                    "the file is damaged"
                )
        try:
            klass = rankers.get(meta["ranker"])
        except ConfigError as exc:
            raise DataError(f"{path}: {exc}") from None
        if not issubclass(klass, cls):
            raise DataError(
                f"{path} holds a {meta['ranker']!r} ranker ({klass.__name__}), not a "
                f"{cls.name!r} ({cls.__name__}); load it with {klass.__name__}.load or "
                "BaseRanker.load"
            )
        for rel, digest in meta["files"].items():
            f = path / rel
            if not f.is_file():
                raise DataError(f"{path}: model file {rel!r} is missing; re-save the ranker")
            if sha256_file(f) != digest:
                raise DataError(
                    f"{f}: contents changed after the ranker was saved (SHA-256 mismatch); "
                    "re-save or retrain the ranker"
                )
        try:
            est = klass(**meta["params"])
            check_params(est)
        except (TypeError, ConfigError) as exc:
            raise DataError(f"{meta_file}: parameters do not fit {klass.__name__}: {exc}") from None
        fitted = meta["fitted"]
        if "n_features_in_" in fitted:
            est.n_features_in_ = int(fitted["n_features_in_"])
        if "feature_names_in_" in fitted:
            est.feature_names_in_ = np.asarray(fitted["feature_names_in_"], dtype=object)
        try:
            est._load(path, meta.get("state"))
        except LtrrError:
            raise
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise DataError(
                f"{path}: cannot restore {klass.__name__} ({type(exc).__name__}: {exc}); the "
                "folder is damaged or was written by another ranker"
            ) from exc
        return est

    def _save(self, path: Path) -> dict[str, Any]:  # pragma: no cover - abstract
        """Write model files into ``path`` (a fresh staging folder); return JSON-able state.

        ``n_features_in_`` and ``feature_names_in_`` are saved and restored by the base class.
        """
        raise NotImplementedError

    def _load(self, path: Path, state: dict[str, Any]) -> None:  # pragma: no cover - abstract
        """Restore fitted state written by ``_save`` (files are checksummed before this runs)."""
        raise NotImplementedError


# ---- evaluation ----------------------------------------------------------------------------
def mean_ndcg(y_true, y_score, qid, *, k: int | None = None) -> float:
    """Mean over queries of nDCG@k, computed per query with `sklearn.metrics.ndcg_score`.

    Gains are the labels (linear); tied scores get their average gain (sklearn's
    ``ignore_ties=False``), so a constant scorer earns the random-order expectation. Queries of
    one row carry no ranking and are left out; a query whose gains are all 0 scores 0
    (sklearn's convention).

    Examples
    --------
    >>> mean_ndcg([1.0, 0.0, 0.0, 1.0], [0.9, 0.1, 0.8, 0.2], [1, 1, 2, 2], k=1)
    0.5
    """
    from sklearn.metrics import ndcg_score

    y_true = np.asarray(y_true, dtype=np.float64)
    y_score = np.asarray(y_score, dtype=np.float64)
    if y_true.shape != y_score.shape or y_true.ndim != 1:
        raise DataError(
            f"mean_ndcg: y_true {y_true.shape} and y_score {y_score.shape} must be 1-D and "
            "of equal length"
        )
    qid = check_qid(qid, len(y_true), required=True)
    if not (np.isfinite(y_true).all() and np.isfinite(y_score).all()):
        raise DataError("mean_ndcg: labels and scores must be finite")
    if (y_true < 0).any():
        raise DataError("mean_ndcg: nDCG needs non-negative gains; got a negative label")
    groups = [ix for ix in group_slices(qid).values() if len(ix) > 1]
    if not groups:
        raise DataError("mean_ndcg: every query has a single row; nDCG needs 2 or more")
    total = 0.0
    # Queries of equal size stack into one matrix, so sklearn scores them in one call.
    by_size: dict[int, list[np.ndarray]] = {}
    for ix in groups:
        by_size.setdefault(len(ix), []).append(ix)
    for ixs in by_size.values():
        rows = np.stack(ixs)
        total += ndcg_score(y_true[rows], y_score[rows], k=k) * len(ixs)
    return float(total / len(groups))


def _ndcg_metric(y_true, y_pred, *, qid=None, k=None) -> float:
    if qid is None:
        raise DataError(
            "ndcg_scorer needs each row's qid: enable sklearn metadata routing "
            "(sklearn.set_config(enable_metadata_routing=True)) and pass qid=... to fit"
        )
    return mean_ndcg(y_true, y_pred, qid, k=k)


def ndcg_scorer(k: int | None = None):
    """A sklearn scorer of per-query mean nDCG@k (see `mean_ndcg`) that requests ``qid``.

    Use it with metadata routing so ``qid`` reaches both the ranker's ``fit`` and the scorer.

    Examples
    --------
    >>> import sklearn
    >>> from sklearn.model_selection import GridSearchCV, GroupKFold
    >>> from ltrr.rankers import ndcg_scorer, rankers
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> X, y, qid = make_ranking_data(n_queries=30, random_state=0)
    >>> with sklearn.config_context(enable_metadata_routing=True):
    ...     search = GridSearchCV(
    ...         rankers.get("svmrank-pairwise")(random_state=0), {"C": [0.1, 1.0]},
    ...         cv=GroupKFold(n_splits=3), scoring=ndcg_scorer(k=1),
    ...     ).fit(X, y, qid=qid, groups=qid)
    >>> sorted(search.best_params_)
    ['C']
    """
    import sklearn
    from sklearn.metrics import make_scorer

    scorer = make_scorer(_ndcg_metric, greater_is_better=True, k=k)
    # The request is stored on the scorer; setting it needs routing on only while we set it.
    with sklearn.config_context(enable_metadata_routing=True):
        scorer = scorer.set_score_request(qid=True)
    return scorer
