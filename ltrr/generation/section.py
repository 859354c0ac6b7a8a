"""The ``[generation]`` config table: the generator, its prompts and its cache.

An open table: keys other than the run's own (`GenerationSection`'s fields) configure the
generator backend (`ltrr.generation.make_generator`, which validates them and names an unknown
one); they are kept in ``extra``. A leaf module: it imports only the standard library,
`ltrr._errors` and `ltrr._sections` (see ``[importlinter]`` in setup.cfg).
"""

from __future__ import annotations

import dataclasses

from ltrr._sections import Section, section, setting

__all__ = ["GenerationSection"]


@section("generation", open=True)
class GenerationSection(Section):
    """The ``[generation]`` table; ``extra`` holds the backend's keys (``model``, ``device``, ...).

    Examples
    --------
    >>> g = GenerationSection.from_mapping({"backend": "echo", "model": "tiny"})
    >>> g.backend, g["model"], g.extra
    ('echo', 'tiny', {'model': 'tiny'})
    """

    backend: str = setting(str, "transformers", help="the generator backend (a registry name)")
    template: str = setting(str, "short_answer", help="the prompt template")
    max_new_tokens: int = setting(int, 32, help="tokens generated per answer", unit="tokens", low=1)
    cache: str = setting(str, "", help="the generation cache (default: <data_root>/cache/generations.sqlite)")
    use_cache: bool = setting(bool, True, help="read and write the generation cache")
    # `ltrr.labels.label_queries` steps through the queries by it: 0 was range()'s ValueError,
    # a negative size labelled nothing (then a KeyError)
    chunk_size: int = setting(int, 8, help="prompts sent to the generator together", low=1)
    max_prompt_tokens: int = setting(int, 0, help="prompt length cap (0: the model's context minus "
                                                  "max_new_tokens)", unit="tokens", low=0)
    prebuilt: str = setting(str, "", help="a packaged prebuilt cache (ltrr/prebuilt/NAME-generations.jsonl.xz or .jsonl.gz)")
    context_budget: int = setting(int, 0, help="answers read the top routed arms' passages packed into this "
                                               "many tokens (0: no packing; settings in [context])", unit="tokens",
                                    low=0)
    extra: dict = dataclasses.field(default_factory=dict)
