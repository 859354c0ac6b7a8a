"""Cross-encoder rankers: a fine-tuned transformer encoder scoring (query, arm passages) pairs.

Each row is a (query, arm) pair. The encoder reads ``[CLS] query [SEP] arm passages [SEP]``,
its token states are pooled into one vector, and a linear head maps that vector, with the
row's optional numeric features, to a score (the network: `ltrr.rankers.cross_encoder`).
Encoder and head are fine-tuned together with a loss of `ltrr.rankers.torch_train`:

- ``transformer-pointwise`` (`TransformerPointwiseRanker`): mean squared error;
- ``transformer-pairwise`` (`TransformerPairwiseRanker`): RankNet's pairwise logistic loss;
- ``transformer-listwise`` (`TransformerListwiseRanker`): ListNet's top-one cross-entropy.

Input
-----
``X`` is a pandas DataFrame with text columns ``query_text`` and ``arm_text`` (the arm's top-k
passages joined). The no-retrieval arm has no passages: an empty (or missing) ``arm_text`` is
replaced by the marker text ``empty_arm_text`` (default ``"[no retrieval]"``), whose token
embeddings are fine-tuned with the rest of the encoder, so the model learns a representation
of "no retrieval" rather than reading an empty segment. The other columns (or those named in
``feature_columns``) must be numeric. They are standardised on the training rows, NaN entries
are filled as in the feed-forward rankers (``missing="learned"``: a learnable value per
feature), and the result is concatenated to the pooled text vector before the linear head
(which leaves the text path unchanged and lets the head weigh the features directly).

Backbone
--------
``backbone=None`` uses the packaged all-MiniLM-L6-v2 (the paper fine-tuned DeBERTa). Any
local folder loadable with ``transformers.AutoModel`` and ``AutoTokenizer`` works, e.g. a
DeBERTa-v3 checkout. Nothing is downloaded.

Persistence
-----------
``save`` writes the encoder and tokenizer (``save_pretrained``) into ``backbone/``, the head
and learned missing values into ``head.safetensors``, and the fitted state into ``ranker.json``.
"""

from __future__ import annotations

from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ltrr._errors import ConfigError, DataError
from ltrr.rankers._validation import canonical_order, check_qid
from ltrr.rankers.base import rankers
from ltrr.rankers.cross_encoder import (
    default_backbone,
    head_tensors,
    load_backbone,
    quiet_transformers,
    scorer_class,
)
from ltrr.rankers.params import Interval, StrOptions, checked_fit, param_error
from ltrr.rankers.torch_base import (
    COMMON_CONSTRAINTS,
    TorchRanker,
    check_n_jobs,
    check_state,
    check_trainable,
    fit_standardiser,
    load_tensors,
    save_tensors,
    torch_device,
    torch_threads,
)

__all__ = [
    "TransformerPointwiseRanker",
    "TransformerPairwiseRanker",
    "TransformerListwiseRanker",
    "QUERY_COLUMN",
    "ARM_COLUMN",
    "default_backbone",
]

QUERY_COLUMN = "query_text"
ARM_COLUMN = "arm_text"
CROSS_ENCODER_FORMAT = "ltrr-cross-encoder/1"
BACKBONE_DIR = "backbone"
HEAD_FILE = "head.safetensors"


def __getattr__(name: str) -> Any:
    # PEP 562: older pickles name ltrr.rankers.transformer.CrossEncoderScorer
    if name == "CrossEncoderScorer":
        return scorer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- the rankers -------------------------------------------------------------------------
