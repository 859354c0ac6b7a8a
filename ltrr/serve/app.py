"""The OpenAI-compatible HTTP API over a `RoutedRAG` (FastAPI; served by uvicorn).

Endpoints: ``POST /v1/chat/completions`` (``stream`` as server-sent events ending in ``[DONE]``),
``POST /v1/completions`` (the legacy text completions: its ``prompt`` is the question; the same
routing, decoding and streaming), ``GET /v1/models``, ``POST /v1/route`` (ranked arms and
passages, no generation), ``GET /health``.

Concurrency: routing and retrieval run in the thread pool, so requests overlap there. Generation
is serial (one CPU-bound model): requests queue for a single generation worker; the queue is
bounded (a full queue answers 429) and a request waits at most ``timeout_s`` (then 503).

Decoding: a request's ``max_tokens`` (or ``max_completion_tokens``), ``temperature``,
``top_p``, ``stop`` and ``seed`` are honoured, each checked as OpenAI checks it (a bad value is a
400 naming it); ``n`` other than 1, ``logprobs``, ``tools`` and a ``response_format`` other than
text are refused with a 400 rather than silently ignored. Without them the answer decodes as the
template recommends (greedy, its ``max_new_tokens``). ``finish_reason`` is ``length`` when the
answer hit its token budget.

Safety: ``LTRR_API_KEY`` set means every ``/v1`` request needs ``Authorization: Bearer <key>``,
compared in constant time; the body size and each message's length are limited; every error is
OpenAI's shape ``{"error": {"message", "type", "param", "code"}}`` and never carries a traceback.
"""


import asyncio
import hmac
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("ltrr.serve")

__all__ = ["ServeSettings", "create_app"]


@dataclass
class ServeSettings:
    """Limits of the server."""

    max_queue: int = 16  # requests waiting for the generation worker
    timeout_s: float = 120.0  # longest wait of a request for its answer
    max_body_bytes: int = 64_000
    max_message_chars: int = 8_000
    max_tokens: int = 1_024  # the largest max_tokens a request may ask for
    api_key: str | None = None  # default: the LTRR_API_KEY environment variable; "" for none

    def __post_init__(self) -> None:
        from ltrr._errors import ConfigError

        for name in ("max_queue", "max_body_bytes", "max_message_chars", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # asyncio.Queue(0) has no bound
                raise ConfigError(f"serve {name.replace('_', '-')} must be a positive integer, got {value!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise ConfigError(f"serve timeout must be a positive number of seconds, got {self.timeout_s!r}")


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
           param: str | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind,
                                                               "param": param, "code": code}})


