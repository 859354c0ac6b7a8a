"""A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions wire format.

Behaviours are scripted per request, in order (`FakeOpenAI.script`); when the script is used up
every request gets ``default``. Behaviours:

- ``"ok"``: a completion whose content is ``"echo: " + last user message``, with usage.
- ``("slow", seconds)``: sleep, then answer ok (to trigger client timeouts).
- ``("status", code)``: an error status with a JSON error body (500, 400, 401, ...).
- ``("429", retry_after)``: HTTP 429 with a ``Retry-After`` header (seconds, as text).
- ``"malformed"``: status 200, a JSON body without ``choices``.
- ``"nonjson"``: status 200, an HTML body.
- ``"nousage"``: ok without a ``usage`` object.
- ``"boolusage"``: ok with token counts of ``true`` (a JSON bool, which Python reads as an int).
- ``"badjson_content"``: ok, but the content is not JSON (for JSON mode).

``POST /v1/completions`` (for likelihood scoring) echoes the prompt with per-token
log-probabilities, or without them for the behaviour ``"nologprobs"``; the behaviours
``("text", continuation)`` and ``("text_vllm", continuation)`` answer a scripted text
continuation instead, cut at the request's stop strings (the latter with vLLM's ``stop_reason``).

Whatever the behaviour, a request with ``response_format = {"type": "json_object"}`` that is
answered ok gets JSON content: ``{"echo": last user message}``.

The server records every request (path, headers, body), counts hits, and tracks the maximum
number of requests in flight at once. ``ok_delay`` delays every ok answer, so that concurrent
requests overlap.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(
        self, script: list[Any] | None = None, *, default: Any = "ok", ok_delay: float = 0.0
    ):
        self.script = list(script or [])
        self.default = default
        self.ok_delay = ok_delay
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def hits(self) -> int:
        return len(self.requests)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _next(self) -> Any:
        with self._lock:
            return self.script.pop(0) if self.script else self.default

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout); nothing to do

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                with fake._lock:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    fake.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": json.loads(raw)}
                    )
                try:
                    self._answer(json.loads(raw))
                finally:
                    with fake._lock:
                        fake.in_flight -= 1

            def _answer(self, body: dict) -> None:
                if self.path == "/v1/completions":
                    self._completion(body)
                    return
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}', "application/json")
                    return
                behaviour = fake._next()
                kind = behaviour[0] if isinstance(behaviour, tuple) else behaviour
                if kind == "slow":
                    time.sleep(behaviour[1])
                    kind = "ok"
                if kind == "status":
                    err = json.dumps({"error": {"message": f"scripted {behaviour[1]}"}}).encode()
                    self._send(behaviour[1], err, "application/json")
                elif kind == "429":
                    err = b'{"error": {"message": "rate limited"}}'
                    self._send(429, err, "application/json", {"Retry-After": str(behaviour[1])})
                elif kind == "malformed":
                    self._send(200, b'{"id": "x", "object": "chat.completion"}', "application/json")
                elif kind == "nonjson":
                    self._send(200, b"<html><body>Bad gateway</body></html>", "text/html")
                elif kind in ("ok", "nousage", "boolusage", "badjson_content"):
                    if fake.ok_delay:
                        time.sleep(fake.ok_delay)
                    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
                    content = f"echo: {user}"
                    fmt = body.get("response_format") or {}
                    if fmt.get("type") == "json_object" and kind != "badjson_content":
                        content = json.dumps({"echo": user})
                    reply: dict[str, Any] = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                    if kind != "nousage":
                        reply["usage"] = {
                            "prompt_tokens": len(user.split()) + 7,
                            "completion_tokens": len(content.split()),
                            "total_tokens": len(user.split()) + 7 + len(content.split()),
                        }
                    if kind == "boolusage":
                        reply["usage"] = {"prompt_tokens": True, "completion_tokens": True, "total_tokens": 2}
                    self._send(200, json.dumps(reply).encode(), "application/json")
                else:
                    raise ValueError(f"unknown scripted behaviour {behaviour!r}")

            def _completion(self, body: dict) -> None:
                """/v1/completions with echo: one token per whitespace-separated word, each with
                log-probability -len(word) / 10 (the first token none, as vLLM does);
                ``"nologprobs"`` answers without them."""
                import re

                behaviour = fake._next()
                if isinstance(behaviour, tuple) and behaviour[0] in ("text", "text_vllm"):
                    self._continuation(body, behaviour)
                    return
                text = body["prompt"]
                choice: dict[str, Any] = {"index": 0, "text": text + " x", "finish_reason": "length"}
                if behaviour != "nologprobs":
                    spans = [(m.start(), m.group()) for m in re.finditer(r"\s*\S+", text)]
                    choice["logprobs"] = {
                        "tokens": [w for _, w in spans],
                        "text_offset": [o for o, _ in spans],
                        "token_logprobs": [None] + [-len(w.strip()) / 10 for _, w in spans[1:]],
                    }
                self._send(200, json.dumps({"choices": [choice]}).encode(), "application/json")

            def _continuation(self, body: dict, behaviour: tuple) -> None:
                """A scripted text continuation, cut before the first stop string as servers do
                (``finish_reason`` "stop"); ``"text_vllm"`` also names the stop string in
                ``stop_reason``, as vLLM does. A third item sets the ``finish_reason`` of a text that
                no stop string cuts (default "length"; "stop" for an end of sequence)."""
                text, stop_reason = behaviour[1], None
                finish = behaviour[2] if len(behaviour) > 2 else "length"
                cuts = [(text.find(s), s) for s in body.get("stop") or [] if s in text]
                if cuts:
                    at, stop_reason = min(cuts)
                    text, finish = text[:at], "stop"
                choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish}
                if behaviour[0] == "text_vllm":
                    choice["stop_reason"] = stop_reason
                usage = {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": len(text.split())}
                self._send(200, json.dumps({"choices": [choice], "usage": usage}).encode(), "application/json")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
