"""Gradient-boosted tree rankers: XGBoost (pointwise, pairwise, listwise) and LightGBM LambdaMART.

All four accept NaN features natively (the libraries learn a default direction for missing
values at each split), train on rows laid out in `canonical_order` (so the model does not depend
on the order rows or query groups arrive in) and save the library's own model file: XGBoost
JSON (``model.json``) or LightGBM text (``model.txt``).

Labels
------
``y`` are graded gains. The pointwise and pairwise objectives use them as they are (regression
targets, or only their order within a query). The listwise LambdaMART objectives need integer
relevance degrees: labels in [0, 1] are quantised to ``n_grades`` grades ``0 .. n_grades - 1``
(`to_grades`, nearest grade), and the gain of grade ``g`` is ``2**g - 1`` (``gain=
"exponential"``, the LETOR convention and both libraries' default) or ``g`` (``gain="linear"``,
proportional to the quantised utility). Labels outside [0, 1] raise `DataError` for listwise
rankers.
"""

from __future__ import annotations

from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils import check_random_state

from ltrr._errors import ConfigError, DataError
from ltrr.rankers._validation import (
    canonical_order,
    check_predict_data,
    check_ranking_data,
    to_grades,
)
from ltrr.rankers.base import BaseRanker, rankers
from ltrr.rankers.params import Interval, StrOptions, checked_fit

__all__ = [
    "XGBoostPointwiseRanker",
    "XGBoostPairwiseRanker",
    "XGBoostListwiseRanker",
    "LambdaMARTRanker",
]

# LightGBM's lambdarank refuses larger queries.
_LIGHTGBM_MAX_GROUP = 10_000

_COMMON_CONSTRAINTS: dict[str, list] = {
    "n_estimators": [Interval(Integral, 1, None, closed="left")],
    "learning_rate": [Interval(Real, 0, None, closed="neither")],
    "subsample": [Interval(Real, 0, 1, closed="right")],
    "colsample_bytree": [Interval(Real, 0, 1, closed="right")],
    "reg_lambda": [Interval(Real, 0, None, closed="left")],
    "random_state": ["random_state"],
    "n_jobs": [Integral, None],
    "verbose": ["verbose"],
}
_GRADE_CONSTRAINTS: dict[str, list] = {
    # XGBoost's exponential gain is defined for grades below 32.
    "n_grades": [Interval(Integral, 2, 31, closed="both")],
    "gain": [StrOptions({"exponential", "linear"})],
}


def _dask_client():
    """The Dask client of an enclosing `ltrr.dist.rankers.dask_training` block, else None."""
    from ltrr.dist.rankers import active_client  # imports no Dask

    return active_client()


def _seed(random_state: Any) -> int:
    """An int seed for the libraries: an int is used as is, else drawn from the RandomState."""
    if isinstance(random_state, Integral):
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


