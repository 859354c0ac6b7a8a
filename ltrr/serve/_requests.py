"""Reading and checking the body of a request to ltrr's OpenAI-compatible server.

Each function reads one part of a request (the JSON body, the question, the decoding, the
streaming options) and raises `Reject` (an OpenAI error: status, message, type, param, code)
when a field is wrong or asks for what ltrr cannot do, so that nothing is silently ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ltrr._checks import check_int, check_number, in_range, is_int

__all__ = ["Reject", "parse_json", "question", "prompt", "decoding", "streaming", "SEED_RANGE"]

SEED_RANGE = (-(2**63), 2**63 - 1)  # OpenAI's seed is a signed 64-bit integer


class Reject(Exception):
    """A request refused with an OpenAI error body (``headers``: extra response headers)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param
        self.headers = headers


def _bad_request(param: str) -> Callable[[str], Reject]:
    """The error of a bad value of field ``param``: a 400 naming it."""
    return lambda message: Reject(400, message, param=param)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes) -> Any:
    """The JSON document of a request body; 400 for anything that is not one.

    ValueError covers malformed JSON, bad UTF-8 and an integer of more digits than Python
    converts (``sys.get_int_max_str_digits``); RecursionError a document nested too deeply.
    ``NaN`` and ``Infinity`` are refused: JSON has no such numbers."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise Reject(400, f"the request body is not valid JSON ({exc.__class__.__name__})") from None


def _text(message: dict) -> str:
    """A message's text: its string content, its text parts joined by newlines, or "" (null)."""
    content = message.get("content")
    if content is None:  # an assistant turn that called a tool has none
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Reject(400, "a message's content must be a string, a list of content parts or null", param="messages")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise Reject(400, "a text content part needs a string text", param="messages")
            texts.append(part["text"])
        elif kind == "refusal" and message.get("role") == "assistant":
            continue  # an earlier answer's refusal: history, never read
        else:
            raise Reject(400, f"content parts of type {kind!r} are not supported: ltrr answers text; give "
                              "{\"type\": \"text\", \"text\": ...} parts or a string", param="messages")
    return "\n".join(texts)


