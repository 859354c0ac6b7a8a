"""Prompt building with passage truncation, answer parsing and the fallback.

Templates (`ltrr.generation.templates`, re-exported here) are TOML files (``ltrr/prompts/*.toml`` ship with the package; a user may pass the path
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ltrr._errors import DataError
from ltrr.generation.base import (  # count_prompt_tokens re-exported: its home was here
    DecodingParams,
    Generation,
    Generator,
    count_prompt_tokens,
)
from ltrr.generation.templates import (  # re-exported: their home was this module
    DEFAULT_TEMPLATE,
    PromptTemplate,
    available_templates,
    load_template,
)

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
        """Whether a passage was dropped or trimmed to fit the budget."""
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
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)


def parse_answer(text: str, template: PromptTemplate | str = DEFAULT_TEMPLATE) -> str | None:
    """Extract the answer from a model output; None when there is no well-formed answer.

    ``plain`` templates: the whole output, stripped (None when empty).

    ``tagged`` templates: the content of ``<answer>...</answer>`` (tags case-insensitive), after
    removing closed ``<think>...</think>`` blocks so that a tag mentioned while reasoning does not
    count. Ill-formed, hence None: no tags, an unclosed or unopened tag, nested tags, an empty
    answer, several answer blocks that disagree, or a ``<think>`` still open before the first
    answer tag with text after the last one (reasoning cut off by the token budget; the fallback
    prompt then asks again). An unclosed ``<think>`` that ends on its answer block is answered. Several blocks with the same content (small
    models often repeat themselves) give that content.

    Examples
    --------
    >>> parse_answer("<think>...</think> <answer> Canberra </answer>")
    'Canberra'
    >>> parse_answer("<answer>Canberra") is None
    True
    >>> parse_answer("<think>I will write <answer>Lyon</answer> maybe. Actually Document 2") is None
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
    unclosed = _THINK_OPEN.search(body)
    if unclosed is not None and unclosed.start() < tags[0].start() and body[tags[-1].end():].strip():
        # a <think> never closed, and text after the last answer: still reasoning (cut off by the
        # token budget), so a tag it mentions is no answer. One that ends on its answer block (a
        # small model forgetting </think>) is answered.
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
        """Whether the item succeeded (``error`` is None), so that its ``answer`` may be scored."""
        return self.error is None

    @property
    def n_truncated_passages(self) -> int:
        """Passages of ``prompt`` dropped or trimmed to fit the budget (0 without a prompt)."""
        return self.prompt.n_truncated_passages if self.prompt else 0

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of every generation, the fallback's included."""
        return sum(g.prompt_tokens for g in self.generations)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens of every generation, the fallback's included."""
        return sum(g.completion_tokens for g in self.generations)

    @property
    def cached(self) -> bool:
        """Whether every generation came from the cache (False when there is none)."""
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
