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
Features are standardised with the mean and standard deviation of the training rows (NaN
ignored; constant or all-NaN columns keep scale 1); the statistics are fitted state (``mean_``,
``scale_``) saved with the model. Training rows are first put in `canonical_order`, and batches
are drawn from a generator seeded by ``random_state``, so a fit does not depend on the order of
the rows or query groups and repeats bit for bit on CPU.

Persistence
-----------
``save`` writes ``weights.safetensors`` (the network, including the learned missing values) and
the base class's ``ranker.json`` (parameters, standardiser statistics, loss curve). torch is
imported only inside functions and methods.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from ltrr._errors import DataError
from ltrr.rankers._validation import (
    RankerParameterError,
    canonical_order,
    check_predict_data,
    check_ranking_data,
)
from ltrr.rankers.base import BaseRanker, rankers

__all__ = ["FFNPointwiseRanker", "RankNetRanker", "ListNetRanker"]

logger = logging.getLogger(__name__)

FFN_FORMAT = "ltrr-ffn/1"
WEIGHTS_FILE = "weights.safetensors"

#: constraints of the parameters every neural ranker (feed-forward and transformer) shares
COMMON_CONSTRAINTS: dict[str, list] = {
    "n_epochs": [Interval(Integral, 1, None, closed="left")],
    "learning_rate": [Interval(Real, 0, None, closed="neither")],
    "batch_size": [Interval(Integral, 1, None, closed="left")],
    "weight_decay": [Interval(Real, 0, None, closed="left")],
    "missing": [StrOptions({"learned", "mean", "error"})],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
    "device": [str],
    "n_jobs": [None, Integral],
}


# ---- helpers shared with ltrr.rankers.transformer ---------------------------------------
def param_error(est: Any, name: str, allowed: str, value: Any) -> RankerParameterError:
    """A parameter error worded like sklearn's constraint messages."""
    return RankerParameterError(
        f"The {name!r} parameter of {type(est).__name__} must be {allowed}. Got {value!r} instead."
    )


def check_n_jobs(est: Any) -> None:
    """``n_jobs=0`` passes the type constraint but means nothing (as in joblib)."""
    if est.n_jobs == 0:
        raise param_error(est, "n_jobs", "None or an int other than 0", est.n_jobs)


