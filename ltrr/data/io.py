"""Loaders and writers for queries, corpus and qrels: JSONL, Parquet and BEIR folders.

A dataset on disk is a folder holding ``queries`` and ``corpus`` tables (``.parquet`` or
``.jsonl``) and optionally ``qrels``; a BEIR folder (``corpus.jsonl``, ``queries.jsonl``,
``qrels/<split>.tsv``) loads too. Malformed JSONL lines are reported as ``file:line: what``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ltrr._atomic import atomic_path, write_table_atomic, write_text_atomic  # re-exported (__all__)
from ltrr._errors import DataError, LtrrError, NotBuiltError
from ltrr.data.lines import utf8_lines
from ltrr.data.schema import validate_corpus, validate_qrels, validate_queries

__all__ = [
    "BUILDERS",
    "Dataset",
    "read_jsonl",
    "read_table",
    "load_queries",
    "load_corpus",
    "load_qrels",
    "load_dataset",
    "atomic_path",
    "write_table_atomic",
    "write_text_atomic",
    "data_root",
    "default_generation_cache",
    "resolve_dataset",
    "read_saved_meta",
    "saved_model_errors",
]


#: the datasets `ltrr.data.build.build_dataset` makes, by builder name (here, beneath the
#: builder, so that a missing dataset's message can say whether a build would make it)
BUILDERS = ("demo",)


def data_root() -> Path:
    """Where built datasets, indexes and caches go: ``$LTRR_DATA_DIR`` or ``./data``."""
    return Path(os.environ.get("LTRR_DATA_DIR", "data"))


def default_generation_cache() -> Path:
    """The generation cache a run uses when ``[generation] cache`` names none, and the one the
    ``ltrr cache`` commands read by default: ``<data root>/cache/generations.sqlite``."""
    return data_root() / "cache" / "generations.sqlite"


def read_jsonl(path: str | Path, *, required: tuple[str, ...] = ()) -> list[dict]:
    """Read a JSONL file; each line must be a JSON object with the ``required`` keys.

    The file is UTF-8, with or without the byte-order mark that Windows editors write, and
    with ``\n`` or ``\r\n`` line endings.

    Raises
    ------
    DataError
        ``file:line: what is wrong`` for the first malformed line.
    """
    path = Path(path)
    rows = []
    for lineno, line in utf8_lines(path):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise DataError(f"{path}:{lineno}: {_TOO_DEEP}") from None
        rows.append(_check_row(path, lineno, obj, required))
    return rows


#: the message of a JSON value nested deeper than Python's parser recurses (thousands of ``[``)
_TOO_DEEP = "JSON nested too deeply to read (arrays or objects inside each other thousands of levels deep)"


def _check_row(path: Path, lineno: int, obj, required: tuple[str, ...]) -> dict:
    if not isinstance(obj, dict):
        raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise DataError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}")
    return obj


def _text_ids(path: Path, rows: list[dict], fields: tuple[str, ...]) -> list[dict]:
    """The id ``fields`` of JSONL ``rows`` as text, each value on its own (a JSON number ``1`` is
    ``"1"``, ``3.5`` is ``"3.5"``): a DataFrame made first would give a column holding one float
    floats throughout, so ``1`` became ``"1.0"`` and no longer matched the qrels' ``"1"``. A
    missing (null), boolean or structured id is a ``file:line`` error."""
    for i, r in enumerate(rows, 1):
        for f in fields:
            if f not in r:
                continue
            v = r[f]
            if v is None or isinstance(v, (bool, list, dict)):
                raise DataError(f"{path}:{i}: {f} must be a string or a number, got {json.dumps(v)}")
            r[f] = v if isinstance(v, str) else str(v)
    return rows


def read_table(path: str | Path, *, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read a ``.jsonl`` or ``.parquet`` table (a JSONL file's ``qid`` and ``docid`` as text,
    value by value)."""
    path = Path(path)
    if not path.exists():
        raise NotBuiltError(f"{path}: no such file")
    if path.suffix == ".parquet":
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise DataError(f"{path}: not a readable Parquet file ({exc})") from None
        missing = [k for k in required if k not in df.columns]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
        return df
    if path.suffix in (".jsonl", ".json"):
        return pd.DataFrame(_text_ids(path, read_jsonl(path, required=required), ("qid", "docid")))
    raise DataError(f"{path}: unsupported table format {path.suffix!r}; use .jsonl or .parquet")


