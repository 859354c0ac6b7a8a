"""Packing the RAG prompt: passages of the top-m routed arms into a token budget.

The candidates are the passages of the ``m`` best arms in routed order (a passage two arms
found is one candidate). Each is a `MemoryItem` of kind ``passage``; its importance is the
answerer's `importance` at the answer stage with the question's embedding as the goal, plus a
prior for where the router and the retriever put it, ``prior / (arm_rank * passage_rank)``. A
selector (`ltrr.packing.select.selectors`) keeps the subset within the budget; the packed
context lists the kept passages in routed order.

`evidence_recall` measures a packing without the generator: the share of a query's gold
passages (qrels) in the packed context, and that share per 100 tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ltrr._checks import check_int
from ltrr.packing.items import MemoryItem
from ltrr.packing.select import DEFAULT_ROLES, ImportanceWeights, content_words, importance, select

__all__ = ["pack_passages", "evidence_recall", "PackResult"]


@dataclass
class PackResult:
    """The packed passages (routed order), their tokens, and the candidates considered."""

    passages: pd.DataFrame
    tokens: int
    candidates: int
    empty_reason: str | None = None
    importance: float = 0.0  # total importance of the kept passages (the knapsack's objective)
    # every candidate (routed order) with its tokens and importance: what the selector chose from,
    # so that another selector's choice or objective can be computed on the same items
    considered: pd.DataFrame | None = None


def pack_passages(results: pd.DataFrame, arm_order: Sequence[str], *, budget: int, top_m: int = 2,
                  count_tokens: Callable[[str], int], question_embedding: Sequence[float] | np.ndarray | None = None,
                  embeddings: Callable[[list[str], list[str]], np.ndarray] | None = None,
                  selector: str = "knapsack", prior: float = 0.3,
                  weights: ImportanceWeights | None = None, question: str | None = None) -> PackResult:
    """Pack one query's passages (``results``: arm, rank, docid, text) into ``budget`` tokens.

    ``arm_order`` is the router's ranking of the arms (best first); ``embeddings(docids, texts)``
    gives passage vectors for the similarity to ``question_embedding``. With ``question``, its
    content words join the answerer's role keywords (the task's keywords).
    """
    check_int(top_m, "top_m", low=1)
    present = set(results["arm"])
    arms = [a for a in arm_order if a in present][:top_m]
    rows, seen = [], set()
    for ai, arm in enumerate(arms, start=1):
        for r in results[results["arm"] == arm].sort_values("rank").itertuples():
            if r.docid in seen:
                continue
            seen.add(r.docid)
            rows.append({"arm": arm, "arm_rank": ai, "rank": int(r.rank), "docid": str(r.docid), "text": str(r.text)})
    cand = pd.DataFrame(rows, columns=["arm", "arm_rank", "rank", "docid", "text"])
    if cand.empty:
        return PackResult(cand.assign(tokens=[]), 0, 0, "no passages (the top arms retrieve nothing)")
    cand["tokens"] = [int(count_tokens(t)) for t in cand["text"]]
    emb = embeddings(cand["docid"].tolist(), cand["text"].tolist()) if embeddings is not None else None
    items = [MemoryItem(id=str(i), kind="passage", text=t, source=a, tokens=k,
                        embedding=None if emb is None else [float(x) for x in emb[i]])
             for i, (t, a, k) in enumerate(zip(cand["text"], cand["arm"], cand["tokens"], strict=True))]
    role = DEFAULT_ROLES["answerer"]
    if question:
        role = replace(role, keywords=tuple(role.keywords) + tuple(sorted(content_words(question))))
    scores = importance(items, role, "answer", round=0, goal_embedding=question_embedding,
                        weights=weights or ImportanceWeights())
    scores = scores + prior / (cand["arm_rank"].to_numpy() * cand["rank"].to_numpy())
    kept = {int(it.id) for it in select(items, scores.tolist(), int(budget), selector)}
    out = cand.iloc[sorted(kept)].reset_index(drop=True)
    reason = None
    if not len(out):
        reason = (f"every candidate passage is longer than the budget of {budget} tokens"
                  if int(cand["tokens"].min()) > budget else f"the {selector} selector kept no passage")
    return PackResult(out, int(out["tokens"].sum()), len(cand), reason, float(scores[sorted(kept)].sum()),
                      cand.assign(importance=scores))


def evidence_recall(packed_docids: Sequence[str], gold_docids: Sequence[str], tokens: int) -> dict:
    """Share of the gold passages in a context, and that share per 100 tokens of it."""
    gold = set(map(str, gold_docids))
    if not gold:
        return {"recall": float("nan"), "recall_per_100_tokens": float("nan"), "tokens": tokens}
    rec = len(gold & set(map(str, packed_docids))) / len(gold)
    return {"recall": rec, "recall_per_100_tokens": 100.0 * rec / tokens if tokens else 0.0, "tokens": tokens}
