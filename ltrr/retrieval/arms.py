"""The pool's arms: the `Arm` value object, its constants, and the paper's default pool.

Split from `ltrr.retrieval.pool` (which builds, loads and searches the pool); `ltrr.retrieval.pool`
re-exports every name here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Arm", "default_pool_config", "NO_RETRIEVAL", "PACKED", "ARM_KEYS", "RETRIEVER_ALIASES"]

NO_RETRIEVAL = "none"
PACKED = "packed"  # the retriever of a packed arm (ltrr.packing.rag)
ARM_KEYS = ("name", "retriever", "reranker", "k", "depth", "cost", "pack")
# config spellings that differ from constructor parameter names
RETRIEVER_ALIASES = {"dense": {"index": "index_type"}}


@dataclass(frozen=True)
class Arm:
    """One arm of the pool.

    Parameters
    ----------
    name : str
        Arm name used in tables and configs (``"bm25+reg"``).
    retriever : str or None
        Name of a pool retriever; ``None`` or ``"none"`` for the no-retrieval arm.
    reranker : str
        Reranker name (``"none"`` keeps the first-stage order).
    k : int
        Passages the arm returns per query.
    depth : int
        First-stage results handed to the reranker (ignored with reranker ``"none"``).
    cost : float or None
        Relative cost of the arm; None means 1.0, or 0.0 for the no-retrieval arm.
    pack : dict or None
        With ``retriever="packed"``: the `ltrr.packing.PackSpec` settings of a packed arm
        (its ``arms`` in order, ``budget``, ``depth``, ...).

    Examples
    --------
    >>> Arm("none", None).cost
    0.0
    >>> Arm("bm25", "bm25").cost
    1.0
    """

    name: str
    retriever: str | None
    reranker: str = "none"
    k: int = 5
    depth: int = 50
    cost: float | None = None
    pack: dict | None = None

    def __post_init__(self):
        retriever = None if self.retriever in (None, NO_RETRIEVAL) else self.retriever
        object.__setattr__(self, "retriever", retriever)
        if self.cost is None:
            object.__setattr__(self, "cost", 0.0 if retriever is None else 1.0)

    @property
    def is_no_retrieval(self) -> bool:
        """Whether this is a no-retrieval arm (no retriever: the model answers unaided)."""
        return self.retriever is None

    @property
    def is_packed(self) -> bool:
        """Whether this is a packed arm (retriever ``"packed"``, settings in ``pack``)."""
        return self.retriever == PACKED

    @property
    def first_stage_depth(self) -> int:
        """How many first-stage results this arm reads."""
        return self.k if self.reranker == "none" else max(self.depth, self.k)

    def to_dict(self) -> dict[str, Any]:
        """The arm as a config mapping (no retrieval as ``"none"``; no ``pack`` key when None)."""
        d = asdict(self)
        d["retriever"] = d["retriever"] or NO_RETRIEVAL
        if d["pack"] is None:
            del d["pack"]
        return d


def default_pool_config() -> dict[str, Any]:
    """The paper's seven arms: bm25, bm25+reg, bm25+stoch, dense, dense+reg, dense+stoch, none.

    Returns keyword arguments for `Pool.from_config` (``retrievers``, ``rerankers``, ``arms``);
    every arm keeps k=5 passages, rerankers read the first-stage top 50.
    """
    arms = []
    for r in ("bm25", "dense"):
        for rr in ("none", "reg", "stoch"):
            name = r if rr == "none" else f"{r}+{rr}"
            arms.append(
                {"name": name, "retriever": r, "reranker": rr, "k": 5, "depth": 50, "cost": 1.0}
            )
    arms.append(
        {
            "name": "none",
            "retriever": NO_RETRIEVAL,
            "reranker": "none",
            "k": 5,
            "depth": 50,
            "cost": 0.0,
        }
    )
    return {
        "retrievers": {
            "bm25": {"type": "bm25", "backend": "bm25s", "k1": 0.9, "b": 0.4},
            "dense": {"type": "dense", "encoder": "minilm", "index": "flat"},
        },
        "rerankers": {
            "reg": {"type": "reg", "m": 5, "t": 1},
            "stoch": {"type": "stoch", "n_samples": 50, "intensity": 2.0},
        },
        "arms": arms,
    }
