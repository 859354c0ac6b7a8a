"""The generator LLM's state of a question alone: the ``lm`` representation of the policy head.

The question text (no prompt template, no passages) goes through the generator's causal LM and
the last layer's hidden state is kept: at the last token (``pooling="last"``), or averaged over
the tokens (``"mean"``). This is the ToolRL-style head on the actor LM: what the model "thinks"
of the question before it sees any passage. The transformers backend computes the states in
batches; the llama.cpp backend, one question at a time in an embedding-mode context
(`LlamaCppGenerator.token_states`), from the same quantised model that made the labels.

States are cached in one safetensors file per (generator, pooling): a key per question text
(its SHA-256), so a re-run or another split computes only the questions it has not seen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ltrr._atomic import atomic_path
from ltrr._errors import ConfigError

__all__ = ["question_states", "POOLINGS"]

POOLINGS = ("last", "mean")


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def question_states(generator: Any, questions: Sequence[str], *, pooling: str = "last",
                    cache_dir: str | Path | None = None, batch_size: int = 16,
                    show_progress: bool = False) -> np.ndarray:
    """(n_questions, hidden_size) last-layer states of ``questions``.

    Parameters
    ----------
    generator : Generator or mapping
        A transformers- or llama.cpp-backend generator (`ltrr.generation.make_generator`), or its
        config.
    pooling : {"last", "mean"}
        The last token's state, or the mean over the question's tokens.
    cache_dir : path, optional
        Folder of the state cache (``states-<generator>-<pooling>.safetensors``).
    """
    if pooling not in POOLINGS:
        raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if isinstance(generator, Mapping):
        from ltrr.generation import make_generator

        generator = make_generator(generator)
    inner = getattr(generator, "generator", generator)  # a CachedGenerator wraps the backend
    batched = hasattr(inner, "hf_model") and hasattr(inner, "tokenizer")
    if not batched and not hasattr(inner, "token_states"):
        raise ConfigError(f"the lm representation reads the generator's hidden states, which the "
                          f"{type(inner).__name__} backend does not expose; use the transformers or "
                          "llama_cpp backend")
    cache_file = None
    cached: dict[str, np.ndarray] = {}
    if cache_dir is not None:
        ident = hashlib.sha256(str(inner.identity).encode()).hexdigest()[:16]
        cache_file = Path(cache_dir) / f"states-{ident}-{pooling}.safetensors"
        if cache_file.is_file():
            from safetensors.numpy import load_file

            cached = dict(load_file(str(cache_file)))
    keys = [_key(q) for q in questions]
    todo = sorted({k: q for k, q in zip(keys, questions, strict=True) if k not in cached}.items())
    if todo:
        from ltrr._log import bar

        had = len(cached)
        try:
            with bar(total=len(todo), desc="question states", unit="q", disable=not show_progress) as pbar:
                if batched:
                    _batched_states(inner, todo, pooling, batch_size, cached, pbar)
                else:
                    for k, q in todo:
                        h = inner.token_states(q)
                        cached[k] = (h.mean(0) if pooling == "mean" else h[-1]).astype(np.float32)
                        pbar.update(1)
        finally:  # interrupted too: the states made so far are kept, and the next call makes the rest
            if cache_file is not None and len(cached) > had:
                from safetensors.numpy import save_file

                with atomic_path(cache_file) as tmp:
                    save_file({k: np.ascontiguousarray(v) for k, v in cached.items()}, str(tmp))
    return np.stack([cached[k] for k in keys]).astype(np.float64)


def _batched_states(inner: Any, todo: list, pooling: str, batch_size: int, cached: dict, pbar: Any) -> None:
    # transformers: right-padded batches, the last real token's state or the masked mean
    import torch

    tok, model = inner.tokenizer, inner.hf_model
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    for i in range(0, len(todo), batch_size):
        chunk = todo[i:i + batch_size]
        enc = tok([q for _, q in chunk], return_tensors="pt", padding=True)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        with torch.no_grad():
            h = model(**enc, output_hidden_states=True).hidden_states[-1].float()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        if pooling == "mean":
            v = (h * mask).sum(1) / mask.sum(1).clamp(min=1)
        else:
            last = enc["attention_mask"].sum(1) - 1
            v = h[torch.arange(h.shape[0]), last]
        for (k, _), row in zip(chunk, v.cpu().numpy().astype(np.float32), strict=True):
            cached[k] = row
        pbar.update(len(chunk))