def torch_device(est: Any):
    """The estimator's ``device`` parameter as a ``torch.device``; a bad value is a ConfigError."""
    import torch

    try:
        dev = torch.device(est.device)
    except (RuntimeError, TypeError) as exc:
        raise param_error(
            est, "device", 'a torch device such as "cpu" or "cuda:0"', est.device
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise param_error(
            est, "device", "an available torch device (CUDA is not available)", est.device
        )
    return dev


def seed_from(random_state: Any) -> int:
    """An int seed: an int ``random_state`` is used as is, else one is drawn from it."""
    from sklearn.utils import check_random_state

    if isinstance(random_state, Integral):
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


@contextlib.contextmanager
def torch_seeded(seed: int, device) -> Iterator[None]:
    """Seed torch for a block without leaking RNG state or determinism settings to the caller."""
    import torch

    was_deterministic = torch.are_deterministic_algorithms_enabled()
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        # warn_only: a few CUDA kernels have no deterministic variant; CPU training is exact.
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(was_deterministic)


@contextlib.contextmanager
def torch_threads(n_jobs: int | None) -> Iterator[None]:
    """Run a block with ``n_jobs`` torch CPU threads (joblib's reading: None is 1, -1 is all
    cores), then restore the caller's setting.

    Small networks train many times faster on one thread than on several when the cores are
    shared, because idle OpenMP workers spin; hence a setting per estimator, not torch's global
    default.
    """
    import torch
    from joblib import effective_n_jobs

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(effective_n_jobs(n_jobs))))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fit_standardiser(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and scale ignoring NaN; constant or all-NaN columns get mean 0/scale 1."""
    import warnings

    from sklearn.preprocessing import StandardScaler

    if X.shape[1] == 0:
        return np.zeros(0), np.ones(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: fixed below
        scaler = StandardScaler().fit(X)
    mean = np.nan_to_num(np.asarray(scaler.mean_, dtype=np.float64), nan=0.0)
    scale = np.asarray(scaler.scale_, dtype=np.float64)
    scale[~np.isfinite(scale) | (scale <= 0)] = 1.0
    return mean, scale


def contiguous_groups(sizes: np.ndarray) -> list[np.ndarray]:
    """Row indices of each group of data laid out in contiguous groups of ``sizes``."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def check_trainable(groups: list[np.ndarray], y: np.ndarray, objective: str, who: str) -> None:
    """Reject data the objective cannot learn from with a `DataError` that says why."""
    if objective == "pairwise" and not any(np.ptp(y[g]) > 0 for g in groups):
        raise DataError(
            f"{who}: no query has two rows with different labels (each has one sample or one "
            "label value), so there is no pair to learn from; give queries of two or more rows "
            "with different gains"
        )
    if objective == "listwise" and not any(len(g) > 1 for g in groups):
        raise DataError(
            f"{who}: every query has one sample; a listwise loss needs queries of two or more rows"
        )


def make_batches(
    groups: list[np.ndarray], budget: int, rng: np.random.Generator
) -> list[list[np.ndarray]]:
    """Shuffle whole groups and pack them into batches of at most ``budget`` rows.

    A batch always holds at least one whole group, so a group larger than the budget forms a
    batch of its own.
    """
    batches: list[list[np.ndarray]] = []
    current: list[np.ndarray] = []
    rows = 0
    for g in rng.permutation(len(groups)):
        grp = groups[g]
        if current and rows + len(grp) > budget:
            batches.append(current)
            current, rows = [], 0
        current.append(grp)
        rows += len(grp)
    if current:
        batches.append(current)
    return batches


def _pad(groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of a batch, group after group, and its ``(n_groups, max_len)`` mask."""
    mask = np.zeros((len(groups), max(len(g) for g in groups)), dtype=bool)
    for i, g in enumerate(groups):
        mask[i, : len(g)] = True
    return np.concatenate(groups), mask


# ---- losses on padded (n_groups, max_len) score and label matrices ------------------------
def pointwise_loss(s, y, mask, **_):
    """Mean squared error over the real (unpadded) rows."""
    return ((s - y) ** 2)[mask].mean()


def ranknet_loss(s, y, mask, **_):
    """RankNet: mean of ``log(1 + exp(-(s_i - s_j)))`` over pairs of one group with
    ``y_i > y_j``; None when the batch has no such pair."""
    import torch

    pairs = (y[:, :, None] > y[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    if not bool(pairs.any()):
        return None
    diff = s[:, :, None] - s[:, None, :]
    return torch.nn.functional.softplus(-diff[pairs]).mean()


def listnet_loss(s, y, mask, temperature: float = 1.0, **_):
    """ListNet: mean over groups of the cross-entropy between ``softmax(y / temperature)``
    and ``softmax(s)``, both over the group's real rows."""
    import torch

    neg_inf = torch.tensor(float("-inf"), dtype=s.dtype, device=s.device)
    target = torch.softmax(torch.where(mask, y / temperature, neg_inf), dim=1)
    logp = torch.log_softmax(torch.where(mask, s, neg_inf), dim=1)
    # padded positions have target 0 and log-probability -inf; zero them before multiplying
    return -(target * torch.where(mask, logp, torch.zeros_like(logp))).sum(dim=1).mean()


LOSSES: dict[str, Callable] = {
    "pointwise": pointwise_loss,
    "pairwise": ranknet_loss,
    "listwise": listnet_loss,
}


def train_loop(
    module,
    forward: Callable,
    groups: list[np.ndarray],
    y: np.ndarray,
    *,
    est: Any,
    objective: str,
    seed: int,
    device,
    scheduler_factory: Callable | None = None,
) -> list[float]:
    """Optimise ``module`` with AdamW on batches of whole groups; return per-epoch mean losses.

    ``forward(rows)`` returns the scores of row indices ``rows`` as a 1-D tensor. ``est``
    supplies ``n_epochs``, ``batch_size``, ``learning_rate``, ``weight_decay``, ``verbose``
    (and ``temperature`` for the listwise loss).
    """
    import torch

    loss_fn = LOSSES[objective]
    extra = {"temperature": float(est.temperature)} if objective == "listwise" else {}
    optimiser = torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad],
        lr=float(est.learning_rate),
        weight_decay=float(est.weight_decay),
    )
    rng = np.random.default_rng(seed)
    # Batches of all epochs are drawn up front so a learning-rate schedule knows the step count.
    plan = [make_batches(groups, int(est.batch_size), rng) for _ in range(int(est.n_epochs))]
    scheduler = scheduler_factory(optimiser, sum(map(len, plan))) if scheduler_factory else None
    y_t = torch.as_tensor(y, dtype=torch.float32, device=device)
    curve: list[float] = []
    module.train()
    for epoch, batches in enumerate(plan):
        total, n_losses = 0.0, 0
        for batch in batches:
            rows, mask_np = _pad(batch)
            mask = torch.as_tensor(mask_np, device=device)
            scores = forward(rows)
            s = scores.new_zeros(mask.shape).masked_scatter(mask, scores)
            yy = y_t.new_zeros(mask.shape).masked_scatter(
                mask, y_t[torch.as_tensor(rows, device=device)]
            )
            loss = loss_fn(s, yy, mask, **extra)
            if loss is not None:  # None: every query of the batch has tied labels
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += float(loss.detach())
                n_losses += 1
            if scheduler is not None:
                scheduler.step()
        curve.append(total / max(n_losses, 1))
        if not math.isfinite(curve[-1]):
            raise DataError(
                f"{type(est).__name__}: training diverged at epoch {epoch + 1} (loss "
                f"{curve[-1]}); lower learning_rate"
            )
        logger.log(
            logging.INFO if est.verbose else logging.DEBUG,
            "%s epoch %d/%d: loss %.6f",
            type(est).__name__,
            epoch + 1,
            est.n_epochs,
            curve[-1],
        )
    module.eval()
    return curve


