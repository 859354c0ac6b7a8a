"""RoutedRAG: the routed RAG system behind the server, loaded once.

One pool (its indexes and encoders), the routers by model name and one generator:

- ``ltrr``: the trained LTR router of the model folder;
- a budgeted policy's folder name (``features-grpo-B1.1``): each policy found in the run's
  ``policies/`` folder, or given explicitly;
- an arm's name: that arm, forced.

`route` searches the pool once and ranks the arms with the chosen router; `answer` then answers
from the top arm's passages (closed-book for no retrieval). Routing and retrieval are safe to
call from several threads; generation is serialised by the server (`ltrr.serve.app`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ltrr._errors import DataError, NotBuiltError

__all__ = ["RoutedRAG"]


class RoutedRAG:
    """Routers by name over one pool, and one generator.

    Parameters
    ----------
    model_dir : path
        A trained LTR router folder (``ltrr train``: ``router.json``).
    policies : list of path, optional
        Budgeted policy folders; default: every folder under ``<workdir>/policies/`` when
        ``model_dir`` is ``<workdir>/models/<ranker>``.
    generator : Generator or dict, optional
        The answering model, used as given, or its config (`ltrr.generation.make_generator`),
        built behind the default generation cache (`ltrr.data.io.default_generation_cache`) as a
        run's generator is. Default: the generator the router's labels were measured with,
        `ltrr.routers.LTRRouter.answering_generator`, behind the generation cache too.
    template : str, optional
        Prompt template of the answers (default: the router's labels' template).
    packing : PackSpec, optional
        Context packing (``[generation] context_budget``, `ltrr.packing`): an answer reads the
        top routed arms' passages packed into the budget instead of the top arm's.
    """

    def __init__(self, model_dir: str | Path, *, policies: list | None = None, generator: Any = None,
                 template: str | None = None, packing: Any = None):
        from ltrr.generation import load_template, make_generator
        from ltrr.routers.ltr import LTRRouter
        from ltrr.routers.pipeline import RoutedPipeline

        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise NotBuiltError(f"{model_dir}: no such model folder; train one with `ltrr train CONFIG`")
        self.ltr = LTRRouter.load(model_dir)  # a folder from another version is a DataError here
        self.pool = self.ltr.make_pool()
        self.arms = list(self.pool.arm_names)
        self.costs = {a.name: float(a.cost) for a in self.pool.arms}
        self.no_retrieval = [a.name for a in self.pool.arms if a.is_no_retrieval]
        self.policies: dict[str, Any] = {}
        if policies is None:
            found = model_dir.resolve().parent.parent / "policies"
            policies = sorted(p for p in found.glob("*") if (p / "policy.json").is_file()) if found.is_dir() else []
        from ltrr.policy.router import PolicyRouter

        for folder in policies:
            pol = PolicyRouter.load(folder)
            if pol.representation == "lm":
                continue  # needs the question states of its generator: served by `ltrr route`
            if sorted(self.arms) != pol.arms_:
                raise DataError(f"policy {folder}: trained on the pool {pol.arms_}, not this router's {sorted(self.arms)}")
            self.policies[Path(folder).name] = pol
        if isinstance(generator, dict):  # cached, as the pipeline's and answering_generator's are
            from ltrr.data.io import default_generation_cache
            from ltrr.generation.cache import CachedGenerator, GenerationCache

            generator = CachedGenerator(make_generator(generator), GenerationCache(default_generation_cache()))
        self.generator = generator if generator is not None else self.ltr.answering_generator()
        template = template or self.ltr.answering_template()
        self.template = load_template(template)
        self.packing = packing
        # one routing path per model name, all over the one loaded pool
        self.pipelines = {name: RoutedPipeline(self.pool, router, packing=packing, generator=self.generator,
                                               template=template)
                          for name, router in {"ltrr": self.ltr, **self.policies}.items()}

    # ---- models -----------------------------------------------------------------------------
    def models(self) -> list[dict]:
        """The model names a request may give, with what each is."""
        out = [{"id": "ltrr", "kind": "router", "detail": f"LTR router ({self.ltr.ranker})"}]
        out += [{"id": name, "kind": "policy", "detail": f"budgeted policy, budget {pol.budget:g}"}
                for name, pol in self.policies.items()]
        out += [{"id": a, "kind": "arm", "detail": f"always arm {a!r} (cost {self.costs[a]:g})"} for a in self.arms]
        return out

    def check_model(self, model: str) -> str:
        """Return ``model`` when it is one of `models`' names.

        Raises
        ------
        DataError
            For any other name; the message lists the known models.
        """
        known = [m["id"] for m in self.models()]
        if model not in known:
            raise DataError(f"unknown model {model!r}; known models: {', '.join(known)}")
        return model

    # ---- routing ----------------------------------------------------------------------------
    def route(self, model: str, question: str) -> dict:
        """Search every arm once, rank the arms with ``model``: arm, ranking, cost and passages."""
        self.check_model(model)
        if model in self.pipelines:
            pipe = self.pipelines[model]
            routed = pipe.route(question)
        else:  # an arm's name: that arm, forced
            pipe = self.pipelines["ltrr"]
            routed = pipe.route(question, arm=model)
        res, _ = pipe.context(routed)
        arm = routed.arm
        passages = [{"docid": str(d), "text": str(t)} for d, t in zip(res["docid"], res["text"], strict=True)]
        return {"model": model, "arm": arm, "cost": self.costs[arm],
                "ranking": [{"arm": str(a), "score": None if not np.isfinite(s) else float(s), "rank": i + 1}
                            for i, (a, s) in enumerate(zip(routed.ranking["arm"], routed.ranking["score"],
                                                           strict=True))],
                "passages": passages}

    def answer(self, routed: dict, question: str, decoding: dict | None = None) -> dict:
        """Answer ``question`` from the routed arm's passages; usage in tokens.

        ``decoding`` overrides the template's decoding (`ltrr.generation.DecodingParams` fields,
        as `ltrr.serve.app` reads them from a request); its ``max_new_tokens`` bounds the fallback
        prompt's answer too. ``finish_reason`` is ``length`` when the answer used its whole budget
        (the backend's own reason when it gives one)."""
        from dataclasses import replace

        from ltrr.generation import answer_with_fallback

        decoding = dict(decoding or {})
        template = self.template
        if "max_new_tokens" in decoding:
            n = int(decoding.pop("max_new_tokens"))
            template = replace(template, max_new_tokens=n, fallback_max_new_tokens=n)
        params = template.default_params(**decoding)
        texts = [p["text"] for p in routed["passages"]]
        out = answer_with_fallback(self.generator, template, question, texts or None, params)
        if out.error:
            raise RuntimeError(f"generation failed: {out.error}")
        prompt = sum(g.prompt_tokens for g in out.generations)
        completion = sum(g.completion_tokens for g in out.generations)
        last = out.generations[-1]
        budget = template.fallback_max_new_tokens if out.used_fallback else params.max_new_tokens
        finish = last.extra.get("finish_reason") or ("length" if last.completion_tokens >= budget else "stop")
        return {"text": out.answer or "", "finish_reason": str(finish),
                "usage": {"prompt_tokens": int(prompt), "completion_tokens": int(completion),
                          "total_tokens": int(prompt + completion)}}

    def warm(self, question: str = "warm-up question") -> None:
        """Load what loads lazily (the encoders, the generator's weights) before the first request."""
        self.route("ltrr", question)
        getattr(self.generator, "context_length", None)  # a transformers backend loads its model here

    def describe(self) -> str:
        """One line of JSON: the model names and the generator's identity (``"?"`` if none)."""
        return json.dumps({"models": [m["id"] for m in self.models()], "generator": getattr(self.generator, "identity", "?")})
