"""The ``openai`` backend against a real local HTTP server speaking the chat-completions format."""

from __future__ import annotations

import json

import pytest
from _fake_openai import FakeOpenAI

from ltrr._errors import ConfigError
from ltrr.generation import (
    DecodingParams,
    OpenAIGenerator,
    answer_with_fallback,
    generators,
    make_generator,
)

FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "timeout": 5.0}
KEY_VAR = "LTRR_TEST_FAKE_KEY"


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def gen_for(fake: FakeOpenAI, **kw) -> OpenAIGenerator:
    opts = {**FAST, "max_concurrency": 1, "max_retries": 3, "api_key_env": KEY_VAR, **kw}
    return OpenAIGenerator("fake-model", base_url=fake.base_url, **opts)


def test_success_text_usage_and_request_body(server, monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-test-123")
    gen = gen_for(server)
    params = DecodingParams(max_new_tokens=17, stop=("\n",), seed=5)
    out = gen.generate(["hello world", [{"role": "user", "content": "second one"}]], params)
    assert [g.text for g in out] == ["echo: hello world", "echo: second one"]
    assert all(g.ok and not g.cached for g in out)
    assert out[0].prompt_tokens == 2 + 7 and out[0].completion_tokens == 3
    assert out[0].extra["finish_reason"] == "stop" and out[0].extra["attempts"] == 1
    assert out[0].latency_s > 0
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert body["model"] == "fake-model"
    assert body["messages"] == [{"role": "user", "content": "hello world"}]
    assert body["max_tokens"] == 17 and body["temperature"] == 0.0 and body["seed"] == 5
    assert body["stop"] == ["\n"] and "response_format" not in body


def test_api_key_read_from_env_var_and_sent_as_bearer(server, monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-secret-xyz")
    gen = gen_for(server)
    gen.generate(["q"])
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer sk-secret-xyz"
    assert "sk-secret-xyz" not in gen.identity and "sk-secret-xyz" not in repr(gen)
    monkeypatch.delenv(KEY_VAR)
    gen.generate(["q"])
    assert "Authorization" not in server.requests[-1]["headers"]


def test_api_key_never_from_config(server):
    with pytest.raises(ConfigError, match="api_key_env"):
        make_generator(
            {"backend": "openai", "model": "m", "base_url": server.base_url, "api_key": "sk-x"}
        )
    gen = make_generator(
        {"backend": "openai", "model": "m", "base_url": server.base_url, "api_key_env": KEY_VAR}
    )
    assert isinstance(gen, OpenAIGenerator) and gen.api_key_env == KEY_VAR


def test_500_then_ok_is_retried(server):
    server.script = [("status", 500), ("status", 503), "ok"]
    out = gen_for(server).generate(["x"])
    assert out[0].ok and out[0].text == "echo: x"
    assert out[0].extra["attempts"] == 3
    assert server.hits == 3


def test_retries_are_bounded_and_failure_is_recorded(server):
    server.default = ("status", 500)
    out = gen_for(server, max_retries=2).generate(["x"])
    assert server.hits == 3  # first attempt + 2 retries, no more
    g = out[0]
    assert not g.ok and g.text == "" and "HTTP 500" in g.error and "after 3 attempts" in g.error
    assert g.extra["attempts"] == 3


def test_429_honours_retry_after(server, monkeypatch):
    import ltrr.generation.openai_backend as ob

    slept: list[float] = []
    monkeypatch.setattr(ob.time, "sleep", slept.append)
    server.script = [("429", "0.3"), "ok"]
    gen = gen_for(server, backoff_base=0.0)
    out = gen.generate(["x"])
    assert out[0].ok and server.hits == 2 and out[0].extra["attempts"] == 2
    # With zero backoff, the one wait between the two requests is the Retry-After's.
    assert slept == [0.3]


def test_other_4xx_is_not_retried(server, monkeypatch):
    monkeypatch.setenv(KEY_VAR, "bad")
    server.script = [("status", 401)]
    out = gen_for(server).generate(["x"])
    assert server.hits == 1
    assert not out[0].ok and "HTTP 401" in out[0].error and "not retried" in out[0].error
    assert KEY_VAR in out[0].error
    server.script = [("status", 400)]
    out = gen_for(server).generate(["x"])
    assert server.hits == 2 and "HTTP 400" in out[0].error


def test_timeout_is_retried_then_succeeds(server):
    server.script = [("slow", 1.5), "ok"]
    out = gen_for(server, timeout=0.3).generate(["x"])
    assert out[0].ok and out[0].extra["attempts"] == 2


def test_timeout_until_failure(server):
    server.default = ("slow", 1.0)
    out = gen_for(server, timeout=0.2, max_retries=1).generate(["x"])
    assert not out[0].ok and "timed out" in out[0].error
    assert server.hits == 2


@pytest.mark.parametrize("kind, message", [("malformed", "no choices"), ("nonjson", "not JSON")])
def test_malformed_bodies_are_retried(server, kind, message):
    server.script = [kind, "ok"]
    out = gen_for(server).generate(["x"])
    assert out[0].ok and server.hits == 2
    server.default = kind
    out = gen_for(server, max_retries=1).generate(["x"])
    assert not out[0].ok and message in out[0].error and server.hits == 4


def test_connection_error_is_retried_and_recorded():
    fake = FakeOpenAI().start()
    url = fake.base_url
    fake.stop()  # nothing listens on the port any more
    gen = OpenAIGenerator("m", base_url=url, max_retries=1, **FAST)
    out = gen.generate(["x"])
    assert not out[0].ok and "connection error" in out[0].error and out[0].extra["attempts"] == 2


def test_json_mode(server):
    out = gen_for(server).generate(["judge this"], DecodingParams(json_mode=True))
    assert server.requests[0]["body"]["response_format"] == {"type": "json_object"}
    assert json.loads(out[0].text) == {"echo": "judge this"}
    server.script = ["badjson_content", "ok"]
    out = gen_for(server).generate(["again"], DecodingParams(json_mode=True))
    assert out[0].ok and server.hits == 3


@pytest.mark.parametrize("behaviour", ["nousage", "boolusage"])
def test_missing_usage_is_estimated_and_flagged(server, behaviour):
    """No usage object, or token counts that are not integers (``true`` was read as 1 token)."""
    server.script = [behaviour]
    out = gen_for(server).generate(["one two three"])
    assert out[0].ok and out[0].extra["usage_estimated"] is True
    assert out[0].prompt_tokens > 1 and out[0].completion_tokens > 1
    assert type(out[0].prompt_tokens) is int and type(out[0].completion_tokens) is int


def test_concurrency_bound_is_respected():
    with FakeOpenAI(ok_delay=0.15) as fake:
        gen = OpenAIGenerator("m", base_url=fake.base_url, max_concurrency=3, **FAST)
        out = gen.generate([f"q{i}" for i in range(12)])
        assert [g.text for g in out] == [f"echo: q{i}" for i in range(12)]
        assert 2 <= fake.max_in_flight <= 3
        fake.max_in_flight = 0
        OpenAIGenerator("m", base_url=fake.base_url, max_concurrency=1, **FAST).generate(
            [f"q{i}" for i in range(4)]
        )
        assert fake.max_in_flight == 1


def test_one_failed_item_does_not_fail_the_batch():
    with FakeOpenAI(script=["ok", ("status", 400), "ok"]) as fake:
        out = gen_for(fake).generate(["a", "b", "c"])
    assert [g.ok for g in out] == [True, False, True]
    assert out[1].text == "" and "HTTP 400" in out[1].error


def test_failed_item_is_failed_never_scored(server):
    server.default = ("status", 500)
    res = answer_with_fallback(gen_for(server, max_retries=1), "short_answer", "Who?", ["A doc."])
    assert res.answer is None and not res.ok and "HTTP 500" in res.error
    assert not res.used_fallback


def test_config_validation():
    assert generators.get("openai") is OpenAIGenerator
    with pytest.raises(ConfigError, match="set 'model'"):
        OpenAIGenerator(None)
    with pytest.raises(ConfigError, match="base_url must be an http"):
        OpenAIGenerator("m", base_url="localhost:8000")
    with pytest.raises(ConfigError, match="max_concurrency must be an integer >= 1"):
        OpenAIGenerator("m", max_concurrency=0)
    with pytest.raises(ConfigError, match="unknown option.*'temprature'.*accepted: model"):
        make_generator({"backend": "openai", "model": "m", "temprature": 0})


def test_backoff_jitter_is_seeded(server, monkeypatch):
    import ltrr.generation.openai_backend as ob

    waits: list[list[float]] = []
    for _ in range(2):
        slept: list[float] = []
        monkeypatch.setattr(ob.time, "sleep", slept.append)
        server.script = [("status", 500)] * 3
        gen = gen_for(server, backoff_base=0.5, backoff_max=10.0, random_state=7)
        assert gen.generate(["x"])[0].ok
        waits.append(slept)
    assert waits[0] == waits[1] and len(waits[0]) == 3
    # Exponential: each wait lies in [0.5, 1] x 0.5 * 2**k.
    for k, w in enumerate(waits[0]):
        assert 0.25 * 2**k <= w <= 0.5 * 2**k


def test_extra_body_is_part_of_the_identity_and_cannot_overwrite_the_decoding():
    """extra_body's fields change the answers (top_k, a repetition penalty): cached apart; a field
    ltrr sends itself from the decoding parameters would silently overwrite what the key says."""
    from ltrr._errors import ConfigError
    from ltrr.generation.openai_backend import OpenAIGenerator

    plain = OpenAIGenerator("m", base_url="http://127.0.0.1:1/v1")
    k1 = OpenAIGenerator("m", base_url="http://127.0.0.1:1/v1", extra_body={"top_k": 1})
    k50 = OpenAIGenerator("m", base_url="http://127.0.0.1:1/v1", extra_body={"top_k": 50, "repetition_penalty": 1.3})
    assert len({plain.identity, k1.identity, k50.identity}) == 3 and k1.identity.startswith(plain.identity + ":extra-")
    assert OpenAIGenerator("m", base_url="http://127.0.0.1:1/v1", extra_body={"top_k": 1}).identity == k1.identity
    for field in ("temperature", "seed", "top_p", "max_tokens", "messages"):
        with pytest.raises(ConfigError, match=f"extra_body must not set {field}"):
            OpenAIGenerator("m", extra_body={field: 1})
