"""RoutedPipeline: question -> pool search -> query features -> rank (-> pack -> answer), once.

The one routing path of ltrr. The LTR router's `route`/`answer`, the budgeted policy's `route`,
the server (`ltrr.serve.RoutedRAG`) and the multi-agent Searcher all route a question here; the
routers themselves are estimators over feature tables and keep nothing between calls.

A router is driven through two public hooks:

- ``routing_inputs(queries, results) -> dict``: extra keyword arguments of its ``ranking``
  (the passages' text for a text-reading ranker, the question states of an ``lm`` policy);
- ``route_query(qraw)`` with ``has_query_path`` true: the per-query fast path over one
  question's `ltrr.features.QueryRaw` (no pandas), used when the router has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ltrr._errors import ConfigError

__all__ = ["RoutedPipeline", "Routed", "ANSWER_TEMPLATE"]

ANSWER_TEMPLATE = "short_answer"


@dataclass(frozen=True)
class Routed:
    """One routed question: the pool's search of it and the ranking of the arms.

    Attributes
    ----------
    question : str
        The question.
    results : DataFrame
        The pool's search of the question (qid ``q0``; arm, rank, docid, score, text).
    ranking : DataFrame
        ``arm, score, rank``, best (rank 1) first.
    """

    question: str
    results: pd.DataFrame
    ranking: pd.DataFrame

    @property
    def arm(self) -> str:
        """The top arm."""
        return str(self.ranking["arm"].iloc[0])

    @property
    def arms(self) -> list[str]:
        """Every arm, best first."""
        return self.ranking["arm"].astype(str).tolist()

    def arm_passages(self, arm: str | None = None) -> pd.DataFrame:
        """``arm``'s (default: the top arm's) rows of the search, in rank order."""
        arm = self.arm if arm is None else arm
        res = self.results
        return res[res["arm"].astype(str) == arm].sort_values("rank")


class RoutedPipeline:
    """A loaded pool, a fitted router, and optionally a context packing and an answering model.

    Parameters
    ----------
    pool : Pool
        The router's pool, its indexes loaded (`ltrr.retrieval.Pool.load`).
    router : Router
        A fitted router over that pool's arms (`ltrr.routers.LTRRouter`, a budgeted policy).
    packing : PackSpec, optional
        Context packing: an answer reads the top routed arms' passages packed into
        ``packing.budget`` tokens (`ltrr.packing.pack_query`) instead of the top arm's.
    generator : Generator, optional
        The answering model (`answer`); its tokenizer counts the packed context.
    template : str
        Prompt template of the answers.

    Examples
    --------
    >>> pipe = RoutedPipeline.from_router(LTRRouter.load("runs/demo/models/lambdamart-listwise"))  # doctest: +SKIP
    >>> pipe.route("Who wrote Hamlet?").ranking  # doctest: +SKIP
    """

    def __init__(self, pool: Any, router: Any, *, packing: Any = None, generator: Any = None,
                 template: str = ANSWER_TEMPLATE):
        self.pool = pool
        self.router = router
        self.packing = packing
        self.generator = generator
        self.template = template

    @classmethod
    def from_router(cls, router: Any, **kwargs: Any) -> RoutedPipeline:
        """The pipeline of a saved router: its pool built from its config, indexes loaded."""
        return cls(router.make_pool(), router, **kwargs)

    # ---- steps ----------------------------------------------------------------------------------
    @property
    def no_retrieval(self) -> list[str]:
        """The names of the pool's no-retrieval arms."""
        return [a.name for a in self.pool.arms if a.is_no_retrieval]

    def search(self, question: str) -> pd.DataFrame:
        """Every arm of the pool on the question (qid ``q0``)."""
        return self.pool.search(pd.DataFrame({"qid": ["q0"], "question": [question]}))

    def rank(self, question: str, results: pd.DataFrame) -> pd.DataFrame:
        """The router's ranking of the arms from the question's search: ``arm, score, rank``."""
        from ltrr.features import extract_query

        pool, router = self.pool, self.router
        if getattr(router, "has_query_path", False):
            qraw = extract_query(question, results, arms=pool.arm_names, no_retrieval=self.no_retrieval,
                                 embedding_source=pool.embedding_source())
            ranked = router.route_query(qraw)
            return pd.DataFrame({"arm": [a for a, _ in ranked], "score": [s for _, s in ranked],
                                 "rank": np.arange(1, len(ranked) + 1)})
        q = pd.DataFrame({"qid": ["q0"], "question": [question]})
        return self.rank_queries(q, results)[["arm", "score", "rank"]].reset_index(drop=True)

    def rank_queries(self, queries: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
        """The router's ranking of the arms of many queries (``qid, question``) from their pool
        search, as one batch under their own qids: ``qid, arm, score, rank``, best first."""
        from ltrr.features import extract_raw

        pool, router = self.pool, self.router
        raw = extract_raw(queries, results, arms=pool.arm_names, embedding_source=pool.embedding_source(),
                          no_retrieval=self.no_retrieval)
        return router.ranking(raw, **router.routing_inputs(queries, results))

    def route(self, question: str, *, arm: str | None = None) -> Routed:
        """Search once and rank the arms; ``arm`` forces that arm (no ranking)."""
        results = self.search(question)
        if arm is not None:
            ranking = pd.DataFrame({"arm": [arm], "score": [float("nan")], "rank": [1]})
        else:
            ranking = self.rank(question, results)
        return Routed(question, results, ranking)

    def context(self, routed: Routed) -> tuple[pd.DataFrame, int | None]:
        """The passages an answer reads (``arm, docid, text``) and the packed context's tokens.

        The top arm's passages, or with ``packing`` the top routed arms' passages packed into
        the budget (``None`` tokens when nothing is packed: no packing, or no retrieval on top).
        """
        top = routed.arm
        if self.packing is None or self.pool.arm(top).is_no_retrieval:
            return routed.arm_passages(top), None
        from ltrr.packing import pack_query

        if self.generator is None:
            raise ConfigError("RoutedPipeline: packing counts tokens with the generator; give generator=...")
        packed = pack_query(self.pool, routed.question, routed.arms, self.packing, self.generator.count_tokens)
        return packed.passages, packed.tokens

    def answer(self, question: str) -> dict:
        """Route, then answer from the context (closed-book for no retrieval).

        Returns ``arm`` (the arms read, joined by ``+`` when packed; the top arm with ``passages``
        empty when the packing kept nothing, answered closed-book), ``answer``, ``passages``
        (the texts the prompt holds: the ones the prompt's token budget dropped are left out),
        ``dropped_passages`` and ``trimmed_passages`` (its cuts), ``ranking``, ``error`` and
        ``context_tokens``.
        """
        from ltrr.generation import answer_with_fallback

        if self.generator is None:
            raise ConfigError("RoutedPipeline.answer needs a generator; give generator=...")
        routed = self.route(question)
        passages, tokens = self.context(routed)
        arm = routed.arm
        if tokens is not None:
            arm = "+".join(dict.fromkeys(passages["arm"])) or arm
        texts = passages["text"].tolist()
        out = answer_with_fallback(self.generator, self.template, question, texts or None)
        dropped = out.prompt.n_dropped_passages if out.prompt else 0
        trimmed = out.prompt.n_trimmed_passages if out.prompt else 0
        return {"arm": arm, "answer": out.answer, "passages": texts[: len(texts) - dropped], "ranking": routed.ranking,
                "error": out.error, "context_tokens": tokens, "dropped_passages": dropped,
                "trimmed_passages": trimmed}
