"""Plain Markdown rendering of small tables (no tabulate dependency)."""

from __future__ import annotations

import pandas as pd

__all__ = ["markdown_table"]


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """Render ``df`` (index as the first column) as a GitHub Markdown table."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join([str(df.index.name or "")] + cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for idx, row in df.iterrows():
        cells = [format(v, floatfmt) if isinstance(v, float) else str(v) for v in row.tolist()]
        lines.append("| " + " | ".join([str(idx)] + cells) + " |")
    return "\n".join(lines)