class _CrossEncoderRanker(TorchRanker):
    """A fine-tuned cross-encoder; subclasses choose the loss."""

    state_format: ClassVar[str] = CROSS_ENCODER_FORMAT
    needs_text: ClassVar[bool] = True
    param_constraints: ClassVar[dict] = {
        **COMMON_CONSTRAINTS,
        # a str, not a Path: parameters are saved as JSON in ranker.json
        "backbone": [None, str],
        "max_length": [Interval(Integral, 8, None, closed="left")],
        "pooling": [StrOptions({"mean", "cls"})],
        "feature_columns": [StrOptions({"auto"}), "array-like", None],
        "empty_arm_text": [str],
        "warmup_ratio": [Interval(Real, 0, 1, closed="left")],
    }

    def __init__(
        self,
        *,
        backbone=None,
        max_length=256,
        pooling="mean",
        feature_columns="auto",
        empty_arm_text="[no retrieval]",
        n_epochs=1,
        learning_rate=2e-5,
        batch_size=16,
        weight_decay=0.01,
        warmup_ratio=0.1,
        missing="learned",
        random_state=None,
        verbose=0,
        device="cpu",
        n_jobs=None,
    ):
        self.backbone = backbone
        self.max_length = max_length
        self.pooling = pooling
        self.feature_columns = feature_columns
        self.empty_arm_text = empty_arm_text
        self.n_epochs = n_epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.warmup_ratio = warmup_ratio
        self.missing = missing
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # X is a DataFrame with text columns, not a numeric 2-D array: sklearn's estimator
        # checks (and the numeric conformance suite) do not apply and skip on this tag.
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags

    # ---- input checks -------------------------------------------------------------------
    def _check_extra_params(self) -> None:
        fc = self.feature_columns
        if fc is not None and not isinstance(fc, str) and not all(isinstance(c, str) for c in fc):
            raise param_error(self, "feature_columns", '"auto", None or a list of column names', fc)
        if not self.empty_arm_text.strip():
            raise param_error(self, "empty_arm_text", "a non-blank string", self.empty_arm_text)
        check_n_jobs(self)

    def _frame(self, X: Any):
        import pandas as pd

        if not isinstance(X, pd.DataFrame):
            raise DataError(
                f"{self.name}: X must be a pandas DataFrame with text columns {QUERY_COLUMN!r} "
                f"and {ARM_COLUMN!r} (plus optional numeric features); got {type(X).__name__}"
            )
        for col in (QUERY_COLUMN, ARM_COLUMN):
            if col not in X.columns:
                raise DataError(
                    f"{self.name}: X has no {col!r} column; columns are "
                    f"{[str(c) for c in X.columns]}"
                )
        if len(X) == 0:
            raise DataError(f"{self.name}: X has no rows")
        return X

    def _texts(self, X) -> tuple[list[str], list[str]]:
        queries, arms = [], []
        for i, (q, a) in enumerate(
            zip(X[QUERY_COLUMN].tolist(), X[ARM_COLUMN].tolist(), strict=True)
        ):
            if not isinstance(q, str) or not q.strip():
                raise DataError(
                    f"{self.name}: {QUERY_COLUMN!r} of row {i} is {q!r}; every row needs its "
                    "query text"
                )
            if a is None or (isinstance(a, float) and np.isnan(a)):
                a = ""
            if not isinstance(a, str):
                raise DataError(
                    f"{self.name}: {ARM_COLUMN!r} of row {i} is a {type(a).__name__}, not text "
                    "(use an empty string for the no-retrieval arm)"
                )
            queries.append(q)
            arms.append(a if a.strip() else self.empty_arm_text)
        return queries, arms

    def _select_features(self, X) -> list[str]:
        text = {QUERY_COLUMN, ARM_COLUMN}
        if self.feature_columns is None:
            return []
        if isinstance(self.feature_columns, str):  # "auto"
            return [str(c) for c in X.columns if c not in text]
        cols = [str(c) for c in self.feature_columns]
        for c in cols:
            if c in text:
                raise DataError(f"{self.name}: {c!r} is a text column, not a numeric feature")
            if c not in X.columns:
                raise DataError(f"{self.name}: feature column {c!r} is not in X")
        return cols

    def _features(self, X, cols: list[str]) -> np.ndarray:
        import pandas as pd

        for c in cols:
            if not pd.api.types.is_numeric_dtype(X[c]) or pd.api.types.is_bool_dtype(X[c]):
                raise DataError(
                    f"{self.name}: column {c!r} has dtype {X[c].dtype}, not numeric; drop it or "
                    "list the numeric feature columns in feature_columns"
                )
        F = X[cols].to_numpy(dtype=np.float64) if cols else np.zeros((len(X), 0))
        if np.isinf(F).any():
            raise DataError(f"{self.name}: feature columns hold infinite values; replace them")
        if self.missing == "error" and np.isnan(F).any():
            bad = [c for c in cols if X[c].isna().any()]
            raise DataError(
                f"{self.name}: NaN in feature columns {bad} with missing='error'; use "
                "missing='learned' or 'mean', or fill them"
            )
        return F

    def _labels(self, y: Any, n_rows: int) -> np.ndarray:
        try:
            y = np.array(y, dtype=np.float64)  # a copy: torch refuses pandas' read-only views
        except (TypeError, ValueError) as exc:
            raise DataError(f"{self.name}: y must be numeric gains ({exc})") from None
        if y.ndim != 1 or len(y) != n_rows:
            raise DataError(
                f"{self.name}: y must hold one label per row of X ({n_rows}); got shape {y.shape}"
            )
        if not np.isfinite(y).all():
            raise DataError(
                f"{self.name}: Input y contains NaN or infinity. Labels must be finite numbers: "
                "drop or fill unlabelled rows."
            )
        return y

    def _check_columns(self, X) -> None:
        seen = [str(c) for c in self.feature_names_in_]
        now = [str(c) for c in X.columns]
        if set(now) != set(seen):
            raise DataError(
                f"{self.name}: X columns differ from those seen in fit: missing "
                f"{sorted(set(seen) - set(now))}, unexpected {sorted(set(now) - set(seen))}"
            )

    # ---- fit / predict ------------------------------------------------------------------
    def _encode(self, queries: list[str], arms: list[str], rows: np.ndarray, device) -> dict:
        enc = self.tokenizer_(
            [queries[i] for i in rows],
            [arms[i] for i in rows],
            truncation=True,
            max_length=int(self.max_length),
            padding=True,
            return_tensors="pt",
        )
        return {k: v.to(device) for k, v in enc.items()}

    @checked_fit
    def fit(self, X, y, qid=None):
        """Fine-tune the encoder and head on rows ``X`` with labels ``y``.

        Parameters
        ----------
        X : pandas.DataFrame
            Columns ``query_text``, ``arm_text`` and optional numeric features.
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

        self._check_extra_params()
        device = torch_device(self)
        X = self._frame(X)
        queries, arms = self._texts(X)
        cols = self._select_features(X)
        F = self._features(X, cols)
        y = self._labels(y, len(X))
        qid = check_qid(qid, len(X), ranker=self, required=self.requires_qid)

        # Canonical row order (texts by sorted code, then features) makes the model
        # independent of the order of rows and query groups.
        keys = np.column_stack(
            [
                np.unique(np.asarray(t, dtype=object), return_inverse=True)[1]
                for t in (queries, arms)
            ]
            + [F]
        ).astype(np.float64)
        layout = canonical_order(keys, y, qid if self.requires_qid else None)
        o = layout.order
        queries, arms, F, y = [queries[i] for i in o], [arms[i] for i in o], F[o], y[o]
        groups = self._train_groups(layout)
        check_trainable(groups, y, self.objective, type(self).__name__)

        self.feature_names_in_ = np.asarray([str(c) for c in X.columns], dtype=object)
        self.n_features_in_ = len(X.columns)
        self.feature_columns_ = cols
        self.mean_, self.scale_ = fit_standardiser(F)
        Ft = torch.as_tensor(self._standardise(F), device=device)
        source = default_backbone() if self.backbone is None else self.backbone

        def build():
            # inside the seeded block: the head's initial weights come from random_state
            self.tokenizer_, encoder = load_backbone(source, verbose=self.verbose)
            module = scorer_class()(encoder, len(cols), self.pooling, self.missing == "learned")
            return module.to(device)

        def forward(module, rows):
            enc = self._encode(queries, arms, rows, device)
            return module(enc, Ft[torch.as_tensor(rows, device=device)])

        def schedule(optimiser, n_steps):
            from transformers import get_linear_schedule_with_warmup

            warmup = int(round(float(self.warmup_ratio) * n_steps))
            return get_linear_schedule_with_warmup(optimiser, warmup, max(n_steps, 1))

        self._train(build, forward, groups, y, device, scheduler_factory=schedule)
        return self

    def predict(self, X) -> np.ndarray:
        """Score each (query, arm) row of ``X``; higher is better.

        Rows are encoded in chunks of ``batch_size`` in the given order.

        Returns
        -------
        ndarray of shape (n_rows,), float64
        """
        import torch
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "module_")
        X = self._frame(X)
        self._check_columns(X)
        queries, arms = self._texts(X)
        F = self._features(X, self.feature_columns_)
        device = next(self.module_.parameters()).device
        Ft = torch.as_tensor(self._standardise(F), device=device)
        self.module_.eval()
        # Padding to the longest sequence of a batch changes float rounding, so a row's score
        # would depend on its batch-mates; identical rows must score identically (ties are
        # broken by row order), so each distinct row is scored once and its score copied.
        keys = [(q, a, f.tobytes()) for q, a, f in zip(queries, arms, np.asarray(F), strict=True)]
        first: dict = {}
        inverse = np.array([first.setdefault(k, len(first)) for k in keys], dtype=np.int64)
        uniq = np.array(sorted(set(inverse.tolist()), key=lambda u: u), dtype=np.int64)
        rep = np.zeros(len(first), dtype=np.int64)
        rep[inverse[::-1]] = np.arange(len(keys))[::-1]  # first row index of each distinct row
        out = []
        with torch_threads(self.n_jobs), torch.no_grad():
            for start in range(0, len(uniq), int(self.batch_size)):
                rows = rep[uniq[start : start + int(self.batch_size)]]
                enc = self._encode(queries, arms, rows, device)
                out.append(self.module_(enc, Ft[torch.as_tensor(rows, device=device)]).cpu())
        scores = torch.cat(out).numpy().astype(np.float64) if out else np.zeros(0)
        return scores[inverse]

    # ---- persistence --------------------------------------------------------------------
    def _save(self, path: Path) -> dict[str, Any]:
        with quiet_transformers(self.verbose):
            self.module_.encoder.save_pretrained(str(path / BACKBONE_DIR))
            self.tokenizer_.save_pretrained(str(path / BACKBONE_DIR))
        save_tensors(head_tensors(self.module_), path / HEAD_FILE, CROSS_ENCODER_FORMAT)
        return {
            **self._fitted_state(),
            "backbone": BACKBONE_DIR,
            "head": HEAD_FILE,
            "feature_columns": list(self.feature_columns_),
        }

    def _load(self, path: Path, state: dict[str, Any]) -> None:
        state = check_state(path, state, self.state_format, self)
        cols = [str(c) for c in state["feature_columns"]]
        state, mean, scale = self._restore_standardiser(path, state, len(cols))
        backbone = path / state.get("backbone", BACKBONE_DIR)
        if not backbone.is_dir():
            raise DataError(f"{path}: missing {backbone.name}/; the saved ranker is incomplete")
        head = load_tensors(path / state.get("head", HEAD_FILE), CROSS_ENCODER_FORMAT)
        try:
            tokenizer, encoder = load_backbone(backbone, verbose=self.verbose)
        except ConfigError as exc:
            raise DataError(f"{path}: the saved encoder does not load: {exc}") from None
        module = scorer_class()(encoder, len(cols), self.pooling, self.missing == "learned")
        expected = head_tensors(module)
        if set(head) != set(expected) or any(head[k].shape != expected[k].shape for k in head):
            raise DataError(
                f"{path}: {HEAD_FILE} does not fit a head for {len(cols)} feature columns on "
                "this encoder; the folder mixes files of different models"
            )
        module.load_state_dict(head, strict=False)
        self.tokenizer_ = tokenizer
        self.feature_columns_ = cols
        self._set_loaded(module, mean, scale, state)


_PARAMS_DOC = """
    backbone : str or None, default=None
        Local folder of a transformers encoder and its tokenizer (e.g. a DeBERTa-v3
        checkout), as a string; None uses the packaged all-MiniLM-L6-v2.
    max_length : int, default=256
        Token budget of ``[CLS] query [SEP] arm passages [SEP]``; the longer segment is cut.
    pooling : {"mean", "cls"}, default="mean"
        Mean of the token states (how all-MiniLM-L6-v2 was trained) or the first-token
        ([CLS]) state.
    feature_columns : "auto", list of str or None, default="auto"
        Numeric columns concatenated to the pooled text vector: every column other than
        ``query_text`` and ``arm_text`` ("auto"), the listed ones, or none.
    empty_arm_text : str, default="[no retrieval]"
        Text read in place of an empty ``arm_text`` (the no-retrieval arm); its token
        embeddings are fine-tuned with the encoder.
    n_epochs : int, default=1
        Passes over the training data.
    learning_rate : float, default=2e-5
        Peak AdamW step size of the linear warm-up and decay schedule.
    batch_size : int, default=16
        (query, arm) sequences per forward pass; the pairwise and listwise rankers keep whole
        queries together in training (a query larger than ``batch_size`` makes a batch of
        its own).
    weight_decay : float, default=0.01
        AdamW decoupled weight decay.
    warmup_ratio : float, default=0.1
        Fraction of the steps spent warming the learning rate up from 0.
    missing : {"learned", "mean", "error"}, default="learned"
        NaN in feature columns: replaced by a learnable value per feature, by the training
        mean, or rejected (see `ltrr.rankers.neural`).
    random_state : int, RandomState or None, default=None
        Seeds the head, dropout and batch order; an int gives identical scores run to run on
        CPU.
    verbose : int, default=0
        When > 0, log each epoch's loss at INFO level and show transformers' progress bars.
    device : str, default="cpu"
        Torch device.
    n_jobs : int or None, default=None
        CPU threads torch uses in fit and predict: None means 1, -1 all cores.
