"""Context packing in the RAG pipeline (`PackSpec`): moved to `ltrr.packing.rag`.

Kept so that imports from the old place go on working; the code lives below the routers, in
`ltrr.packing`, and this module only re-exports it (a downward import).
"""

from ltrr.packing.rag import (
    PackSpec,
    pack_query,
    pack_results,
    pack_settings,
    pack_spec,
    packing_from_config,
    question_embeddings,
)

__all__ = ["PackSpec", "pack_query", "pack_results", "pack_settings", "pack_spec",
           "packing_from_config", "question_embeddings"]
