"""The OpenAI-compatible HTTP API over a `RoutedRAG` (FastAPI; served by uvicorn).

Endpoints: ``POST /v1/chat/completions`` (``stream`` as server-sent events ending in ``[DONE]``),
``POST /v1/completions`` (the legacy text completions: its ``prompt`` is the question; the same
routing, decoding and streaming), ``GET /v1/models`` and ``GET /v1/models/{id}``,
``POST /v1/route`` (ranked arms and passages, no generation), ``GET /health``.

The question: a chat request is answered from its last non-empty user message alone (a string
or its text parts joined by newlines). System messages and the earlier turns of the
conversation are checked for their shape but neither routed nor shown to the generator: ltrr
routes and answers one question, as the router was trained to.

Concurrency: routing and retrieval run in the thread pool, so requests overlap there. Generation
is serial (one CPU-bound model): requests queue for a single generation worker. At most
``max_queue`` requests may be routing or waiting for the worker (a request past that answers 429
before any retrieval), and a request waits at most ``timeout_s`` for its answer, routing
included (then 503); both carry ``Retry-After`` (about one generation's seconds). A request whose
client disconnects is dropped: its routing is not waited for, its generation never starts, and
one under way stops at its next token (`ltrr.generation.base.cancel_scope`; nothing is cached).

Decoding: a request's ``max_tokens`` (or ``max_completion_tokens``), ``temperature``,
``top_p``, ``stop`` and ``seed`` are honoured, each checked as OpenAI checks it (a bad value is a
400 naming it); ``n`` other than 1, ``logprobs``, ``tools``, ``functions``, a ``tool_choice`` or
``function_call`` other than ``"none"``, ``logit_bias``, non-zero ``presence_penalty`` or
``frequency_penalty`` and a ``response_format`` other than text are refused with a 400 rather
than silently ignored. Without them the answer decodes as the template recommends (greedy, its
``max_new_tokens``). ``finish_reason`` is ``length`` when the answer hit its token budget. A
stream carries ``usage`` only when ``stream_options`` asks for it (``include_usage``), in a last
chunk with no choices, as OpenAI does.

Safety: ``LTRR_API_KEY`` set means every ``/v1`` request needs ``Authorization: Bearer <key>``,
compared in constant time; the body size and the question's length are limited; every error is
OpenAI's shape ``{"error": {"message", "type", "param", "code"}}`` and never carries a traceback.
"""


import asyncio
import hmac
import json
import logging
import math
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ltrr.generation.base import cancel_scope
from ltrr.serve import _requests as req
from ltrr.serve._requests import Reject as _Reject

logger = logging.getLogger("ltrr.serve")

__all__ = ["ServeSettings", "create_app"]

_DISCONNECT_POLL_S = 0.1  # a pause between two receive() messages that are not a disconnect


@dataclass
class ServeSettings:
    """Limits of the server (``ltrr serve`` flags of the same names).

    Parameters
    ----------
    max_queue : int
        Requests routing or waiting for the generation worker; one more is a 429.
    timeout_s : float
        Longest wait of a request for its answer, routing included; past it, a 503.
    max_body_bytes : int
        Largest request body; a larger one is a 413.
    max_message_chars : int
        Longest question: a chat request's last user message (the only one read) or a
        completion's prompt.
    max_tokens : int
        The largest ``max_tokens`` (or ``max_completion_tokens``) a request may ask for.
    api_key : str, optional
        The key every ``/v1`` request must bear; default the ``LTRR_API_KEY`` environment
        variable; ``""`` for none.

    Examples
    --------
    >>> ServeSettings(max_queue=4, timeout_s=30).max_tokens
    1024
    """

    max_queue: int = 16
    timeout_s: float = 120.0
    max_body_bytes: int = 64_000
    max_message_chars: int = 8_000
    max_tokens: int = 1_024
    api_key: str | None = None

    def __post_init__(self) -> None:
        from ltrr._checks import check_int, check_number

        for name in ("max_queue", "max_body_bytes", "max_message_chars", "max_tokens"):
            check_int(getattr(self, name), f"serve {name.replace('_', '-')}", low=1)  # asyncio.Queue(0) has no bound
        check_number(self.timeout_s, "serve timeout (seconds)", low=0, low_open=True)


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
           param: str | None = None, headers: dict[str, str] | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, headers=headers,
                        content={"error": {"message": message, "type": kind, "param": param, "code": code}})


def _model_object(m: dict) -> dict:
    return {"id": m["id"], "object": "model", "owned_by": "ltrr", "created": 0, "ltrr": m}


