"""Prompt templates: TOML files that say how to ask a generator (`PromptTemplate`).

Templates ship in ``ltrr/prompts/*.toml`` (`available_templates`); a user may pass the path of
their own (`load_template`). Each string's placeholders are checked on load, so a typo fails at
once. `ltrr.generation.prompts` builds prompts from them and parses the answers.
"""

from __future__ import annotations

import string
import sys
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ltrr._checks import check_int, is_int
from ltrr._errors import ConfigError
from ltrr.generation.base import DecodingParams

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "ANSWER_FORMATS",
    "DEFAULT_TEMPLATE",
    "PromptTemplate",
    "available_templates",
    "load_template",
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
    >>> from ltrr.generation.prompts import parse_answer
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
        """``<name>@<version>``: the template that labels record."""
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
    if not is_int(raw["version"]):
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
            check_int(v, f"decoding.{key}", low=1, error=fail)
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
