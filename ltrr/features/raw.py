"""The raw feature tables: their columns, the containers (`RawFeatures` for many queries,
`QueryRaw` for one) and their files.

`ltrr.features.extract` computes them (see it for each feature's definition);
`ltrr.features.FeaturePipeline` turns them into model inputs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ltrr._atomic import atomic_path, write_json_atomic, write_table_atomic
from ltrr._errors import DataError, NotBuiltError

__all__ = [
    "RAW_VERSION",
    "KEY_COLUMNS",
    "BOOK_COLUMNS",
    "PRE_COLUMNS",
    "POST_COLUMNS",
    "RAW_COLUMNS",
    "RawFeatures",
    "QueryRaw",
    "write_feature_tables",
    "read_feature_tables",
    "feature_tables_inputs",
    "copy_feature_tables",
]

#: version of the raw feature definitions; bump when a definition changes
RAW_VERSION = 1
KEY_COLUMNS = ("qid", "arm")
BOOK_COLUMNS = ("is_no_retrieval", "n_docs")
PRE_COLUMNS = ("query_length", "query_type")
POST_COLUMNS = ("overall_sim", "avg_sim", "max_sim", "var_sim", "moran", "cross_ret_sim")
RAW_COLUMNS = (*KEY_COLUMNS, *BOOK_COLUMNS, *PRE_COLUMNS, *POST_COLUMNS)

_TABLE_FILE = "raw.parquet"
_EMB_FILE = "query_embeddings.npy"
_META_FILE = "raw_meta.json"


@dataclass
class RawFeatures:
    """Raw features of every (query, arm) plus the query embeddings, stored once per query.

    Parameters
    ----------
    table : DataFrame
        One row per (qid, arm) with the columns `RAW_COLUMNS`, queries in input order and arms
        in pool order within each query.
    query_embeddings : ndarray of shape (n_queries, dim)
        Unit-length query embeddings, row ``i`` for ``qids[i]``.
    qids : list of str
        Row order of ``query_embeddings``.
    arms : list of str
        Arm names in pool order (the tie-break order of routers).
    no_retrieval : list of str
        The no-retrieval arms among ``arms``.
    meta : dict
        ``version`` (`RAW_VERSION`), ``encoder``, ``k``, ``moran_neighbours``, ``query_type``.

    Examples
    --------
    >>> from ltrr.features import extract_raw
    >>> raw = extract_raw(queries, results, arms=["bm25", "dense", "none"],
    ...                   no_retrieval="none")  # doctest: +SKIP
    >>> train = raw.subset(train_qids)  # doctest: +SKIP
    """

    table: pd.DataFrame
    query_embeddings: np.ndarray
    qids: list[str]
    arms: list[str]
    no_retrieval: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.table)

    def check_columns(self, columns: Sequence[str]) -> None:
        """Raise `DataError` naming the columns of ``columns`` that the table lacks."""
        if not isinstance(self.table, pd.DataFrame):
            raise DataError(
                f"RawFeatures.table must be a DataFrame, got {type(self.table).__name__}"
            )
        missing = [c for c in columns if c not in self.table.columns]
        if missing:
            raise DataError(
                f"the raw feature table is missing column(s) {', '.join(missing)}; it has "
                f"{', '.join(map(str, self.table.columns))}. Re-extract it with "
                "ltrr.features.extract_raw (or `ltrr features CONFIG`)"
            )

    def embeddings_for(self, qids: Sequence[str] | np.ndarray) -> np.ndarray:
        """Query embeddings of ``qids`` (rows in the order given); unknown qid -> `DataError`."""
        row_of = {q: i for i, q in enumerate(self.qids)}
        rows = []
        for q in qids:
            r = row_of.get(str(q))
            if r is None:
                raise DataError(f"qid {q!r} has no query embedding in these raw features")
            rows.append(r)
        return np.asarray(self.query_embeddings)[np.asarray(rows, dtype=np.int64)]

    def subset(self, qids: Sequence[str]) -> RawFeatures:
        """The rows and embeddings of ``qids`` only (order of this object kept)."""
        keep = {str(q) for q in qids}
        unknown = sorted(keep - set(self.qids))
        if unknown:
            raise DataError(f"subset: qid(s) {unknown[:5]} are not in these raw features")
        rows = [i for i, q in enumerate(self.qids) if q in keep]
        table = self.table[self.table["qid"].astype(str).isin(keep)].reset_index(drop=True)
        return RawFeatures(
            table=table,
            query_embeddings=np.asarray(self.query_embeddings)[np.asarray(rows, dtype=np.int64)],
            qids=[self.qids[i] for i in rows],
            arms=list(self.arms),
            no_retrieval=list(self.no_retrieval),
            meta=dict(self.meta),
        )


@dataclass
class QueryRaw:
    """Raw features of one query as arrays: what a router needs to route it, without a table.

    `extract_query` builds it; ``FeaturePipeline.transform_query`` and
    ``LTRRouter.route_query`` consume it. Values equal `extract_raw`'s for the same query
    (`to_raw` gives the `RawFeatures` form).

    Parameters
    ----------
    qid, question : str
    columns : dict of str to ndarray of shape (n_arms,)
        The numeric columns of `RAW_COLUMNS` (bookkeeping, pre- and post-retrieval), one value
        per arm in ``arms`` order.
    query_embedding : ndarray of shape (dim,)
        Unit-length query embedding (float32).
    arms, no_retrieval : list of str
    meta : dict
        As `RawFeatures.meta`.
    """

    qid: str
    question: str
    columns: dict[str, np.ndarray]
    query_embedding: np.ndarray
    arms: list[str]
    no_retrieval: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_raw(self) -> RawFeatures:
        """The same features as a one-query `RawFeatures` (the table form)."""
        A = len(self.arms)
        table = pd.DataFrame(
            {
                "qid": pd.Series([self.qid] * A, dtype=object),
                "arm": pd.Series(list(self.arms), dtype=object),
                **{c: self.columns[c] for c in RAW_COLUMNS[2:]},
            }
        )
        return RawFeatures(
            table=table,
            query_embeddings=self.query_embedding[None, :],
            qids=[self.qid],
            arms=list(self.arms),
            no_retrieval=list(self.no_retrieval),
            meta=dict(self.meta),
        )


# ---- persistence ----------------------------------------------------------------------------
def write_feature_tables(raw: RawFeatures, folder: str | Path, *, inputs: str | None = None) -> Path:
    """Write ``raw`` into ``folder`` atomically; returns the folder.

    Files: ``raw.parquet`` (the table), ``query_embeddings.npy`` and ``raw_meta.json`` (qids in
    embedding order, arms, no-retrieval arms, meta, and ``inputs``). Each file is written to a
    temporary name and renamed; the JSON goes last, so a folder with it is complete.

    ``inputs`` is the fingerprint of what the tables were made from (the features stage passes
    its input fingerprint); `feature_tables_inputs` reads it back, so a reader can tell tables
    of other inputs from its own, whoever wrote the folder last.
    """
    if not isinstance(raw, RawFeatures):
        raise DataError(f"write_feature_tables needs RawFeatures, got {type(raw).__name__}")
    raw.check_columns(RAW_COLUMNS)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _META_FILE).unlink(missing_ok=True)
    write_table_atomic(raw.table, folder / _TABLE_FILE)
    with atomic_path(folder / _EMB_FILE) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.asarray(raw.query_embeddings, dtype=np.float32), allow_pickle=False)
    meta = {
        "qids": [str(x) for x in raw.qids],
        "arms": list(raw.arms),
        "no_retrieval": list(raw.no_retrieval),
        "meta": raw.meta,
    }
    if inputs is not None:
        meta["inputs"] = str(inputs)
    write_json_atomic(folder / _META_FILE, meta, indent=1)
    return folder


def _complete(folder: Path) -> bool:
    return all((folder / f).is_file() for f in (_META_FILE, _TABLE_FILE, _EMB_FILE))


def feature_tables_inputs(folder: str | Path) -> str | None:
    """The ``inputs`` fingerprint `write_feature_tables` recorded in ``folder``.

    None when the folder holds no complete tables (none yet, or another process is writing
    them), its JSON is damaged, or the tables were written without one (by an older ltrr, or by
    hand).
    """
    folder = Path(folder)
    if not _complete(folder):
        return None
    try:
        got = json.loads((folder / _META_FILE).read_text(encoding="utf-8")).get("inputs")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError, RecursionError):
        return None  # OSError: removed between the check and the read, by a process rewriting them
    return str(got) if got is not None else None


def copy_feature_tables(src: str | Path, dst: str | Path) -> Path:
    """Copy complete feature tables from ``src`` to ``dst`` with `write_feature_tables`'s atomicity.

    The JSON of ``dst`` is removed first and copied last, so an interrupted copy leaves a folder
    that reads as incomplete, never one that mixes two runs' files.
    """
    src, dst = Path(src), Path(dst)
    if not _complete(src):
        raise NotBuiltError(f"{src}: no complete feature tables to copy")
    dst.mkdir(parents=True, exist_ok=True)
    (dst / _META_FILE).unlink(missing_ok=True)
    for name in (_TABLE_FILE, _EMB_FILE, _META_FILE):
        with atomic_path(dst / name) as tmp:
            shutil.copyfile(src / name, tmp)
    return dst


def read_feature_tables(folder: str | Path) -> RawFeatures:
    """Read what `write_feature_tables` wrote; `NotBuiltError` if the folder is incomplete."""
    folder = Path(folder)
    paths = [folder / _META_FILE, folder / _TABLE_FILE, folder / _EMB_FILE]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise NotBuiltError(
            f"{folder}: no complete feature tables (missing {', '.join(missing)}); run `ltrr features CONFIG`"
        )
    try:
        meta = json.loads(paths[0].read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{paths[0]}: not valid JSON ({exc}); the file is damaged") from None
    table = pd.read_parquet(paths[1])
    for c in KEY_COLUMNS:  # the same dtype as extract_raw gives (Parquet reads back strings)
        if c in table.columns:
            table[c] = table[c].astype(object)
    raw = RawFeatures(
        table=table,
        query_embeddings=np.load(paths[2], allow_pickle=False),
        qids=[str(x) for x in meta["qids"]],
        arms=[str(a) for a in meta["arms"]],
        no_retrieval=[str(a) for a in meta["no_retrieval"]],
        meta=dict(meta["meta"]),
    )
    if raw.query_embeddings.shape[0] != len(raw.qids):
        raise DataError(
            f"{folder}: {raw.query_embeddings.shape[0]} query embeddings for {len(raw.qids)} qids"
        )
    return raw
