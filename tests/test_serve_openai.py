"""`ltrr serve` against what OpenAI's API does: content parts, errors, streaming usage, the
queue's admission, deadlines and disconnects. A stand-in service (no model folder) served by
uvicorn on 127.0.0.1, driven by the official openai client and raw HTTP."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from test_serve import Live

MSGS = [{"role": "user", "content": "capital of australia?"}]


class FakeService:
    """Models ``ltrr`` and ``none``; counts routings and answers, keeps the questions asked.

    ``gate``: answers wait for it (so the generation worker can be kept busy);
    ``route_delay``: seconds each routing takes."""

    def __init__(self, *, gate: threading.Event | None = None, route_delay: float = 0.0):
        self.gate, self.route_delay = gate, route_delay
        self.routes, self.answers, self.questions = 0, 0, []

    def models(self):
        return [{"id": "ltrr", "kind": "router", "detail": "LTR router"}, {"id": "none", "kind": "arm", "detail": ""}]

    def check_model(self, model):
        from ltrr._errors import DataError

        if model not in ("ltrr", "none"):
            raise DataError(f"unknown model {model!r}; known models: ltrr, none")
        return model

    def route(self, model, question):
        self.routes += 1
        time.sleep(self.route_delay)
        return {"model": model, "arm": "none", "cost": 0.0, "ranking": [], "passages": []}

    def answer(self, routed, question, decoding=None):
        self.answers += 1
        self.questions.append(question)
        if self.gate is not None:
            self.gate.wait(20)
        return {"text": "canberra is the capital", "finish_reason": "stop",
                "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}


def _serve(service=None, **settings):
    from ltrr.serve import ServeSettings, create_app

    settings.setdefault("api_key", "")
    return Live(create_app(service or FakeService(), ServeSettings(**settings)))


def _client(live, key="unused"):
    return openai.OpenAI(base_url=live.url + "/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def live():
    service = FakeService()
    with _serve(service, max_message_chars=100) as server:
        yield server, service


def _post(live, body, path="/v1/chat/completions", **kw):
    return httpx.post(live.url + path, json=body, timeout=20, **kw)


def _events(response: httpx.Response) -> list[dict]:
    data = [e[len("data: "):] for e in response.text.strip().split("\n\n")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


# ---- 1. content parts and null content -------------------------------------------------------
def test_message_content_may_be_text_parts_or_null(live):
    """OpenAI takes a message's content as a string, a list of content parts or (an assistant turn
    that called a tool) null: text parts are the question, joined; other parts are one 400."""
    server, service = live
    client = _client(server)
    parts = [{"type": "text", "text": "capital of"}, {"type": "text", "text": "australia?"}]
    r = client.chat.completions.create(model="ltrr", messages=[{"role": "user", "content": parts}])
    assert r.choices[0].message.content == "canberra is the capital"
    assert service.questions[-1] == "capital of\naustralia?"
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None},
               {"role": "user", "content": "capital of france?"}]
    client.chat.completions.create(model="ltrr", messages=history)
    assert service.questions[-1] == "capital of france?"
    n = service.answers
    for content in ([{"type": "image_url", "image_url": {"url": "http://x/y.png"}}], [{"type": "text"}], [3], 7):
        msgs = [{"role": "user", "content": content}]
        with pytest.raises(openai.BadRequestError, match="content") as info:
            client.chat.completions.create(model="ltrr", messages=msgs)
        assert info.value.param == "messages", content
    assert service.answers == n


# ---- 2. a client that goes away costs no generation ------------------------------------------
def test_abandoned_requests_are_never_generated():
    """Clients that give up while their request waits for the generation worker (a read timeout
    closes the connection, streamed or not) are dropped: their answers are never generated."""
    gate = threading.Event()
    service = FakeService(gate=gate)
    with _serve(service, max_queue=8, timeout_s=30) as server:
        busy = threading.Thread(target=_post, args=(server, {"model": "ltrr", "messages": MSGS}))
        busy.start()  # keeps the worker busy until the gate opens
        deadline = time.monotonic() + 20
        while service.answers < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        for stream in (False, True):
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(server.url + "/v1/chat/completions", json={"model": "ltrr", "messages": MSGS,
                                                                       "stream": stream}, timeout=0.5)
        time.sleep(0.5)  # the server sees the disconnects
        assert httpx.get(server.url + "/health").json()["queue"] == 0
        gate.set()
        busy.join()
        # a later request queues behind whatever is left: once it is answered, all of it ran
        assert _post(server, {"model": "ltrr", "messages": MSGS}).status_code == 200
        assert service.answers == 2 and service.routes == 4


def test_a_generation_under_way_stops_when_its_client_leaves():
    """A client whose timeout is shorter than one generation (retried by the openai client, each
    try cost a whole generation): the answer under way stops at its next token."""
    from ltrr.generation.base import cancel_requested

    seen = threading.Event()

    class TokenByToken(FakeService):
        def answer(self, routed, question, decoding=None):
            self.answers += 1
            for _ in range(2000):  # a long answer, one "token" every 10 ms, as a backend checks
                if cancel_requested():
                    seen.set()
                    raise RuntimeError("generation failed: cancelled")
                time.sleep(0.01)
            return super().answer(routed, question, decoding)

    service = TokenByToken()
    with _serve(service, timeout_s=30) as server:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/v1/chat/completions", json={"model": "ltrr", "messages": MSGS}, timeout=0.5)
        assert seen.wait(15)  # the generation saw its request abandoned, long before its 20 s end
        assert service.answers == 1 and httpx.get(server.url + "/health").json()["queue"] == 0


# ---- 3. a full queue is refused before routing, with Retry-After --------------------------
def test_full_queue_costs_no_routing_and_says_when_to_retry():
    gate = threading.Event()
    service = FakeService(gate=gate)
    with _serve(service, max_queue=1, timeout_s=2.5) as server:
        out = {}

        def post(i):
            out[i] = _post(server, {"model": "ltrr", "messages": MSGS})

        threads = [threading.Thread(target=post, args=(i,)) for i in range(2)]
        for t in threads:  # one generates (held by the gate), one waits in the queue
            t.start()
            time.sleep(0.4)
        full = _post(server, {"model": "ltrr", "messages": MSGS})
        assert full.status_code == 429 and full.json()["error"]["type"] == "rate_limit_error"
        assert service.routes == 2  # the refused request searched nothing
        assert int(full.headers["retry-after"]) >= 1
        for t in threads:
            t.join()
        gate.set()
        assert sorted(r.status_code for r in out.values()) == [503, 503]
        assert all(int(r.headers["retry-after"]) >= 1 for r in out.values())


# ---- 4. routing counts against timeout_s -----------------------------------------------------
def test_timeout_covers_routing():
    service = FakeService(route_delay=3.0)
    with _serve(service, timeout_s=0.5) as server:
        t0 = time.monotonic()
        r = _post(server, {"model": "ltrr", "messages": MSGS})
        assert r.status_code == 503 and "no answer within 0.5s" in r.json()["error"]["message"]
        assert time.monotonic() - t0 < 2.5 and "retry-after" in r.headers
        routed = httpx.post(server.url + "/v1/route", json={"model": "ltrr", "question": "q"}, timeout=20)
        assert routed.status_code == 503
        assert service.answers == 0


# ---- 5. the keys OpenAI's chat completion always has ------------------------------------
def test_chat_choice_has_logprobs_and_refusal(live):
    server, _ = live
    choice = _post(server, {"model": "ltrr", "messages": MSGS}).json()["choices"][0]
    assert "logprobs" in choice and choice["logprobs"] is None
    assert "refusal" in choice["message"] and choice["message"]["refusal"] is None


# ---- 6. the limits on the command line; only the question's length counts ------------------
def test_serve_flags_reach_the_settings(tmp_path, monkeypatch, capsys):
    import ltrr.serve
    from ltrr.cli import main
    from ltrr.serve import ServeSettings

    got = {}
    monkeypatch.setattr(ltrr.serve, "serve", lambda model_dir, **kw: got.update(kw))
    assert main(["serve", str(tmp_path), "--port", "0", "--max-tokens", "7", "--max-message-chars", "90",
                 "--max-body-bytes", "5000", "--max-queue", "3", "--timeout", "4.5"]) == 0
    assert got["settings"] == ServeSettings(max_tokens=7, max_message_chars=90, max_body_bytes=5000, max_queue=3,
                                            timeout_s=4.5)
    assert main(["serve", str(tmp_path), "--port", "0"]) == 0
    assert got["settings"] == ServeSettings()
    assert main(["serve", str(tmp_path), "--port", "0", "--max-body-bytes", "0"]) == 2
    assert "serve max-body-bytes must be an integer >= 1" in capsys.readouterr().err


def test_only_the_routed_message_is_length_checked(live):
    """System messages and earlier turns are never read: their length is not the question's."""
    server, service = live
    client = _client(server)
    long = "x" * 150
    r = client.chat.completions.create(model="ltrr", messages=[
        {"role": "system", "content": long}, {"role": "user", "content": long},
        {"role": "assistant", "content": long}, {"role": "user", "content": "capital?"}])
    assert r.choices[0].message.content and service.questions[-1] == "capital?"
    with pytest.raises(openai.BadRequestError, match="last user message is longer than 100 characters"):
        client.chat.completions.create(model="ltrr", messages=[{"role": "user", "content": long}])


