"""The ranker contract shared by every learning-to-rank model.

Rankers follow the scikit-learn estimator contract (``__init__`` stores hyper-parameters only;
``fit`` validates, learns, sets trailing-underscore state and returns ``self``) with query
grouping passed as data, as in LightGBM's ``LGBMRanker``: ``fit(X, y, qid=...)``.

- ``X``: a 2-D numeric array or a DataFrame (text rankers read named text columns).
- ``y``: graded relevance per row (here: normalised utility gains in [0, 1]).
- ``qid``: one query id per row; rows of one query need not be contiguous.
- ``predict(X)`` returns one score per row; higher is better.
- ``rank(X, qid)`` returns, per query, the row indices ordered best first.
- ``save(path)`` / ``load(path)`` use JSON for parameters plus the libraries' own model formats
  (XGBoost JSON, LightGBM text, safetensors); never pickle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from ltrr._errors import ConfigError, DataError
from ltrr._registry import Registry
from ltrr._version import __version__

__all__ = ["BaseRanker", "rankers", "group_slices"]

rankers: Registry = Registry("ranker")

FORMAT_VERSION = 1


def group_slices(qid: np.ndarray) -> dict[Any, np.ndarray]:
    """Map each query id to the row indices that carry it, in order of first appearance."""
    qid = np.asarray(qid)
    order: dict[Any, list[int]] = {}
    for i, q in enumerate(qid.tolist()):
        order.setdefault(q, []).append(i)
    return {q: np.asarray(ix, dtype=np.int64) for q, ix in order.items()}


class BaseRanker(BaseEstimator):
    """Base class of all rankers; subclasses implement ``fit``, ``predict``, ``_save``, ``_load``."""

    #: registry name, set by subclasses
    name: str = "abstract"

    def rank(self, X, qid) -> dict[Any, np.ndarray]:
        """Return, for each query id, the row indices of ``X`` ordered by descending score.

        Ties are broken by row order (stable sort), so the result is deterministic.
        """
        scores = np.asarray(self.predict(X), dtype=float)
        qid = np.asarray(qid)
        if len(qid) != len(scores):
            raise DataError(f"qid has {len(qid)} entries but X has {len(scores)} rows")
        return {
            q: ix[np.argsort(-scores[ix], kind="stable")] for q, ix in group_slices(qid).items()
        }

    # ---- persistence -------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save the fitted ranker into folder ``path`` (created); returns the folder."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {
            "ranker": self.name,
            "class": type(self).__name__,
            "ltrr_version": __version__,
            "format_version": FORMAT_VERSION,
            "params": _jsonable(self.get_params(deep=False)),
            "state": self._save(path),
        }
        tmp = path / "ranker.json.tmp"
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
        tmp.replace(path / "ranker.json")
        return path

    @classmethod
    def load(cls, path: str | Path) -> BaseRanker:
        """Load a ranker saved by `save`; the concrete class is read from the folder."""
        path = Path(path)
        meta_file = path / "ranker.json"
        if not meta_file.is_file():
            raise DataError(f"{path}: no ranker.json; not a saved ltrr ranker")
        meta = json.loads(meta_file.read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise DataError(
                f"{path}: ranker saved with format version {meta.get('format_version')} "
                f"(ltrr {meta.get('ltrr_version')}); this ltrr ({__version__}) reads version "
                f"{FORMAT_VERSION}. Retrain with `ltrr train`."
            )
        try:
            klass = rankers.get(meta["ranker"])
        except ConfigError as exc:
            raise DataError(f"{path}: {exc}") from None
        est = klass(**meta["params"])
        est._load(path, meta["state"])
        return est

    def _save(self, path: Path) -> dict[str, Any]:  # pragma: no cover - abstract
        """Write model files into ``path``; return JSON-able state (e.g. ``n_features_in_``)."""
        raise NotImplementedError

    def _load(self, path: Path, state: dict[str, Any]) -> None:  # pragma: no cover - abstract
        """Restore fitted state written by ``_save``."""
        raise NotImplementedError


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in params.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, tuple):
            v = list(v)
        out[k] = v
    return out
