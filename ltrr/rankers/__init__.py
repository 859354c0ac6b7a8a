"""Learning-to-rank rankers, each found by name in the `rankers` registry.

- Tree and linear rankers: ``xgboost-pointwise``, ``xgboost-pairwise``, ``xgboost-listwise``,
  ``lambdamart-listwise`` (`ltrr.rankers.gbdt`), ``svm-pointwise`` and ``svmrank-pairwise``
  (`ltrr.rankers.linear`).
- Neural rankers on numeric features: ``ffn-pointwise``, ``ffn-pairwise``,
  ``listnet-listwise`` (`ltrr.rankers.neural`).
- Cross-encoder rankers on text: ``transformer-pointwise``, ``transformer-pairwise``,
  ``transformer-listwise`` (`ltrr.rankers.transformer`).

What a ranker needs (text, imputed features) is a tag of its class: `ranker_tags`.

All follow `BaseRanker`'s contract: ``fit(X, y, qid=...)``, ``predict(X)``, ``rank(X, qid)``,
``save(dir)``/``load(dir)``. Library imports (xgboost, lightgbm, torch, transformers) happen
inside ``fit``/``load``, so importing this package stays light.

Examples
--------
>>> from ltrr.rankers import rankers
>>> "lambdamart-listwise" in rankers
True
"""

from ltrr.rankers.base import BaseRanker, group_slices, mean_ndcg, ndcg_scorer, rankers
from ltrr.rankers.gbdt import (
    LambdaMARTRanker,
    XGBoostListwiseRanker,
    XGBoostPairwiseRanker,
    XGBoostPointwiseRanker,
)
from ltrr.rankers.linear import RankSVMRanker, SVMPointwiseRanker
from ltrr.rankers.neural import FFNPointwiseRanker, ListNetRanker, RankNetRanker
from ltrr.rankers.tags import RankerTags, ranker_defaults, ranker_tags
from ltrr.rankers.transformer import (
    TransformerListwiseRanker,
    TransformerPairwiseRanker,
    TransformerPointwiseRanker,
)

__all__ = [
    "BaseRanker",
    "rankers",
    "group_slices",
    "mean_ndcg",
    "ndcg_scorer",
    "RankerTags",
    "ranker_defaults",
    "ranker_tags",
    "XGBoostPointwiseRanker",
    "XGBoostPairwiseRanker",
    "XGBoostListwiseRanker",
    "LambdaMARTRanker",
    "SVMPointwiseRanker",
    "RankSVMRanker",
    "FFNPointwiseRanker",
    "RankNetRanker",
    "ListNetRanker",
    "TransformerPointwiseRanker",
    "TransformerPairwiseRanker",
    "TransformerListwiseRanker",
]
