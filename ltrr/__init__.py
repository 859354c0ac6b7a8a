"""ltrr: learning to rank retrievers for LLMs.

Subpackages (imported on demand, so ``import ltrr`` stays light): `ltrr.data` (schema, loaders,
the demo benchmark), `ltrr.retrieval` (the pool of arms), `ltrr.generation` (generators,
prompts, cache), `ltrr.metrics` (utility metrics), `ltrr.labels`, `ltrr.features`,
`ltrr.rankers`, `ltrr.routers`, `ltrr.eval`, and `ltrr.pipeline` (the stages of `ltrr run`).
"""

from ltrr._cpu import pin_cpu_kernels
from ltrr._version import __version__

pin_cpu_kernels()  # before anything imports torch: the same numbers on every x86-64 machine

__all__ = ["__version__"]
