"""`ltrr serve`: the official openai client against a live server on 127.0.0.1, and its limits."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import openai
import pytest

from ltrr.cli import main

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    """uvicorn serving ``app`` in a thread on a free port of 127.0.0.1."""

    def __init__(self, app):
        import uvicorn

        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        # Wait for as long as the server thread lives (a loaded CI machine can take well over
        # 10 s to import and bind); a server that fails exits its thread, which ends the wait.
        # The 300 s bound only keeps a hung start from hanging the suite.
        deadline = time.monotonic() + 300
        while self.thread.is_alive() and time.monotonic() < deadline:
            if self.server.started:
                return self
            time.sleep(0.05)
        raise RuntimeError("the test server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small run (bm25 arms and no retrieval) with its trained LTR router."""
    from test_pipeline_e2e import _config, _register_reader

    root = tmp_path_factory.mktemp("serve")
    _register_reader()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LTRR_DATA_DIR", str(root / "data"))
        mp.chdir(root)
        cfg = _config(root, "srv", root / "unused", 7)
        cfg.write_text(cfg.read_text().replace('rankers = ["lambdamart-listwise", "svm-pointwise", "ffn-pairwise"]',
                                               'rankers = ["lambdamart-listwise"]'))
        assert main(["run", str(cfg)]) == 0
        yield root, cfg, root / "srv" / "models" / "lambdamart-listwise"


@pytest.fixture(scope="module")
def server(trained):
    from ltrr.generation import generators
    from ltrr.serve import RoutedRAG, ServeSettings, create_app

    root, cfg, model = trained
    service = RoutedRAG(model, generator=generators.get("test-last-doc")())
    service.warm()
    with Live(create_app(service, ServeSettings(api_key="", max_body_bytes=4000, max_message_chars=500))) as live:
        yield live, service, model


def _client(live, key="unused"):
    return openai.OpenAI(base_url=live.url + "/v1", api_key=key, max_retries=0)


def test_chat_stream_models_and_route(server, capsys):
    live, service, model = server
    client = _client(live)
    q = "what is the capital of paris 3"
    resp = client.chat.completions.create(model="ltrr", messages=[{"role": "user", "content": q}])
    text = resp.choices[0].message.content
    assert text and resp.usage.prompt_tokens > 0 and resp.usage.total_tokens >= resp.usage.prompt_tokens
    extra = resp.model_extra["ltrr"]
    assert extra["arm"] in service.arms and extra["ranking"][0]["arm"] == extra["arm"]
    assert extra["cost"] == service.costs[extra["arm"]] and "queue_wait_s" in extra
    assert all("text" in p for p in extra["passages"])
    # streaming: the same answer in chunks, ended by [DONE] (the client stops there)
    pieces = [c.choices[0].delta.content or "" for c in
              client.chat.completions.create(model="ltrr", messages=[{"role": "user", "content": q}], stream=True)]
    assert "".join(pieces) == text
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == "ltrr" and set(service.arms) <= set(ids)
    # a forced arm
    forced = client.chat.completions.create(model="none", messages=[{"role": "user", "content": q}])
    assert forced.model_extra["ltrr"]["arm"] == "none" and forced.model_extra["ltrr"]["passages"] == []
    # /v1/route answers what `ltrr route` prints for the same model and question
    r = httpx.post(live.url + "/v1/route", json={"model": "ltrr", "question": q}).json()
    assert main(["route", str(model), q]) == 0
    printed = [ln.split() for ln in capsys.readouterr().out.strip().splitlines()]
    assert [(int(a), b, f"{float(c):+.4f}") for a, b, c in printed] == \
        [(x["rank"], x["arm"], f"{x['score']:+.4f}") for x in r["ranking"]]


def test_bad_requests_get_openai_errors(server):
    live, _, _ = server
    client = _client(live)
    with pytest.raises(openai.NotFoundError, match="unknown model 'gpt-4'") as info:  # OpenAI's 404 model_not_found
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert info.value.code == "model_not_found" and info.value.param == "model"
    with pytest.raises(openai.BadRequestError, match="messages must be a non-empty list"):
        client.chat.completions.create(model="ltrr", messages=[])
    bad = httpx.post(live.url + "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    big = httpx.post(live.url + "/v1/chat/completions", json={"model": "ltrr", "messages": [
        {"role": "user", "content": "x" * 5000}]})
    assert big.status_code == 413 and big.json()["error"]["type"] == "invalid_request_error"

    def chunked():  # no Content-Length: the body arrives in pieces and is refused at the limit
        for _ in range(50):
            yield b"x" * 1000

    streamed = httpx.post(live.url + "/v1/chat/completions", content=chunked(), headers={"content-type": "application/json"})
    assert "content-length" not in {k.lower() for k in streamed.request.headers}
    assert streamed.status_code == 413 and "over 4000 bytes" in streamed.json()["error"]["message"]
    long = httpx.post(live.url + "/v1/route", json={"model": "ltrr", "question": "y" * 600})
    assert long.status_code == 400 and "longer than 500 characters" in long.json()["error"]["message"]
    for r in (bad, big, long):
        assert "Traceback" not in r.text
    assert httpx.get(live.url + "/health").json()["status"] == "ok"