class _Reject(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param


def _question(body: Any, settings: "ServeSettings") -> str:
    """The last user message of a chat request (validated)."""
    if not isinstance(body, dict):
        raise _Reject(400, "the request body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _Reject(400, "messages must be a non-empty list of {role, content}", param="messages")
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("content", ""), str) or "role" not in m:
            raise _Reject(400, "each message must be an object with a role and a string content", param="messages")
        if len(m.get("content") or "") > settings.max_message_chars:
            raise _Reject(400, f"a message is longer than {settings.max_message_chars} characters", param="messages")
    users = [m["content"] for m in msgs if m.get("role") == "user" and (m.get("content") or "").strip()]
    if not users:
        raise _Reject(400, "messages has no non-empty user message", param="messages")
    return users[-1]


def _prompt(body: Any, settings: "ServeSettings") -> str:
    """The question of a (legacy) text completion request: its ``prompt``, one string (validated).

    Token-id prompts, several prompts, ``echo``, ``suffix`` and ``best_of`` other than 1 are
    refused: ltrr answers one question per request, in words."""
    if not isinstance(body, dict):
        raise _Reject(400, "the request body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list):
        raise _Reject(400, "prompt must be one string (a question): ltrr answers one question per request, "
                           "and token ids are not read", param="prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise _Reject(400, "prompt must be a non-empty string: the question", param="prompt")
    if len(prompt) > settings.max_message_chars:
        raise _Reject(400, f"prompt is longer than {settings.max_message_chars} characters", param="prompt")
    for key in ("echo", "suffix"):
        if body.get(key):
            raise _Reject(400, f"{key} is not supported by ltrr's server", param=key)
    best_of = body.get("best_of")
    if best_of is not None and (isinstance(best_of, bool) or best_of != 1):
        raise _Reject(400, f"best_of must be 1: ltrr answers each request once (got {best_of!r})", param="best_of")
    return prompt


def _number(body: dict, key: str, low: float, high: float, *, low_open: bool = False) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    lo = "(" if low_open else "["
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (low < v if low_open else low <= v) or v > high:
        raise _Reject(400, f"{key} must be a number in {lo}{low:g}, {high:g}], got {v!r}", param=key)
    return float(v)


def _decoding(body: dict, settings: "ServeSettings") -> dict[str, Any]:
    """The decoding a chat request asks for, as `ltrr.generation.DecodingParams` fields (validated).

    Only the fields the request gives: the rest stay as the template recommends."""
    out: dict[str, Any] = {}
    given = {k: body[k] for k in ("max_tokens", "max_completion_tokens") if body.get(k) is not None}
    if len(set(map(repr, given.values()))) > 1:
        raise _Reject(400, "max_tokens and max_completion_tokens differ; give one", param="max_tokens")
    for key, v in given.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= settings.max_tokens:
            raise _Reject(400, f"{key} must be an integer in [1, {settings.max_tokens}], got {v!r}", param=key)
        out["max_new_tokens"] = v
    if (t := _number(body, "temperature", 0, 2)) is not None:
        out["temperature"] = t
    if (t := _number(body, "top_p", 0, 1, low_open=True)) is not None:
        out["top_p"] = t
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not 1 <= len(stop) <= 4 or not all(isinstance(x, str) and x for x in stop):
            raise _Reject(400, "stop must be a non-empty string or a list of 1 to 4 of them", param="stop")
        out["stop"] = tuple(stop)
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise _Reject(400, f"seed must be an integer, got {seed!r}", param="seed")
        out["seed"] = seed
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise _Reject(400, f"n must be 1: ltrr answers each request once (got {n!r})", param="n")
    for key in ("logprobs", "tools"):
        if body.get(key):
            raise _Reject(400, f"{key} is not supported by ltrr's server", param=key)
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise _Reject(400, "response_format: only {\"type\": \"text\"} is supported", param="response_format")
    return out


def create_app(service, settings: "ServeSettings | None" = None):
    """The FastAPI app over ``service`` (a `ltrr.serve.RoutedRAG` or anything with its methods)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.concurrency import run_in_threadpool

    settings = settings or ServeSettings()
    # "" (or unset LTRR_API_KEY) means no authentication
    api_key = (settings.api_key if settings.api_key is not None else os.environ.get("LTRR_API_KEY")) or None
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app):
        state["queue"] = asyncio.Queue(maxsize=settings.max_queue)
        state["worker"] = asyncio.create_task(worker())
        yield
        state["worker"].cancel()

    app = FastAPI(title="ltrr", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    async def worker():
        while True:
            job, fut = await state["queue"].get()
            try:
                if not fut.cancelled():
                    fut.set_result(await run_in_threadpool(job))
            except Exception as exc:  # handed to the waiting request, which answers 500 without a traceback
                if not fut.cancelled():
                    fut.set_exception(exc)
            finally:
                state["queue"].task_done()

    @app.middleware("http")
    async def guard(request: Request, call_next):
        try:
            if request.url.path.startswith("/v1"):
                if api_key is not None:
                    got = request.headers.get("authorization", "")
                    token = got[7:] if got.lower().startswith("bearer ") else ""
                    if not hmac.compare_digest(token.encode(), api_key.encode()):
                        return _error(401, "invalid API key", "authentication_error", "invalid_api_key")
                size = request.headers.get("content-length")
                if size is not None and (not size.isdigit() or int(size) > settings.max_body_bytes):
                    return _error(413, f"the request body is over {settings.max_body_bytes} bytes")
            return await call_next(request)
        except Exception:  # never a traceback in a response
            logger.exception("request failed")
            return _error(500, "internal error", "server_error")

    async def _body(request: Request) -> Any:
        # read in chunks and stop at the limit: a chunked body (no Content-Length, which the
        # guard checks) is never held whole in memory
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > settings.max_body_bytes:
                raise _Reject(413, f"the request body is over {settings.max_body_bytes} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _Reject(400, f"the request body is not valid JSON ({exc.__class__.__name__})") from None

    async def _route(body: Any, question: str) -> dict:
        from ltrr._errors import LtrrError

        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str):
            raise _Reject(400, "model must be a string: a router (see GET /v1/models)", param="model")
        try:
            service.check_model(model)
        except LtrrError as exc:
            raise _Reject(400, str(exc), code="model_not_found", param="model") from None
        return await run_in_threadpool(service.route, model, question)

    async def _generate(routed: dict, question: str, decoding: dict) -> tuple[dict, float]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        t0 = time.perf_counter()
        started: dict[str, float] = {}

        def job():
            started["t"] = time.perf_counter()
            return service.answer(routed, question, decoding)

        try:
            state["queue"].put_nowait((job, fut))
        except asyncio.QueueFull:
            raise _Reject(429, "the generation queue is full; retry later", "rate_limit_error") from None
        try:
            out = await asyncio.wait_for(asyncio.shield(fut), timeout=settings.timeout_s)
        except asyncio.TimeoutError:
            fut.cancel()
            raise _Reject(503, f"no answer within {settings.timeout_s:g}s; the server is busy", "server_error") from None
        return out, started.get("t", t0) - t0

    @app.exception_handler(_Reject)
    async def _rejected(request, exc: _Reject):
        return _error(exc.status, exc.message, exc.kind, exc.code, exc.param)

    @app.get("/health")
    async def health():
        return {"status": "ok", "queue": state["queue"].qsize() if "queue" in state else 0}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": m["id"], "object": "model", "owned_by": "ltrr",
                                            "created": 0, "ltrr": m} for m in service.models()]}

    @app.post("/v1/route")
    async def route(request: Request):
        body = await _body(request)
        if isinstance(body, dict) and isinstance(body.get("question"), str) and "messages" not in body:
            if not body["question"].strip():
                raise _Reject(400, "question is empty", param="question")
            if len(body["question"]) > settings.max_message_chars:
                raise _Reject(400, f"question is longer than {settings.max_message_chars} characters", param="question")
            question = body["question"]
        else:
            question = _question(body, settings)
        return await _route(body, question)

    async def _complete(body: dict, question: str, chat: bool):
        """Route, answer and reply as a chat completion (``chat``) or a text completion, whole or
        as server-sent events."""
        decoding = _decoding(body, settings)
        t0 = time.perf_counter()
        routed = await _route(body, question)
        try:
            out, waited = await _generate(routed, question, decoding)
        except _Reject:
            raise
        except Exception:
            logger.exception("generation failed")
            raise _Reject(500, "generation failed", "server_error") from None
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created, finish = int(time.time()), out.get("finish_reason", "stop")
        extra = {**routed, "queue_wait_s": round(waited, 4), "seconds": round(time.perf_counter() - t0, 4)}
        head = {"id": cid, "created": created, "model": routed["model"]}
        if not body.get("stream"):
            choice = ({"index": 0, "message": {"role": "assistant", "content": out["text"]}, "finish_reason": finish}
                      if chat else {"index": 0, "text": out["text"], "logprobs": None, "finish_reason": finish})
            return JSONResponse({**head, "object": "chat.completion" if chat else "text_completion",
                                 "choices": [choice], "usage": out["usage"], "ltrr": extra})

        def chunk(piece: str | None, finish: str | None = None, *, opening: bool = False, **more) -> str:
            if chat:
                delta = {"role": "assistant", "content": ""} if opening else {} if piece is None else {"content": piece}
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}
            doc = {**head, "object": "chat.completion.chunk" if chat else "text_completion",
                   "choices": [choice], **more}
            return f"data: {json.dumps(doc)}\n\n"

        async def events():
            # The answer exists whole before the first event: it comes from the generation cache
            # or is generated, then passes the template's answer parser (and its fallback prompt
            # when the first reply holds no answer), which need the finished text. So the stream
            # carries that parsed answer in word pieces, not the model's raw tokens.
            if chat:
                yield chunk(None, opening=True)
            words = out["text"].split(" ")
            for i, w in enumerate(words):
                yield chunk(w if i == 0 else " " + w)
            yield chunk(None, finish, usage=out["usage"], ltrr=extra)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await _body(request)
        return await _complete(body, _question(body, settings), chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await _body(request)
        return await _complete(body, _prompt(body, settings), chat=False)

    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc):
        return _error(exc.status_code, str(exc.detail), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc):
        return _error(400, "invalid request", "invalid_request_error")

    @app.exception_handler(Exception)
    async def _any(request, exc):
        logger.exception("request failed")
        return _error(500, "internal error", "server_error")

    return app
