"""Datasets named ``irds:<id>``: queries, documents and qrels through ``ir_datasets``.

``[data] dataset = "irds:beir/nq"`` reads the dataset's documents as the corpus (``doc_id``,
``title`` where it has one, and the text), its queries (``query_id`` and text) and its qrels.
The text of a document or query is its ``text`` field, else ir_datasets' ``default_text()``
(for TREC topics with title, description and narrative, the title; the run logs which fields
there were); a document whose ``default_text()`` holds its title is indexed with the title once.
Answers come from the queries where the dataset has them (an ``answers`` field, as in
``natural-questions`` or ``dpr-w100``), else from ``[data] answers``: a JSONL or Parquet table
with ``qid`` and ``answers``. Without answers a dataset can be retrieved and evaluated for
retrieval, not labelled.

Offline use: ``ir_datasets`` keeps downloaded files under ``$IR_DATASETS_HOME`` (default
``~/.ir_datasets``). Download once where there is a network (``ir_datasets export <id> docs``
fetches everything a dataset needs) and copy that folder to the offline machine, or register a
dataset from local files, the documented way to add one::

    import ir_datasets
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload
    ir_datasets.registry.register("my/set", ir_datasets.datasets.base.Dataset(
        TsvDocs(LocalDownload("docs.tsv")), TsvQueries(LocalDownload("queries.tsv")),
        TrecQrels(LocalDownload("qrels.txt"), {1: "relevant"})))

and name it ``irds:my/set`` (register it in the process that runs ltrr, e.g. in a plugin
module imported first).
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pandas as pd

from ltrr._errors import ConfigError, DataError, MissingDependencyError

__all__ = ["IRDS_PREFIX", "is_irds", "irds_slug", "load_irds", "attach_answers"]

IRDS_PREFIX = "irds:"


def is_irds(name) -> bool:
    """True for a dataset named ``irds:<id>``."""
    return isinstance(name, str) and name.startswith(IRDS_PREFIX)


def irds_slug(name: str) -> str:
    """A folder name for the indexes of ``irds:<id>`` (``irds:beir/nq`` -> ``irds-beir--nq``)."""
    return "irds-" + name[len(IRDS_PREFIX):].replace("/", "--")


def _module():
    try:
        import ir_datasets
    except ImportError:
        raise MissingDependencyError("irds: datasets need ir_datasets: pip install 'ltrr[irds]'") from None
    return ir_datasets


def _text(obj) -> str:
    text = getattr(obj, "text", None)
    if isinstance(text, str):
        return text
    return obj.default_text()


def _doc_row(d) -> dict:
    """A corpus row of an ir_datasets document. Where the document has no ``text`` field its
    ``default_text()`` is the text, and that often holds the title already (``msmarco-document``:
    title and body; ``cord19``: title and abstract): the title is then left empty, since ltrr puts
    a passage's title before its text and would index it twice."""
    title = str(getattr(d, "title", "") or "")
    text = _text(d)
    if title and not isinstance(getattr(d, "text", None), str) and title in text:
        title = ""
    return {"docid": str(d.doc_id), "title": title, "text": text}


def attach_answers(queries: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Set ``answers`` of ``queries`` from a table of ``qid, answers`` (JSONL or Parquet).

    Queries the table lacks keep no answers; a qid of the table that is no query is an error,
    since it means the file belongs to another topic set.
    """
    from ltrr.data.io import read_table
    from ltrr.data.schema import validate_queries

    path = Path(path)
    table = read_table(path, required=("qid", "answers"))
    table["qid"] = table["qid"].astype(str)
    if table["qid"].duplicated().any():
        raise DataError(f"{path}: qid {table.loc[table['qid'].duplicated(), 'qid'].iloc[0]!r} appears twice")
    unknown = sorted(set(table["qid"]) - set(queries["qid"].astype(str)))
    if unknown:
        raise DataError(f"{path}: {len(unknown)} qid(s) of the answers file are not queries of the dataset "
                        f"(e.g. {', '.join(map(repr, unknown[:3]))})")
    by_qid = dict(zip(table["qid"], table["answers"], strict=True))
    out = queries.copy()
    out["answers"] = [by_qid.get(str(q), old) for q, old in zip(out["qid"], out["answers"], strict=True)]
    try:  # checked as a queries file's answers are: one string is one alias, never its letters
        return validate_queries(out)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def load_irds(name: str, *, answers: str | Path | None = None):
    """Load ``irds:<id>`` as a `ltrr.data.io.Dataset` (no network if the files are local).

    Raises
    ------
    ConfigError
        For an id ``ir_datasets`` does not know (with the closest known ids).
    DataError
        For a dataset without queries or documents.
    """

    if not is_irds(name):
        raise ConfigError(f"{name!r} is not an ir_datasets name; write irds:<id>")
    irds = _module()
    ident = name[len(IRDS_PREFIX):]
    try:
        ds = irds.load(ident)
    except KeyError:
        close = difflib.get_close_matches(ident, list(irds.registry), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(IRDS_PREFIX + c for c in close)}?" if close else ""
        raise ConfigError(f"unknown ir_datasets id {ident!r} in [data] dataset = {name!r}{hint} (a local dataset "
                          "must be registered with ir_datasets.registry.register first)") from None
    if not (ds.has_queries() and ds.has_docs()):
        raise DataError(f"{name}: ltrr needs a dataset with queries and documents; {ident!r} has "
                        f"{'no queries' if not ds.has_queries() else 'no documents'} (pick a subset id)")
    try:
        return _read(name, ds, answers)
    except (RuntimeError, OSError, ValueError) as exc:  # ir_datasets' own reading errors
        if isinstance(exc, (ConfigError, DataError)):
            raise
        raise DataError(f"{name}: ir_datasets could not read the dataset ({type(exc).__name__}: {exc}); "
                        "are its files under $IR_DATASETS_HOME (no download is possible offline)?") from None


def _read(name: str, ds, answers):
    from ltrr.data.io import Dataset
    from ltrr.data.schema import validate_corpus, validate_qrels, validate_queries
    from ltrr.data.trec import check_qrels_match

    rows = []
    fields = getattr(ds.queries_cls(), "_fields", ())
    if "text" not in fields and len([f for f in fields if f != "query_id"]) > 1:
        from ltrr._log import logger

        logger.info(f"[data] {name}: the queries have no text field but {', '.join(f for f in fields if f != 'query_id')}; "
                    "each question is ir_datasets' default_text() of its query")
    for q in ds.queries_iter():
        ans = getattr(q, "answers", None)
        rows.append({"qid": str(q.query_id), "question": _text(q),
                     "answers": [str(a) for a in ans] if isinstance(ans, (list, tuple)) else []})
    queries = validate_queries(pd.DataFrame(rows))
    if answers:
        queries = attach_answers(queries, answers)
    corpus = validate_corpus(pd.DataFrame([_doc_row(d) for d in ds.docs_iter()]))
    qrels = None
    if ds.has_qrels():
        qrels = validate_qrels(pd.DataFrame(
            [{"qid": str(r.query_id), "docid": str(r.doc_id), "relevance": int(r.relevance)} for r in ds.qrels_iter()],
            columns=["qid", "docid", "relevance"]))
        check_qrels_match(qrels, queries, f"{name} qrels")
    return Dataset(name=irds_slug(name), queries=queries, corpus=corpus, qrels=qrels, path=None)