def save_tensors(tensors: dict[str, Any], file: Path, fmt: str) -> None:
    """Write tensors to ``file`` as safetensors (tagged with ``fmt``), atomically."""
    from safetensors.torch import save_file

    tmp = file.with_name(file.name + ".tmp")
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in tensors.items()},
        str(tmp),
        metadata={"format": fmt},
    )
    tmp.replace(file)


def load_tensors(file: Path, fmt: str) -> dict[str, Any]:
    """Read tensors written by `save_tensors`, checking the format tag."""
    from safetensors import SafetensorError, safe_open

    if not file.is_file():
        raise DataError(f"{file.parent}: missing {file.name}; the saved ranker is incomplete")
    try:
        with safe_open(str(file), framework="pt") as fh:
            found = (fh.metadata() or {}).get("format")
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - not a dict
    except (SafetensorError, OSError) as exc:
        raise DataError(f"{file}: not a readable safetensors file ({exc})") from None
    if found != fmt:
        raise DataError(
            f"{file}: weights in format {found!r}; this ltrr reads {fmt!r}. Retrain the ranker."
        )
    return tensors


def check_state(path: Path, state: Any, fmt: str, est: Any) -> dict[str, Any]:
    """The ``state`` written by ``_save``, checked to be of format ``fmt``."""
    got = state.get("format") if isinstance(state, dict) else None
    if got != fmt:
        raise DataError(
            f"{path}: expected a {fmt!r} model for {est.name!r}, found {got!r}; the folder was "
            "written by another ranker or another ltrr version. Retrain and save again."
        )
    return state


def tuple_params(est: Any) -> list[str]:
    """Names of parameters holding tuples (JSON turns them into lists; `restore_tuples`)."""
    return sorted(k for k, v in est.get_params(deep=False).items() if isinstance(v, tuple))


def restore_tuples(est: Any, names: Sequence[str]) -> None:
    """Give back the tuple type JSON dropped, so a loaded ranker has its saved parameters."""
    for k in names:
        v = getattr(est, k, None)
        if isinstance(v, list):
            setattr(est, k, tuple(v))


# ---- torch modules -----------------------------------------------------------------------
_TORCH_CLASSES = ("MissingFill", "MLPScorer")


