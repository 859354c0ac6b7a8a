"""Routing features: raw per-(query, arm) features and the fitted pipeline to a feature matrix.

Two layers:

1. `extract_raw` computes the raw table (query length and type, and per arm OverallSim,
   AvgSim, MaxSim, VarSim, Moran's I and CrossRetSim over its passages) plus the query
   embeddings, stored once per query (`RawFeatures`); `write_feature_tables` /
   `read_feature_tables` persist them.
2. `FeaturePipeline` (a scikit-learn transformer) fits the PCA of the query embeddings, the
   query-length standardiser and the median imputer on training rows only and maps raw
   features to ``X``; the feature set comes from a TOML spec (`load_spec`, `available_specs`).

The query-type classifiers and their measured accuracies are in `ltrr.features.querytype`.
Importing this package loads no heavy library.

Examples
--------
>>> from ltrr.features import available_specs, load_spec
>>> "paper" in available_specs()
True
>>> load_spec("paper").pca_dim
32
"""

from ltrr.features.extract import (
    POST_COLUMNS,
    PRE_COLUMNS,
    RAW_COLUMNS,
    RAW_VERSION,
    QueryRaw,
    RawFeatures,
    extract_query,
    extract_raw,
    query_length,
    read_feature_tables,
    write_feature_tables,
)
from ltrr.features.pipeline import (
    POST_FEATURES,
    PRE_FEATURES,
    FeaturePipeline,
    FeatureSpec,
    available_specs,
    load_spec,
)
from ltrr.features.querytype import (
    KEYWORD,
    QUESTION,
    EmbeddingQueryTypeClassifier,
    RuleQueryTypeClassifier,
    SpacyQueryTypeClassifier,
    evaluate_query_type,
    get_query_type_classifier,
    phrasing_labels,
    query_type_classifiers,
)
from ltrr.features.raw import copy_feature_tables, feature_tables_inputs

__all__ = [
    "RAW_VERSION",
    "RAW_COLUMNS",
    "PRE_COLUMNS",
    "POST_COLUMNS",
    "PRE_FEATURES",
    "POST_FEATURES",
    "RawFeatures",
    "QueryRaw",
    "extract_raw",
    "extract_query",
    "query_length",
    "write_feature_tables",
    "read_feature_tables",
    "feature_tables_inputs",
    "copy_feature_tables",
    "FeatureSpec",
    "load_spec",
    "available_specs",
    "FeaturePipeline",
    "QUESTION",
    "KEYWORD",
    "RuleQueryTypeClassifier",
    "SpacyQueryTypeClassifier",
    "EmbeddingQueryTypeClassifier",
    "query_type_classifiers",
    "get_query_type_classifier",
    "phrasing_labels",
    "evaluate_query_type",
]