class Recorder:
    """A stand-in generator that keeps the decoding it was asked for and answers within its budget."""

    backend = "test-recorder"
    identity = "test-recorder-1"

    def __init__(self):
        self.params = []

    def generate(self, prompts, params=None):
        from ltrr.generation.base import Generation

        self.params.append(params)
        words = ["canberra", "is", "the", "capital", "city", "of", "australia"][: params.max_new_tokens]
        return [Generation(text=" ".join(words), prompt_tokens=10, completion_tokens=len(words)) for _ in prompts]

    def count_tokens(self, text):
        return len(text.split())

    context_length = 2048


def test_decoding_fields_are_honoured_or_refused(trained):
    """max_tokens, temperature, top_p, stop and seed reach the generator; a bad value of each, n > 1,
    logprobs, tools and a JSON response_format are one 400 naming the field, never silently ignored."""
    from ltrr.generation import DecodingParams
    from ltrr.serve import RoutedRAG, ServeSettings, create_app

    _, _, model = trained
    gen = Recorder()
    service = RoutedRAG(model, generator=gen)
    msgs = [{"role": "user", "content": "capital of australia?"}]
    with Live(create_app(service, ServeSettings(api_key="", max_tokens=64))) as live:
        client = _client(live)
        plain = client.chat.completions.create(model="none", messages=msgs)
        assert gen.params[-1] == DecodingParams(max_new_tokens=32)  # short_answer's own budget, greedy
        assert plain.choices[0].finish_reason == "stop" and plain.usage.completion_tokens == 7
        asked = client.chat.completions.create(model="none", messages=msgs, max_tokens=2, temperature=0.7, top_p=0.9,
                                               stop=["\n\n"], seed=5)
        assert gen.params[-1] == DecodingParams(max_new_tokens=2, temperature=0.7, top_p=0.9, stop=("\n\n",), seed=5)
        assert asked.choices[0].message.content == "canberra is" and asked.choices[0].finish_reason == "length"
        streamed = list(client.chat.completions.create(model="none", messages=msgs, max_completion_tokens=3,
                                                       stream=True))
        assert gen.params[-1].max_new_tokens == 3 and streamed[-1].choices[0].finish_reason == "length"
        n_calls = len(gen.params)
        for extra, param in [({"max_tokens": -3}, "max_tokens"), ({"max_tokens": "ten"}, "max_tokens"),
                             ({"max_tokens": 65}, "max_tokens"), ({"max_completion_tokens": 0}, "max_completion_tokens"),
                             ({"max_tokens": 4, "max_completion_tokens": 5}, "max_tokens"),
                             ({"temperature": -1}, "temperature"), ({"temperature": 2.5}, "temperature"),
                             ({"top_p": 0}, "top_p"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": [""]}, "stop"),
                             ({"seed": 1.5}, "seed"), ({"n": 3}, "n"), ({"logprobs": True}, "logprobs"),
                             ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
                             ({"response_format": {"type": "json_object"}}, "response_format")]:
            r = httpx.post(live.url + "/v1/chat/completions", json={"model": "none", "messages": msgs, **extra})
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == param and err["type"] == "invalid_request_error", (extra, r.text)
        assert len(gen.params) == n_calls  # a refused request generates nothing


def test_legacy_text_completions_answer_the_prompt_as_the_question(trained):
    """``/v1/completions`` (the openai client's ``completions.create``, used by older tools): the
    prompt is the question, routed and answered as in chat, whole or streamed, with the same
    decoding fields; several prompts, token ids, echo, suffix and best_of > 1 are one 400."""
    from ltrr.serve import RoutedRAG, ServeSettings, create_app

    _, _, model = trained
    gen = Recorder()
    service = RoutedRAG(model, generator=gen)
    with Live(create_app(service, ServeSettings(api_key="", max_tokens=64, max_message_chars=200))) as live:
        client = _client(live)
        q = "capital of australia?"
        chat = client.chat.completions.create(model="ltrr", messages=[{"role": "user", "content": q}], max_tokens=3)
        text = client.completions.create(model="ltrr", prompt=q, max_tokens=3)
        assert text.object == "text_completion" and text.id.startswith("cmpl-")
        assert text.choices[0].text == chat.choices[0].message.content == "canberra is the"
        assert text.choices[0].finish_reason == "length" and text.usage == chat.usage
        assert text.model_extra["ltrr"]["arm"] == chat.model_extra["ltrr"]["arm"]
        assert text.model_extra["ltrr"]["passages"] == chat.model_extra["ltrr"]["passages"]
        listed = client.completions.create(model="none", prompt=[q])  # a list of one prompt is that prompt
        assert listed.choices[0].text == "canberra is the capital city of australia"
        chunks = list(client.completions.create(model="none", prompt=q, max_tokens=2, stream=True))
        assert "".join(c.choices[0].text for c in chunks) == "canberra is"
        assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].object == "text_completion"
        n_calls = len(gen.params)
        for extra, param in [({"prompt": [q, q]}, "prompt"), ({"prompt": [1, 2, 3]}, "prompt"),
                             ({"prompt": "  "}, "prompt"), ({"prompt": None}, "prompt"),
                             ({"prompt": "x" * 201}, "prompt"), ({"prompt": q, "echo": True}, "echo"),
                             ({"prompt": q, "suffix": "!"}, "suffix"), ({"prompt": q, "best_of": 2}, "best_of"),
                             ({"prompt": q, "logprobs": 2}, "logprobs"), ({"prompt": q, "max_tokens": 0}, "max_tokens")]:
            r = httpx.post(live.url + "/v1/completions", json={"model": "none", **extra})
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == param and "Traceback" not in r.text, (extra, r.text)
        assert len(gen.params) == n_calls  # a refused request generates nothing
        unknown = httpx.post(live.url + "/v1/completions", json={"model": "gpt-4", "prompt": q})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("field, value", [("max_queue", 0), ("max_queue", -1), ("timeout_s", 0), ("max_tokens", 0)])
