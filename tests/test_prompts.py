"""Prompt templates, prompt building and truncation, answer parsing, and the fallback path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.generation import (
    DecodingParams,
    Generation,
    Generator,
    answer_batch,
    answer_with_fallback,
    available_templates,
    build_prompt,
    format_documents,
    load_template,
    parse_answer,
)

THINK = load_template("think_answer")
SHORT = load_template("short_answer")


class Scripted(Generator):
    """Answers with ``respond(user_message)``; records every call."""

    backend = "scripted"
    identity = "scripted"

    def __init__(self, respond: Callable[[str], str | Generation], context_length: int = 2048):
        self.respond = respond
        self._ctx = context_length
        self.calls: list[tuple[list, DecodingParams]] = []

    @property
    def context_length(self) -> int:
        return self._ctx

    def generate(self, prompts: Sequence, params: DecodingParams | None = None) -> list[Generation]:
        self.calls.append((list(prompts), params))
        out = []
        for p in prompts:
            r = self.respond(p[-1]["content"])
            out.append(r if isinstance(r, Generation) else Generation(text=r, completion_tokens=3))
        return out


# ----------------------------------------------------------------------------- templates


def test_packaged_templates():
    assert {"think_answer", "short_answer"} <= set(available_templates())
    assert THINK.identity == "think_answer@1" and THINK.answer_format == "tagged"
    assert SHORT.identity == "short_answer@1" and SHORT.answer_format == "plain"
    assert THINK.default_params() == DecodingParams(max_new_tokens=THINK.max_new_tokens)
    assert THINK.fallback_params(DecodingParams(json_mode=True, seed=3)) == DecodingParams(
        max_new_tokens=THINK.fallback_max_new_tokens, seed=3
    )
    for t in (THINK, SHORT):
        assert load_template(t) is t


def test_unknown_template_lists_choices():
    with pytest.raises(
        ConfigError, match="unknown prompt template 'nope'.*few_shot, short_answer, short_answer_b, think_answer"
    ):
        load_template("nope")
    with pytest.raises(ConfigError, match="does not exist"):
        load_template("/no/such/file.toml")


VALID = """
name = "mine"
version = 3
answer_format = "plain"
rag = "{documents}\\nQ: {question}"
no_retrieval = "Q: {question}"
fallback_rag = "{documents}\\nQ: {question} (short)"
fallback_no_retrieval = "Q: {question} (short)"
document = "[{index}] {title}: {text}"
system = "Be brief."
[decoding]
max_new_tokens = 12
"""


def test_user_template_file(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(VALID)
    t = load_template(str(path))
    assert t.identity == "mine@3" and t.max_new_tokens == 12 and t.fallback_max_new_tokens == 32
    build = build_prompt(t, "Who?", [{"text": "Alpha text.", "title": "Alpha"}, "Beta text."])
    assert build.messages[0] == {"role": "system", "content": "Be brief."}
    assert build.prompt == "[1] Alpha: Alpha text.\n\n[2] : Beta text.\nQ: Who?"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.replace('name = "mine"\n', ""), "missing key 'name'"),
        (lambda s: s.replace('"plain"', '"xml"'), "answer_format' must be one of"),
        (
            lambda s: s.replace('rag = "{documents}\\nQ: {question}"', 'rag = "Q: {question}"'),
            "'rag' must use the placeholders",
        ),
        (
            lambda s: s.replace(
                'no_retrieval = "Q: {question}"', 'no_retrieval = "Q: {question} {documents}"'
            ),
            "may only use the placeholders",
        ),
        (lambda s: s.replace("(short)", "{oops"), "not a valid format string"),
        (lambda s: "extra_key = 1\n" + s, "unknown keys \\['extra_key'\\]"),
        (lambda s: s + "\nextra_key = 1\n", "unknown keys in \\[decoding\\]"),
        (lambda s: s.replace("max_new_tokens = 12", "max_new_tokens = 0"), "an integer >= 1, got 0"),
        (lambda s: s.replace("version = 3", "version = [3"), "invalid TOML"),
    ],
)
def test_invalid_templates(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(edit(VALID))
    with pytest.raises(ConfigError, match=message):
        load_template(path)


# ------------------------------------------------------------------------------- building


def test_rag_prompt_numbers_documents_from_one():
    build = build_prompt(
        THINK,
        "  What is the capital of Australia? ",
        ["Canberra is the capital.", "Sydney is big."],
    )
    p = build.prompt
    assert "Document 1: Canberra is the capital.\n\nDocument 2: Sydney is big." in p
    assert "Question: What is the capital of Australia?" in p
    assert "<think>" in p and "<answer>" in p
    assert build.kind == "rag" and build.n_passages == 2 and not build.truncated
    assert build.messages == [{"role": "user", "content": p}]
    assert build.budget is None and build.prompt_tokens is None


def test_no_retrieval_prompt_has_no_documents():
    for passages in (None, []):
        build = build_prompt(THINK, "Who wrote Hamlet?", passages)
        assert build.kind == "no_retrieval" and "Document" not in build.prompt
        assert "Who wrote Hamlet?" in build.prompt


def test_fallback_prompts_with_and_without_documents():
    with_docs = build_prompt(THINK, "Q?", ["doc text"], fallback=True)
    assert with_docs.kind == "fallback_rag" and "Document 1: doc text" in with_docs.prompt
    assert "answer only" in with_docs.prompt and "<think>" not in with_docs.prompt
    without = build_prompt(SHORT, "Q?", None, fallback=True)
    assert without.kind == "fallback_no_retrieval" and "Document" not in without.prompt


def test_format_documents_and_bad_passages():
    assert format_documents(THINK, ["a", {"text": " b "}]) == "Document 1: a\n\nDocument 2: b"
    with pytest.raises(DataError, match="a passage must be a string or a mapping"):
        format_documents(THINK, [{"body": "x"}])
    with pytest.raises(DataError, match="non-empty string"):
        build_prompt(THINK, "   ", ["a"])


def test_braces_in_passages_are_literal():
    build = build_prompt(THINK, "Q {x}?", ["set {a, b} and {question}"])
    assert "Document 1: set {a, b} and {question}" in build.prompt and "Q {x}?" in build.prompt


# ----------------------------------------------------------------------------- truncation


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_truncation_drops_from_the_last_passage_backwards():
    gen = Scripted(lambda _: "", context_length=400)
    passages = [words(60, "a"), words(60, "b"), words(60, "c"), words(60, "d")]
    build = build_prompt(THINK, "Q?", passages, generator=gen, max_new_tokens=100)
    assert build.budget == 300
    assert build.prompt_tokens <= 300
    assert build.n_dropped_passages >= 1 and build.n_trimmed_passages == 0
    kept = 4 - build.n_dropped_passages
    assert f"Document {kept}:" in build.prompt and f"Document {kept + 1}:" not in build.prompt
    assert "a59" in build.prompt  # the first passage is kept whole
    assert build.n_truncated_passages == build.n_dropped_passages and build.truncated


def test_truncation_trims_the_first_passage_when_alone_too_long():
    build = build_prompt(SHORT, "Q?", [words(500, "a"), words(50, "b")], max_prompt_tokens=200)
    assert build.n_dropped_passages == 1 and build.n_trimmed_passages == 1
    assert build.n_truncated_passages == 2
    assert "a0 a1" in build.prompt and "a499" not in build.prompt and "b0" not in build.prompt
    assert 150 < build.prompt_tokens <= 200  # trimmed to fill the budget, not far below it


def test_truncation_uses_the_tighter_of_context_and_max_prompt_tokens():
    gen = Scripted(lambda _: "", context_length=1000)
    build = build_prompt(SHORT, "Q?", [words(300, "a")], generator=gen, max_prompt_tokens=100)
    assert build.budget == 100 and build.prompt_tokens <= 100 and build.n_trimmed_passages == 1


def test_question_that_cannot_fit_raises_and_fails_only_its_item():
    gen = Scripted(lambda _: "short answer", context_length=120)
    with pytest.raises(DataError, match="even without passage text"):
        build_prompt(SHORT, words(200, "q"), ["p"], generator=gen)
    results = answer_batch(gen, SHORT, [(words(200, "q"), ["p"]), ("Fine?", ["p"])])
    assert results[0].answer is None and "even without passage text" in results[0].error
    assert results[1].ok and results[1].answer == "short answer"
    assert len(gen.calls) == 1 and len(gen.calls[0][0]) == 1


def test_truncation_count_reaches_the_generation():
    gen = Scripted(lambda _: "<answer>x</answer>", context_length=500)
    res = answer_with_fallback(gen, THINK, "Q?", [words(100, "a"), words(100, "b")])
    assert res.n_truncated_passages >= 1
    assert res.generations[0].truncated_passages == res.n_truncated_passages


# -------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>Doc 1 is relevant.</think>\n<answer>Canberra</answer>", "Canberra"),
        ("<answer>  Canberra \n</answer>", "Canberra"),
        ("<ANSWER>Canberra</Answer>", "Canberra"),
        ("The answer is Canberra.", None),  # missing tags
        ("", None),
        ("<answer>Canberra", None),  # unclosed
        ("Canberra</answer>", None),  # closed without opening
        ("<answer><answer>Canberra</answer></answer>", None),  # nested
        ("<answer></answer>", None),  # empty
        ("<answer>Canberra</answer> or <answer>Sydney</answer>", None),  # two disagreeing answers
        ("<answer>Canberra</answer>\n<answer>canberra </answer>", "Canberra"),  # repeated answer
        (
            "<think>I will write <answer>x</answer> later</think><answer>Canberra</answer>",
            "Canberra",
        ),
        ("<think>never closed <answer>Canberra</answer>", "Canberra"),  # ends on its answer: answered
        # cut off while reasoning: a tag it mentions is no answer (the fallback asks again)
        ("<think>The rule is to put it between <answer> and </answer>. Document 1 says Paris is the", None),
        ("<think>I will write <answer>Lyon</answer> maybe. Actually Document 2 says", None),
        ("<answer>first</answer></answer>", None),
    ],
)
def test_parse_answer_tagged(text, expected):
    assert parse_answer(text, THINK) == expected


def test_parse_answer_plain():
    assert parse_answer("  Canberra.\n", SHORT) == "Canberra."
    assert parse_answer(" \n ", SHORT) is None
    assert parse_answer("<answer>x</answer>", SHORT) == "<answer>x</answer>"


# ------------------------------------------------------------------------------- fallback


def test_well_formed_answer_needs_no_fallback():
    gen = Scripted(lambda _: "<think>Document 1 is relevant.</think><answer>Canberra</answer>")
    res = answer_with_fallback(gen, THINK, "Capital of Australia?", ["Canberra is the capital."])
    assert res.ok and res.answer == "Canberra" and not res.used_fallback
    assert len(gen.calls) == 1 and res.raw_output.startswith("<think>")
    assert gen.calls[0][1] == THINK.default_params()
    assert res.prompt_tokens == 0 and res.completion_tokens == 3


def test_ill_formed_answer_runs_the_fallback():
    def respond(user: str) -> str:
        return "  Canberra \n" if "answer only" in user else "I think it is Canberra but <answer>"

    gen = Scripted(respond)
    res = answer_with_fallback(gen, THINK, "Capital of Australia?", ["Canberra is the capital."])
    assert res.ok and res.used_fallback and res.answer == "Canberra"
    assert res.raw_output == "I think it is Canberra but <answer>"
    assert len(res.generations) == 2 and res.fallback_prompt.kind == "fallback_rag"
    assert "Document 1: Canberra is the capital." in res.fallback_prompt.prompt
    assert gen.calls[1][1].max_new_tokens == THINK.fallback_max_new_tokens


def test_fallback_without_documents_and_tagged_fallback_output():
    gen = Scripted(lambda u: "<answer>Shakespeare</answer>" if "answer only" in u else "no tags")
    res = answer_with_fallback(gen, THINK, "Who wrote Hamlet?", None)
    assert res.used_fallback and res.answer == "Shakespeare"
    assert res.fallback_prompt.kind == "fallback_no_retrieval"


def test_empty_fallback_output_is_an_empty_answer_not_a_failure():
    gen = Scripted(lambda u: "   ")
    res = answer_with_fallback(gen, SHORT, "Q?", ["p"])
    assert res.ok and res.used_fallback and res.answer == ""


def test_plain_template_uses_the_whole_output():
    gen = Scripted(lambda _: " The capital of Australia is Canberra.\n")
    res = answer_with_fallback(gen, SHORT, "Capital of Australia?", ["Canberra is the capital."])
    assert res.answer == "The capital of Australia is Canberra." and not res.used_fallback


def test_failed_generation_is_a_failed_item_without_fallback():
    gen = Scripted(lambda _: Generation(text="", error="HTTP 500"))
    res = answer_with_fallback(gen, THINK, "Q?", ["p"])
    assert not res.ok and res.answer is None and res.error == "HTTP 500"
    assert not res.used_fallback and len(gen.calls) == 1


def test_failed_fallback_is_a_failed_item():
    gen = Scripted(
        lambda u: Generation(text="", error="timeout") if "answer only" in u else "no tags"
    )
    res = answer_with_fallback(gen, THINK, "Q?", ["p"])
    assert not res.ok and res.answer is None and "fallback generation failed: timeout" in res.error


def test_answer_batch_sends_whole_batches():
    gen = Scripted(
        lambda u: "x" if "answer only" in u else ("<answer>A</answer>" if "ALPHA" in u else "??")
    )
    items = [("ALPHA?", ["p"]), ("two?", ["p"]), ("three?", None)]
    results = answer_batch(gen, THINK, items, DecodingParams(max_new_tokens=50))
    assert [r.answer for r in results] == ["A", "x", "x"]
    assert [r.used_fallback for r in results] == [False, True, True]
    assert [len(c[0]) for c in gen.calls] == [3, 2]
    assert gen.calls[0][1].max_new_tokens == 50


def test_few_shot_examples_are_earlier_chat_turns():
    from ltrr.generation.prompts import build_prompt, load_template

    t = load_template("few_shot")
    assert len(t.examples) == 3
    rag = build_prompt(t, "Who?", ["Some passage."]).messages
    assert [m["role"] for m in rag] == ["user", "assistant"] * 3 + ["user"]
    assert rag[0]["content"].startswith("Document 1: Lake Varos") and rag[1]["content"] == "A glacier"
    assert rag[-1]["content"].startswith("Document 1: Some passage.") and rag[-1]["content"].endswith("Question: Who?")
    closed = build_prompt(t, "Who?").messages
    assert [m["role"] for m in closed] == ["user", "assistant"] * 3 + ["user"]
    assert "Document" not in closed[0]["content"]
    fallback = build_prompt(t, "Who?", ["Some passage."], fallback=True).messages
    assert [m["role"] for m in fallback] == ["user"]  # fallbacks carry no examples


@pytest.mark.parametrize("examples, match", [
    ("examples = 3", "'examples' must be an array of tables"),
    ("[[examples]]\nquestion = 'q'", "example 1: question and answer must be non-empty strings"),
    ("[[examples]]\nquestion = 'q'\nanswer = 'a'\nhint = 'x'", "example 1 must be a table with question, answer"),
])
def test_bad_examples_are_clear_errors(tmp_path, examples, match):
    from ltrr.generation.prompts import load_template

    src = (Path(__file__).parent.parent / "ltrr" / "prompts" / "short_answer.toml").read_text()
    p = tmp_path / "t.toml"
    p.write_text(examples + "\n" + src if not examples.startswith("[[") else src + "\n" + examples + "\n")
    with pytest.raises(ConfigError, match=match):
        load_template(str(p))
