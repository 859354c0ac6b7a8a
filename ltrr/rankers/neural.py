"""Feed-forward neural rankers: pointwise regression, RankNet and ListNet.

Three rankers share one multilayer perceptron that maps a feature vector to a score and differ
only in the loss they train it with:

- ``ffn-pointwise`` (`FFNPointwiseRanker`): mean squared error between score and label.
- ``ffn-pairwise`` (`RankNetRanker`, Burges et al. 2005): logistic loss on the score difference
  of every pair of rows of one query whose labels differ.
- ``listnet-listwise`` (`ListNetRanker`, Cao et al. 2007): cross-entropy between the top-one
  probabilities ``softmax(labels / temperature)`` and ``softmax(scores)`` of each query.

Missing features
----------------
The no-retrieval arm has no post-retrieval features, so its rows carry NaN there. With
``missing="learned"`` (the default) the network owns one learnable value per feature that
replaces NaN entries (in standardised units, starting at 0, the training mean) and is trained
with the rest of the network, so the model learns what "no retrieved passages" should look like
to it. ``missing="mean"`` fills NaN with the training mean (a fixed 0 after standardisation);
``missing="error"`` rejects NaN with `DataError`. Infinite values are always rejected.

Standardisation and determinism
-------------------------------
As for every torch ranker (`ltrr.rankers.torch_base`): features are standardised with the
training rows' statistics, and a fit does not depend on the order of the rows or query groups
and repeats bit for bit on CPU.

Persistence
-----------
``save`` writes ``weights.safetensors`` (the network, including the learned missing values) and
the base class's ``ranker.json`` (parameters, standardiser statistics, loss curve). torch is
imported only inside functions and methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import RegressorMixin

from ltrr._checks import is_int
from ltrr._errors import DataError
from ltrr.rankers._validation import (
    canonical_order,
    check_predict_data,
    check_ranking_data,
)
from ltrr.rankers.base import rankers
from ltrr.rankers.params import Interval, checked_fit, param_error
from ltrr.rankers.torch_base import (
    COMMON_CONSTRAINTS,
    TorchRanker,
    check_n_jobs,
    check_trainable,
    fit_standardiser,
    load_tensors,
    missing_fill_class,
    save_tensors,
    torch_device,
    torch_threads,
)

__all__ = ["FFNPointwiseRanker", "RankNetRanker", "ListNetRanker"]

FFN_FORMAT = "ltrr-ffn/1"
WEIGHTS_FILE = "weights.safetensors"


# ---- torch module ------------------------------------------------------------------------
def _define_mlp_scorer() -> None:
    """Define `MLPScorer` on first use (so importing ltrr needs no torch) as a module-level
    name, so fitted rankers pickle like any sklearn estimator."""
    import torch
    from torch import nn

    MissingFill = missing_fill_class()

    class MLPScorer(nn.Module):
        """NaN filling, then Linear-ReLU(-Dropout) layers, then a linear score."""

        def __init__(
            self, n_features: int, hidden_sizes: Sequence[int], dropout: float, learned: bool
        ):
            super().__init__()
            self.missing = MissingFill(n_features, learned)
            layers: list[nn.Module] = []
            width = n_features
            for h in hidden_sizes:
                layers += [nn.Linear(width, int(h)), nn.ReLU()]
                if dropout > 0:
                    layers.append(nn.Dropout(dropout))
                width = int(h)
            layers.append(nn.Linear(width, 1))
            self.net = nn.Sequential(*layers)

        def forward(self, x):
            return self.net(self.missing(x)).squeeze(-1)

        def score_rows(self, x, max_elements: int = 1 << 24):
            """Scores in eval mode that do not depend on which other rows share the batch.

            A matrix product may round a row differently by its position in the batch (BLAS
            kernels treat edge blocks apart), so identical rows could score differently. Here
            each output is a reduction over one row's own contiguous values, summed in the
            same order for every row. Rows go in chunks that keep the (rows, out, in)
            products under ``max_elements``.
            """
            widest = max(m.weight.numel() for m in self.net if isinstance(m, nn.Linear))
            chunk = max(1, max_elements // widest)
            out = []
            for start in range(0, x.shape[0], chunk):
                h = self.missing(x[start : start + chunk])
                for layer in self.net:
                    if isinstance(layer, nn.Linear):
                        h = (h.unsqueeze(1) * layer.weight).sum(dim=-1) + layer.bias
                    else:
                        h = layer(h)
                out.append(h.squeeze(-1))
            return torch.cat(out) if out else x.new_zeros(0)

    MLPScorer.__qualname__ = "MLPScorer"
    globals()["MLPScorer"] = MLPScorer


def _mlp_scorer_class() -> type:
    if "MLPScorer" not in globals():
        _define_mlp_scorer()
    return globals()["MLPScorer"]


def __getattr__(name: str) -> Any:
    # PEP 562: pickle finds ltrr.rankers.neural.MLPScorer here even before anything built it
    # (and MissingFill, which lived here before `ltrr.rankers.torch_base`).
    if name == "MLPScorer":
        return _mlp_scorer_class()
    if name == "MissingFill":
        return missing_fill_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- the rankers -------------------------------------------------------------------------
class _FeedForwardRanker(TorchRanker):
    """A multilayer perceptron scoring feature vectors; subclasses choose the loss."""

    state_format: ClassVar[str] = FFN_FORMAT
    param_constraints: ClassVar[dict] = {
        **COMMON_CONSTRAINTS,
        "hidden_sizes": ["array-like"],
        "dropout": [Interval(Real, 0, 1, closed="left")],
    }

    def __init__(
        self,
        *,
        hidden_sizes=(64, 32),
        dropout=0.0,
        n_epochs=50,
        learning_rate=1e-3,
        batch_size=256,
        weight_decay=1e-4,
        missing="learned",
        random_state=None,
        verbose=0,
        device="cpu",
        n_jobs=None,
    ):
        self.hidden_sizes = hidden_sizes
        self.dropout = dropout
        self.n_epochs = n_epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.missing = missing
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.n_jobs = n_jobs

    def _hidden(self) -> list[int]:
        hs = self.hidden_sizes
        if isinstance(hs, (str, bytes)) or not all(
            is_int(h) and h >= 1 for h in hs
        ):
            raise param_error(self, "hidden_sizes", "a sequence of ints >= 1", hs)
        return [int(h) for h in hs]

    def _build(self, n_features: int):
        return _mlp_scorer_class()(
            n_features, self._hidden(), float(self.dropout), self.missing == "learned"
        )

    @checked_fit
    def fit(self, X, y, qid=None):
        """Train on rows ``X`` with labels ``y`` grouped by ``qid``.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_rows, n_features)
            Numeric features; NaN marks a missing value (see ``missing``).
        y : array-like of shape (n_rows,)
            Finite graded relevance labels.
        qid : array-like of shape (n_rows,), optional
            Query id per row; required by the pairwise and listwise rankers, ignored by the
            pointwise one.

        Returns
        -------
        self
        """
        import torch

        self._hidden()
        check_n_jobs(self)
        device = torch_device(self)
        X, y, qid = check_ranking_data(self, X, y, qid)
        # Training in a canonical row order makes the model independent of row/group order.
        layout = canonical_order(X, y, qid if self.requires_qid else None)
        X, y = X[layout.order], y[layout.order]
        groups = self._train_groups(layout)
        check_trainable(groups, y, self.objective, type(self).__name__)
        self.mean_, self.scale_ = fit_standardiser(X)
        Xt = torch.as_tensor(self._standardise(X), device=device)
        self._train(
            lambda: self._build(X.shape[1]).to(device),
            lambda module, rows: module(Xt[torch.as_tensor(rows, device=device)]),
            groups,
            y,
            device,
        )
        return self

    def predict(self, X) -> np.ndarray:
        """Score each row of ``X``; higher is better.

        Returns
        -------
        ndarray of shape (n_rows,), float64
        """
        import torch

        X = check_predict_data(self, X)
        device = next(self.module_.parameters()).device
        self.module_.eval()
        with torch_threads(self.n_jobs), torch.no_grad():
            out = self.module_.score_rows(torch.as_tensor(self._standardise(X), device=device))
        return out.cpu().numpy().astype(np.float64)

    # ---- persistence --------------------------------------------------------------------
    def _save(self, path: Path) -> dict[str, Any]:
        save_tensors(self.module_.state_dict(), path / WEIGHTS_FILE, FFN_FORMAT)
        return {**self._fitted_state(), "weights": WEIGHTS_FILE}

    def _load(self, path: Path, state: dict[str, Any]) -> None:
        n = int(self.n_features_in_)
        state, mean, scale = self._restore_standardiser(path, state, n)
        tensors = load_tensors(path / state.get("weights", WEIGHTS_FILE), FFN_FORMAT)
        module = self._build(n)
        try:
            module.load_state_dict(tensors, strict=True)
        except RuntimeError as exc:
            raise DataError(
                f"{path}: the weights do not fit a {type(self).__name__} with {n} features and "
                f"hidden_sizes={self._hidden()}; the folder mixes files of different models "
                f"({str(exc).splitlines()[0]})"
            ) from None
        self._set_loaded(module, mean, scale, state)


_PARAMS_DOC = """
    hidden_sizes : sequence of int, default=(64, 32)
        Widths of the hidden ReLU layers.
    dropout : float, default=0.0
        Dropout after each hidden layer.
    n_epochs : int, default=50
        Passes over the training data.
    learning_rate : float, default=1e-3
        AdamW step size.
    batch_size : int, default=256
        Rows per optimisation step; the pairwise and listwise rankers keep whole queries
        together (a query larger than ``batch_size`` makes a batch of its own).
    weight_decay : float, default=1e-4
        AdamW decoupled weight decay.
    missing : {"learned", "mean", "error"}, default="learned"
        NaN features: ``"learned"`` replaces them by a learnable value per feature trained
        with the network (for the no-retrieval arm, which has no post-retrieval features);
        ``"mean"`` by the training mean; ``"error"`` rejects them with `DataError`.
    random_state : int, RandomState or None, default=None
        Seeds weight initialisation, dropout and batch order; an int gives identical scores
        run to run on CPU.
    verbose : int, default=0
        When > 0, log each epoch's loss at INFO level (logger ``ltrr.rankers.neural``).
    device : str, default="cpu"
        Torch device to train and predict on.
    n_jobs : int or None, default=None
        CPU threads torch uses in fit and predict: None means 1 (fastest for these small
        networks on shared cores), -1 all cores.
