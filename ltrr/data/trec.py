"""TREC run and qrels files: read, write, and the record of where a saved run came from.

A run file has one line per retrieved passage, ``qid Q0 docno rank score tag``, split on any
whitespace; ltrr writes the arm's name as the tag. A qrels file has ``qid iteration docno
relevance``. Both are read into ltrr's tables (``qid, docid, rank, score, arm`` and
``qid, docid, relevance``) and every malformed line is reported as ``file:line: what``.

trec_eval (and ``ir_measures``, ``pytrec_eval`` and PyTerrier, which use it) order a query's
passages by score, not by the rank column. ltrr's ranking is its ``rank``, and some arms' scores
do not order it: a sampled reranking (``stoch``) keeps the first-stage scores, and a retriever
can tie. So every writer of a run goes through `ordering_scores`: an arm whose scores strictly
decrease down every query's ranking keeps them; any other arm is written with ``1 / rank``,
which evaluates exactly as ltrr ranked it. Reading a written run therefore gives back the same
``qid, docid, rank, arm`` and the score column that was written (exactly: scores are written
with ``repr``).

`RunKey` is the record a saved run carries (issue 27): the config fingerprint and checksums of
the topics and qrels it was made from, so a later run with other inputs is never read as if it
were the same.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._errors import DataError, NotBuiltError
from ltrr.data.lines import utf8_lines

__all__ = [
    "RUN_COLUMNS",
    "RunKey",
    "ordering_scores",
    "write_trec_run",
    "read_trec_run",
    "write_trec_runs",
    "read_trec_qrels",
    "write_trec_qrels",
    "looks_like_trec_qrels",
    "check_qrels_match",
    "table_digest",
    "read_run_key",
    "file_name_problem",
]

RUN_COLUMNS = ["qid", "docid", "rank", "score", "arm"]
MANIFEST = "runs.json"


def _lines(path: Path):
    """``(lineno, fields)`` of the non-blank lines of a UTF-8 text file (BOM allowed)."""
    if not path.is_file():
        raise NotBuiltError(f"{path}: no such file")
    for lineno, line in utf8_lines(path):
        yield lineno, line.split()


def _token(value, what: str) -> str:
    s = str(value)
    if not s or any(ch.isspace() for ch in s):
        raise DataError(f"a TREC file cannot hold the {what} {s!r}: it is empty or has whitespace")
    return s


def file_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a file's name inside a folder (it would be no file, or one
    elsewhere, or a hidden one), or None when it can.

    A run, an arm or anything else that names a file must be a plain name: not empty, not
    ``.`` or ``..``, not starting with ``.``, without ``/``, ``\\`` or NUL.

    Examples
    --------
    >>> file_name_problem("bm25+reg") is None
    True
    >>> file_name_problem("../escaped")
    "it holds '/' (a path, not a name)"
    """
    if not name:
        return "it is empty"
    if "\0" in name:
        return "it holds a NUL character"
    bad = next((c for c in ("/", "\\") if c in name), None)
    if bad is not None:
        return f"it holds {bad!r} (a path, not a name)"
    if name in (".", ".."):
        return "it names a folder, not a file"
    if name.startswith("."):
        return "it starts with '.' (a hidden file)"
    return None


def _run_name(name) -> str:
    """``name`` as the tag of a run and the stem of its file ``<name>.trec``."""
    s = _token(name, "run name")
    problem = file_name_problem(s)
    if problem is not None:
        raise DataError(f"the run name {s!r} cannot name a file inside the runs folder: {problem}")
    return s


def _own_run_files(folder: Path) -> list[Path]:
    """The run files ``folder/runs.json`` lists that are ltrr's to remove: plain ``*.trec``
    names inside ``folder``. Any other entry (a path, a name of another kind, not a string)
    is not a file ltrr wrote there and is left alone; so is an unreadable record."""
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("files", {})
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, AttributeError):
        return []
    if not isinstance(files, (dict, list)):
        return []
    out = []
    for n in files:
        if (isinstance(n, str) and n.endswith(".trec") and Path(n).name == n
                and file_name_problem(n) is None):
            p = folder / n
            if p.is_symlink() or p.is_file():  # a link is removed, never what it points to
                out.append(p)
    return out


