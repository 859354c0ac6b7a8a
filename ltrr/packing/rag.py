"""Context packing in the RAG pipeline: ``[generation] context_budget`` and the packed arm.

With ``[generation] context_budget = N`` an answer no longer reads the top arm's ``k`` passages:
it reads the passages of the ``top_m`` best routed arms, each searched ``depth`` deep, packed
into at most ``N`` tokens of passage text, counted by the generator's tokenizer, by a selector
(`pack_passages`). The prompt's ``Document i:`` headers and blank lines come on top (about 4
tokens a passage), as do the question and the instructions; ``max_prompt_tokens`` stays the
hard cap of the whole prompt. The ``[context]`` table sets the
rest::

    [generation]
    context_budget = 256
    [context]
    top_m = 2           # arms whose passages are candidates, in routed order
    depth = 5           # passages read per arm
    selector = "knapsack"  # or greedy, greedy-skip, knapsack-marginal, greedy-density
    prior = 0.3         # weight of the router's and retriever's order, prior / (arm rank * rank)
    weights = {keyword = 0.25, stage = 0.25, recency = 0.15, similarity = 0.35}

A *packed arm* is an arm of the pool like any other (labelling, features, evaluation) whose
passages are such a packing over a fixed order of other arms::

    [[arms]]
    name = "packed"
    retriever = "packed"
    pack = {arms = ["bm25+reg", "dense+reg"], budget = 256, depth = 5}

Every listed arm is packed (``top_m`` defaults to the number of ``arms``; a smaller ``top_m``
is a `ConfigError`).

It counts tokens with the run's generator (the pipeline sets it), else with the packaged
default generator's tokenizer. On the ``openai`` backend a count is an estimate, so the budget is
approximate there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError
from ltrr.data.schema import POOL_COLUMNS
from ltrr.packing.pack import PackResult, pack_passages
from ltrr.packing.select import ImportanceWeights, selectors

__all__ = ["PackSpec", "pack_query", "pack_results", "pack_settings", "pack_spec", "packing_from_config",
           "question_embeddings"]

_WEIGHT_KEYS = ("keyword", "stage", "recency", "similarity", "decay")


@dataclass(frozen=True)
class PackSpec:
    """How to pack: the budget, the arms read (``top_m``, each ``depth`` deep), the selector."""

    budget: int
    top_m: int = 2
    depth: int = 5
    selector: str = "knapsack"
    prior: float = 0.3
    weights: ImportanceWeights = field(default_factory=ImportanceWeights)
    arms: tuple[str, ...] = ()  # a packed arm's fixed arm order; empty: the router's order

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any], where: str = "[context]") -> PackSpec:
        """Validate a config mapping (unknown keys, types, ranges) into a `PackSpec`."""
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where} must be a table, got {type(spec).__name__}")
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(sorted(allowed))}")
        kw: dict[str, Any] = {}
        for key in ("budget", "top_m", "depth"):
            if key in spec:
                kw[key] = check_int(spec[key], f"{where}.{key}", low=0 if key == "budget" else 1)
        if "budget" not in kw:
            raise ConfigError(f"{where}.budget is missing: the token budget of the packed context")
        if "selector" in spec:
            if spec["selector"] not in selectors:
                raise ConfigError(f"{where}.selector: unknown selector {spec['selector']!r}; "
                                  f"one of {', '.join(selectors.names())}")
            kw["selector"] = str(spec["selector"])
        if "prior" in spec:
            kw["prior"] = check_number(spec["prior"], f"{where}.prior", low=0)
        if "weights" in spec:
            w = spec["weights"]
            if not isinstance(w, Mapping) or set(w) - set(_WEIGHT_KEYS):
                raise ConfigError(f"{where}.weights must be a table with keys among {', '.join(_WEIGHT_KEYS)}, got {w!r}")
            for k, v in w.items():
                check_number(v, f"{where}.weights.{k}", low=0)
                if k == "decay" and v > 1:  # recency is decay ** age: above 1, older items would score higher
                    raise ConfigError(f"{where}.weights.decay must be a number in [0, 1] (recency is decay ** "
                                      f"rounds since the item), got {v!r}")
            kw["weights"] = ImportanceWeights(**{k: float(v) for k, v in w.items()})
        if "arms" in spec:
            arms = spec["arms"]
            if not isinstance(arms, (list, tuple)) or not arms or not all(isinstance(a, str) for a in arms):
                raise ConfigError(f"{where}.arms must be a non-empty list of arm names, got {arms!r}")
            kw["arms"] = tuple(arms)
            # a packed arm packs every arm it lists: top_m defaults to their number, and a smaller
            # top_m would silently leave the last ones out
            if "top_m" not in kw:
                kw["top_m"] = len(kw["arms"])
            elif kw["top_m"] < len(kw["arms"]):
                raise ConfigError(f"{where}.top_m = {kw['top_m']} is less than the {len(kw['arms'])} arms listed in "
                                  f"{where}.arms {list(kw['arms'])}: the arms after the first {kw['top_m']} would "
                                  "never be packed; drop top_m or list only the arms to pack")
        return cls(**kw)

    def to_dict(self) -> dict:
        """Every setting as a plain mapping: ``weights`` as a table, ``arms`` as a list."""
        return {"budget": self.budget, "top_m": self.top_m, "depth": self.depth, "selector": self.selector,
                "prior": self.prior, "weights": {k: getattr(self.weights, k) for k in _WEIGHT_KEYS},
                "arms": list(self.arms)}


def pack_settings(context: Mapping[str, Any] | None) -> dict:
    """The `PackSpec` keys of a config's ``[context]`` table, which also holds the agent loop's
    keys (`ltrr.packing.strategies.LoopSpec`); the config schema has already rejected unknown keys."""
    names = {f.name for f in fields(PackSpec)}
    return {k: v for k, v in dict(context or {}).items() if k in names}


def pack_spec(context: Mapping[str, Any] | None, budget: int,
              where: str = "[generation] context_budget / [context]") -> PackSpec:
    """The validated `PackSpec` of a config's ``[context]`` table with token budget ``budget``."""
    return PackSpec.from_mapping({**pack_settings(context), "budget": budget}, where)


