"""The base of the torch rankers: standardising, seeding, threads and persistence.

`TorchRanker` is the base class of the feed-forward rankers (`ltrr.rankers.neural`) and the
cross-encoders (`ltrr.rankers.transformer`). Both standardise their numeric features with the
training rows' mean and scale, fill NaN features with `MissingFill`, train with
`ltrr.rankers.torch_train.train_loop` under a seeded, thread-limited torch, and save their
weights as safetensors beside the base class's ``ranker.json``.

Standardisation and determinism
-------------------------------
Features are standardised with the mean and standard deviation of the training rows (NaN
ignored; constant or all-NaN columns keep scale 1); the statistics are fitted state (``mean_``,
``scale_``) saved with the model. Training rows are first put in `canonical_order`, and batches
are drawn from a generator seeded by ``random_state``, so a fit does not depend on the order of
the rows or query groups and repeats bit for bit on CPU.

torch is imported only inside functions and methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ltrr._atomic import atomic_path
from ltrr._errors import DataError
from ltrr.rankers.base import BaseRanker
from ltrr.rankers.params import Interval, StrOptions, param_error
from ltrr.rankers.torch_train import train_loop

__all__ = [
    "COMMON_CONSTRAINTS",
    "TorchRanker",
    "check_n_jobs",
    "check_state",
    "check_trainable",
    "contiguous_groups",
    "fit_standardiser",
    "load_tensors",
    "save_tensors",
    "seed_from",
    "missing_fill_class",
    "restore_tuples",
    "torch_device",
    "torch_seeded",
    "torch_threads",
    "tuple_params",
]

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


def save_tensors(tensors: dict[str, Any], file: Path, fmt: str) -> None:
    """Write tensors to ``file`` as safetensors (tagged with ``fmt``), atomically."""
    from safetensors.torch import save_file

    with atomic_path(file) as tmp:
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in tensors.items()},
            str(tmp),
            metadata={"format": fmt},
        )


def load_tensors(file: Path, fmt: str) -> dict[str, Any]:
    """Read tensors written by `save_tensors`, checking the format tag."""
    from safetensors import SafetensorError, safe_open

    if not file.is_file():
        raise DataError(f"{file.parent}: missing {file.name}; the saved ranker is incomplete")
    try:
        with safe_open(str(file), framework="pt") as fh:
            found = (fh.metadata() or {}).get("format")
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # a safetensors file handle, not a dict: .keys() is its API
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
def _define_missing_fill() -> None:
    """Define `MissingFill` on first use (so importing ltrr needs no torch) as a module-level
    name, so fitted rankers pickle like any sklearn estimator."""
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

    MissingFill.__qualname__ = "MissingFill"
    globals()["MissingFill"] = MissingFill


def missing_fill_class() -> type:
    """The `MissingFill` torch module class (built on first use)."""
    if "MissingFill" not in globals():
        _define_missing_fill()
    return globals()["MissingFill"]


def __getattr__(name: str) -> Any:
    # PEP 562: pickle finds ltrr.rankers.torch_base.MissingFill here before anything built it.
    if name == "MissingFill":
        return missing_fill_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- the base class ----------------------------------------------------------------------
class TorchRanker(BaseRanker):
    """Base of the rankers that train a torch module on standardised numeric features.

    Subclasses set ``objective`` (a key of `ltrr.rankers.torch_train.LOSSES`) and
    ``state_format`` (the format tag of their saved state and weights), store the parameters
    of `COMMON_CONSTRAINTS` in ``__init__``, and build their module in ``fit`` through
    `_train`. The fitted state this class manages: ``mean_``/``scale_`` (standardiser),
    ``module_`` (whose ``missing`` attribute is a `MissingFill`), ``loss_curve_``, ``n_iter_``.
    """

    objective: ClassVar[str] = "pointwise"
    #: format tag written in ``ranker.json``'s state and in the safetensors metadata
    state_format: ClassVar[str] = "abstract"
    torch_based: ClassVar[bool] = True
    allows_nan: ClassVar[bool] = True  # with the default missing="learned"
    learns_missing: ClassVar[bool] = True

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self.missing != "error"
        return tags

    def _train_groups(self, layout) -> list[np.ndarray]:
        """Training groups of rows in canonical order: queries, or single rows (pointwise)."""
        if self.requires_qid:
            return contiguous_groups(layout.sizes)
        # pointwise: rows are independent, and qid is ignored entirely
        return [np.array([i]) for i in range(len(layout.order))]

    def _train(
        self,
        build: Callable[[], Any],
        forward: Callable,
        groups: list[np.ndarray],
        y: np.ndarray,
        device,
        scheduler_factory: Callable | None = None,
    ) -> None:
        """Build the module and train it, seeded by ``random_state`` on ``n_jobs`` threads.

        ``build()`` returns the module (on ``device``); ``forward(module, rows)`` the scores of
        row indices ``rows``. Sets ``module_``, ``loss_curve_`` and ``n_iter_``.
        """
        seed = seed_from(self.random_state)
        with torch_threads(self.n_jobs), torch_seeded(seed, device):
            module = build()
            self.loss_curve_ = train_loop(
                module,
                lambda rows: forward(module, rows),
                groups,
                y,
                est=self,
                objective=self.objective,
                seed=seed,
                device=device,
                scheduler_factory=scheduler_factory,
            )
        self.module_ = module
        self.n_iter_ = len(self.loss_curve_)

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return ((X - self.mean_) / self.scale_).astype(np.float32)

    @property
    def missing_values_(self) -> np.ndarray:
        """Values (standardised units) that replace NaN features; 0 is the training mean."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "module_")
        return self.module_.missing.fill.detach().cpu().numpy().astype(np.float64)

    # ---- persistence --------------------------------------------------------------------
    def _fitted_state(self) -> dict[str, Any]:
        """The JSON state every torch ranker saves (subclasses add their own keys)."""
        # floats round-trip exactly through JSON (repr of a double is shortest-exact)
        return {
            "format": self.state_format,
            "mean": [float(v) for v in self.mean_],
            "scale": [float(v) for v in self.scale_],
            "loss_curve": [float(v) for v in self.loss_curve_],
            "tuple_params": tuple_params(self),
        }

    def _restore_standardiser(
        self, path: Path, state: Any, n_features: int
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
        """Check ``state``'s format, give tuple parameters back, and read ``mean``/``scale``
        (of ``n_features`` values each)."""
        state = check_state(path, state, self.state_format, self)
        restore_tuples(self, state.get("tuple_params", []))
        mean = np.asarray(state["mean"], dtype=np.float64)
        scale = np.asarray(state["scale"], dtype=np.float64)
        if mean.shape != (n_features,) or scale.shape != (n_features,):
            raise DataError(
                f"{path}: standardiser statistics have {mean.size}/{scale.size} values for "
                f"{n_features} features; the folder mixes files of different models"
            )
        return state, mean, scale

    def _set_loaded(self, module, mean: np.ndarray, scale: np.ndarray, state: dict) -> None:
        """Install the loaded module (on ``device``, in eval mode) and the fitted state."""
        self.module_ = module.to(torch_device(self)).eval()
        self.mean_, self.scale_ = mean, scale
        self.loss_curve_ = [float(v) for v in state.get("loss_curve", [])]
        self.n_iter_ = len(self.loss_curve_)
