"""Prompt templates, prompt building with passage truncation, answer parsing and the fallback.

Templates are TOML files (``ltrr/prompts/*.toml`` ship with the package; a user may pass the path
of their own). Two families ship:

- ``think_answer`` (``answer_format = "tagged"``): the LTRR paper's design in our own wording.
  Passages are numbered ``Document i: text`` (1-based), the model weighs each document's
  relevance and reasons inside ``<think>...</think>``, then answers inside
  ``<answer>...</answer>``. Only the content of ``<answer>`` is scored.
- ``short_answer`` (``answer_format = "plain"``): a direct "answer in a few words" prompt for
  small models; the whole output, stripped, is the answer.

Both carry a fallback prompt (with and without documents) that asks for the answer alone; it is
run when the first output has no well-formed answer (`answer_with_fallback`).
"""

from __future__ import annotations

import re
import string
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ltrr._errors import ConfigError, DataError
from ltrr.generation.base import DecodingParams, Generation, Generator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "PromptTemplate",
    "PromptBuild",
    "AnswerResult",
    "available_templates",
    "load_template",
    "format_documents",
    "build_prompt",
    "parse_answer",
    "answer_with_fallback",
    "answer_batch",
    "count_prompt_tokens",
]

DEFAULT_TEMPLATE = "think_answer"
ANSWER_FORMATS = ("tagged", "plain")