def question(body: Any, max_chars: int) -> str:
    """The question of a chat request: its last non-empty user message (validated).

    Only that message is routed and answered: system messages and the earlier turns are checked
    for their shape but never read, so only that message's length counts against ``max_chars``."""
    if not isinstance(body, dict):
        raise Reject(400, "the request body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise Reject(400, "messages must be a non-empty list of {role, content}", param="messages")
    users = []
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise Reject(400, "each message must be an object with a role and a content", param="messages")
        text = _text(m)
        if m["role"] == "user" and text.strip():
            users.append(text)
    if not users:
        raise Reject(400, "messages has no non-empty user message", param="messages")
    if len(users[-1]) > max_chars:
        raise Reject(400, f"the last user message is longer than {max_chars} characters", param="messages")
    return users[-1]


def prompt(body: Any, max_chars: int) -> str:
    """The question of a (legacy) text completion request: its ``prompt``, one string (validated).

    Token-id prompts, several prompts, ``echo``, ``suffix`` and ``best_of`` other than 1 are
    refused: ltrr answers one question per request, in words."""
    if not isinstance(body, dict):
        raise Reject(400, "the request body must be a JSON object")
    text = body.get("prompt")
    if isinstance(text, list) and len(text) == 1 and isinstance(text[0], str):
        text = text[0]
    if isinstance(text, list):
        raise Reject(400, "prompt must be one string (a question): ltrr answers one question per request, "
                          "and token ids are not read", param="prompt")
    if not isinstance(text, str) or not text.strip():
        raise Reject(400, "prompt must be a non-empty string: the question", param="prompt")
    if len(text) > max_chars:
        raise Reject(400, f"prompt is longer than {max_chars} characters", param="prompt")
    for key in ("echo", "suffix"):
        if body.get(key):
            raise Reject(400, f"{key} is not supported by ltrr's server", param=key)
    best_of = body.get("best_of")
    if best_of is not None and (isinstance(best_of, bool) or best_of != 1):
        raise Reject(400, f"best_of must be 1: ltrr answers each request once (got {best_of!r})", param="best_of")
    return text


def _number(body: dict, key: str, low: float, high: float, *, low_open: bool = False) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    return check_number(v, key, low=low, high=high, low_open=low_open, error=_bad_request(key))


def _refuse_unsupported(body: dict) -> None:
    """400 for each field ltrr's answers cannot honour, rather than ignoring it."""
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise Reject(400, f"n must be 1: ltrr answers each request once (got {n!r})", param="n")
    for key in ("logprobs", "top_logprobs", "tools", "functions"):
        if body.get(key):
            raise Reject(400, f"{key} is not supported by ltrr's server", param=key)
    for key in ("tool_choice", "function_call"):  # "none" asks for what ltrr does anyway
        if body.get(key) not in (None, "none"):
            raise Reject(400, f"{key} is not supported by ltrr's server (only \"none\"): it calls no tools",
                         param=key)
    bias = body.get("logit_bias")
    if bias is not None and not isinstance(bias, dict):
        raise Reject(400, f"logit_bias must be an object of token ids to biases, got {bias!r}", param="logit_bias")
    if bias:
        raise Reject(400, "logit_bias is not supported by ltrr's server", param="logit_bias")
    for key in ("presence_penalty", "frequency_penalty"):
        if _number(body, key, -2, 2):
            raise Reject(400, f"{key} is not supported by ltrr's server (only 0)", param=key)
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise Reject(400, "response_format: only {\"type\": \"text\"} is supported", param="response_format")


def decoding(body: dict, max_tokens: int) -> dict[str, Any]:
    """The decoding a request asks for, as `ltrr.generation.DecodingParams` fields (validated).

    Only the fields the request gives: the rest stay as the template recommends. A field ltrr
    cannot honour (``n`` > 1, ``logprobs``, tools and functions, ``logit_bias``, a non-zero
    penalty, a JSON ``response_format``) is a 400 naming it."""
    out: dict[str, Any] = {}
    given = {k: body[k] for k in ("max_tokens", "max_completion_tokens") if body.get(k) is not None}
    if len(set(map(repr, given.values()))) > 1:
        raise Reject(400, "max_tokens and max_completion_tokens differ; give one", param="max_tokens")
    for key, v in given.items():
        out["max_new_tokens"] = check_int(v, key, low=1, high=max_tokens, error=_bad_request(key))
    if (t := _number(body, "temperature", 0, 2)) is not None:
        out["temperature"] = t
    if (t := _number(body, "top_p", 0, 1, low_open=True)) is not None:
        out["top_p"] = t
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not 1 <= len(stop) <= 4 or not all(isinstance(x, str) and x for x in stop):
            raise Reject(400, "stop must be a non-empty string or a list of 1 to 4 of them", param="stop")
        out["stop"] = tuple(stop)
    seed = body.get("seed")
    if seed is not None:
        if not is_int(seed) or not in_range(seed, *SEED_RANGE):
            raise Reject(400, f"seed must be a signed 64-bit integer (in [-2**63, 2**63 - 1]), got {seed!r}",
                         param="seed")
        out["seed"] = seed
    _refuse_unsupported(body)
    return out


def streaming(body: dict) -> tuple[bool, bool]:
    """``(stream, include_usage)`` of a request: ``stream`` must be a boolean, and
    ``stream_options`` (only with ``stream: true``) an object whose ``include_usage`` is one."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise Reject(400, f"stream must be true or false, got {stream!r}", param="stream")
    options = body.get("stream_options")
    if options is None:
        return bool(stream), False
    if not stream:
        raise Reject(400, "stream_options is only allowed with stream: true", param="stream_options")
    if not isinstance(options, dict):
        raise Reject(400, f"stream_options must be an object, got {options!r}", param="stream_options")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise Reject(400, f"stream_options.include_usage must be true or false, got {include!r}",
                     param="stream_options")
    return True, bool(include)
