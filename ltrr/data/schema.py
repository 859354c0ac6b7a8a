"""Table schemas for queries, corpus and qrels, and their validators.

- queries: ``qid`` (str, unique), ``question`` (non-empty str), ``answers`` (list of str aliases;
  a single string is taken as a list of one alias, ``"Paris"`` -> ``["Paris"]``, never split),
  ``qtype`` (str), ``group`` (str; related queries share a group and stay on one side of a
  split). Optional facets: ``answer_type``, ``phrasing``, ``wording``, ``source``.
- corpus: ``docid`` (str, unique), ``title``, ``text``.
- qrels: ``qid``, ``docid``, ``relevance`` (int > 0 for relevant).
- pool results (`POOL_COLUMNS`): ``qid``, ``arm``, ``rank``, ``docid``, ``score``, ``text``; what
  `ltrr.retrieval.Pool.search` returns and a packed arm (`ltrr.packing.pack_results`) writes.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ltrr._errors import DataError

__all__ = [
    "QUERY_COLUMNS",
    "CORPUS_COLUMNS",
    "QREL_COLUMNS",
    "POOL_COLUMNS",
    "validate_queries",
    "validate_corpus",
    "validate_qrels",
]

QUERY_COLUMNS = ("qid", "question", "answers", "qtype", "group")
CORPUS_COLUMNS = ("docid", "title", "text")
QREL_COLUMNS = ("qid", "docid", "relevance")
POOL_COLUMNS = ["qid", "arm", "rank", "docid", "score", "text"]  # a list: it selects columns


def _require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{what} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing and not len(df.columns):
        raise DataError(f"{what} table is empty")
    if missing:
        raise DataError(
            f"{what} table is missing column(s) {', '.join(missing)}; it has {', '.join(map(str, df.columns))}"
        )


def _unique(df: pd.DataFrame, col: str, what: str) -> None:
    dup = df[col][df[col].duplicated()]
    if len(dup):
        raise DataError(f"{what}: duplicate {col} {dup.iloc[0]!r} ({len(dup)} duplicate(s) in all)")


def validate_queries(df: pd.DataFrame, *, require_answers: bool = False) -> pd.DataFrame:
    """Check a queries table and return it with defaults filled and types normalised.

    Missing ``qtype`` becomes ``"unknown"``; a missing ``group`` becomes the qid (each query its
    own group). With ``require_answers`` every query needs a non-empty list of string answers.
    """
    _require(df, ("qid", "question"), "queries")
    df = df.copy()
    df["qid"] = df["qid"].astype(str)
    _unique(df, "qid", "queries")
    for qid, q in zip(df["qid"], df["question"], strict=True):
        if not isinstance(q, str) or not q.strip():
            raise DataError(f"queries: question of qid {qid!r} is empty or not a string")
    if "answers" not in df.columns:
        if require_answers:
            raise DataError("queries table is missing column answers (a list of answer strings)")
        df["answers"] = [[] for _ in range(len(df))]
    df["answers"] = [_answers(qid, a, require_answers) for qid, a in zip(df["qid"], df["answers"], strict=True)]
    if "qtype" not in df.columns:
        df["qtype"] = "unknown"
    if "group" not in df.columns:
        df["group"] = df["qid"]
    # a row without them (in a file where other rows have them) gets the same defaults
    df["qtype"] = df["qtype"].fillna("unknown").astype(str)
    df["group"] = df["group"].fillna(df["qid"]).astype(str)
    return df.reset_index(drop=True)


def _answers(qid: str, a, required: bool) -> list[str]:
    if a is None or (isinstance(a, float) and a != a):  # NaN: pandas' fill for a row without answers
        a = []
    if isinstance(a, str):
        a = [a]
    try:
        items = list(a)
    except TypeError:
        raise DataError(f"queries: answers of qid {qid!r} must be a list of strings, got {type(a).__name__}") from None
    for x in items:
        if not isinstance(x, str):
            raise DataError(
                f"queries: answers of qid {qid!r} must be strings, got {type(x).__name__} {x!r}"
            )
    items = [x for x in items if x.strip()]
    if required and not items:
        raise DataError(f"queries: qid {qid!r} has an empty answer list")
    return items


def validate_corpus(df: pd.DataFrame) -> pd.DataFrame:
    """Check a corpus table (docid unique, text a string) and return it normalised."""
    _require(df, ("docid", "text"), "corpus")
    df = df.copy()
    df["docid"] = df["docid"].astype(str)
    _unique(df, "docid", "corpus")
    if "title" not in df.columns:
        df["title"] = ""
    df["title"] = df["title"].fillna("").astype(str)
    bad = df["text"].map(lambda t: not isinstance(t, str))
    if bad.any():
        raise DataError(f"corpus: text of docid {df['docid'][bad].iloc[0]!r} is not a string")
    if len(df) == 0:
        raise DataError("corpus is empty")
    return df.reset_index(drop=True)


def validate_qrels(df: pd.DataFrame) -> pd.DataFrame:
    """Check a qrels table and return it normalised."""
    _require(df, QREL_COLUMNS, "qrels")
    df = df.copy()
    for col in ("qid", "docid"):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise DataError(f"qrels row {int(empty.to_numpy().argmax())} has no {col}")
    df["qid"] = df["qid"].astype(str)
    df["docid"] = df["docid"].astype(str)
    rel = pd.to_numeric(df["relevance"], errors="coerce")
    bad = ~rel.map(lambda v: bool(v == v) and float(v).is_integer())  # NaN, inf and 0.5 are not grades
    if bad.any():
        i = int(bad.to_numpy().argmax())
        raise DataError(f"qrels row {i} (qid {df['qid'].iloc[i]!r}): relevance {str(df['relevance'].iloc[i])!r} is not "
                        "an integer grade")
    df["relevance"] = rel.astype(int)
    return df.reset_index(drop=True)
