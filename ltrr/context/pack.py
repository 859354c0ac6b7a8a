"""Packing the RAG prompt into a token budget: moved to `ltrr.packing.pack`.

Kept so that imports from the old place go on working; the code lives below the routers, in
`ltrr.packing`, and this module only re-exports it (a downward import).
"""

from ltrr.packing.pack import (
    PackResult,
    evidence_recall,
    pack_passages,
)

__all__ = ["PackResult", "evidence_recall", "pack_passages"]
