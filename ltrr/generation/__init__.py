"""LLM generation: backends found by name, prompt templates, answer parsing and an LLM-call cache.

Backends (registry `generators`; `make_generator` builds one from a config table):

- ``transformers`` (default): a local Hugging Face folder or a GGUF file; by default the packaged
  SmolLM2-135M-Instruct GGUF.
- ``openai``: any OpenAI-compatible chat-completions server (vLLM, Ollama, llama.cpp server,
  OpenAI), with bounded concurrency and retries.
- ``llama_cpp``: llama-cpp-python (``pip install 'ltrr[llamacpp]'``).

Importing this package loads neither torch, transformers nor httpx; backends import them when
they first run.

Examples
--------
>>> from ltrr.generation import generators, make_generator
>>> generators.names()
['llama_cpp', 'openai', 'transformers']
>>> gen = make_generator({"backend": "openai", "model": "m", "base_url": "http://localhost:8000/v1"})
>>> gen.identity
'openai:http://localhost:8000/v1:m'
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ltrr._errors import ConfigError
from ltrr._registry import Registry
from ltrr.generation.base import DecodingParams, Generation, Generator
from ltrr.generation.cache import CachedGenerator, GenerationCache, cache_key, stats
from ltrr.generation.llamacpp_backend import LlamaCppGenerator
from ltrr.generation.openai_backend import OpenAIGenerator
from ltrr.generation.prompts import (
    AnswerResult,
    PromptBuild,
    PromptTemplate,
    answer_batch,
    answer_with_fallback,
    available_templates,
    build_prompt,
    format_documents,
    load_template,
    parse_answer,
)
from ltrr.generation.transformers_backend import TransformersGenerator, default_model_path

__all__ = [
    "AnswerResult",
    "CachedGenerator",
    "DecodingParams",
    "Generation",
    "GenerationCache",
    "Generator",
    "LlamaCppGenerator",
    "OpenAIGenerator",
    "PromptBuild",
    "PromptTemplate",
    "TransformersGenerator",
    "answer_batch",
    "check_generator_options",
    "answer_with_fallback",
    "available_templates",
    "build_prompt",
    "cache_key",
    "default_model_path",
    "format_documents",
    "generators",
    "load_template",
    "make_generator",
    "parse_answer",
    "stats",
    "DEFAULT_BACKEND",
]

DEFAULT_BACKEND = "transformers"

generators: Registry = Registry("generator backend")
generators.register("transformers", TransformersGenerator)
generators.register("openai", OpenAIGenerator)
generators.register("llama_cpp", LlamaCppGenerator, extra="llamacpp")

# Keys that would put a secret into a config file; the key is read from the variable named by
# api_key_env instead.
_SECRET_KEYS = {"api_key", "key", "token", "openai_api_key", "password"}


def make_generator(config: Mapping[str, Any] | None = None) -> Generator:
    """Build a generator from a config table such as ``{"backend": "transformers", "model": None}``.

    ``backend`` (default ``transformers``) picks the class in `generators`; every other key is
    passed to its constructor, and unknown keys raise `ConfigError` naming the accepted ones.

    Raises
    ------
    ConfigError
        Unknown backend (the message lists the choices), unknown or secret keys, bad values.
    MissingDependencyError
        The backend's optional dependency is missing.
    """
    cls, options = check_generator_options(config)
    return cls(**options)


def check_generator_options(config: Mapping[str, Any] | None = None) -> tuple[type[Generator], dict[str, Any]]:
    """The backend class and constructor options of a generator config table, checked as
    `make_generator` checks them, without building (or loading) anything.

    Raises
    ------
    ConfigError
        Unknown backend, unknown or secret keys.
    """
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise ConfigError(f"the generator config must be a table, got {type(config).__name__}")
    options = dict(config)
    backend = options.pop("backend", DEFAULT_BACKEND) or DEFAULT_BACKEND
    cls = generators.get(backend)
    secrets = sorted(_SECRET_KEYS & {str(k).lower() for k in options})
    if secrets:
        raise ConfigError(
            f"generator config key(s) {secrets} would store a secret in a config file; put the "
            "key in an environment variable and name it with api_key_env"
        )
    accepted = [
        name
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown} for the {backend!r} generator backend; "
            f"accepted: {', '.join(accepted)}"
        )
    return cls, options