def create_app(service, settings: "ServeSettings | None" = None):
    """The FastAPI app over ``service`` (a `ltrr.serve.RoutedRAG` or anything with its methods)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.datastructures import Headers

    settings = settings or ServeSettings()
    # "" (or unset LTRR_API_KEY) means no authentication
    api_key = (settings.api_key if settings.api_key is not None else os.environ.get("LTRR_API_KEY")) or None
    # waiting: the futures of the admitted requests the worker has not taken yet (routing or
    # queued); a future leaves it when the worker takes it or its request gives up (cancelled).
    # generation_s: a running mean of a generation's seconds, for Retry-After.
    state: dict[str, Any] = {"waiting": set(), "generation_s": 1.0}

    @asynccontextmanager
    async def lifespan(app):
        state["queue"] = asyncio.Queue()  # bounded by the admission check on state["waiting"]
        state["worker"] = asyncio.create_task(worker())
        yield
        state["worker"].cancel()

    app = FastAPI(title="ltrr", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    async def worker():
        while True:
            job, fut = await state["queue"].get()
            state["waiting"].discard(fut)
            try:
                if not fut.cancelled():  # its request gave up (timeout, disconnect): generate nothing
                    t0 = time.perf_counter()
                    result = await run_in_threadpool(job)
                    state["generation_s"] = 0.8 * state["generation_s"] + 0.2 * (time.perf_counter() - t0)
                    if not fut.cancelled():
                        fut.set_result(result)
            except Exception as exc:  # handed to the waiting request, which answers 500 without a traceback
                if not fut.cancelled():
                    fut.set_exception(exc)
            finally:
                state["queue"].task_done()

    def retry_after() -> dict[str, str]:
        return {"Retry-After": str(min(60, max(1, math.ceil(state["generation_s"]))))}

    max_body = settings.max_body_bytes

    class Guard:
        """The key and the declared body size of every ``/v1`` request, checked before routing.

        A plain ASGI middleware, not ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware
        hands the endpoint a ``receive`` through which a client's disconnect is never seen."""

        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            if scope["type"] == "http" and scope["path"].startswith("/v1"):
                refused = self.check(Headers(scope=scope))
                if refused is not None:
                    return await refused(scope, receive, send)
            await self.app(scope, receive, send)

        @staticmethod
        def check(headers):
            if api_key is not None:
                got = headers.get("authorization", "")
                token = got[7:] if got.lower().startswith("bearer ") else ""
                if not hmac.compare_digest(token.encode(), api_key.encode()):
                    # OpenAI's own answer to a wrong key: type invalid_request_error, code invalid_api_key
                    return _error(401, "invalid API key", code="invalid_api_key")
            size = headers.get("content-length")
            if size is not None and (not size.isdigit() or int(size) > max_body):
                return _error(413, f"the request body is over {max_body} bytes")
            return None

    app.add_middleware(Guard)

    async def _body(request: Request) -> Any:
        # read in chunks and stop at the limit: a chunked body (no Content-Length, which the
        # guard checks) is never held whole in memory
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > settings.max_body_bytes:
                raise _Reject(413, f"the request body is over {settings.max_body_bytes} bytes")
            chunks.append(chunk)
        return req.parse_json(b"".join(chunks))

    async def _gone(request: Request) -> None:
        """Return once the client has disconnected (the body is read: nothing else comes)."""
        while (await request.receive())["type"] != "http.disconnect":
            await asyncio.sleep(_DISCONNECT_POLL_S)  # never a busy loop, whatever the server sends

    async def _within(awaitable, request: Request, deadline: float):
        """``awaitable``'s result if it comes before ``deadline`` (loop time) and while the client
        is connected; else it is cancelled: 503 past the deadline, 499 for a client gone."""
        task = asyncio.ensure_future(awaitable)
        watch = asyncio.ensure_future(_gone(request))
        try:
            done, _ = await asyncio.wait({task, watch}, timeout=max(0.0, deadline - asyncio.get_running_loop().time()),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if task in done:
            return task.result()
        task.cancel()  # a routing thread runs on, unwaited; a queued generation is skipped
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # nothing left unretrieved
        if watch in done:
            logger.info("client disconnected; request dropped")
            raise _Reject(499, "the client closed the request")
        raise _Reject(503, f"no answer within {settings.timeout_s:g}s; the server is busy", "server_error",
                      headers=retry_after())

    def _model(body: Any) -> str:
        from ltrr._errors import LtrrError

        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str):
            raise _Reject(400, "model must be a string: a router (see GET /v1/models)", param="model")
        try:
            service.check_model(model)
        except LtrrError as exc:  # OpenAI answers an unknown model with 404 model_not_found
            raise _Reject(404, str(exc), code="model_not_found", param="model") from None
        return model

    def _admit():
        """The future of an admitted request's answer; 429 when ``max_queue`` are waiting."""
        if len(state["waiting"]) >= settings.max_queue:
            raise _Reject(429, "the generation queue is full; retry later", "rate_limit_error", headers=retry_after())
        fut = asyncio.get_running_loop().create_future()
        state["waiting"].add(fut)
        fut.add_done_callback(state["waiting"].discard)
        return fut

    @app.exception_handler(_Reject)
    async def _rejected(request, exc: _Reject):
        return _error(exc.status, exc.message, exc.kind, exc.code, exc.param, exc.headers)

    @app.get("/health")
    async def health():
        return {"status": "ok", "queue": len(state["waiting"])}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [_model_object(m) for m in service.models()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        found = [m for m in service.models() if m["id"] == model_id]
        if not found:
            raise _Reject(404, f"unknown model {model_id!r} (see GET /v1/models)", code="model_not_found",
                          param="model")
        return _model_object(found[0])

    @app.post("/v1/route")
    async def route(request: Request):
        body = await _body(request)
        deadline = asyncio.get_running_loop().time() + settings.timeout_s
        if isinstance(body, dict) and isinstance(body.get("question"), str) and "messages" not in body:
            if not body["question"].strip():
                raise _Reject(400, "question is empty", param="question")
            if len(body["question"]) > settings.max_message_chars:
                raise _Reject(400, f"question is longer than {settings.max_message_chars} characters", param="question")
            question = body["question"]
        else:
            question = req.question(body, settings.max_message_chars)
        model = _model(body)
        return await _within(run_in_threadpool(service.route, model, question), request, deadline)

    async def _complete(request: Request, body: dict, question: str, chat: bool):
        """Route, answer and reply as a chat completion (``chat``) or a text completion, whole or
        as server-sent events."""
        t0 = time.perf_counter()
        deadline = asyncio.get_running_loop().time() + settings.timeout_s
        decoding = req.decoding(body, settings.max_tokens)
        stream, include_usage = req.streaming(body)
        model = _model(body)
        fut = _admit()  # before routing: a full queue costs no retrieval
        started: dict[str, float] = {}
        abandoned = threading.Event()  # set when the request gives up: its generation stops at the next token

        def job():
            started["t"] = time.perf_counter()
            with cancel_scope(abandoned):
                return service.answer(routed, question, decoding)

        try:
            routed = await _within(run_in_threadpool(service.route, model, question), request, deadline)
            queued_at = time.perf_counter()
            state["queue"].put_nowait((job, fut))
            try:
                out = await _within(fut, request, deadline)
            except _Reject:
                raise
            except Exception:
                logger.exception("generation failed")
                raise _Reject(500, "generation failed", "server_error") from None
        finally:
            fut.cancel()  # no-op once answered; otherwise it leaves the queue and the worker skips it
            if fut.cancelled():
                abandoned.set()  # a generation under way for it stops (nothing is cached)
        waited = started.get("t", queued_at) - queued_at
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created, finish = int(time.time()), out.get("finish_reason", "stop")
        extra = {**routed, "queue_wait_s": round(waited, 4), "seconds": round(time.perf_counter() - t0, 4)}
        head = {"id": cid, "created": created, "model": routed["model"]}
        if not stream:
            choice = ({"index": 0, "message": {"role": "assistant", "content": out["text"], "refusal": None},
                       "logprobs": None, "finish_reason": finish}
                      if chat else {"index": 0, "text": out["text"], "logprobs": None, "finish_reason": finish})
            return JSONResponse({**head, "object": "chat.completion" if chat else "text_completion",
                                 "choices": [choice], "usage": out["usage"], "ltrr": extra})
        obj = "chat.completion.chunk" if chat else "text_completion"
        usage = {"usage": None} if include_usage else {}  # OpenAI: null on every chunk but the last

        def chunk(piece: str | None, finish: str | None = None, *, opening: bool = False, **more) -> str:
            if chat:
                delta = {"role": "assistant", "content": ""} if opening else {} if piece is None else {"content": piece}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}
            return f"data: {json.dumps({**head, 'object': obj, 'choices': [choice], **usage, **more})}\n\n"

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
                # uvicorn's send does not yield to the loop: without this pause a client's
                # disconnect is seen only after the whole answer was written to a closed socket
                await asyncio.sleep(0)
            yield chunk(None, finish, ltrr=extra)
            if include_usage:
                yield f"data: {json.dumps({**head, 'object': obj, 'choices': [], 'usage': out['usage']})}\n\n"
            yield "data: [DONE]\n\n"

        # no-cache and X-Accel-Buffering: no keep proxies (nginx) from holding events back
        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await _body(request)
        return await _complete(request, body, req.question(body, settings.max_message_chars), chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await _body(request)
        return await _complete(request, body, req.prompt(body, settings.max_message_chars), chat=False)

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