def ordering_scores(results: pd.DataFrame) -> pd.Series:
    """The scores to publish for ``results`` (``qid, arm, rank, score``) so that sorting by them
    gives ltrr's ranking.

    An arm whose scores strictly decrease with rank within every query keeps them; the rows of
    any other arm (ties, or an order not made by its scores) get ``1 / rank``.

    Examples
    --------
    >>> res = pd.DataFrame({"qid": ["q"] * 4, "arm": ["a", "a", "b", "b"], "rank": [1, 2, 1, 2],
    ...                     "score": [3.0, 1.0, 1.0, 2.0]})
    >>> ordering_scores(res).tolist()
    [3.0, 1.0, 1.0, 0.5]
    """
    df = results[["qid", "arm", "rank", "score"]].copy()
    df["_pos"] = np.arange(len(df))
    df = df.sort_values(["arm", "qid", "rank"], kind="stable")
    same_group = (df["arm"].to_numpy()[1:] == df["arm"].to_numpy()[:-1]) & (
        df["qid"].to_numpy()[1:] == df["qid"].to_numpy()[:-1])
    s = df["score"].to_numpy(dtype=np.float64)
    bad_step = same_group & ~(s[1:] < s[:-1])
    bad_arms = set(df["arm"].to_numpy()[1:][bad_step]) | set(df.loc[~np.isfinite(s), "arm"])
    out = results["score"].astype(np.float64).copy()
    mask = results["arm"].isin(bad_arms).to_numpy()
    ranks = results["rank"].to_numpy(dtype=np.float64)
    shift = max(0.0, 1.0 - ranks.min()) if len(ranks) else 0.0  # ranks from 0 (PyTerrier's) count from 1
    out[mask] = 1.0 / (ranks[mask] + shift)
    return out


def write_trec_run(results: pd.DataFrame, path: str | Path, *, tag: str | None = None) -> Path:
    """Write ``results`` (``qid, docid, rank, score``, and ``arm`` unless ``tag``) as a TREC run.

    Rows are written by query (first appearance) and rank; scores go through `ordering_scores`.
    The file is written atomically.
    """
    from ltrr._atomic import write_text_atomic

    missing = [c for c in ("qid", "docid", "rank", "score") if c not in results.columns]
    if missing:
        raise DataError(f"a run table needs column(s) {', '.join(missing)}")
    df = results.copy()
    if "arm" not in df.columns:
        if tag is None:
            raise DataError("a run table needs an arm column or a tag")
        df["arm"] = tag
    # decided per arm before the tag replaces it: in a routed run each query keeps the scores
    # of the arm chosen for it unless that arm's scores do not order its ranking
    df["score"] = ordering_scores(df).to_numpy()
    if tag is not None:
        df["arm"] = tag
    qpos = {q: i for i, q in enumerate(pd.unique(df["qid"]))}
    df = df.iloc[np.lexsort((df["rank"].to_numpy(), df["qid"].map(qpos).to_numpy()))]
    lines = [f"{_token(q, 'qid')} Q0 {_token(d, 'docid')} {int(r)} {float(s)!r} {_token(a, 'arm tag')}"
             for q, d, r, s, a in zip(df["qid"], df["docid"], df["rank"], df["score"], df["arm"], strict=True)]
    return write_text_atomic(path, "".join(line + "\n" for line in lines))


def read_trec_run(path: str | Path) -> pd.DataFrame:
    """Read a TREC run file into ``DataFrame[qid, docid, rank, score, arm]`` (the tag as arm).

    Raises
    ------
    DataError
        ``file:line: what`` for the first line without six fields or with a rank that is not
        an integer or a score that is not a number.
    """
    path = Path(path)
    rows = []
    for lineno, f in _lines(path):
        if len(f) != 6:
            raise DataError(f"{path}:{lineno}: a TREC run line has 6 fields (qid Q0 docno rank score tag), "
                            f"this one has {len(f)}: {' '.join(f)[:80]!r}")
        try:
            rank = int(f[3])
        except ValueError:
            raise DataError(f"{path}:{lineno}: rank {f[3]!r} is not an integer") from None
        try:
            score = float(f[4])
        except ValueError:
            raise DataError(f"{path}:{lineno}: score {f[4]!r} is not a number") from None
        rows.append((f[0], f[2], rank, score, f[5]))
    df = pd.DataFrame(rows, columns=RUN_COLUMNS)
    return df.astype({"qid": object, "docid": object, "rank": np.int64, "score": np.float64, "arm": object})


def read_trec_qrels(path: str | Path) -> pd.DataFrame:
    """Read a TREC qrels file (``qid iteration docno relevance``) into ``qid, docid, relevance``.

    Raises
    ------
    DataError
        ``file:line: what`` for the first line without four fields or with a non-integer grade.
    """
    path = Path(path)
    rows = []
    for lineno, f in _lines(path):
        if len(f) != 4:
            raise DataError(f"{path}:{lineno}: a TREC qrels line has 4 fields (qid iteration docno relevance), "
                            f"this one has {len(f)}: {' '.join(f)[:80]!r}")
        try:
            rel = int(f[3])
        except ValueError:
            raise DataError(f"{path}:{lineno}: relevance {f[3]!r} is not an integer") from None
        rows.append((f[0], f[2], rel))
    return pd.DataFrame(rows, columns=["qid", "docid", "relevance"]).astype({"qid": object, "docid": object})


def write_trec_qrels(qrels: pd.DataFrame, path: str | Path) -> Path:
    """Write ``qid, docid, relevance`` as a TREC qrels file (iteration 0)."""
    from ltrr._atomic import write_text_atomic

    lines = [f"{_token(q, 'qid')} 0 {_token(d, 'docid')} {int(r)}\n"
             for q, d, r in zip(qrels["qid"], qrels["docid"], qrels["relevance"], strict=True)]
    return write_text_atomic(path, "".join(lines))