# ---- 7. OpenAI's statuses for an unknown model and a wrong key -------------------------------
def test_unknown_model_is_404_and_wrong_key_is_invalid_api_key():
    with _serve(api_key="s3cret") as server:
        client = _client(server, "s3cret")
        with pytest.raises(openai.NotFoundError, match="unknown model 'gpt-4o'") as info:
            client.chat.completions.create(model="gpt-4o", messages=MSGS)
        assert info.value.code == "model_not_found" and info.value.type == "invalid_request_error"
        with pytest.raises(openai.NotFoundError, match="unknown model"):
            client.completions.create(model="gpt-4o", prompt="q")
        head = {"Authorization": "Bearer s3cret"}
        routed = httpx.post(server.url + "/v1/route", json={"model": "gpt-4o", "question": "q"}, headers=head)
        assert routed.status_code == 404 and routed.json()["error"]["code"] == "model_not_found"
        with pytest.raises(openai.AuthenticationError, match="invalid API key") as info:
            _client(server, "wrong").models.list()
        assert info.value.type == "invalid_request_error" and info.value.code == "invalid_api_key"


# ---- 8. usage in a stream only on request, in a last chunk of its own ------------------------
@pytest.mark.parametrize("path, body", [("/v1/chat/completions", {"messages": MSGS}),
                                        ("/v1/completions", {"prompt": "capital of australia?"})])
