"""The ``llama_cpp`` generator backend: a GGUF file run by llama-cpp-python.

About twenty times faster than ``transformers`` on CPU for the packaged SmolLM2 GGUF, but the
package is built from source (``pip install 'ltrr[llamacpp]'``, several minutes; set
``CMAKE_ARGS=-DGGML_NATIVE=OFF`` for a portable build), so it is optional.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ltrr._errors import ConfigError
from ltrr._registry import require
from ltrr.generation.base import DecodingParams, Generation, Generator
from ltrr.generation.transformers_backend import default_model_path, file_sha256

__all__ = ["LlamaCppGenerator"]

_MODELS: dict[tuple[str, int, int, int, str | None], Any] = {}
_LOAD_LOCK = threading.Lock()


def _llama_cpp() -> Any:
    return require("llama_cpp", extra="llamacpp", purpose="the llama_cpp generator backend")


class LlamaCppGenerator(Generator):
    """Chat completions from a GGUF model through ``llama_cpp.Llama``.

    Parameters
    ----------
    model : str or Path, optional
        A ``.gguf`` file; None uses the packaged SmolLM2-135M-Instruct.
    n_ctx : int
        Context window allocated by llama.cpp (prompt + completion tokens).
    n_threads : int, optional
        CPU threads; None uses the cores this process may run on.
    n_gpu_layers : int
        Layers offloaded to a GPU (0: CPU only; -1: all) when llama.cpp was built with one.
    chat_format : str, optional
        llama.cpp chat format name; None uses the template stored in the GGUF file.

    Raises
    ------
    MissingDependencyError
        When llama-cpp-python is not installed (``pip install 'ltrr[llamacpp]'``).

    Examples
    --------
    >>> gen = LlamaCppGenerator(n_ctx=2048)  # doctest: +SKIP
    >>> gen.generate(["What is the capital of Australia?"])[0].text  # doctest: +SKIP
    'The capital of Australia is Canberra.'
    """

    backend = "llama_cpp"

    # Checking the dependency and the file at construction is a deliberate departure from the
    # estimator contract: a missing backend must fail before a long run starts.
    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        chat_format: str | None = None,
    ):
        self.model = model
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.n_gpu_layers = n_gpu_layers
        self.chat_format = chat_format
        _llama_cpp()
        if not isinstance(n_ctx, int) or n_ctx < 16:
            raise ConfigError(f"llama_cpp n_ctx must be an integer >= 16, got {n_ctx!r}")
        if n_threads is not None and (not isinstance(n_threads, int) or n_threads < 1):
            raise ConfigError(f"llama_cpp n_threads must be a positive integer, got {n_threads!r}")
        self._path = default_model_path() if model is None else Path(model).expanduser()
        if not self._path.is_file() or self._path.suffix.lower() != ".gguf":
            raise ConfigError(f"llama_cpp generator model {str(model)!r} is not a .gguf file")
        self._identity: str | None = None

    def __repr__(self) -> str:
        return f"LlamaCppGenerator(model={str(self._path)!r}, n_ctx={self.n_ctx})"

    @property
    def identity(self) -> str:
        if self._identity is None:
            self._identity = f"llama_cpp:{self._path.name}:{file_sha256(self._path)[:16]}"
        return self._identity

    @property
    def context_length(self) -> int:
        return self.n_ctx

    def _threads(self) -> int:
        if self.n_threads:
            return self.n_threads
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # macOS and Windows have no affinity masks
            return os.cpu_count() or 1

    @property
    def llama(self) -> Any:
        """The loaded ``llama_cpp.Llama`` (shared by generators of the process with equal settings)."""
        key = (
            str(self._path.resolve()),
            self.n_ctx,
            self._threads(),
            self.n_gpu_layers,
            self.chat_format,
        )
        with _LOAD_LOCK:
            if key not in _MODELS:
                llama_cpp = _llama_cpp()
                _MODELS[key] = llama_cpp.Llama(
                    model_path=str(self._path),
                    n_ctx=self.n_ctx,
                    n_threads=self._threads(),
                    n_gpu_layers=self.n_gpu_layers,
                    chat_format=self.chat_format,
                    verbose=False,
                )
        return _MODELS[key]

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def generate(
        self, prompts: Sequence[str | list[dict[str, str]]], params: DecodingParams | None = None
    ) -> list[Generation]:
        params = params or DecodingParams()
        llm = self.llama
        out = []
        for prompt in prompts:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            kwargs: dict[str, Any] = {
                "messages": messages,
                "max_tokens": params.max_new_tokens,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "seed": params.seed,
                "stop": list(params.stop) or None,
            }
            if params.temperature <= 0:
                # top_k=1 makes greedy decoding explicit whatever llama.cpp's sampler defaults are.
                kwargs["top_k"] = 1
            if params.json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            start = time.perf_counter()
            try:
                response = llm.create_chat_completion(**kwargs)
            except (RuntimeError, ValueError) as exc:
                out.append(
                    Generation(
                        text="",
                        latency_s=time.perf_counter() - start,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                )
                continue
            choice = response["choices"][0]
            usage = response.get("usage") or {}
            out.append(
                Generation(
                    text=choice["message"].get("content") or "",
                    prompt_tokens=int(usage.get("prompt_tokens", 0)),
                    completion_tokens=int(usage.get("completion_tokens", 0)),
                    latency_s=time.perf_counter() - start,
                    extra={"finish_reason": choice.get("finish_reason")},
                )
            )
        return out