def looks_like_trec_qrels(path: str | Path) -> bool:
    """True when the first non-blank line has four whitespace fields and no BEIR header."""
    for _, f in _lines(Path(path)):
        return len(f) == 4 and f[0] not in ("query-id", "qid") and f[-1].lstrip("-").isdigit()
    return False


def check_qrels_match(qrels: pd.DataFrame, queries: pd.DataFrame, where: str) -> None:
    """Raise when no qid of ``qrels`` is a query of ``queries`` (a qrels file of another set).

    Some queries may lack qrels (unanswerable ones), and qrels may cover queries a run leaves
    out; only a qrels table that matches no query at all is an error.
    """
    if qrels is None or qrels.empty:
        return
    qq = set(queries["qid"].astype(str))
    qr = pd.unique(qrels["qid"].astype(str))
    if not qq.intersection(qr):
        raise DataError(f"{where}: none of the {len(qr)} qids of the qrels (e.g. {', '.join(map(repr, qr[:3]))}) "
                        f"is a query id of the {len(qq)} queries (e.g. {', '.join(map(repr, sorted(qq)[:3]))}); "
                        "are the qrels of another topic set?")


def table_digest(df: pd.DataFrame, columns: list[str]) -> str:
    """A 16-hex checksum of ``df[columns]`` (row order included), for `RunKey`."""
    h = hashlib.sha256(json.dumps(columns).encode())
    if len(df):
        h.update(pd.util.hash_pandas_object(df[columns].astype(str), index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class RunKey:
    """Where a saved run came from: the config fingerprint, the topics and the qrels.

    Parameters
    ----------
    config : str
        Fingerprint of everything in the config that changes the passages (the retrieve
        stage's input fingerprint).
    topics : str
        `table_digest` of the queries' ``qid, question``.
    qrels : str or None
        `table_digest` of the qrels' ``qid, docid, relevance``; None without qrels.
    dataset : str
        The dataset the topics came from (a folder or an ``irds:`` id), for the message only.
    """

    config: str
    topics: str
    qrels: str | None
    dataset: str = ""

    @classmethod
    def of(cls, config: str, queries: pd.DataFrame, qrels: pd.DataFrame | None, dataset: str = "") -> RunKey:
        """A run's key: ``config`` as given, ``queries`` and ``qrels`` as their `table_digest`."""
        return cls(config=config, topics=table_digest(queries, ["qid", "question"]),
                   qrels=None if qrels is None else table_digest(qrels, ["qid", "docid", "relevance"]),
                   dataset=str(dataset))

    def differences(self, other: RunKey) -> list[str]:
        """Names of the inputs (``config``, ``topics``, ``qrels``) that differ."""
        return [f for f in ("config", "topics", "qrels") if getattr(self, f) != getattr(other, f)]


def read_run_key(folder: str | Path) -> RunKey | None:
    """The `RunKey` recorded in ``folder/runs.json``, or None when there is none."""
    p = Path(folder) / MANIFEST
    if not p.is_file():
        return None
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
        return RunKey(**meta["key"])
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{p}: not a run record written by ltrr ({exc})") from None
    except RecursionError:
        raise DataError(f"{p}: not a run record written by ltrr (JSON nested too deeply)") from None


def write_trec_runs(runs: dict[str, pd.DataFrame], folder: str | Path, key: RunKey, *, log=print) -> dict[str, Path]:
    """Write each run as ``folder/<name>.trec`` and the record ``folder/runs.json``.

    Run files that an earlier call wrote from other inputs (another `RunKey`) are removed
    first, and the replacement is said, so a folder never mixes runs of different inputs; an id
    no TREC file can hold (empty, or with whitespace) and a run name that is not a plain file
    name (`file_name_problem`) are refused before anything is removed or written. Only what
    ltrr writes is removed: the plain ``*.trec`` names of the old ``runs.json`` inside
    ``folder``; any other entry there (``../elsewhere``, a name not ending in ``.trec``) is
    left alone.
    """
    from ltrr._atomic import write_text_atomic

    folder = Path(folder)
    for name, df in runs.items():  # every id a TREC file cannot hold is refused before anything is removed
        _run_name(name)
        for col, what in (("qid", "qid"), ("docid", "docid")):
            if col in df.columns:
                for v in pd.unique(df[col]):
                    _token(v, what)
    old = read_run_key(folder)
    if old is not None and old != key:
        log(f"[trec] {folder} held runs of other inputs ({', '.join(old.differences(key)) or 'dataset'} differ): "
            "replacing them")
        for p in _own_run_files(folder):
            p.unlink(missing_ok=True)
    paths = {}
    for name, df in runs.items():
        paths[name] = write_trec_run(df, folder / f"{_run_name(name)}.trec", tag=name)
    manifest = {"key": asdict(key), "files": {p.name: name for name, p in paths.items()},
                "format": "qid Q0 docno rank score tag; scores order the ranking (ltrr.data.trec.ordering_scores)"}
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return paths