def _build_torch_classes() -> None:
    """Define the torch modules on first use (so importing ltrr needs no torch) as
    module-level names, so fitted rankers pickle like any sklearn estimator."""
    if "MLPScorer" in globals():
        return
    import torch
    from torch import nn

    class MissingFill(nn.Module):
        """Replaces NaN entries by one value per feature, learnable or fixed at 0."""

        def __init__(self, n_features: int, learned: bool):
            super().__init__()
            if learned:
                self.fill = nn.Parameter(torch.zeros(n_features))
            else:
                self.register_buffer("fill", torch.zeros(n_features))

        def forward(self, x):
            return torch.where(torch.isnan(x), self.fill.expand_as(x), torch.nan_to_num(x, nan=0.0))

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

    for cls in (MissingFill, MLPScorer):
        cls.__qualname__ = cls.__name__
        globals()[cls.__name__] = cls


def __getattr__(name: str) -> Any:
    # PEP 562: pickle finds ltrr.rankers.neural.MLPScorer here even before anything built it.
    if name in _TORCH_CLASSES:
        _build_torch_classes()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def torch_class(name: str):
    """One of this module's torch module classes (built on first use)."""
    _build_torch_classes()
    return globals()[name]


# ---- the rankers -------------------------------------------------------------------------
class _FeedForwardRanker(BaseRanker):
    """A multilayer perceptron scoring feature vectors; subclasses choose the loss."""

    objective: ClassVar[str] = "pointwise"
    _parameter_constraints: ClassVar[dict] = {
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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self.missing != "error"
        return tags

    def _hidden(self) -> list[int]:
        hs = self.hidden_sizes
        if isinstance(hs, (str, bytes)) or not all(
            isinstance(h, Integral) and not isinstance(h, bool) and int(h) >= 1 for h in hs
        ):
            raise param_error(self, "hidden_sizes", "a sequence of ints >= 1", hs)
        return [int(h) for h in hs]

    def _build(self, n_features: int):
        return torch_class("MLPScorer")(
            n_features, self._hidden(), float(self.dropout), self.missing == "learned"
        )

    @_fit_context(prefer_skip_nested_validation=True)
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
        if self.requires_qid:
            groups = contiguous_groups(layout.sizes)
        else:  # pointwise: rows are independent, and qid is ignored entirely
            groups = [np.array([i]) for i in range(len(y))]
        check_trainable(groups, y, self.objective, type(self).__name__)
        self.mean_, self.scale_ = fit_standardiser(X)
        Xt = torch.as_tensor(self._standardise(X), device=device)
        seed = seed_from(self.random_state)
        with torch_threads(self.n_jobs), torch_seeded(seed, device):
            module = self._build(X.shape[1]).to(device)
            self.loss_curve_ = train_loop(
                module,
                lambda rows: module(Xt[torch.as_tensor(rows, device=device)]),
                groups,
                y,
                est=self,
                objective=self.objective,
                seed=seed,
                device=device,
            )
        self.module_ = module
        self.n_iter_ = len(self.loss_curve_)
        return self

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return ((X - self.mean_) / self.scale_).astype(np.float32)

    @property
    def missing_values_(self) -> np.ndarray:
        """Values (standardised units) that replace NaN features; 0 is the training mean."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "module_")
        return self.module_.missing.fill.detach().cpu().numpy().astype(np.float64)

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
        # floats round-trip exactly through JSON (repr of a double is shortest-exact)
        return {
            "format": FFN_FORMAT,
            "weights": WEIGHTS_FILE,
            "mean": [float(v) for v in self.mean_],
            "scale": [float(v) for v in self.scale_],
            "loss_curve": [float(v) for v in self.loss_curve_],
            "tuple_params": tuple_params(self),
        }

    def _load(self, path: Path, state: dict[str, Any]) -> None:
        state = check_state(path, state, FFN_FORMAT, self)
        restore_tuples(self, state.get("tuple_params", []))
        n = int(self.n_features_in_)
        mean = np.asarray(state["mean"], dtype=np.float64)
        scale = np.asarray(state["scale"], dtype=np.float64)
        if mean.shape != (n,) or scale.shape != (n,):
            raise DataError(
                f"{path}: standardiser statistics have {mean.size}/{scale.size} values for {n} "
                "features; the folder mixes files of different models"
            )
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
        self.module_ = module.to(torch_device(self)).eval()
        self.mean_, self.scale_ = mean, scale
        self.loss_curve_ = [float(v) for v in state.get("loss_curve", [])]
        self.n_iter_ = len(self.loss_curve_)


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
    _parameter_constraints: ClassVar[dict] = {
        **_FeedForwardRanker._parameter_constraints,
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
