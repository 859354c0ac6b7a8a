"""The ``llama_cpp`` generator backend: a GGUF file run by llama-cpp-python.

The embedded default runtime: 2-4 times faster than ``transformers`` on CPU for the same GGUF
file and a sixth of its memory (``benchmarks/generation.py``). llama-cpp-python is built from
source by ``make env`` (a C++ compiler and CMake are needed; ``CMAKE_ARGS=-DGGML_NATIVE=OFF``
gives the portable build the shipped generations were made with).

Determinism
-----------
llama.cpp reuses the KV cache of the longest prompt prefix it has already evaluated. Left to
itself that makes an answer depend on the previous call: the reused prefix was computed in a
batch of another shape, and quantised matrix products round differently in different batch
shapes. Here the reused prefix is cut down to a multiple of ``n_batch`` tokens, so every prompt
token is always evaluated in the same batch (the same tokens at the same positions), whatever
came before. A call's output is a function of the prompt, the model file and the build alone;
the constant few-shot prefix of a template is still evaluated only once.
"""

from __future__ import annotations

import atexit
import os
import struct
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError, GenerationError
from ltrr._registry import require
from ltrr.generation.base import CANCELLED, DecodingParams, Generation, Generator, cancel_requested
from ltrr.generation.transformers_backend import file_sha256

__all__ = ["LlamaCppGenerator", "gguf_metadata", "token_logprobs"]

_MODELS: dict[tuple, Any] = {}
_LOAD_LOCK = threading.Lock()
_CALL_LOCK = threading.RLock()  # one llama.cpp context serves one call at a time
_TURN_ENDS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "</s>")

# GGUF general.file_type values (llama_ftype) of the quantisations ltrr ships or meets.
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
               10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
               16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


@atexit.register
def _close_models() -> None:
    # Closed before the interpreter tears down llama_cpp's module globals, which its __del__
    # needs (otherwise every loaded model prints a TypeError at exit).
    for llama in _MODELS.values():
        llama.close()
    _MODELS.clear()


def _llama_cpp() -> Any:
    return require("llama_cpp", extra="llamacpp", purpose="the llama_cpp generator backend")


def gguf_metadata(path: str | os.PathLike[str], keys: Sequence[str]) -> dict[str, Any]:
    """The values of ``keys`` in a GGUF file's header (absent keys are left out).

    The header's key-value section is read directly (`_scan_gguf_header`): the ``gguf``
    package's ``GGUFReader`` builds every field up front, the 151,000-string vocabulary
    included, which took 12.4 s for the Qwen-0.5B file on one core against milliseconds here
    (measured 2026-11-27). A header this scan does not take in (big-endian, a version before
    2, an unknown value type) is read with ``GGUFReader``, which also judges a broken file.

    Raises
    ------
    DataError
        The file is not a readable GGUF file.
    """
    try:
        return _scan_gguf_header(path, keys)
    except RecursionError:
        # arrays of arrays nested thousands deep: no model writes that, and GGUFReader recurses too
        raise DataError(f"{path} is not a readable GGUF file: its metadata nests arrays too deeply") from None
    except (_NotScanned, OSError, struct.error, UnicodeDecodeError, ValueError):
        pass
    import gguf

    try:
        reader = gguf.GGUFReader(str(path), "r")
    except Exception as exc:  # the reader raises ValueError, struct.error, OSError...
        raise DataError(f"{path} is not a readable GGUF file: {type(exc).__name__}: {exc}") from None
    out: dict[str, Any] = {}
    for key in keys:
        field = reader.get_field(key)
        if field is not None:
            out[key] = field.contents()
    return out


class _NotScanned(Exception):
    """The header is not one `_scan_gguf_header` reads; the ``gguf`` package reads it."""