"""

_ATTRS_DOC = """
    Attributes
    ----------
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of str
        Column names, when X was a DataFrame with string column names.
    mean_, scale_ : ndarray of shape (n_features_in_,)
        Standardisation statistics of the training rows.
    missing_values_ : ndarray of shape (n_features_in_,)
        Values (standardised units) that replace NaN features.
    loss_curve_ : list of float
        Mean training loss per epoch.
    n_iter_ : int
        Epochs run.
    module_ : torch.nn.Module
        The trained network.
"""


@rankers.register("ffn-pointwise")
class FFNPointwiseRanker(RegressorMixin, _FeedForwardRanker):
    __doc__ = f"""Feed-forward network regressing each row's label (mean squared error).

    A scikit-learn regressor: ``qid`` is optional and ignored.

    Parameters
    ----------
    {_PARAMS_DOC.strip()}

    {_ATTRS_DOC.strip()}

    Examples
    --------
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> from ltrr.rankers.neural import FFNPointwiseRanker
    >>> X, y, qid = make_ranking_data(n_queries=20, random_state=0)
    >>> ranker = FFNPointwiseRanker(n_epochs=5, random_state=0).fit(X, y)
    >>> ranker.predict(X).shape
    (140,)
    """

    name = "ffn-pointwise"
    objective = "pointwise"
    requires_qid = False


@rankers.register("ffn-pairwise")
class RankNetRanker(_FeedForwardRanker):
    __doc__ = f"""RankNet (Burges et al. 2005): a feed-forward network trained on pairs.

    For each query, every pair of rows ``(i, j)`` with ``y_i > y_j`` adds the logistic loss
    ``log(1 + exp(-(s_i - s_j)))``; a batch's loss is the mean over its pairs. Queries whose
    rows all share one label contribute nothing. ``qid`` is required.

    Parameters
    ----------
    {_PARAMS_DOC.strip()}

    {_ATTRS_DOC.strip()}

    Examples
    --------
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> from ltrr.rankers.neural import RankNetRanker
    >>> X, y, qid = make_ranking_data(n_queries=20, random_state=0)
    >>> ranker = RankNetRanker(n_epochs=5, random_state=0).fit(X, y, qid=qid)
    >>> best = {{q: int(ix[0]) for q, ix in ranker.rank(X, qid).items()}}
    >>> len(best)
    20
    """

    name = "ffn-pairwise"
    objective = "pairwise"


@rankers.register("listnet-listwise")
class ListNetRanker(_FeedForwardRanker):
    __doc__ = f"""ListNet (Cao et al. 2007): a feed-forward network trained on whole lists.

    Per query, the loss is the cross-entropy between the top-one probabilities of the labels,
    ``softmax(y / temperature)``, and of the scores, ``softmax(s)``; a batch's loss is the
    mean over its queries. ``qid`` is required.

    Parameters
    ----------
    {_PARAMS_DOC.strip()}
    temperature : float, default=0.1
        Divides the labels before their softmax. Labels here are utility gains in [0, 1], for
        which a temperature of 1 gives nearly uniform targets; 0.1 sharpens them towards the
        best arms.

    {_ATTRS_DOC.strip()}

    Examples
    --------
    >>> from ltrr.rankers.checks import make_ranking_data
    >>> from ltrr.rankers.neural import ListNetRanker
    >>> X, y, qid = make_ranking_data(n_queries=20, random_state=0)
    >>> ranker = ListNetRanker(n_epochs=5, random_state=0).fit(X, y, qid=qid)
    >>> ranker.predict(X[:3]).shape
    (3,)
    """

    name = "listnet-listwise"
    objective = "listwise"
    param_constraints: ClassVar[dict] = {
        **_FeedForwardRanker.param_constraints,
        "temperature": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        *,
        hidden_sizes=(64, 32),
        dropout=0.0,
        n_epochs=50,
        learning_rate=1e-3,
        batch_size=256,
        weight_decay=1e-4,
        missing="learned",
        temperature=0.1,
        random_state=None,
        verbose=0,
        device="cpu",
        n_jobs=None,
    ):
        super().__init__(
            hidden_sizes=hidden_sizes,
            dropout=dropout,
            n_epochs=n_epochs,
            learning_rate=learning_rate,
            batch_size=batch_size,
            weight_decay=weight_decay,
            missing=missing,
            random_state=random_state,
            verbose=verbose,
            device=device,
            n_jobs=n_jobs,
        )
        self.temperature = temperature