"""

_ATTRS_DOC = """
    Attributes
    ----------
    n_features_in_ : int
        Number of columns of X seen in fit.
    feature_names_in_ : ndarray of str
        Column names of X seen in fit.
    feature_columns_ : list of str
        The numeric columns the head reads.
    mean_, scale_ : ndarray of shape (len(feature_columns_),)
        Standardisation statistics of the feature columns.
    missing_values_ : ndarray of shape (len(feature_columns_),)
        Values (standardised units) that replace NaN feature values.
    loss_curve_ : list of float
        Mean training loss per epoch.
    n_iter_ : int
        Epochs run.
    module_ : torch.nn.Module
        The fine-tuned encoder and head.
    tokenizer_ : transformers tokenizer
        The encoder's tokenizer.
"""

_EXAMPLE = """
    Examples
    --------
    >>> import pandas as pd
    >>> from ltrr.rankers.transformer import {cls}
    >>> X = pd.DataFrame({{
    ...     "query_text": ["capital of australia"] * 2 + ["who wrote hamlet"] * 2,
    ...     "arm_text": ["Canberra is the capital of Australia.", "",
    ...                  "Hamlet is a tragedy by William Shakespeare.", ""],
    ... }})
    >>> ranker = {cls}(max_length=32, random_state=0)
    >>> ranker = ranker.fit(X, [1.0, 0.0, 1.0, 0.0], qid=[0, 0, 1, 1])
    >>> ranker.predict(X).shape
    (4,)