def test_server_limits_must_be_positive(field, value):
    """asyncio.Queue(0) has no bound: --max-queue 0 served an unbounded queue."""
    from ltrr._errors import ConfigError
    from ltrr.serve import ServeSettings

    with pytest.raises(ConfigError, match=r"must be (an integer >= 1|a number > 0), got -?[0-9]"):
        ServeSettings(**{field: value})


class SlowService:
    """A stand-in service whose answers wait for a signal: the queue can be filled."""

    def __init__(self):
        self.release = threading.Event()

    def models(self):
        return [{"id": "ltrr", "kind": "router", "detail": ""}]

    def check_model(self, model):
        from ltrr._errors import DataError

        if model != "ltrr":
            raise DataError(f"unknown model {model!r}")

    def route(self, model, question):
        return {"model": model, "arm": "none", "cost": 0.0, "ranking": [], "passages": []}

    def answer(self, routed, question, decoding=None):
        self.release.wait(10)
        return {"text": "ok", "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def test_wrong_key_full_queue_and_timeout():
    from ltrr.serve import ServeSettings, create_app

    svc = SlowService()
    # the 3 s timeout leaves the three staggered requests (0.6 s) ample room to arrive before the
    # first one's wait ends, on a loaded machine too
    settings = ServeSettings(api_key="s3cret", max_queue=1, timeout_s=3.0)
    with Live(create_app(svc, settings)) as live:
        with pytest.raises(openai.AuthenticationError, match="invalid API key"):
            _client(live, "wrong").models.list()
        assert _client(live, "s3cret").models.list().data[0].id == "ltrr"
        body = {"model": "ltrr", "messages": [{"role": "user", "content": "q"}]}
        head = {"Authorization": "Bearer s3cret"}
        out = {}

        def post(i):
            out[i] = httpx.post(live.url + "/v1/chat/completions", json=body, headers=head, timeout=20)

        threads = [threading.Thread(target=post, args=(i,)) for i in range(3)]
        for t in threads:  # one is generating, one waits in the queue, the third finds it full
            t.start()
            time.sleep(0.3)
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in out.values())
        assert codes == [429, 503, 503], codes  # nobody is released within the 3 s timeout
        assert any(r.json()["error"]["type"] == "rate_limit_error" for r in out.values())
        svc.release.set()
        time.sleep(0.5)
        ok = httpx.post(live.url + "/v1/chat/completions", json=body, headers=head, timeout=20)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "ok"


def test_serve_bad_model_folder(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "no such model folder" in capsys.readouterr().err
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "router.json").write_text(json.dumps({"format": 0, "ltrr_version": "0.0.1"}))
    assert main(["serve", str(tmp_path / "old")]) == 2
    assert "router saved in format 0" in capsys.readouterr().err