# Which placeholders each template string must / may use. Checked on load so that a typo in a
# user's template fails at once, not after an hour of generation.
_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    "rag": ({"question", "documents"}, {"question", "documents"}),
    "no_retrieval": ({"question"}, {"question"}),
    "fallback_rag": ({"question", "documents"}, {"question", "documents"}),
    "fallback_no_retrieval": ({"question"}, {"question"}),
    "document": ({"text"}, {"index", "text", "title"}),
}
_OPTIONAL_STRINGS = {"system": "", "description": "", "document_separator": "\n\n"}


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt template family loaded from TOML.

    Parameters
    ----------
    name, version : str, int
        Name and version; ``identity`` (``name@version``) goes into result tables so that a
        wording change is visible.
    answer_format : {"tagged", "plain"}
        ``tagged``: the answer is the content of ``<answer>...</answer>``; ``plain``: the whole
        stripped output is the answer.
    rag, no_retrieval, fallback_rag, fallback_no_retrieval : str
        ``str.format`` templates over ``{question}`` and (for the ``rag`` variants)
        ``{documents}``.
    document : str
        Format of one passage, over ``{index}`` (1-based), ``{text}`` and ``{title}``.
    document_separator : str
        Joins the formatted passages.
    system : str
        Optional system message ("" leaves the model's own default in place).
    max_new_tokens, fallback_max_new_tokens : int
        Recommended decoding budgets (``[decoding]`` table), used by `default_params`.
    examples : tuple of dict
        Worked examples (``[[examples]]`` tables with ``question``, ``answer`` and optional
        ``documents``), rendered with the same template as earlier user and assistant turns of
        the chat, so that a small model sees the shape of an answer before the question. The
        main prompts use them; the fallback prompts do not.

    Examples
    --------
    >>> t = load_template("think_answer")
    >>> t.identity
    'think_answer@1'
    >>> parse_answer("<think>Document 1 says so.</think><answer>Canberra</answer>", t)
    'Canberra'
    """

    name: str
    version: int
    answer_format: str
    rag: str
    no_retrieval: str
    fallback_rag: str
    fallback_no_retrieval: str
    document: str = "Document {index}: {text}"
    document_separator: str = "\n\n"
    system: str = ""
    description: str = ""
    max_new_tokens: int = 64
    fallback_max_new_tokens: int = 32
    source: str = ""
    examples: tuple = ()

    @property
    def identity(self) -> str:
        return f"{self.name}@{self.version}"

    def default_params(self, **overrides: Any) -> DecodingParams:
        """Greedy `DecodingParams` with this template's ``max_new_tokens``."""
        return DecodingParams(**{"max_new_tokens": self.max_new_tokens, **overrides})

    def fallback_params(self, params: DecodingParams | None = None) -> DecodingParams:
        """``params`` with the fallback's token budget (and no JSON mode)."""
        base = params or self.default_params()
        return replace(base, max_new_tokens=self.fallback_max_new_tokens, json_mode=False)


def available_templates() -> list[str]:
    """Names of the templates that ship with ltrr."""
    folder = resources.files("ltrr").joinpath("prompts")
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def _template_fields(text: str, key: str, source: str) -> set[str]:
    try:
        return {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as exc:
        raise ConfigError(
            f"prompt template {source}: {key!r} is not a valid format string ({exc}); "
            "write literal braces as {{ and }}"
        ) from None


def _from_dict(raw: dict[str, Any], source: str) -> PromptTemplate:
    def fail(msg: str) -> ConfigError:
        return ConfigError(f"prompt template {source}: {msg}")

    for key in ("name", "version", "answer_format", *_FIELDS):
        if key not in raw and key != "document":
            raise fail(f"missing key {key!r}")
    if not isinstance(raw["name"], str) or not raw["name"]:
        raise fail("'name' must be a non-empty string")
    if not isinstance(raw["version"], int) or isinstance(raw["version"], bool):
        raise fail(f"'version' must be an integer, got {raw['version']!r}")
    if raw["answer_format"] not in ANSWER_FORMATS:
        raise fail(f"'answer_format' must be one of {ANSWER_FORMATS}, got {raw['answer_format']!r}")
    values: dict[str, Any] = {
        "name": raw["name"],
        "version": raw["version"],
        "answer_format": raw["answer_format"],
        "source": source,
    }
    for key, (required, allowed) in _FIELDS.items():
        text = raw.get(key, PromptTemplate.document if key == "document" else None)
        if not isinstance(text, str):
            raise fail(f"{key!r} must be a string")
        used = _template_fields(text, key, source)
        if not required <= used:
            raise fail(
                f"{key!r} must use the placeholders {sorted(required)}; it uses {sorted(used)}"
            )
        if not used <= allowed:
            raise fail(
                f"{key!r} may only use the placeholders {sorted(allowed)}; it uses {sorted(used)}"
            )
        values[key] = text
    for key, default in _OPTIONAL_STRINGS.items():
        value = raw.get(key, default)
        if not isinstance(value, str):
            raise fail(f"{key!r} must be a string")
        values[key] = value
    decoding = raw.get("decoding", {})
    if not isinstance(decoding, dict):
        raise fail("[decoding] must be a table")
    unknown_decoding = set(decoding) - {"max_new_tokens", "fallback_max_new_tokens"}
    if unknown_decoding:
        raise fail(f"unknown keys in [decoding]: {sorted(unknown_decoding)}")
    for key in ("max_new_tokens", "fallback_max_new_tokens"):
        if key in decoding:
            v = decoding[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise fail(f"decoding.{key} must be a positive integer, got {v!r}")
            values[key] = v
    values["examples"] = _examples(raw.get("examples", []), fail)
    unknown = set(raw) - {
        "name",
        "version",
        "answer_format",
        *_FIELDS,
        *_OPTIONAL_STRINGS,
        "decoding",
        "examples",
    }
    if unknown:
        raise fail(f"unknown keys {sorted(unknown)}")
    return PromptTemplate(**values)


def _examples(raw: Any, fail) -> tuple:
    if not isinstance(raw, list):
        raise fail("'examples' must be an array of tables ([[examples]])")
    out = []
    for i, ex in enumerate(raw, 1):
        if not isinstance(ex, dict) or set(ex) - {"question", "answer", "documents"}:
            raise fail(f"example {i} must be a table with question, answer and optional documents")
        docs = ex.get("documents", [])
        if not all(isinstance(ex.get(k), str) and ex[k].strip() for k in ("question", "answer")) or \
                not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
            raise fail(f"example {i}: question and answer must be non-empty strings, documents a list of strings")
        out.append({"question": ex["question"].strip(), "answer": ex["answer"].strip(), "documents": tuple(docs)})
    return tuple(out)


def load_template(name_or_path: str | Path | PromptTemplate = DEFAULT_TEMPLATE) -> PromptTemplate:
    """Load a packaged template by name (``think_answer``, ``short_answer``) or a TOML file.

    Raises
    ------
    ConfigError
        Unknown name, missing file, invalid TOML or an invalid template.
    """
    if isinstance(name_or_path, PromptTemplate):
        return name_or_path
    text_name = str(name_or_path)
    path = Path(text_name)
    if path.suffix == ".toml" or path.is_file():
        if not path.is_file():
            raise ConfigError(f"prompt template file {text_name!r} does not exist")
        data, source = path.read_bytes(), str(path)
    else:
        packaged = resources.files("ltrr").joinpath("prompts", f"{text_name}.toml")
        if not packaged.is_file():
            raise ConfigError(
                f"unknown prompt template {text_name!r}; choose one of: "
                f"{', '.join(available_templates())}, or give the path of a .toml file"
            )
        data, source = packaged.read_bytes(), text_name
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"prompt template {source}: invalid TOML ({exc})") from None
    return _from_dict(raw, source)


# ---------------------------------------------------------------------------- building prompts


def _passage_fields(passage: str | Mapping[str, Any]) -> tuple[str, str]:
    if isinstance(passage, str):
        return passage, ""
    if isinstance(passage, Mapping) and isinstance(passage.get("text"), str):
        title = passage.get("title") or ""
        return passage["text"], str(title)
    raise DataError(
        f"a passage must be a string or a mapping with a 'text' string, got {type(passage).__name__}"
    )


def format_documents(template: PromptTemplate, passages: Sequence[str | Mapping[str, Any]]) -> str:
    """Format passages as ``Document 1: ...``, ``Document 2: ...`` (1-based) and join them."""
    parts = []
    for i, passage in enumerate(passages, start=1):
        text, title = _passage_fields(passage)
        parts.append(template.document.format(index=i, text=text.strip(), title=title))
    return template.document_separator.join(parts)


def _estimate_tokens(text: str) -> int:
    return max(1, int(len(text.split()) * 1.3))


def count_prompt_tokens(generator: Generator | None, messages: list[dict[str, str]]) -> int:
    """Tokens of a chat prompt under ``generator`` (exact when the backend can count them).

    Backends that render a chat template expose ``count_prompt_tokens``; otherwise the message
    contents are counted with ``generator.count_tokens`` plus a small per-message overhead.
    """
    if generator is None:
        return sum(_estimate_tokens(m["content"]) + 4 for m in messages)
    exact = getattr(generator, "count_prompt_tokens", None)
    if callable(exact):
        return int(exact(messages))
    return sum(generator.count_tokens(m["content"]) + 4 for m in messages)


@dataclass
class PromptBuild:
    """A built prompt and what was cut to make it fit.

    Attributes
    ----------
    messages : list of dict
        Chat messages (an optional system message, then the user message).
    kind : str
        ``rag``, ``no_retrieval``, ``fallback_rag`` or ``fallback_no_retrieval``.
    n_passages : int
        Passages given.
    n_dropped_passages, n_trimmed_passages : int
        Passages left out entirely (from the last one backwards) and passages whose text was cut.
    prompt_tokens : int or None
        Prompt length in tokens when a budget was checked.
    budget : int or None
        The prompt-token budget that applied (None: no check was possible or asked for).
    """

    messages: list[dict[str, str]]
    kind: str
    n_passages: int = 0
    n_dropped_passages: int = 0
    n_trimmed_passages: int = 0
    prompt_tokens: int | None = None
    budget: int | None = None

    @property
    def prompt(self) -> str:
        """The user message (the prompt for backends without a chat template)."""
        return self.messages[-1]["content"]

    @property
    def n_truncated_passages(self) -> int:
        """Passages dropped or trimmed to fit the budget."""
        return self.n_dropped_passages + self.n_trimmed_passages

    @property
    def truncated(self) -> bool:
        return self.n_truncated_passages > 0


def _messages(template: PromptTemplate, user: str, kind: str = "") -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": template.system}] if template.system else []
    if kind in ("rag", "no_retrieval"):
        for ex in template.examples:
            text = getattr(template, kind)
            if kind == "rag":
                docs = format_documents(template, list(ex["documents"]) or [""])
                msgs.append({"role": "user", "content": text.format(question=ex["question"], documents=docs)})
            else:
                msgs.append({"role": "user", "content": text.format(question=ex["question"])})
            msgs.append({"role": "assistant", "content": ex["answer"]})
    msgs.append({"role": "user", "content": user})
    return msgs


def build_prompt(
    template: PromptTemplate | str,
    question: str,
    passages: Sequence[str | Mapping[str, Any]] | None = None,
    *,
    generator: Generator | None = None,
    max_prompt_tokens: int | None = None,
    max_new_tokens: int | None = None,
    fallback: bool = False,
) -> PromptBuild:
    """Build the chat messages for one question, truncating passages to fit the context.

    The budget is ``generator.context_length - max_new_tokens`` (``max_new_tokens`` defaults to
    the template's), further capped by ``max_prompt_tokens``. When the prompt is over budget,
    passages are dropped from the last one backwards; if the first passage alone is still too
    long its text is trimmed. What was cut is counted in the returned `PromptBuild`; the prompt
    never silently overflows. With neither a generator nor ``max_prompt_tokens`` no check is made.

    Parameters
    ----------
    template : PromptTemplate or str
        A template or the name/path `load_template` accepts.
    question : str
        The question (non-empty).
    passages : sequence of str or mapping, optional
        Retrieved passages (strings or mappings with ``text`` and optional ``title``); None or
        empty builds the no-retrieval prompt.
    fallback : bool
        Build the fallback prompt instead of the main one.

    Raises
    ------
    DataError
        Empty question, or a question that alone does not fit the budget.
    """
    template = load_template(template)
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"the question must be a non-empty string, got {question!r}")
    question = question.strip()
    items = [_passage_fields(p) for p in (passages or [])]
    with_docs = bool(items)
    kind = ("fallback_" if fallback else "") + ("rag" if with_docs else "no_retrieval")
    text_template = getattr(template, kind)

    def render(docs: list[tuple[str, str]]) -> list[dict[str, str]]:
        if with_docs:
            documents = format_documents(template, [{"text": t, "title": ti} for t, ti in docs])
            return _messages(template, text_template.format(question=question, documents=documents), kind)
        return _messages(template, text_template.format(question=question), kind)

    if max_new_tokens is None:
        max_new_tokens = template.fallback_max_new_tokens if fallback else template.max_new_tokens
    budget = max_prompt_tokens
    if generator is not None:
        ctx_budget = int(generator.context_length) - int(max_new_tokens)
        budget = ctx_budget if budget is None else min(budget, ctx_budget)
    build = PromptBuild(messages=render(items), kind=kind, n_passages=len(items), budget=budget)
    if budget is None:
        return build

    def count(msgs: list[dict[str, str]]) -> int:
        return count_prompt_tokens(generator, msgs)

    n_tokens = count(build.messages)
    kept = list(items)
    while n_tokens > budget and len(kept) > 1:
        kept.pop()
        build.n_dropped_passages += 1
        build.messages = render(kept)
        n_tokens = count(build.messages)
    if n_tokens > budget and kept:
        # Binary search on the number of words of the one passage left: the largest prefix
        # that fits (token counts are monotone in the prefix length up to tokenizer merges).
        text, title = kept[0]
        words = text.split()
        lo, hi = 0, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(render([(" ".join(words[:mid]), title)])) <= budget:
                lo = mid
            else:
                hi = mid - 1
        build.n_trimmed_passages = 1
        build.messages = render([(" ".join(words[:lo]), title)])
        n_tokens = count(build.messages)
    if n_tokens > budget:
        raise DataError(
            f"the prompt for question {question[:80]!r} needs {n_tokens} tokens even without "
            f"passage text, over the budget of {budget} (context minus {max_new_tokens} new "
            "tokens); shorten the question or use a model with a longer context"
        )
    build.prompt_tokens = n_tokens
    return build


# ----------------------------------------------------------------------------- parsing answers

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_ANSWER_TAG = re.compile(r"<(/?)answer>", re.IGNORECASE)


def parse_answer(text: str, template: PromptTemplate | str = DEFAULT_TEMPLATE) -> str | None:
    """Extract the answer from a model output; None when there is no well-formed answer.

    ``plain`` templates: the whole output, stripped (None when empty).

    ``tagged`` templates: the content of ``<answer>...</answer>`` (tags case-insensitive), after
    removing closed ``<think>...</think>`` blocks so that a tag mentioned while reasoning does not
    count. Ill-formed, hence None: no tags, an unclosed or unopened tag, nested tags, an empty
    answer, or several answer blocks that disagree. Several blocks with the same content (small
    models often repeat themselves) give that content.

    Examples
    --------
    >>> parse_answer("<think>...</think> <answer> Canberra </answer>")
    'Canberra'
    >>> parse_answer("<answer>Canberra") is None
    True
    """
    template = load_template(template)
    if not isinstance(text, str):
        return None
    if template.answer_format == "plain":
        return text.strip() or None
    body = _THINK_BLOCK.sub(" ", text)
    tags = list(_ANSWER_TAG.finditer(body))
    if not tags or len(tags) % 2:
        return None
    answers = []
    for open_tag, close_tag in zip(tags[::2], tags[1::2], strict=True):
        if open_tag.group(1) or not close_tag.group(1):
            return None
        content = body[open_tag.end() : close_tag.start()].strip()
        if not content:
            return None
        answers.append(content)
    if len({" ".join(a.split()).casefold() for a in answers}) > 1:
        return None
    return answers[0]


def _fallback_text(text: str, template: PromptTemplate) -> str:
    """The fallback output as an answer: tagged content if well-formed, else the stripped text."""
    tagged = parse_answer(text, replace(template, answer_format="tagged"))
    if tagged is not None:
        return tagged
    return _ANSWER_TAG.sub(" ", _THINK_BLOCK.sub(" ", text)).strip()


# ------------------------------------------------------------------------- answer with fallback


@dataclass
class AnswerResult:
    """The scored answer for one question and how it was obtained.

    Attributes
    ----------
    answer : str or None
        What gets scored: the content of ``<answer>`` (or the whole output for plain templates),
        or the fallback's text. None only when a generation failed (``error`` is set): such an
        item must be recorded as failed, never scored.
    raw_output : str
        The first generation's text.
    used_fallback : bool
        True when the first output had no well-formed answer and the fallback prompt was run.
    generations : list of Generation
        The first generation, then the fallback's when it ran.
    prompt, fallback_prompt : PromptBuild
        The prompts sent (with truncation counts).
    error : str or None
        Why the item failed.
    """

    answer: str | None
    raw_output: str
    used_fallback: bool
    generations: list[Generation] = field(default_factory=list)
    prompt: PromptBuild | None = None
    fallback_prompt: PromptBuild | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def n_truncated_passages(self) -> int:
        return self.prompt.n_truncated_passages if self.prompt else 0

    @property
    def prompt_tokens(self) -> int:
        return sum(g.prompt_tokens for g in self.generations)

    @property
    def completion_tokens(self) -> int:
        return sum(g.completion_tokens for g in self.generations)

    @property
    def cached(self) -> bool:
        return bool(self.generations) and all(g.cached for g in self.generations)


def answer_batch(
    generator: Generator,
    template: PromptTemplate | str,
    items: Sequence[tuple[str, Sequence[str | Mapping[str, Any]] | None]],
    params: DecodingParams | None = None,
    *,
    max_prompt_tokens: int | None = None,
) -> list[AnswerResult]:
    """`answer_with_fallback` over many ``(question, passages)`` items.

    All first prompts go to the generator in one call, then all fallback prompts in a second
    one, so that backends with concurrency (``openai``) and the cache see whole batches.
    """
    template = load_template(template)
    params = params or template.default_params()
    fb_params = template.fallback_params(params)
    for q, _ in items:
        if not isinstance(q, str) or not q.strip():
            raise DataError(f"the question must be a non-empty string, got {q!r}")
    results = [AnswerResult(answer=None, raw_output="", used_fallback=False) for _ in items]

    def build_all(indices: list[int], fallback: bool, max_new: int) -> dict[int, PromptBuild]:
        builds = {}
        for i in indices:
            question, passages = items[i]
            # A prompt that cannot fit fails its own item, like a failed generation, so that one
            # oversized question does not stop a long labelling run.
            try:
                builds[i] = build_prompt(
                    template,
                    question,
                    passages,
                    generator=generator,
                    max_prompt_tokens=max_prompt_tokens,
                    max_new_tokens=max_new,
                    fallback=fallback,
                )
            except DataError as exc:
                results[i].error = str(exc)
        return builds

    firsts = build_all(list(range(len(items))), False, params.max_new_tokens)
    need_fallback: list[int] = []
    if firsts:
        gens = generator.generate([b.messages for b in firsts.values()], params)
        for (i, build), gen in zip(firsts.items(), gens, strict=True):
            res = results[i]
            gen.truncated_passages = build.n_truncated_passages
            res.prompt, res.raw_output = build, gen.text
            res.generations.append(gen)
            if not gen.ok:
                res.error = gen.error
            elif (answer := parse_answer(gen.text, template)) is None:
                need_fallback.append(i)
            else:
                res.answer = answer
    fallbacks = build_all(need_fallback, True, fb_params.max_new_tokens)
    if fallbacks:
        gens = generator.generate([b.messages for b in fallbacks.values()], fb_params)
        for (i, build), gen in zip(fallbacks.items(), gens, strict=True):
            res = results[i]
            gen.truncated_passages = build.n_truncated_passages
            res.used_fallback, res.fallback_prompt = True, build
            res.generations.append(gen)
            if gen.ok:
                # An empty fallback output is a (wrong) answer of the model, not a failure.
                res.answer = _fallback_text(gen.text, template)
            else:
                res.error = f"fallback generation failed: {gen.error}"
    return results


def answer_with_fallback(
    generator: Generator,
    template: PromptTemplate | str,
    question: str,
    passages: Sequence[str | Mapping[str, Any]] | None = None,
    params: DecodingParams | None = None,
    *,
    max_prompt_tokens: int | None = None,
) -> AnswerResult:
    """Generate, parse the answer, and run the fallback prompt when no answer is well-formed.

    Examples
    --------
    >>> from ltrr.generation.base import Generation, Generator
    >>> class Echo(Generator):
    ...     backend = "echo"
    ...     identity = "echo"
    ...     def generate(self, prompts, params=None):
    ...         return [Generation(text="<answer>Canberra</answer>") for _ in prompts]
    >>> r = answer_with_fallback(Echo(), "think_answer", "Capital of Australia?", ["Canberra is..."])
    >>> r.answer, r.used_fallback
    ('Canberra', False)
    """
    return answer_batch(
        generator, template, [(question, passages)], params, max_prompt_tokens=max_prompt_tokens
    )[0]
