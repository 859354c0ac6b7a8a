"""PolicyRouter: the LTR router, the per-arm rows and a `BudgetPolicy`, for one budget, in one folder.

Each (query, arm) row holds the arm's LTRR features (the LTR router's fitted feature pipeline),
the LTR ranker's score and the arm's cost; with ``representation="lm"`` the generator LLM's
state of the question alone (`ltrr.policy.states`), reduced by a PCA fit on the training
queries, is appended to every row of the query.

The LTR scores of the training queries are cross-fitted: each comes from a ranker trained on the
other folds (grouped), so the head learns how far to trust the ranker on queries it has not
seen; the ranker saved for deployment is then fit on every training query.

A query with an incompletely labelled arm (a failed label item) is left out of training, by the
rule the protocol and ``ltrr policy eval`` use (`ltrr.eval.routing.utility_matrix`: complete
cases only); `PolicyRouter.fit` records how many in ``n_incomplete_queries_``.

Arms are kept in name order inside, so a pool listed in another order gives identical
decisions. A policy refuses features from a pool with other arms. Its costs are its own, saved
with it: the config's or measured token costs (``[policy] cost``), so they need not equal the
serving pool's config costs and are not checked at load; `PolicyRouter.check_costs_match`
compares them with a pool's costs for a caller that needs the two to agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.exceptions import NotFittedError

from ltrr._atomic import manifest_last, plain_json, write_arrays_atomic, write_json_atomic
from ltrr._cpu import one_blas_thread
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr._version import __version__
from ltrr.policy.estimator import BudgetPolicy
from ltrr.policy.objective import check_costs
from ltrr.routers.reference import score_frame
from ltrr.routers.trainfree import Router, rank_scores, routing_table

__all__ = ["PolicyRouter", "REPRESENTATIONS", "POLICY_FORMAT"]

REPRESENTATIONS = ("features", "lm")
POLICY_FORMAT = 1


def _grid(table: pd.DataFrame, values: np.ndarray, qids: list[str], arms: list[str]) -> np.ndarray:
    """Rows of ``table`` (qid, arm) with ``values`` (n_rows, d) -> (n_qids, n_arms, d), NaN-filled."""
    qi = pd.Index(qids).get_indexer(table["qid"].astype(str))
    ai = pd.Index(arms).get_indexer(table["arm"].astype(str))
    out = np.full((len(qids), len(arms), values.shape[1]), np.nan)
    ok = (qi >= 0) & (ai >= 0)
    out[qi[ok], ai[ok]] = values[ok]
    return out


class PolicyRouter(Router):
    """A budgeted routing policy over a pool of arms (see the module docstring).

    Parameters
    ----------
    budget : float
        Average cost budget per query.
    costs : dict
        ``arm -> cost`` (>= 0) for every arm of the pool.
    representation : {"features", "lm"}
        The rows only, or the rows plus the question's LLM state.
    trainer : {"grpo", "exact"}
        See `BudgetPolicy`.
    ltr : dict, optional
        `ltrr.routers.LTRRouter` parameters (ranker, ranker_params, features, label,
        pool_config, index_dir).
    policy_params : dict, optional
        More `BudgetPolicy` parameters (n_steps, group_size, ...).
    n_folds : int
        Folds of the cross-fitted LTR scores of the training queries.
    lm_dim : int
        PCA size of the question states (``lm``).
    lm : dict, optional
        How the question states are made (``ltrr.policy.states.question_states`` arguments:
        ``generator`` config and ``pooling``); needed to route new questions with ``lm``.
    random_state : int
        One seed for the ranker, the folds, the PCA and the head.
    """

    name = "policy"

    def __init__(self, budget: float = 0.5, *, costs: dict | None = None, representation: str = "features",
                 trainer: str = "grpo", ltr: dict | None = None, policy_params: dict | None = None,
                 n_folds: int = 5, lm_dim: int = 16, lm: dict | None = None, random_state: int = 0):
        self.budget = budget
        self.costs = costs
        self.representation = representation
        self.trainer = trainer
        self.ltr = ltr
        self.policy_params = policy_params
        self.n_folds = n_folds
        self.lm_dim = lm_dim
        self.lm = lm
        self.random_state = random_state

    # ---- rows ---------------------------------------------------------------------------------
    def _ltr(self):
        from ltrr.routers.ltr import LTRRouter

        # the policy's own seed wins: `ltr` is often another router's get_params(), which carries
        # that router's seed (the config seed), and `ltrr policy eval --seed N` must reach it
        return LTRRouter(**{**(self.ltr or {}), "random_state": self.random_state})

    def _cost_vector(self, arms: list[str]) -> np.ndarray:
        if not isinstance(self.costs, dict):
            raise ConfigError("PolicyRouter needs costs: a dict arm -> cost for every arm of the pool")
        missing = [a for a in arms if a not in self.costs]
        if missing:
            raise ConfigError(f"PolicyRouter: no cost for arm(s) {', '.join(missing)}")
        return check_costs([self.costs[a] for a in arms], "cost")

    def _rows(self, raw, ltr_scores: np.ndarray, states: np.ndarray | None) -> np.ndarray:
        feats = np.asarray(self.ltr_.pipeline_.transform(raw), dtype=np.float64)
        n_rows = len(raw.table)
        cost = np.asarray([self.costs_[a] for a in raw.table["arm"].astype(str)], dtype=np.float64)
        values = np.column_stack([feats, ltr_scores.reshape(n_rows, 1), cost.reshape(n_rows, 1)])
        X = _grid(raw.table, values, [str(q) for q in raw.qids], self.arms_)
        if self.representation == "lm":
            if states is None:
                raise DataError("the lm representation needs the question states (question_states=...)")
            with one_blas_thread():  # the same last bits in a worker and in the main process
                z = (np.asarray(states, dtype=np.float64) - self.lm_mean_) @ self.lm_components_.T
            X = np.concatenate([X, np.repeat(z[:, None, :], len(self.arms_), axis=1)], axis=2)
            X[np.isnan(X[:, :, 0])] = np.nan  # a missing arm stays a NaN row
        return X

    def _check_pool(self, raw) -> None:
        got = sorted(map(str, raw.arms))
        if got != self.arms_:
            raise DataError(f"the policy was trained on the pool {self.arms_}; these features come from {got}")

    # ---- fit ------------------------------------------------------------------------------------
    def fit(self, raw: Any = None, labels: pd.DataFrame | None = None, *, groups: pd.Series | None = None,
            question_states: np.ndarray | None = None) -> PolicyRouter:
        """Fit the LTR router (cross-fitted scores), the rows and the head on training queries.

        ``labels`` need ``utility`` (the reward) and the LTR label column; a query with a failed
        item or a missing utility is left out (`ltrr.eval.routing.utility_matrix`, the rule of
        the protocol and of ``ltrr policy eval``), counted in ``n_incomplete_queries_``.
        ``groups`` maps qid to group for the folds and the calibration split;
        ``question_states`` (n_queries, h), aligned with ``raw.qids``, is required by ``lm``.
        """
        from sklearn.model_selection import GroupKFold

        from ltrr.eval.routing import utility_matrix

        if self.representation not in REPRESENTATIONS:
            raise ConfigError(f"representation must be one of {', '.join(REPRESENTATIONS)}, got {self.representation!r}")
        if raw is None or labels is None:
            raise DataError("PolicyRouter.fit needs raw features and labels")
        self.arms_ = sorted(map(str, raw.arms))
        cvec = self._cost_vector(self.arms_)
        self.costs_ = dict(zip(self.arms_, cvec.tolist(), strict=True))
        U = utility_matrix(labels, arms=self.arms_)  # complete cases: every arm labelled, none failed
        labelled = set(labels["qid"].astype(str))
        qids = [str(q) for q in raw.qids if str(q) in U.index]
        self.n_incomplete_queries_ = sum(1 for q in raw.qids if str(q) in labelled and str(q) not in U.index)
        if not qids:
            raise DataError("PolicyRouter.fit: no query has both raw features and complete utility labels")
        keep_pos = pd.Index([str(q) for q in raw.qids]).get_indexer(qids)
        raw = raw.subset(qids)
        qids = [str(q) for q in raw.qids]
        grp = np.asarray(pd.Series(groups).reindex(qids).fillna(pd.Series(qids, index=qids)) if groups is not None
                         else qids)
        lab = labels[labels["qid"].astype(str).isin(set(qids))]
        # cross-fitted LTR scores of the training queries
        n_folds = min(int(self.n_folds), len(set(grp)))
        if n_folds < 2:
            raise DataError("PolicyRouter.fit needs at least 2 groups of training queries for the cross-fitted ranker")
        parts = []
        for tr, te in GroupKFold(n_splits=n_folds).split(qids, groups=grp):
            q_tr, q_te = [qids[i] for i in tr], [qids[i] for i in te]
            fold = self._ltr().fit(raw.subset(q_tr), lab[lab["qid"].astype(str).isin(set(q_tr))])
            parts.append(fold.route_scores(raw.subset(q_te)))
        oof = pd.concat(parts).set_index(["qid", "arm"])["score"].reindex(
            pd.MultiIndex.from_frame(raw.table[["qid", "arm"]].astype(str)))
        self.ltr_ = self._ltr().fit(raw, lab)
        states = None
        if self.representation == "lm":
            if question_states is None:
                raise DataError("the lm representation needs question_states (ltrr.policy.states.question_states)")
            S = np.asarray(question_states, dtype=np.float64)[keep_pos]
            from sklearn.decomposition import PCA

            k = min(int(self.lm_dim), S.shape[0], S.shape[1])
            with one_blas_thread():
                pca = PCA(n_components=k, random_state=self.random_state).fit(S)
            self.lm_mean_, self.lm_components_ = pca.mean_, pca.components_
            states = S
        X = self._rows(raw, oof.to_numpy(), states)
        ltr_col = X.shape[2] - 2 - (self.lm_components_.shape[0] if self.representation == "lm" else 0)
        self.train_ltr_ = X[:, :, ltr_col].copy()  # the cross-fitted LTR scores, (n, A) in arms_ order
        self.train_qids_ = qids
        self._train = (X, U.loc[qids].to_numpy(dtype=np.float64), np.broadcast_to(cvec, (len(qids), len(cvec))), grp)
        self.n_train_queries_ = len(qids)
        return self._fit_head()

    def _fit_head(self) -> PolicyRouter:
        X, Um, C, grp = self._train
        params = {**(self.policy_params or {}), "random_state": self.random_state}
        self.head_ = BudgetPolicy(budget=self.budget, trainer=self.trainer, **params).fit(X, Um, C, groups=grp)
        return self

    def with_budget(self, budget: float, trainer: str | None = None) -> PolicyRouter:
        """A new policy for another budget (or trainer) sharing this one's ranker and rows: only
        the head is trained again."""
        import copy

        if not hasattr(self, "_train"):
            raise NotFittedError("with_budget needs a PolicyRouter fitted in this session (fit, not load)")
        new = copy.copy(self)
        new.budget, new.trainer = budget, trainer or self.trainer
        return new._fit_head()

    # ---- routing ----------------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "head_"):
            raise NotFittedError("PolicyRouter is not fitted; call fit(raw, labels) or PolicyRouter.load(folder)")

    def policy_rows(self, raw, question_states: np.ndarray | None = None) -> np.ndarray:
        """``X`` (n_queries, n_arms, d) of new queries, arms in name order (``arms_``)."""
        self._check_fitted()
        self._check_pool(raw)
        scores = self.ltr_.route_scores(raw)["score"].to_numpy(dtype=np.float64)
        return self._rows(raw, scores, question_states)

    def route_scores(self, raw: Any, *, question_states: np.ndarray | None = None) -> pd.DataFrame:
        """The deployed rule's score ``logit - tau * cost / c_max`` of every (query, arm)."""
        self._check_fitted()
        table = routing_table(raw)
        X = self.policy_rows(raw, question_states)
        z = self.head_.decision_logits(X)
        c = np.asarray([self.costs_[a] for a in self.arms_]) / self.head_.c_max_
        s = z - self.head_.tau_ * c[None, :]
        qi = pd.Index([str(q) for q in raw.qids]).get_indexer(table["qid"].astype(str))
        ai = pd.Index(self.arms_).get_indexer(table["arm"].astype(str))
        return score_frame(table, s[qi, ai])

    def ranking(self, raw: Any, **route_kwargs: Any) -> pd.DataFrame:
        """Each query's arms by the deployed rule, best first; an exact tie goes to the cheaper
        arm, then to the name first in order, so the pool's listing order never decides."""
        self._check_fitted()  # `choose` comes through here
        tie_order = sorted(self.arms_, key=lambda a: (self.costs_[a], a))
        return rank_scores(self.route_scores(raw, **route_kwargs), tie_order)

    def predict_proba(self, raw: Any, *, question_states: np.ndarray | None = None) -> pd.DataFrame:
        """The stochastic policy ``pi(a | q)`` as ``DataFrame[qid, arm, prob]``."""
        self._check_fitted()
        table = routing_table(raw)
        p = self.head_.predict_proba(self.policy_rows(raw, question_states))
        qi = pd.Index([str(q) for q in raw.qids]).get_indexer(table["qid"].astype(str))
        ai = pd.Index(self.arms_).get_indexer(table["arm"].astype(str))
        return score_frame(table, p[qi, ai]).rename(columns={"score": "prob"})

    def routing_inputs(self, queries: pd.DataFrame, results: pd.DataFrame) -> dict:
        """The questions' LLM states for the ``lm`` representation (``question_states``), else nothing."""
        if self.representation != "lm":
            return {}
        from ltrr.policy.states import question_states

        if not self.lm:
            raise NotBuiltError("this lm policy has no generator config; train it with `ltrr policy train`")
        questions = queries["question"].astype(str).tolist()
        return {"question_states": question_states(self.lm["generator"], questions, pooling=self.lm["pooling"])}

    def make_pool(self):
        """The pool of the policy's LTR router, its indexes loaded."""
        if not hasattr(self, "ltr_"):
            raise NotFittedError("PolicyRouter is not fitted; call fit(raw, labels) or PolicyRouter.load(folder)")
        return self.ltr_.make_pool()

    def route(self, question: str) -> pd.DataFrame:
        """Rank the arms for one question by the deployed rule: DataFrame[arm, score, rank].

        A one-off that loads the pool each call; `ltrr.routers.RoutedPipeline` routes many.
        """
        from ltrr.routers.pipeline import RoutedPipeline

        return RoutedPipeline.from_router(self).route(question).ranking

    # ---- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """One folder: ``ltr/`` (the LTR router), ``head/`` (the head), ``policy.json`` last."""
        self._check_fitted()
        # the metadata in plain JSON before any file is touched (a numpy seed is converted; a
        # value JSON cannot hold fails here, not after the old folder was half replaced)
        meta = plain_json({"format": POLICY_FORMAT, "router": "policy", "ltrr_version": __version__,
                           "params": self.get_params(), "arms": self.arms_, "costs": self.costs_,
                           "n_train_queries": self.n_train_queries_}, "PolicyRouter")
        with manifest_last(path, "policy.json") as path:
            self.ltr_.save(path / "ltr")
            self.head_.save(path / "head")
            if self.representation == "lm":
                write_arrays_atomic(path / "lm_pca.safetensors",
                                    {"mean": self.lm_mean_, "components": self.lm_components_})
            write_json_atomic(path / "policy.json", meta, indent=2, sort_keys=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> PolicyRouter:
        """Load a policy saved by `save`.

        Raises
        ------
        NotBuiltError
            ``path`` holds no ``policy.json``.
        DataError
            One message naming ``path`` for a damaged folder: a missing or ill-typed entry of
            ``policy.json``, a parameter this class does not take, a damaged array file (the
            LTR router and the head report their own folders).
        """
        from ltrr.data.io import read_saved_meta, saved_model_errors
        from ltrr.routers.ltr import LTRRouter

        path = Path(path)
        meta = read_saved_meta(path / "policy.json", "train a policy with `ltrr policy train CONFIG --cost-budget B`")
        if meta.get("router") != "policy" or meta.get("format") != POLICY_FORMAT:
            raise DataError(f"{path}: not a policy in format {POLICY_FORMAT}")
        with saved_model_errors(path, "policy"):
            pol = cls(**meta["params"])
            if pol.representation not in REPRESENTATIONS:
                raise DataError(f"{path}: policy.json's representation {pol.representation!r} is not one of "
                                f"{', '.join(REPRESENTATIONS)}; the folder is damaged: train the policy again")
            arms, costs = meta["arms"], meta["costs"]
            if not isinstance(arms, list) or not all(isinstance(a, str) for a in arms):
                raise DataError(f"{path}: policy.json's arms must be a list of arm names, got "
                                f"{type(arms).__name__}; the folder is damaged: train the policy again")
            pol.arms_, pol.costs_ = list(arms), {str(k): float(v) for k, v in costs.items()}
            if sorted(pol.costs_) != sorted(pol.arms_):
                raise DataError(f"{path}: policy.json's costs name arms {sorted(pol.costs_)}, not its arms "
                                f"{sorted(pol.arms_)}; the folder is damaged: train the policy again")
            pol.n_train_queries_ = int(meta["n_train_queries"])
        pol.ltr_ = LTRRouter.load(path / "ltr")
        pol.head_ = BudgetPolicy.load(path / "head")
        if pol.representation == "lm":
            from safetensors.numpy import load_file

            with saved_model_errors(path, "policy"):
                arrays = load_file(str(path / "lm_pca.safetensors"))
                pol.lm_mean_, pol.lm_components_ = arrays["mean"], arrays["components"]
        return pol

    def check_costs_match(self, costs: dict) -> None:
        """A policy is trained for one pool and its costs: other arms or costs are an error."""
        other = {str(k): float(v) for k, v in costs.items()}
        if sorted(other) != self.arms_ or any(abs(other[a] - self.costs_[a]) > 1e-12 for a in self.arms_):
            raise DataError(f"the policy was trained on the pool {self.costs_} (arm: cost); this pool is {other}")

    def __repr__(self) -> str:
        return f"PolicyRouter(budget={self.budget}, representation={self.representation!r}, trainer={self.trainer!r})"
