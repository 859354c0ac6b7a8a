"""Bridges to other IR toolkits; each is imported on its own and needs its extra.

- `ltrr.integrations.pyterrier` (``pip install 'ltrr[pyterrier]'``): the LTR router as a
  PyTerrier transformer, and ltrr's arms as PyTerrier retrievers.
"""