def packing_from_config(generation: Mapping[str, Any], context: Mapping[str, Any] | None) -> PackSpec | None:
    """The `PackSpec` of a run's config, or None when ``context_budget`` is 0 (no packing)."""
    budget = generation.get("context_budget", 0)
    return pack_spec(context, budget) if budget else None


def question_embeddings(pool, questions: Sequence[str]) -> np.ndarray:
    """The questions' vectors under the encoder of the pool's passage embeddings, in one batch."""
    from ltrr.embed import get_encoder

    enc = get_encoder(pool.embedding_source().encoder_name)
    return np.asarray(enc.encode_queries(list(questions)), dtype=np.float64)


def pack_query(pool, question: str, arm_order: Sequence[str], spec: PackSpec, count_tokens: Callable[[str], int],
               results: pd.DataFrame | None = None, question_embedding: np.ndarray | None = None) -> PackResult:
    """Pack one question's context: the ``top_m`` first retrieving arms of ``arm_order``.

    ``results`` are the arms' passages ``spec.depth`` deep (``pool.search(..., k=spec.depth)``);
    without them the pool is searched here. ``question_embedding`` (`question_embeddings`) is
    computed here when similarity counts and it is not given.
    """
    order = [a for a in arm_order if not pool.arm(a).is_no_retrieval][: spec.top_m]
    if results is None:
        q = pd.DataFrame({"qid": ["q0"], "question": [question]})
        results = pool.search(q, order, k=spec.depth) if order else pd.DataFrame(columns=["arm", "rank", "docid", "text"])
    results = results[results["arm"].isin(order) & (results["rank"] <= spec.depth)]
    qv = question_embedding
    if qv is None and spec.weights.similarity > 0 and len(results):
        qv = question_embeddings(pool, [question])[0]
    return pack_passages(results, order, budget=spec.budget, top_m=spec.top_m, count_tokens=count_tokens,
                         question_embedding=qv, embeddings=pool.embedding_source().get if qv is not None else None,
                         selector=spec.selector, prior=spec.prior, weights=spec.weights, question=question)


def pack_results(pool, queries: pd.DataFrame, arm_name: str, spec: PackSpec,
                 count_tokens: Callable[[str], int]) -> pd.DataFrame:
    """A packed arm's rows (``POOL_COLUMNS``) for ``queries``: each query's packing, rank 1..n."""
    deep = pool.search(queries, list(spec.arms), k=spec.depth)
    by_q = {str(qid): g for qid, g in deep.groupby("qid", sort=False)}  # the pool names queries by str
    qvecs = question_embeddings(pool, queries["question"].astype(str).tolist()) \
        if spec.weights.similarity > 0 and len(deep) else [None] * len(queries)
    rows = []
    for qid, question, qv in zip(queries["qid"].astype(str), queries["question"], qvecs, strict=True):
        g = by_q.get(qid)
        if g is None:
            continue
        packed = pack_query(pool, str(question), list(spec.arms), spec, count_tokens, results=g, question_embedding=qv)
        for rank, p in enumerate(packed.passages.itertuples(), start=1):
            rows.append({"qid": qid, "arm": arm_name, "rank": rank, "docid": p.docid,
                         "score": float(-rank), "text": p.text})
    return pd.DataFrame(rows, columns=POOL_COLUMNS)
