"""Evaluation of routers: grouped splits, routing metrics with significance tests, reports, plots.

- `ltrr.eval.splits`: `make_splits` (``balanced``, ``leave-one-type-out``, ``kfold``), `Split`.
- `ltrr.eval.stats`: bootstrap CIs, paired Wilcoxon test, Bonferroni/Holm, tau, P@1, nDCG.
- `ltrr.eval.routing`: `evaluate_router`, `evaluate_routers`, `evaluate_splits` -> `Evaluation`
  (over `ltrr.eval.outcomes`: the utility matrix, per-query outcomes and their summary).
- `ltrr.eval.report`: Table-1-style Markdown/CSV/JSON (`write_report`).
- `ltrr.eval.plots`: PNG plots (matplotlib loads only when a plot is drawn).
"""

from ltrr.eval.report import (
    format_ci,
    headroom_table,
    per_type_table,
    pvalue_table,
    report_markdown,
    utility_table,
    write_report,
)
from ltrr.eval.routing import (
    RESULT_COLUMNS,
    Evaluation,
    best_single_arm,
    by_type,
    evaluate_router,
    evaluate_routers,
    evaluate_splits,
    normalised_gains,
    per_query_outcomes,
    scores_from_long,
    summarise_outcomes,
    utility_matrix,
)
from ltrr.eval.splits import (
    Split,
    balanced_split,
    grouped_kfold,
    leave_one_type_out,
    make_splits,
    splits_table,
    splitters,
)
from ltrr.eval.stats import (
    CI,
    bootstrap_ci,
    correct_pvalues,
    kendall_tau,
    kendall_tau_rows,
    ndcg_at_k,
    ndcg_rows,
    paired_bootstrap_ci,
    paired_wilcoxon,
    precision_at_1,
)

__all__ = [
    "Split",
    "splitters",
    "balanced_split",
    "leave_one_type_out",
    "grouped_kfold",
    "make_splits",
    "splits_table",
    "CI",
    "bootstrap_ci",
    "paired_bootstrap_ci",
    "paired_wilcoxon",
    "correct_pvalues",
    "kendall_tau",
    "kendall_tau_rows",
    "precision_at_1",
    "ndcg_at_k",
    "ndcg_rows",
    "RESULT_COLUMNS",
    "Evaluation",
    "utility_matrix",
    "scores_from_long",
    "normalised_gains",
    "best_single_arm",
    "per_query_outcomes",
    "summarise_outcomes",
    "evaluate_router",
    "evaluate_routers",
    "evaluate_splits",
    "by_type",
    "format_ci",
    "utility_table",
    "headroom_table",
    "pvalue_table",
    "per_type_table",
    "report_markdown",
    "write_report",
]