"""


@rankers.register("transformer-pointwise")
class TransformerPointwiseRanker(_CrossEncoderRanker):
    __doc__ = f"""Cross-encoder fine-tuned to regress each row's label (mean squared error).

    ``qid`` is optional and ignored.

    Parameters
    ----------
    {_PARAMS_DOC.strip()}

    {_ATTRS_DOC.strip()}

    {_EXAMPLE.format(cls="TransformerPointwiseRanker").strip()}
    """

    name = "transformer-pointwise"
    objective = "pointwise"
    requires_qid = False


@rankers.register("transformer-pairwise")
class TransformerPairwiseRanker(_CrossEncoderRanker):
    __doc__ = f"""Cross-encoder fine-tuned with RankNet's pairwise logistic loss.

    Every pair of rows of one query with ``y_i > y_j`` adds ``log(1 + exp(-(s_i - s_j)))``.
    ``qid`` is required.

    Parameters
    ----------
    {_PARAMS_DOC.strip()}

    {_ATTRS_DOC.strip()}

    {_EXAMPLE.format(cls="TransformerPairwiseRanker").strip()}
    """

    name = "transformer-pairwise"
    objective = "pairwise"


@rankers.register("transformer-listwise")
class TransformerListwiseRanker(_CrossEncoderRanker):
    __doc__ = f"""Cross-encoder fine-tuned with ListNet's top-one cross-entropy per query.

    ``qid`` is required.

    Parameters
    ----------
    {_PARAMS_DOC.strip()}
    temperature : float, default=0.1
        Divides the labels before their softmax (sharpens targets of gains in [0, 1]).

    {_ATTRS_DOC.strip()}

    {_EXAMPLE.format(cls="TransformerListwiseRanker").strip()}
    """

    name = "transformer-listwise"
    objective = "listwise"
    param_constraints: ClassVar[dict] = {
        **_CrossEncoderRanker.param_constraints,
        "temperature": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        *,
        backbone=None,
        max_length=256,
        pooling="mean",
        feature_columns="auto",
        empty_arm_text="[no retrieval]",
        n_epochs=1,
        learning_rate=2e-5,
        batch_size=16,
        weight_decay=0.01,
        warmup_ratio=0.1,
        missing="learned",
        temperature=0.1,
        random_state=None,
        verbose=0,
        device="cpu",
        n_jobs=None,
    ):
        super().__init__(
            backbone=backbone,
            max_length=max_length,
            pooling=pooling,
            feature_columns=feature_columns,
            empty_arm_text=empty_arm_text,
            n_epochs=n_epochs,
            learning_rate=learning_rate,
            batch_size=batch_size,
            weight_decay=weight_decay,
            warmup_ratio=warmup_ratio,
            missing=missing,
            random_state=random_state,
            verbose=verbose,
            device=device,
            n_jobs=n_jobs,
        )
        self.temperature = temperature