class _GBDTRanker(BaseRanker):
    """Shared fit/predict/persistence of the tree rankers; subclasses train the booster."""

    _model_file: ClassVar[str]
    _model_format: ClassVar[str]
    # the libraries learn a default split direction for NaN, not a fill value
    allows_nan: ClassVar[bool] = True

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    @checked_fit
    def fit(self, X, y, qid=None):
        """Fit the ranker.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_rows, n_features)
            Numeric features; NaN marks a missing value.
        y : array-like of shape (n_rows,)
            Graded gains (in [0, 1] for listwise rankers).
        qid : array-like of shape (n_rows,)
            Query id of each row (optional for the pointwise ranker, which ignores it).

        Returns
        -------
        self
        """
        X, y, qid = check_ranking_data(self, X, y, qid)
        if _dask_client() is not None and not self.trains_on_dask:
            raise ConfigError(f"{self.name} does not train on Dask; --scheduler trains lambdamart-listwise, "
                              "xgboost-pairwise and xgboost-listwise")
        # A pointwise ranker ignores qid entirely, so its model is the same with or without it.
        groups = canonical_order(X, y, qid if self.requires_qid else None)
        o = groups.order
        self.booster_ = self._train(X[o], y[o], groups.codes, groups.sizes)
        return self

    def predict(self, X) -> np.ndarray:
        """Score each row of ``X``; higher is better."""
        X = check_predict_data(self, X)
        return np.asarray(self._predict(X), dtype=np.float64)

    def _train(self, X, y, codes, sizes):  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def _save(self, path: Path) -> dict[str, Any]:
        self.booster_.save_model(str(path / self._model_file))
        return {"model_file": self._model_file, "model_format": self._model_format}

    def _load(self, path: Path, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("model_format") != self._model_format:
            got = state.get("model_format") if isinstance(state, dict) else None
            raise DataError(
                f"{path}: expected a {self._model_format} model for {self.name!r}, found "
                f"{got!r}; the folder was written by another ranker"
            )
        self.booster_ = self._read_booster(path / self._model_file)

    def _read_booster(self, file: Path):  # pragma: no cover - abstract
        raise NotImplementedError


class _XGBoostRanker(_GBDTRanker):
    _model_file = "model.json"
    _model_format = "xgboost-json"
    param_constraints: ClassVar[dict] = {
        **_COMMON_CONSTRAINTS,
        "max_depth": [Interval(Integral, 1, None, closed="left")],
        "min_child_weight": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        *,
        n_estimators=100,
        learning_rate=0.1,
        max_depth=6,
        min_child_weight=1.0,
        subsample=1.0,
        colsample_bytree=1.0,
        reg_lambda=1.0,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _xgb_params(self) -> dict[str, Any]:
        return {
            "n_estimators": self.n_estimators,
            "learning_rate": self.learning_rate,
            "max_depth": self.max_depth,
            "min_child_weight": self.min_child_weight,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "reg_lambda": self.reg_lambda,
            "random_state": _seed(self.random_state),
            "n_jobs": self.n_jobs,
            "verbosity": min(int(self.verbose), 3),
            "tree_method": "hist",
        }

    def _predict(self, X):
        return self.booster_.inplace_predict(X)

    def _read_booster(self, file: Path):
        import xgboost as xgb

        booster = xgb.Booster()
        try:
            booster.load_model(str(file))
        except xgb.core.XGBoostError as exc:
            raise DataError(f"{file}: not a readable XGBoost JSON model ({exc})") from None
        if booster.num_features() != self.n_features_in_:
            raise DataError(
                f"{file}: model expects {booster.num_features()} features but ranker.json says "
                f"{self.n_features_in_}; the folder is damaged"
            )
        if self.n_jobs is not None:
            booster.set_param({"nthread": self.n_jobs})
        return booster


@rankers.register("xgboost-pointwise")
class XGBoostPointwiseRanker(RegressorMixin, _XGBoostRanker):
    """Pointwise ranker: XGBoost regression of the gains (``reg:squarederror``).

    A scikit-learn regressor: ``qid`` is optional and ignored.

    Parameters
    ----------
    n_estimators : int, default=100
        Number of boosting rounds.
    learning_rate : float, default=0.1
        Shrinkage of each tree.
    max_depth : int, default=6
        Maximum tree depth.
    min_child_weight : float, default=1.0
        Minimum sum of hessians in a leaf.
    subsample, colsample_bytree : float in (0, 1], default=1.0
        Row and column sampling ratios per tree.
    reg_lambda : float, default=1.0
        L2 regularisation of leaf weights.
    random_state : int, RandomState or None
        Seed of the sampling; an int gives identical models run to run.
    n_jobs : int or None
        Threads; None uses the library default (all cores).
    verbose : int, default=0
        XGBoost verbosity (0 silent ... 3 debug).

    Attributes
    ----------
    booster_ : xgboost.Booster
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Set when ``X`` is a DataFrame with string column names.

    Examples
    --------
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> X, y, qid = make_ranking_data(n_queries=20, random_state=0)
    >>> ranker = XGBoostPointwiseRanker(n_estimators=10, random_state=0).fit(X, y)
    >>> ranker.predict(X[:2]).shape
    (2,)
    """

    name = "xgboost-pointwise"
    requires_qid = False

    def _train(self, X, y, codes, sizes):
        import xgboost as xgb

        model = xgb.XGBRegressor(objective="reg:squarederror", **self._xgb_params())
        return model.fit(X, y).get_booster()


@rankers.register("xgboost-pairwise")
class XGBoostPairwiseRanker(_XGBoostRanker):
    """Pairwise ranker: XGBoost ``rank:pairwise`` (RankNet loss on within-query pairs).

    Only the order of labels within a query matters, so any finite labels work. Parameters and
    attributes as `XGBoostPointwiseRanker`; ``qid`` is required.

    Examples
    --------
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> X, y, qid = make_ranking_data(n_queries=20, random_state=0)
    >>> ranker = XGBoostPairwiseRanker(n_estimators=10, random_state=0).fit(X, y, qid=qid)
    >>> len(ranker.rank(X, qid)) == len(set(qid))
    True
    """

    name = "xgboost-pairwise"
    trains_on_dask = True

    def _train(self, X, y, codes, sizes):
        import xgboost as xgb

        params = {"objective": "rank:pairwise", **self._xgb_params()}
        client = _dask_client()
        if client is not None:
            from ltrr.dist.rankers import fit_xgboost_ranker_on_dask

            return fit_xgboost_ranker_on_dask(X, y, codes, sizes, params, client)
        return xgb.XGBRanker(**params).fit(X, y, qid=codes).get_booster()


@rankers.register("xgboost-listwise")
class XGBoostListwiseRanker(_XGBoostRanker):
    """Listwise ranker: XGBoost LambdaMART (``rank:ndcg``).

    Labels in [0, 1] are quantised to ``n_grades`` integer grades (see the module docstring).
    Parameters and attributes as `XGBoostPointwiseRanker`, plus:

    Parameters
    ----------
    n_grades : int in [2, 31], default=5
        Number of relevance grades the gains are quantised to.
    gain : {"exponential", "linear"}, default="exponential"
        nDCG gain of grade g: ``2**g - 1`` or ``g``.

    Examples
    --------
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> X, y, qid = make_ranking_data(n_queries=20, random_state=0)
    >>> ranker = XGBoostListwiseRanker(n_estimators=10, random_state=0).fit(X, y, qid=qid)
    >>> ranker.predict(X).shape == y.shape
    True
    """

    name = "xgboost-listwise"
    trains_on_dask = True
    param_constraints: ClassVar[dict] = {
        **_XGBoostRanker.param_constraints,
        **_GRADE_CONSTRAINTS,
    }

    def __init__(
        self,
        *,
        n_estimators=100,
        learning_rate=0.1,
        max_depth=6,
        min_child_weight=1.0,
        subsample=1.0,
        colsample_bytree=1.0,
        reg_lambda=1.0,
        n_grades=5,
        gain="exponential",
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        super().__init__(
            n_estimators=n_estimators,
            learning_rate=learning_rate,
            max_depth=max_depth,
            min_child_weight=min_child_weight,
            subsample=subsample,
            colsample_bytree=colsample_bytree,
            reg_lambda=reg_lambda,
            random_state=random_state,
            n_jobs=n_jobs,
            verbose=verbose,
        )
        self.n_grades = n_grades
        self.gain = gain

    def _train(self, X, y, codes, sizes):
        import xgboost as xgb

        grades = to_grades(y, self.n_grades, name=self.name)
        params = {"objective": "rank:ndcg", "ndcg_exp_gain": self.gain == "exponential", **self._xgb_params()}
        client = _dask_client()
        if client is not None:
            from ltrr.dist.rankers import fit_xgboost_ranker_on_dask

            return fit_xgboost_ranker_on_dask(X, grades, codes, sizes, params, client)
        return xgb.XGBRanker(**params).fit(X, grades, qid=codes).get_booster()


@rankers.register("lambdamart-listwise")
class LambdaMARTRanker(_GBDTRanker):
    """Listwise ranker: LightGBM LambdaMART (``LGBMRanker``, ``lambdarank``).

    Labels in [0, 1] are quantised to ``n_grades`` integer grades, and LightGBM's
    ``label_gain`` is set from ``gain`` (see the module docstring). Queries may hold at most
    10,000 rows (a LightGBM limit).

    Parameters
    ----------
    n_estimators : int, default=100
        Number of boosting rounds.
    learning_rate : float, default=0.1
        Shrinkage of each tree.
    num_leaves : int, default=31
        Maximum leaves per tree.
    max_depth : int, default=-1
        Maximum tree depth; -1 for no limit.
    min_child_samples : int, default=20
        Minimum rows in a leaf.
    subsample, colsample_bytree : float in (0, 1], default=1.0
        Row (bagging every iteration when < 1) and column sampling ratios.
    reg_lambda : float, default=0.0
        L2 regularisation of leaf weights.
    n_grades : int in [2, 31], default=5
        Number of relevance grades the gains are quantised to.
    gain : {"exponential", "linear"}, default="exponential"
        nDCG gain of grade g: ``2**g - 1`` or ``g``.
    random_state : int, RandomState or None
        Seed; an int gives identical models run to run (LightGBM runs in deterministic mode).
    n_jobs : int or None
        Threads; None uses the library default.
    verbose : int, default=0
        0 silences LightGBM; 1 info, 2 and more debug.

    Attributes
    ----------
    booster_ : lightgbm.Booster
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    Examples
    --------
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> X, y, qid = make_ranking_data(n_queries=20, random_state=0)
    >>> ranker = LambdaMARTRanker(n_estimators=10, random_state=0).fit(X, y, qid=qid)
    >>> ranker.predict(X).shape == y.shape
    True
    """

    name = "lambdamart-listwise"
    trains_on_dask = True
    _model_file = "model.txt"
    _model_format = "lightgbm-text"
    param_constraints: ClassVar[dict] = {
        **_COMMON_CONSTRAINTS,
        **_GRADE_CONSTRAINTS,
        "num_leaves": [Interval(Integral, 2, None, closed="left")],
        "max_depth": [Interval(Integral, -1, None, closed="left")],
        "min_child_samples": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        *,
        n_estimators=100,
        learning_rate=0.1,
        num_leaves=31,
        max_depth=-1,
        min_child_samples=20,
        subsample=1.0,
        colsample_bytree=1.0,
        reg_lambda=0.0,
        n_grades=5,
        gain="exponential",
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.max_depth = max_depth
        self.min_child_samples = min_child_samples
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.n_grades = n_grades
        self.gain = gain
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _train(self, X, y, codes, sizes):
        import lightgbm as lgb

        if sizes.size and sizes.max() > _LIGHTGBM_MAX_GROUP:
            raise DataError(
                f"{self.name}: a query has {int(sizes.max())} rows; LightGBM's lambdarank takes "
                f"at most {_LIGHTGBM_MAX_GROUP} per query. Split or subsample large queries."
            )
        grades = to_grades(y, self.n_grades, name=self.name)
        g = np.arange(self.n_grades, dtype=np.float64)
        label_gain = (2.0**g - 1.0) if self.gain == "exponential" else g
        params = dict(
            objective="lambdarank",
            n_estimators=self.n_estimators,
            learning_rate=self.learning_rate,
            num_leaves=self.num_leaves,
            max_depth=self.max_depth,
            min_child_samples=self.min_child_samples,
            subsample=self.subsample,
            subsample_freq=1 if self.subsample < 1.0 else 0,
            colsample_bytree=self.colsample_bytree,
            reg_lambda=self.reg_lambda,
            random_state=_seed(self.random_state),
            n_jobs=self.n_jobs,
            verbose=-1 if self.verbose == 0 else int(self.verbose),
            label_gain=label_gain.tolist(),
            deterministic=True,
            force_col_wise=True,
        )
        client = _dask_client()
        if client is not None:  # `ltrr train --scheduler`: LightGBM's Dask ranker, same parameters
            from ltrr.dist.rankers import fit_lambdamart_on_dask

            return fit_lambdamart_on_dask(self, X, grades, sizes, params, client)
        return lgb.LGBMRanker(**params).fit(X, grades, group=sizes).booster_

    def _predict(self, X):
        kwargs = {} if self.n_jobs is None else {"num_threads": self.n_jobs}
        return self.booster_.predict(X, **kwargs)

    def _read_booster(self, file: Path):
        import lightgbm as lgb

        try:
            booster = lgb.Booster(model_file=str(file))
        except lgb.basic.LightGBMError as exc:
            raise DataError(f"{file}: not a readable LightGBM text model ({exc})") from None
        if booster.num_feature() != self.n_features_in_:
            raise DataError(
                f"{file}: model expects {booster.num_feature()} features but ranker.json says "
                f"{self.n_features_in_}; the folder is damaged"
            )
        return booster