def test_serve_refuses_a_remote_generator_the_folder_names(trained, tmp_path, capsys):
    """`ltrr serve MODEL` without --config answers with the generator the folder records; a
    remote one (it would choose where questions and an API key go) is one error line before the
    server listens."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(trained[2], model)
    rec = {"generation": {"backend": "openai", "model": "x", "base_url": "http://attacker.example/v1",
                          "api_key_env": "HOME"}, "template": "short_answer"}
    (model / "generator.json").write_text(json.dumps(rec))
    assert main(["serve", str(model), "--port", str(_free_port())]) == 2
    err = capsys.readouterr().err
    assert "attacker.example" in err and "does not choose where questions" in err and "listening" not in err


def test_packed_context_in_serving_and_route_answer(trained, capsys):
    """[generation] context_budget: serving and `LTRRouter.answer` read the top routed arms'
    passages packed into the budget (the reader counts ~1.3 tokens a word), never over it."""
    from ltrr.generation import generators
    from ltrr.packing import PackSpec
    from ltrr.routers.ltr import LTRRouter
    from ltrr.serve import RoutedRAG

    root, cfg, model = trained
    reader = generators.get("test-last-doc")()
    spec = PackSpec(budget=40, top_m=2, depth=3)
    service = RoutedRAG(model, generator=reader, packing=spec)
    q = "what is the capital of paris 3"
    routed = service.route("ltrr", q)
    tokens = sum(reader.count_tokens(p["text"]) for p in routed["passages"])
    assert 0 < tokens <= 40 and len({p["docid"] for p in routed["passages"]}) == len(routed["passages"])
    assert service.route("none", q)["passages"] == []  # closed-book reads no context
    out = LTRRouter.load(model).answer(q, reader, packing=spec)
    assert out["context_tokens"] is not None and out["context_tokens"] <= 40 and out["passages"]
    assert main(["route", str(model), q, "--token-budget", "64"]) == 2
    assert "add --answer" in capsys.readouterr().err
    # a prompt budget that drops a passage: the result lists what the prompt held, and says so

    class Small(type(reader)):
        context_length = 90  # the 33-token packed context fits the packing; the prompt around it does not

    small = Small()
    cut = LTRRouter.load(model).answer(q, small, packing=PackSpec(budget=100, top_m=2, depth=3))
    assert cut["dropped_passages"] == 1 and len(cut["passages"]) == 2  # of the 3 packed
    whole = LTRRouter.load(model).answer(q, reader, packing=spec)
    assert (whole["dropped_passages"], whole["trimmed_passages"]) == (0, 0)
    # `ltrr route --answer --config`: the config's generator, template and packing, as serve takes them
    packed = cfg.parent / "srv-packed.toml"
    packed.write_text(cfg.read_text().replace('[generation]\n', '[generation]\ncontext_budget = 40\n', 1))
    assert main(["route", str(model), q, "--answer", "--config", str(packed), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("answer (") for line in lines)
    assert any(line.startswith("context: ") and "tokens" in line for line in lines)  # the packed context, said
    assert main(["route", str(model), q, "--answer", "--config", str(cfg)]) == 0  # no context_budget: one arm
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("answer (") for line in lines)
    assert not any(line.startswith("context: ") for line in lines)


def test_one_routing_path_and_no_state_between_calls(server):
    """The LTR router's route, the server and a RoutedPipeline rank a question alike (one code
    path), and routing leaves nothing on the router (no last results, no cached pool)."""
    from ltrr.routers import LTRRouter, RoutedPipeline

    live, service, model = server
    router = LTRRouter.load(model)
    state = set(vars(router))
    q = "what is the capital of paris 3"
    routed = RoutedPipeline.from_router(router).route(q)
    assert routed.ranking.equals(router.route(q))
    assert set(vars(router)) == state
    served = service.route("ltrr", q)
    assert [(x["arm"], x["rank"]) for x in served["ranking"]] == list(zip(routed.ranking["arm"], routed.ranking["rank"],
                                                                        strict=True))
    assert [p["docid"] for p in served["passages"]] == routed.arm_passages()["docid"].astype(str).tolist()


def test_generator_config_is_served_behind_the_generation_cache(trained):
    """``RoutedRAG(generator={...})`` builds the backend behind the default generation cache, as
    the pipeline and `LTRRouter.answering_generator` do: a repeated question is a cache hit."""
    from ltrr.data.io import default_generation_cache
    from ltrr.generation.cache import CachedGenerator
    from ltrr.serve import RoutedRAG

    _, _, model = trained
    service = RoutedRAG(model, generator={"backend": "test-last-doc"})
    assert isinstance(service.generator, CachedGenerator)
    assert service.generator.cache.path == default_generation_cache()
    q = "what is the capital of paris 3 (cached)"
    routed = service.route("ltrr", q)
    first = service.answer(routed, q)
    calls = service.generator.generator_calls
    assert calls >= 1
    assert service.answer(routed, q) == first and service.generator.generator_calls == calls