def test_stream_usage_only_with_include_usage(live, path, body):
    server, _ = live
    plain = _events(_post(server, {"model": "ltrr", **body, "stream": True}, path))
    assert all("usage" not in e for e in plain) and plain[-1]["choices"][0]["finish_reason"] == "stop"
    asked = _events(_post(server, {"model": "ltrr", **body, "stream": True,
                                   "stream_options": {"include_usage": True}}, path))
    assert asked[-1]["choices"] == [] and asked[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 4,
                                                                  "total_tokens": 14}
    assert all(e["usage"] is None and len(e["choices"]) == 1 for e in asked[:-1])
    assert asked[-2]["choices"][0]["finish_reason"] == "stop"
    for options, stream in [("yes", True), ({"include_usage": "yes"}, True), ({"include_usage": True}, False)]:
        r = _post(server, {"model": "ltrr", **body, "stream": stream, "stream_options": options}, path)
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options", (options, r.text)


def test_openai_client_reads_stream_usage(live):
    server, _ = live
    chunks = list(_client(server).chat.completions.create(model="ltrr", messages=MSGS, stream=True,
                                                          stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 14
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == "canberra is the capital"


# ---- 9. fields ltrr cannot honour are refused, never ignored ---------------------------------
def test_tools_functions_bias_and_penalties_are_refused(live):
    server, service = live
    n = service.answers
    for extra, param in [({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
                         ({"function_call": "auto"}, "function_call"), ({"tool_choice": "auto"}, "tool_choice"),
                         ({"tool_choice": "required"}, "tool_choice"),
                         ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
                         ({"logit_bias": {"50256": -100}}, "logit_bias"), ({"logit_bias": [1]}, "logit_bias"),
                         ({"presence_penalty": 1.5}, "presence_penalty"),
                         ({"frequency_penalty": -0.5}, "frequency_penalty"),
                         ({"frequency_penalty": 3}, "frequency_penalty"), ({"top_logprobs": 2}, "top_logprobs")]:
        r = _post(server, {"model": "ltrr", "messages": MSGS, **extra})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == param, (extra, r.text)
    assert service.answers == n  # a refused request generates nothing
    ok = {"tool_choice": "none", "function_call": "none", "logit_bias": {}, "presence_penalty": 0,
          "frequency_penalty": 0.0, "functions": [], "top_logprobs": 0}
    assert _post(server, {"model": "ltrr", "messages": MSGS, **ok}).status_code == 200


# ---- 10. bodies json cannot read, and the seed's range -----------------------------------
def test_unreadable_json_and_out_of_range_seed_are_400(live):
    server, _ = live
    head = {"content-type": "application/json"}
    huge = b'{"model": "ltrr", "messages": [{"role": "user", "content": "q"}], "seed": ' + b"9" * 5000 + b"}"
    for raw in (huge, b"[" * 30_000 + b"]" * 30_000, b'{"model": "ltrr", "temperature": NaN}'):
        r = httpx.post(server.url + "/v1/chat/completions", content=raw, headers=head, timeout=20)
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"], r.text[:200]
    for seed in (2**63, -(2**63) - 1, 10**30):
        r = _post(server, {"model": "ltrr", "messages": MSGS, "seed": seed})
        assert r.status_code == 400 and r.json()["error"]["param"] == "seed"
    for seed in (2**63 - 1, -(2**63)):
        assert _post(server, {"model": "ltrr", "messages": MSGS, "seed": seed}).status_code == 200


# ---- 11. one model by id -----------------------------------------------------------------
def test_retrieve_one_model(live):
    server, _ = live
    client = _client(server)
    model = client.models.retrieve("ltrr")
    assert (model.id, model.object, model.owned_by) == ("ltrr", "model", "ltrr")
    assert model.model_extra["ltrr"]["kind"] == "router"
    assert client.models.retrieve("none").id == "none"
    with pytest.raises(openai.NotFoundError, match="unknown model 'gpt-4o'") as info:
        client.models.retrieve("gpt-4o")
    assert info.value.code == "model_not_found"


# ---- 12. only the last user message is the question (documented) ---------------------------
def test_only_the_last_user_message_is_routed_and_it_is_documented(live):
    from pathlib import Path

    import ltrr.serve.app

    server, service = live
    r = _post(server, {"model": "ltrr", "messages": [
        {"role": "system", "content": "answer in french"}, {"role": "user", "content": "capital of italy?"},
        {"role": "assistant", "content": "rome"}, {"role": "user", "content": "and of australia?"},
        {"role": "user", "content": "  "}]})
    assert r.status_code == 200 and service.questions[-1] == "and of australia?"
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    serving = readme[readme.index("## Serving"):readme.index("## Context routing")]
    for doc in (ltrr.serve.app.__doc__, serving):
        text = " ".join(doc.split())
        assert "last non-empty user message" in text and "system messages and the earlier turns" in text.lower()


# ---- 13. stream must be a boolean --------------------------------------------------------
def test_stream_must_be_a_boolean(live):
    server, _ = live
    for stream in ("false", "true", 1, 0, [True]):
        r = _post(server, {"model": "ltrr", "messages": MSGS, "stream": stream})
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream", (stream, r.text[:200])
    whole = _post(server, {"model": "ltrr", "messages": MSGS, "stream": None})
    assert whole.headers["content-type"] == "application/json"


# ---- 14. the event stream's headers ------------------------------------------------------
def test_event_stream_is_not_cached_or_buffered(live):
    server, _ = live
    r = _post(server, {"model": "ltrr", "messages": MSGS, "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache" and r.headers["x-accel-buffering"] == "no"