def load_queries(path: str | Path, *, require_answers: bool = False) -> pd.DataFrame:
    """Load and validate a queries table (``.jsonl``/``.parquet``, or a BEIR ``queries.jsonl``)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        rows = read_jsonl(path)
        if rows and "_id" in rows[0]:  # BEIR layout: _id, text, metadata
            rows = [_beir_query(path, i, r) for i, r in enumerate(_text_ids(path, rows, ("_id",)), 1)]
            if any("answers" in r for r in rows):  # a query without metadata.answers among queries
                for r in rows:                     # with them has none, as in a folder without any
                    r.setdefault("answers", [])
        _text_ids(path, rows, ("qid",))
        for i, r in enumerate(rows, 1):
            for key in ("qid", "question"):
                if key not in r:
                    raise DataError(f"{path}:{i}: missing field {key}")
        df = pd.DataFrame(rows)
    else:
        df = read_table(path, required=("qid", "question"))
    try:
        return validate_queries(df, require_answers=require_answers)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def _beir_query(path: Path, lineno: int, r: dict) -> dict:
    for key in ("_id", "text"):
        if key not in r:
            raise DataError(f"{path}:{lineno}: missing field {key}")
    meta = r.get("metadata") or {}
    out = {"qid": str(r["_id"]), "question": r["text"]}
    if isinstance(meta, dict) and "answers" in meta:
        out["answers"] = meta["answers"]
    return out


def load_corpus(path: str | Path) -> pd.DataFrame:
    """Load and validate a corpus table (``.jsonl``/``.parquet``; BEIR ``_id`` accepted)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        rows = read_jsonl(path)
        if rows and "_id" in rows[0]:
            for i, r in enumerate(rows, 1):
                if "_id" not in r:  # was the docid "None"
                    raise DataError(f"{path}:{i}: missing field _id")
            rows = [{"docid": r["_id"], "title": r.get("title", ""), "text": r.get("text")}
                    for r in _text_ids(path, rows, ("_id",))]
        _text_ids(path, rows, ("docid",))
        for i, r in enumerate(rows, 1):
            for key in ("docid", "text"):
                if key not in r:
                    raise DataError(f"{path}:{i}: missing field {key}")
        df = pd.DataFrame(rows)
    else:
        df = read_table(path, required=("docid", "text"))
    try:
        return validate_corpus(df)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def load_qrels(path: str | Path) -> pd.DataFrame:
    """Load qrels from ``.parquet``/``.jsonl``, a BEIR ``.tsv`` or a TREC qrels file.

    A TREC qrels file (``qid iteration docno relevance``, no header) is recognised by its
    suffix (``.qrels``, ``.trec``, ``.txt``) or, for ``.tsv``, by a first line of four fields
    with no BEIR header.
    """
    from ltrr.data.trec import looks_like_trec_qrels, read_trec_qrels

    path = Path(path)
    if path.suffix in (".qrels", ".trec", ".txt") or (path.suffix == ".tsv" and looks_like_trec_qrels(path)):
        df = read_trec_qrels(path)
    elif path.suffix == ".tsv":
        try:
            # ids are text: "NA", "null" or "None" are ids, not missing values
            df = pd.read_csv(path, sep="\t", dtype=str, encoding="utf-8-sig", keep_default_na=False)
        except Exception as exc:
            raise DataError(f"{path}: unreadable TSV ({exc})") from None
        df = df.rename(columns={"query-id": "qid", "corpus-id": "docid", "score": "relevance"})
    else:
        df = read_table(path, required=("qid", "docid", "relevance"))
    try:
        return validate_qrels(df)
    except (DataError, ValueError) as exc:
        raise DataError(f"{path}: {exc}") from None


@dataclass
class Dataset:
    """Queries, corpus and optional qrels of one dataset."""

    name: str
    queries: pd.DataFrame
    corpus: pd.DataFrame
    qrels: pd.DataFrame | None = None
    path: Path | None = None


def _first(folder: Path, stems: tuple[str, ...]) -> Path | None:
    for stem in stems:
        for ext in (".parquet", ".jsonl"):
            p = folder / f"{stem}{ext}"
            if p.exists():
                return p
    return None


def resolve_dataset(name_or_path: str | Path) -> Path:
    """A dataset name (``demo``) resolves to ``<data_root>/built/<name>``; a path is kept."""
    p = Path(name_or_path)
    if p.exists():
        return p
    if "/" not in str(name_or_path) and p.suffix == "":
        built = data_root() / "built" / str(name_or_path)
        if built.exists():
            return built
        if str(name_or_path) in BUILDERS:
            raise NotBuiltError(
                f"dataset {str(name_or_path)!r} is not built (looked in {built}); run `ltrr data build {name_or_path}`"
            )
        raise NotBuiltError(f"no dataset folder {str(name_or_path)!r} and no built dataset of that name (looked in "
                            f"{built}); give a dataset folder, or build one with `ltrr data build NAME` (NAME one "
                            f"of: {', '.join(BUILDERS)})")
    raise NotBuiltError(f"dataset folder {p} does not exist")


def _beir_splits(folder: Path) -> dict[str, Path]:
    """The qrels splits of a BEIR folder: ``qrels/<split>.tsv`` by split name."""
    qdir = folder / "qrels"
    return {t.stem: t for t in sorted(qdir.glob("*.tsv"))} if qdir.is_dir() else {}