# GGUF value types (gguf.constants.GGUFValueType): fixed-size scalars by struct code.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _scan_gguf_header(path: str | os.PathLike[str], keys: Sequence[str]) -> dict[str, Any]:
    """``keys``' values from a little-endian GGUF (version 2 or 3) header; arrays of the wanted
    keys come back as lists, every other array is skipped unread."""
    import mmap

    wanted, out = set(keys), {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise _NotScanned
        version, _, n_kv = struct.unpack_from("<IQQ", m, 4)
        if version not in (2, 3):
            raise _NotScanned
        pos = 24

        def string(pos: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", m, pos)
            return m[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n

        def value(kind: int, pos: int, keep: bool) -> tuple[Any, int]:
            if kind in _GGUF_SCALARS:
                code = "<" + _GGUF_SCALARS[kind]
                return (struct.unpack_from(code, m, pos)[0] if keep else None), pos + struct.calcsize(code)
            if kind == _GGUF_STRING:
                if keep:
                    return string(pos)
                return None, pos + 8 + struct.unpack_from("<Q", m, pos)[0]
            if kind == _GGUF_ARRAY:
                item, count = struct.unpack_from("<IQ", m, pos)
                pos += 12
                if item in _GGUF_SCALARS and not keep:
                    return None, pos + count * struct.calcsize("<" + _GGUF_SCALARS[item])
                items = []
                for _ in range(count):
                    v, pos = value(item, pos, keep)
                    items.append(v)
                return (items if keep else None), pos
            raise _NotScanned

        for _ in range(n_kv):
            key, pos = string(pos)
            (kind,) = struct.unpack_from("<I", m, pos)
            v, pos = value(kind, pos + 4, key in wanted)
            if key in wanted:
                out[key] = v
                if len(out) == len(wanted):
                    break
    return out


def token_logprobs(logits: np.ndarray, tokens: Sequence[int]) -> list[float]:
    """Log-probability of each of ``tokens`` under its row of ``logits`` (a stable log-softmax
    in float64, computed as `LlamaCppGenerator.score` computes it, so values can be compared to
    the last bit)."""
    logits = np.asarray(logits, dtype=np.float64)
    top = logits.max(axis=1, keepdims=True)
    logz = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    return [float(x) for x in logits[np.arange(len(tokens)), list(tokens)] - logz]


class LlamaCppGenerator(Generator):
    """Chat completions, likelihoods and token continuations from a GGUF model (llama-cpp-python).

    Parameters
    ----------
    model : str or Path, optional
        A ``.gguf`` file or a packaged model name (`ltrr.generation.models.packaged_models`);
        None uses the embedded default, `ltrr.generation.models.DEFAULT_MODEL`.
    n_ctx : int
        Context window (prompt + completion tokens). A longer prompt is cut in its middle (the
        template's head and the question at its tail are kept) and the cut is recorded in
        ``Generation.extra["truncated_tokens"]``; it never fails the call. It is not part of the
        `identity`: a cached answer is made again where this context would feed the model
        another prompt (`answer_holds`).
    n_threads : int, optional
        CPU threads; None uses the cores this process may run on. Outputs do not depend on it.
    n_batch : int
        Prompt tokens evaluated per batch, and the grain of KV-cache reuse (module docstring).
    n_gpu_layers : int
        Layers offloaded to a GPU (0: CPU only; -1: all) when llama.cpp was built with one.
    chat_format : str, optional
        A llama.cpp chat format name for a model without a template; None uses the template
        stored in the GGUF file, and a file without one is refused.

    Raises
    ------
    MissingDependencyError
        llama-cpp-python is not installed (``pip install 'ltrr[llamacpp]'``), or a packaged
        model's packages are not.
    ConfigError
        The model is not a ``.gguf`` file, has no chat template, or a setting is out of range.
    DataError
        A packaged model's parts do not join to the pinned sha256.

    Examples
    --------
    >>> gen = LlamaCppGenerator("smollm2-135m", n_ctx=2048)  # doctest: +SKIP
    >>> gen.generate(["What is the capital of Australia?"])[0].text  # doctest: +SKIP
    'The capital of Australia is Canberra.'
    """

    backend = "llama_cpp"
    exact_token_counts = True

    # Checking the dependency and the file at construction is a deliberate departure from the
    # estimator contract: a missing backend must fail before a long run starts.
    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 64,
        n_gpu_layers: int = 0,
        chat_format: str | None = None,
    ):
        from ltrr.generation.models import DEFAULT_MODEL, resolve_model

        self.model = model
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.n_batch = n_batch
        self.n_gpu_layers = n_gpu_layers
        self.chat_format = chat_format
        _llama_cpp()
        check_int(n_ctx, "llama_cpp n_ctx", low=16)
        check_int(n_batch, "llama_cpp n_batch", low=1)
        if n_threads is not None:
            check_int(n_threads, "llama_cpp n_threads", low=1)
        path = resolve_model(DEFAULT_MODEL if model is None else model)
        if path is None or not path.is_file() or path.suffix.lower() != ".gguf":
            raise ConfigError(f"llama_cpp generator model {str(model)!r} is not a .gguf file or a "
                              "packaged model name")
        self._path = path
        meta = gguf_metadata(path, ["tokenizer.chat_template", "general.file_type"])
        self._template: str | None = meta.get("tokenizer.chat_template")
        if not self._template and chat_format is None:
            raise ConfigError(
                f"llama_cpp model {path.name} has no chat template (tokenizer.chat_template): it "
                "is a base model; give chat_format = NAME (a llama.cpp chat format) or a chat model"
            )
        file_type = meta.get("general.file_type")
        self.quantisation = _FILE_TYPES.get(int(file_type), f"ftype{file_type}") if file_type is not None else "unknown"
        self._identity: str | None = None
        self._eog: frozenset[int] | None = None
        self._formatter: Any = None  # the chat template, compiled once (compiling it cost 0.1 s a prompt)

    def __repr__(self) -> str:
        return f"LlamaCppGenerator(model={str(self._path)!r}, n_ctx={self.n_ctx})"

    @property
    def model_path(self) -> Path:
        """The ``.gguf`` file the model resolved to (a packaged model's assembled file)."""
        return self._path

    @property
    def identity(self) -> str:
        """Runtime version, file name, the file's sha256 (16 hex digits), its quantisation, the
        batch grain, GPU offload when on (a GPU rounds differently from the CPU, so its answers
        are cached apart from the CPU's), and the ``chat_format`` when it is the one that renders
        (a file without a chat template).

        ``n_ctx`` is not part of it: it changes an answer only when a prompt longer than the
        context is cut, and the generation records that cut and the context it was made in
        (``extra["truncated_tokens"]``, ``extra["context_length"]``), which `answer_holds` reads."""
        if self._identity is None:
            version = getattr(_llama_cpp(), "__version__", "unknown")
            gpu = f":gpu{self.n_gpu_layers}" if self.n_gpu_layers else ""
            fmt = f":fmt-{self.chat_format}" if not self._template and self.chat_format else ""
            self._identity = (f"llama_cpp-{version}:{self._path.name}:{file_sha256(self._path)[:16]}:"
                              f"{self.quantisation}:b{self.n_batch}{gpu}{fmt}")
        return self._identity

    @property
    def context_length(self) -> int:
        return self.n_ctx

    def answer_holds(self, generation: Generation, room: int) -> bool:
        """Whether a cached answer is the one this context makes: a prompt that was cut holds
        only in the context it was cut for, and an uncut one only where it still fits beside
        ``room`` (a smaller ``n_ctx`` would cut it now). See `Generator.answer_holds`."""
        if generation.extra.get("truncated_tokens"):
            return generation.extra.get("context_length") == self.n_ctx
        return generation.prompt_tokens + room <= self.n_ctx

    def _threads(self) -> int:
        if self.n_threads:
            return self.n_threads
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # macOS and Windows have no affinity masks
            return os.cpu_count() or 1

    def _load(self, embedding: bool = False) -> Any:
        key = (str(self._path.resolve()), self.n_ctx, self._threads(), self.n_batch, self.n_gpu_layers,
               self.chat_format, embedding)
        with _LOAD_LOCK:
            if key not in _MODELS:
                lc = _llama_cpp()
                # embedding mode with no pooling: one last-layer state (after the final norm, as
                # transformers' hidden_states[-1]) per input token, causal attention kept
                # (the whole text in one batch: the context's length, not the generation batch)
                pooling = lc.LLAMA_POOLING_TYPE_NONE if embedding else lc.LLAMA_POOLING_TYPE_UNSPECIFIED
                n_batch = self.n_ctx if embedding else self.n_batch
                _MODELS[key] = lc.Llama(
                    model_path=str(self._path), n_ctx=self.n_ctx, n_threads=self._threads(),
                    n_threads_batch=self._threads(), n_batch=n_batch, n_ubatch=n_batch,
                    n_gpu_layers=self.n_gpu_layers, chat_format=self.chat_format,
                    embedding=embedding, pooling_type=pooling, verbose=False)
        return _MODELS[key]

    @property
    def llama(self) -> Any:
        """The loaded ``llama_cpp.Llama`` for generation and likelihoods (shared within the process)."""
        return self._load()

    def token_states(self, text: str) -> np.ndarray:
        """The last layer's state of every token of ``text`` alone (no template), (n_tokens, n_embd).

        A third context, in embedding mode, computes them in one batch (the policy's ``lm``
        representation, `ltrr.policy.states`). Text longer than the context is an error, not a
        silent cut.
        """
        llama = self._load(embedding=True)
        n = len(llama.tokenize(text.encode("utf-8")))
        if n == 0:
            raise DataError("token_states: the text has no tokens")
        if n > self.n_ctx:
            raise DataError(f"token_states: the text has {n} tokens, more than the context of {self.n_ctx}")
        return np.asarray(llama.embed(text, normalize=False, truncate=False), dtype=np.float32)

    # ------------------------------------------------------------------ tokens

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` alone: no BOS, special-token text not parsed as special tokens."""
        return list(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the token ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
        return self.llama.detokenize(list(ids)).decode("utf-8", errors="replace")

    def _token_text(self, token: int) -> str:
        return self.llama.detokenize([token], special=True).decode("utf-8", errors="replace")

    def render(self, prompt: str | list[dict[str, str]]) -> str:
        """The prompt in the model's own chat template, ending with the assistant's turn."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if self._formatter is None:
            chat = _llama_cpp().llama_chat_format
            if self._template:
                llama = self.llama
                self._formatter = chat.Jinja2ChatFormatter(
                    template=self._template, eos_token=self._token_text(llama.token_eos()),
                    bos_token=self._token_text(llama.token_bos()), add_generation_prompt=True)
            else:
                formatter = getattr(chat, f"format_{self.chat_format}", None)
                if formatter is None:
                    raise ConfigError(f"llama_cpp chat_format {self.chat_format!r} is not a llama.cpp chat "
                                      "format (llama_cpp.llama_chat_format.format_NAME)")
                self._formatter = formatter
        return self._formatter(messages=messages).prompt

    def prompt_ids(self, prompt: str | list[dict[str, str]]) -> list[int]:
        """Token ids of the rendered prompt (the template writes its special tokens as text)."""
        return list(self.llama.tokenize(self.render(prompt).encode("utf-8"), add_bos=False, special=True))

    def count_prompt_tokens(self, prompt: str | list[dict[str, str]]) -> int:
        """Tokens of ``prompt`` in the chat template (`prompt_ids`), as it is fed to the model."""
        return len(self.prompt_ids(prompt))

    def fit(self, ids: list[int], room: int) -> tuple[list[int], int]:
        """``ids`` cut in the middle to leave ``room`` tokens of context free; (ids, tokens cut)."""
        limit = self.n_ctx - room
        if limit < 2:
            raise ConfigError(f"llama_cpp n_ctx {self.n_ctx} leaves no room for a prompt beside {room} tokens")
        if len(ids) <= limit:
            return ids, 0
        head = limit // 4
        cut = len(ids) - limit
        return ids[:head] + ids[head + cut:], cut

    # ------------------------------------------------------------------ decoding

    def _align(self, llama: Any, ids: Sequence[int], limit: int) -> None:
        """Keep the KV cache of the longest common prefix, cut down to a multiple of n_batch."""
        cached = llama.input_ids[: llama.n_tokens]
        common = 0
        for a, b in zip(cached, ids[:limit], strict=False):
            if a != b:
                break
            common += 1
        llama.n_tokens = (common // self.n_batch) * self.n_batch

    def _answer_logits(self, llama: Any, full: list[int], first: int) -> np.ndarray:
        """Evaluate ``full`` after the cached prefix, in the batches `Llama.eval` would use, and
        return the logits at positions ``first`` to ``len(full) - 2`` (float64, one row each).

        Written against llama.cpp's public C API (``llama_decode`` with a batch that flags its
        output rows), which the binding's ``Llama.eval`` does not expose: it flags every row or
        only the last. The binding's prompt bookkeeping (``input_ids``, ``n_tokens``) is kept, so
        the next call reuses this prefix as after ``eval``.
        """
        lc = _llama_cpp()
        start = llama.n_tokens
        lc.llama_memory_seq_rm(lc.llama_get_memory(llama.ctx), -1, start, -1)  # as Llama.eval
        n_vocab = llama.n_vocab()
        rows: list[np.ndarray] = []
        batch = lc.llama_batch_init(self.n_batch, 0, 1)
        try:
            for i in range(start, len(full), self.n_batch):
                chunk = full[i:i + self.n_batch]
                batch.n_tokens = len(chunk)
                wanted = []
                for j, token in enumerate(chunk):
                    batch.token[j], batch.pos[j], batch.n_seq_id[j] = token, i + j, 1
                    batch.seq_id[j][0] = 0
                    keep = first <= i + j < len(full) - 1
                    batch.logits[j] = keep
                    if keep:
                        wanted.append(j)
                batch.logits[len(chunk) - 1] = True  # as Llama.eval flags it
                status = lc.llama_decode(llama.ctx, batch)
                if status != 0:
                    llama.n_tokens = i  # what was decoded before this batch still stands
                    raise GenerationError(f"llama.cpp could not evaluate a likelihood batch (llama_decode returned {status})")
                llama.input_ids[i:i + len(chunk)] = chunk
                llama.n_tokens = i + len(chunk)
                rows.extend(np.ctypeslib.as_array(lc.llama_get_logits_ith(llama.ctx, j), shape=(n_vocab,))
                            .astype(np.float64) for j in wanted)
        finally:
            lc.llama_batch_free(batch)
        return np.stack(rows)

    def continue_ids(self, ids: list[int], params: DecodingParams, *,
                     keep_stop: bool = False) -> tuple[list[int], str, str]:
        """Decode after the token ids ``ids``: (new ids, their text, finish reason).

        Greedy when ``params.temperature`` is 0; otherwise top-p sampling seeded with
        ``params.seed``. Stops at the end-of-generation token, ``max_new_tokens`` or a stop
        string (the text is cut before it, or ends with it when ``keep_stop``: the router
        loop's closing tags). The finish reason is ``eos``, ``stop``, ``length``, or ``cancelled``
        when this thread's `ltrr.generation.base.cancel_scope` was set; an end-of-turn
        token ends the ids (a policy in training learns to stop) but not the text.
        """
        llama = self.llama
        eog = self._end_tokens(llama)
        if params.temperature > 0:
            kwargs: dict[str, Any] = {"temp": params.temperature, "top_p": params.top_p, "top_k": 0, "min_p": 0.0}
        else:
            kwargs = {"temp": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0}
        new: list[int] = []
        text, finish = "", "length"
        with _CALL_LOCK:
            self._align(llama, ids, len(ids) - 1)
            llama.set_seed(params.seed)
            stream = llama.generate(list(ids), reset=True, repeat_penalty=1.0, **kwargs)
            try:
                for token in stream:
                    if cancel_requested():  # its request was abandoned (`cancel_scope`)
                        finish = "cancelled"
                        break
                    if token in eog:
                        new.append(int(token))
                        finish = "eos"
                        break
                    new.append(int(token))
                    text = self.decode(new)
                    cut = min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=-1)
                    if cut >= 0:
                        finish = "stop"
                        if not keep_stop:
                            text = text[:cut]
                        break
                    if len(new) >= params.max_new_tokens:
                        break
            finally:
                stream.close()
        return new, text, finish

    def _end_tokens(self, llama: Any) -> frozenset[int]:
        # Chat models end a turn with a template token (Qwen's <|im_end|>) that need not be the
        # file's eos id: any of these that is one special token of the vocabulary ends the answer.
        if self._eog is None:
            ends = {int(llama.token_eos())}
            for text in _TURN_ENDS:
                ids = llama.tokenize(text.encode(), add_bos=False, special=True)
                if len(ids) == 1:
                    ends.add(int(ids[0]))
            self._eog = frozenset(ends)
        return self._eog

    def generate(
        self, prompts: Sequence[str | list[dict[str, str]]], params: DecodingParams | None = None
    ) -> list[Generation]:
        params = params or DecodingParams()
        out = []
        for prompt in prompts:
            start = time.perf_counter()
            ids, cut = self.fit(self.prompt_ids(prompt), params.max_new_tokens)
            try:
                new, text, finish = self.continue_ids(ids, params)
            except (RuntimeError, ValueError) as exc:
                out.append(Generation(text="", prompt_tokens=len(ids), latency_s=time.perf_counter() - start,
                                      error=f"{type(exc).__name__}: {exc}"))
                continue
            if finish == "cancelled":
                out.append(Generation(text="", prompt_tokens=len(ids), latency_s=time.perf_counter() - start,
                                      error=CANCELLED))
                continue
            extra: dict[str, Any] = {"finish_reason": "length" if finish == "length" else "stop"}
            if cut:
                extra.update(truncated_tokens=cut, context_length=self.n_ctx)
            if params.json_mode:
                extra["json_mode"] = "not enforced by the llama_cpp backend"
            out.append(Generation(text=text, prompt_tokens=len(ids), completion_tokens=len(new),
                                  latency_s=time.perf_counter() - start, extra=extra))
        return out

    def score(
        self, prompts: Sequence[str | list[dict[str, str]]], continuations: Sequence[str]
    ) -> list[Generation]:
        """Teacher-forced log-probabilities of each continuation after its rendered prompt.

        They run on the generation context and ask llama.cpp for the logits of the answer's
        positions only. ``llama_cpp.Llama(logits_all=True)``, the binding's way to get them,
        computes the vocabulary projection for every prompt token and copies it out (a
        ``n_ctx`` x vocabulary buffer; measured in ``benchmarks/generation.py``); the values of
        the positions kept are the same to the last bit, because the batches are the same
        (module docstring). A prompt too long for the context is cut in its middle, as for
        `generate`, and the cut recorded.
        """
        prompts, continuations = list(prompts), list(continuations)
        if len(prompts) != len(continuations):
            raise DataError(f"score: {len(prompts)} prompts but {len(continuations)} continuations")
        llama = self.llama
        out = []
        for prompt, continuation in zip(prompts, continuations, strict=True):
            start = time.perf_counter()
            cont = self.encode(continuation) if isinstance(continuation, str) else []
            if not cont:
                raise DataError(
                    f"the gold answer {continuation!r} tokenises to nothing under {self._path.name}; "
                    "its likelihood is undefined: remove or fix that alias")
            if len(cont) > self.n_ctx // 2:
                out.append(Generation(text="", latency_s=time.perf_counter() - start,
                                      error=f"answer of {len(cont)} tokens exceeds half the context {self.n_ctx}"))
                continue
            ids, cut = self.fit(self.prompt_ids(prompt), len(cont))
            full = ids + cont
            with _CALL_LOCK:
                self._align(llama, full, len(ids) - 1)
                logits = self._answer_logits(llama, full, len(ids) - 1)
            extra: dict[str, Any] = {"token_logprobs": token_logprobs(logits, cont)}
            if cut:
                extra.update(truncated_tokens=cut, context_length=self.n_ctx)
            out.append(Generation(text="", prompt_tokens=len(ids), completion_tokens=len(cont),
                                  latency_s=time.perf_counter() - start, extra=extra))
        return out
