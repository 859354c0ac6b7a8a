"""The ``openai`` generator backend: any OpenAI-compatible chat-completions server.

Works with vLLM, Ollama, the llama.cpp server and OpenAI itself, over ``httpx``. The API key is
read from the environment variable named by ``api_key_env``; it never comes from a config file.

Each prompt is sent with bounded retries: exponential backoff with seeded jitter, honouring
``Retry-After`` on HTTP 429, retrying server errors (5xx), timeouts, connection errors and
malformed bodies, but not other 4xx errors (a bad request stays bad). A prompt that still fails
comes back as ``Generation(text="", error=...)``; one failed item never raises.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ltrr._checks import check_int, check_number, is_int
from ltrr._errors import ConfigError
from ltrr.generation.base import DecodingParams, Generation, Generator

__all__ = ["OpenAIGenerator"]

# Transient 4xx: request timeout, conflict, too early, rate limited (the set the OpenAI SDK retries).
_RETRY_STATUS = {408, 409, 425, 429}
#: The request fields ltrr sends from the prompt and the decoding parameters: not for extra_body.
_OWN_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop",
               "response_format", "n", "stream"}


class MalformedResponse(Exception):
    """The server answered 200 with a body that is not a chat completion."""


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class OpenAIGenerator(Generator):
    """Chat completions from an OpenAI-compatible HTTP server.

    Parameters
    ----------
    model : str
        Model name as the server knows it.
    base_url : str
        Server root including the API version, e.g. ``http://localhost:8000/v1`` (vLLM),
        ``http://localhost:11434/v1`` (Ollama), ``https://api.openai.com/v1``.
    api_key_env : str or None
        Name of the environment variable holding the API key, sent as ``Authorization: Bearer``.
        When the variable is unset no key is sent (local servers need none).
    max_concurrency : int
        Requests in flight at once.
    timeout : float
        Seconds per request (connect, read and write each).
    max_retries : int
        Retries after the first attempt; a prompt is sent at most ``max_retries + 1`` times.
    backoff_base, backoff_max : float
        Backoff before retry ``k`` (1-based) is ``min(backoff_max, backoff_base * 2**(k-1))``
        scaled by a jitter in [0.5, 1]; a 429's ``Retry-After`` is waited when longer
        (at most ``max_wait``).
    max_wait : float
        Upper bound of any single wait, ``Retry-After`` included.
    random_state : int
        Seeds the jitter (per prompt), so retry timing is reproducible.
    context_length : int
        The served model's context, used to budget prompts.
    max_tokens_field : str
        Request field for the completion budget: ``max_tokens`` (vLLM, Ollama, llama.cpp) or
        ``max_completion_tokens`` (newer OpenAI models).
    extra_body : dict, optional
        Extra request fields sent as is (e.g. ``{"top_k": 1}`` for vLLM).
        Not the fields ltrr sends itself (model, messages, the token budget, temperature, top_p,
        seed, stop, response_format); part of the identity (the cache key).

    Examples
    --------
    >>> gen = OpenAIGenerator("qwen2.5-7b-instruct", base_url="http://localhost:8000/v1")
    >>> gen.identity
    'openai:http://localhost:8000/v1:qwen2.5-7b-instruct'
    >>> out = gen.generate(["What is the capital of Australia?"])  # doctest: +SKIP
    """

    backend = "openai"
    remote = True  # prompts go to base_url, with the key of api_key_env

    # Validation at construction is a deliberate departure from the estimator contract: a
    # generator is a handle on a resource, and bad settings must fail before a long run starts.
    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key_env: str | None = "OPENAI_API_KEY",
        max_concurrency: int = 4,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        max_wait: float = 120.0,
        random_state: int = 0,
        context_length: int = 8192,
        max_tokens_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
    ):
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_wait = max_wait
        self.random_state = random_state
        self._context_length = context_length
        self.max_tokens_field = max_tokens_field
        self.extra_body = extra_body
        self._validate()
        self._client: Any = None
        self._client_lock = threading.Lock()

    def _validate(self) -> None:
        def bad(name: str, what: str) -> ConfigError:
            return ConfigError(
                f"openai generator: {name} must be {what}, got {getattr(self, name, None)!r}"
            )

        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(
                "openai generator: set 'model' to the model name the server serves "
                '(e.g. model = "Qwen/Qwen2.5-7B-Instruct")'
            )
        if not isinstance(self.base_url, str) or not self.base_url.startswith(
            ("http://", "https://")
        ):
            raise bad("base_url", "an http:// or https:// URL")
        if self.api_key_env is not None and (
            not isinstance(self.api_key_env, str) or not self.api_key_env
        ):
            raise bad("api_key_env", "the name of an environment variable or null")
        check_int(self.max_concurrency, "openai generator: max_concurrency", low=1)
        check_int(self.max_retries, "openai generator: max_retries", low=0)
        for name in ("timeout", "backoff_max", "max_wait"):
            check_number(getattr(self, name), f"openai generator: {name}", low=0, low_open=True)
        check_number(self.backoff_base, "openai generator: backoff_base", low=0)
        check_int(self._context_length, "openai generator: context_length", low=1)
        if self.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise bad("max_tokens_field", "'max_tokens' or 'max_completion_tokens'")
        if self.extra_body is not None and not isinstance(self.extra_body, dict):
            raise bad("extra_body", "a table of request fields")
        owned = sorted(set(self.extra_body or {}) & _OWN_FIELDS)
        if owned:  # they would overwrite what the decoding parameters (and the cache key) say
            raise ConfigError(f"OpenAIGenerator extra_body must not set {', '.join(owned)}: ltrr sends them "
                              "from the decoding parameters (set them there, e.g. [generation] temperature)")

    def __repr__(self) -> str:
        return f"OpenAIGenerator(model={self.model!r}, base_url={self.base_url!r})"

    # The client (sockets, a lock) must not cross a fork or be pickled to a worker.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_client=None, _client_lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client_lock = threading.Lock()

    @property
    def identity(self) -> str:
        """``openai:<base url>:<model>``, and a digest of ``extra_body`` when it is given: its
        fields (``top_k``, a repetition penalty) change the answers, so they are cached apart."""
        extra = ""
        if self.extra_body:
            canon = json.dumps(self.extra_body, sort_keys=True, separators=(",", ":"), default=str)
            extra = f":extra-{hashlib.sha256(canon.encode()).hexdigest()[:12]}"
        return f"openai:{self.base_url.rstrip('/')}:{self.model}{extra}"

    @property
    def context_length(self) -> int:
        return self._context_length

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _http(self) -> Any:
        with self._client_lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(
                    base_url=self.base_url.rstrip("/") + "/",
                    timeout=httpx.Timeout(self.timeout),
                    limits=httpx.Limits(
                        max_connections=self.max_concurrency,
                        max_keepalive_connections=self.max_concurrency,
                    ),
                )
            return self._client

    def close(self) -> None:
        """Close the HTTP connections (they are reopened on the next call)."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> OpenAIGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_body(
        self, prompt: str | list[dict[str, str]], params: DecodingParams
    ) -> dict[str, Any]:
        """The JSON body sent for ``prompt``."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            self.max_tokens_field: params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": params.seed,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.json_mode:
            body["response_format"] = {"type": "json_object"}
        if self.extra_body:
            body.update(self.extra_body)
        return body

    def generate(
        self, prompts: Sequence[str | list[dict[str, str]]], params: DecodingParams | None = None
    ) -> list[Generation]:
        params = params or DecodingParams()
        prompts = list(prompts)
        if not prompts:
            return []
        client, headers = self._http(), self._headers()
        workers = min(self.max_concurrency, len(prompts))
        if workers == 1:
            return [self._one(client, headers, i, p, params) for i, p in enumerate(prompts)]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ltrr-openai") as pool:
            return list(
                pool.map(
                    lambda ip: self._one(client, headers, ip[0], ip[1], params), enumerate(prompts)
                )
            )

    def _parse(self, response: Any, params: DecodingParams) -> tuple[str, dict[str, Any]]:
        try:
            data = response.json()
        except ValueError as exc:
            raise MalformedResponse(
                f"response body is not JSON ({exc}): {response.text[:200]!r}"
            ) from None
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise MalformedResponse(
                f"response has no choices[0].message.content: {str(data)[:200]!r}"
            ) from None
        if not isinstance(text, str):
            raise MalformedResponse(f"choices[0].message.content is not a string: {text!r}")
        if params.json_mode:
            try:
                json.loads(text)
            except ValueError:
                raise MalformedResponse(
                    f"JSON mode was asked but the content is not JSON: {text[:200]!r}"
                ) from None
        return text, {"data": data, "finish_reason": choice.get("finish_reason")}

    def _one(
        self, client: Any, headers: dict[str, str], index: int, prompt: Any, params: DecodingParams
    ) -> Generation:
        body = self.request_body(prompt, params)

        def parse(response: Any, attempts: int, started: float, t0: float) -> Generation:
            text, info = self._parse(response, params)
            usage = info["data"].get("usage") or {}
            extra: dict[str, Any] = {
                "finish_reason": info["finish_reason"],
                "attempts": attempts,
                "total_s": time.perf_counter() - started,
            }
            reported = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if all(is_int(n) for n in reported):
                prompt_tokens, completion_tokens = (int(n) for n in reported)  # type: ignore[arg-type]  # is_int checked
            else:  # servers without usage reporting (or with counts that are no integers): an estimate, flagged
                extra["usage_estimated"] = True
                prompt_tokens = sum(self.count_tokens(m["content"]) for m in body["messages"])
                completion_tokens = self.count_tokens(text) if text else 0
            return Generation(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                              latency_s=time.perf_counter() - t0, extra=extra)

        return self._post(client, headers, index, "chat/completions", body, parse)

    def _post(self, client: Any, headers: dict[str, str], index: int, endpoint: str, body: dict, parse) -> Generation:
        """POST ``body`` with bounded retries; ``parse`` turns a 200 response into a Generation
        (raising `MalformedResponse` for a response it cannot read, which is retried)."""
        import httpx

        # Jitter seeded per prompt position, so retry timing does not depend on thread order.
        rng = random.Random(f"{self.random_state}:{index}")
        started = time.perf_counter()
        error = "not sent"
        attempts = 0
        for attempt in range(self.max_retries + 1):
            attempts = attempt + 1
            wait_hint: float | None = None
            t0 = time.perf_counter()
            try:
                response = client.post(endpoint, json=body, headers=headers)
            except httpx.TimeoutException as exc:
                error = f"timed out after {self.timeout} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                error = f"connection error: {type(exc).__name__}: {exc}"
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return parse(response, attempts, started, t0)
                    except MalformedResponse as exc:
                        error = f"malformed response: {exc}"
                else:
                    detail = response.text[:300]
                    error = f"HTTP {status}: {detail}"
                    if status == 429:
                        wait_hint = _retry_after(response.headers.get("Retry-After"))
                    elif status < 500 and status not in _RETRY_STATUS:
                        if status in (401, 403):
                            error += (
                                f" (check the API key in the environment variable {self.api_key_env!r})"
                                if self.api_key_env
                                else " (set api_key_env to the variable holding the API key)"
                            )
                        return self._failed(error + " (not retried)", attempts, started)
            if attempt == self.max_retries:
                break
            delay = min(self.backoff_max, self.backoff_base * 2**attempt) * rng.uniform(0.5, 1.0)
            if wait_hint is not None:
                delay = max(delay, wait_hint)
            time.sleep(min(delay, self.max_wait))
        return self._failed(f"failed after {attempts} attempts: {error}", attempts, started)

    # ------------------------------------------------------------------ likelihood

    @staticmethod
    def score_text(prompt: str | list[dict[str, str]]) -> str:
        """The plain text scored for ``prompt``: the messages' contents joined by blank lines.

        The ``/v1/completions`` endpoint takes raw text, so the server's chat template is not
        applied; scores are comparable among themselves, not with chat generations.
        """
        if isinstance(prompt, str):
            return prompt
        return "\n\n".join(m["content"] for m in prompt) + "\n\n"

    def score(
        self, prompts: Sequence[str | list[dict[str, str]]], continuations: Sequence[str]
    ) -> list[Generation]:
        """Log-probabilities of each continuation from the server's prompt log-probabilities.

        Sends ``/v1/completions`` with ``echo: true`` and ``logprobs: 0`` over prompt text +
        continuation (vLLM and the original OpenAI completions API return the prompt tokens'
        log-probabilities this way) and keeps the tokens that start inside the continuation. A
        server that returns none gives `GenerationError`: the likelihood utility cannot be had
        from it.
        """
        from ltrr._errors import DataError, GenerationError

        prompts, continuations = list(prompts), list(continuations)
        if len(prompts) != len(continuations):
            raise DataError(f"score: {len(prompts)} prompts but {len(continuations)} continuations")
        client, headers = self._http(), self._headers()
        out = []
        for i, (p, c) in enumerate(zip(prompts, continuations, strict=True)):
            if not isinstance(c, str) or not c.strip():
                raise DataError(f"the gold answer {c!r} tokenises to nothing; its likelihood is undefined: "
                                "remove or fix that alias")
            text = self.score_text(p)
            body = {"model": self.model, "prompt": text + c, "max_tokens": 1, "echo": True, "logprobs": 0,
                    "temperature": 0.0}
            span = (len(text), len(text) + len(c))
            gen = self._post(client, headers, i, "completions", body,
                             functools.partial(_prompt_logprobs_of, span=span))
            if gen.error and "no prompt log-probabilities" in gen.error:
                raise GenerationError(f"{self.base_url}: {gen.error}")
            out.append(gen)
        return out

    @staticmethod
    def _failed(error: str, attempts: int, started: float) -> Generation:
        return Generation(
            text="",
            latency_s=time.perf_counter() - started,
            error=error,
            extra={"attempts": attempts},
        )


def _prompt_logprobs_of(response: Any, attempts: int, started: float, t0: float, *, span: tuple[int, int]) -> Generation:
    return _prompt_logprobs(response, span[0], span[1], t0)


def _prompt_logprobs(response: Any, start: int, end: int, t0: float) -> Generation:
    """The log-probabilities of the echoed tokens that overlap the continuation ``[start, end)``.

    A token that straddles the boundary (the prompt's last blank line glued to the answer's
    first word) belongs to the answer: it cannot be predicted without it.
    """
    try:
        data = response.json()
        lp = data["choices"][0].get("logprobs")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise MalformedResponse(f"response has no choices[0]: {response.text[:200]!r}") from None
    if not lp or not lp.get("token_logprobs") or not lp.get("text_offset"):
        return Generation(text="", latency_s=time.perf_counter() - t0,
                          error="the server returned no prompt log-probabilities (echo with logprobs); "
                                "the likelihood utility needs a server that does, such as vLLM")
    offs = list(lp["text_offset"])
    ends = offs[1:] + [end + 1]
    vals = [v for v, off, stop in zip(lp["token_logprobs"], offs, ends, strict=False)
            if stop > start and off < end and v is not None]
    if not vals:
        raise MalformedResponse("no echoed token falls inside the answer")
    return Generation(text="", prompt_tokens=sum(1 for off in lp["text_offset"] if off < start),
                      completion_tokens=len(vals), latency_s=time.perf_counter() - t0,
                      extra={"token_logprobs": [float(v) for v in vals]})