def load_dataset(name_or_path: str | Path, *, require_answers: bool = False, split: str = "") -> Dataset:
    """Load a dataset folder (ours or BEIR) or a built dataset by name.

    Parameters
    ----------
    name_or_path : str or Path
        A built dataset's name (``demo``) or a folder.
    require_answers : bool, default False
        Refuse queries without gold answers.
    split : str, default ""
        A BEIR folder's qrels split (``qrels/<split>.tsv``): its judgments are loaded and the
        queries are only those judged in it, as BEIR evaluates a split. Empty: every query of
        ``queries.jsonl``, with the ``test`` split's judgments (else the first split's).

    Raises
    ------
    DataError
        The folder lacks queries or corpus, or ``split`` is not one of its qrels splits.
    """
    folder = resolve_dataset(name_or_path)
    if not folder.is_dir():
        raise DataError(f"{folder}: a dataset is a folder with queries and corpus tables")
    q = _first(folder, ("queries",))
    c = _first(folder, ("corpus",))
    if q is None or c is None:
        raise DataError(f"{folder}: needs queries.(parquet|jsonl) and corpus.(parquet|jsonl)")
    splits = _beir_splits(folder)
    if split:
        if split not in splits:
            raise DataError(f"{folder}: no qrels split {split!r} (qrels/{split}.tsv); its splits: "
                            f"{', '.join(splits) or 'none (the split option is for a BEIR folder)'}")
        qr: Path | None = splits[split]
    else:
        qr = _first(folder, ("qrels",))
        if qr is None:
            qr = next((folder / f"qrels{ext}" for ext in (".tsv", ".trec", ".qrels", ".txt")
                       if (folder / f"qrels{ext}").is_file()), None)
        if qr is None and splits:
            qr = splits.get("test", next(iter(splits.values())))
    queries = load_queries(q, require_answers=require_answers)
    qrels = None
    if qr is not None:
        from ltrr.data.trec import check_qrels_match

        qrels = load_qrels(qr)
        check_qrels_match(qrels, queries, str(qr))
        if split:
            judged = set(qrels["qid"].astype(str))
            queries = queries[queries["qid"].astype(str).isin(judged)].reset_index(drop=True)
    return Dataset(
        name=folder.name,
        queries=queries,
        corpus=load_corpus(c),
        qrels=qrels,
        path=folder,
    )


def read_saved_meta(file: str | Path, missing: str) -> dict:
    """The JSON object of a saved model's metadata file (``router.json``, ``policy.json``, ...).

    Raises `NotBuiltError` with ``missing`` (what to run) when the file is absent, and
    `DataError` when it is not a JSON object.
    """
    file = Path(file)
    if not file.is_file():
        raise NotBuiltError(f"{file.parent}: no {file.name}; {missing}")
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{file}: not valid JSON ({exc})") from None
    except RecursionError:
        raise DataError(f"{file}: {_TOO_DEEP}") from None
    if not isinstance(meta, dict):
        raise DataError(f"{file}: expected a JSON object")
    return meta


@contextmanager
def saved_model_errors(folder: str | Path, what: str) -> Iterator[None]:
    """Read a saved model's files inside this block: a missing key, a value of the wrong type,
    a parameter the class does not take or a damaged array file becomes one `DataError` naming
    ``folder`` and ``what`` it holds (ltrr's own errors pass as they are).

    Examples
    --------
    >>> with saved_model_errors("models/knn", "knn router"):
    ...     int({"n": "x"}["n"])
    Traceback (most recent call last):
    ltrr._errors.DataError: models/knn: not a readable knn router (a value is wrong: invalid literal for int() with base 10: 'x'); the folder is damaged or was written by something else: save or train it again
    """
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors is a dependency; nothing to catch without it
        SafetensorError = ValueError  # type: ignore[misc,assignment]
    try:
        yield
    except LtrrError:
        raise
    except KeyError as exc:
        raise DataError(_damaged(folder, what, f"no entry {exc}")) from None
    except TypeError as exc:
        raise DataError(_damaged(folder, what, f"a value or parameter does not fit: {exc}")) from None
    except (ValueError, AttributeError, RuntimeError, OSError, SafetensorError) as exc:
        # AttributeError: a list where a mapping belongs; RuntimeError: torch's shape mismatch
        # (RecursionError is one too); OSError, SafetensorError: a damaged array file
        detail = "a value is wrong" if isinstance(exc, ValueError) else type(exc).__name__
        raise DataError(_damaged(folder, what, f"{detail}: {exc}")) from None


def _damaged(folder: str | Path, what: str, detail: str) -> str:
    detail = " ".join(detail.split())  # one line: torch's shape mismatch spans several
    return (f"{folder}: not a readable {what} ({detail}); the folder is damaged or was written by "
            "something else: save or train it again")
