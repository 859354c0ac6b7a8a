"""`ltrr data build|stats`: the datasets on the command line (`ltrr.data.build`, `ltrr.data.io`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from ltrr._errors import LtrrError
from ltrr.cli._flags import FIELD_DEFAULT, add_field_flag
from ltrr.data.section import DataSection


def add_parser(sub, log: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Register ``ltrr data`` on the CLI's subparsers."""
    data = sub.add_parser("data", help="build or inspect datasets")
    dsub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    b = dsub.add_parser("build", help="build a named dataset (demo) offline")
    b.add_argument("name", help="dataset to build: demo")
    b.add_argument("--out", help="output folder (default: data/built/NAME)")
    add_field_flag(b, DataSection, "build_seed", "--seed", default=FIELD_DEFAULT)
    add_field_flag(b, DataSection, "n_per_type", "--n-per-type", default=FIELD_DEFAULT)
    add_field_flag(b, DataSection, "n_noanswer", "--n-noanswer", default=FIELD_DEFAULT)
    add_field_flag(b, DataSection, "n_multihop", "--n-multihop", default=FIELD_DEFAULT,
                   help="two-hop bridge questions (at most; the corpus gives fewer)")
    add_field_flag(b, DataSection, "grow_per_type", "--grow-per-type", default=FIELD_DEFAULT,
                   help="a second round: this many more of each generated type, from unused documents (the "
                        "first round is unchanged)")
    add_field_flag(b, DataSection, "grow_noanswer", "--grow-noanswer", default=FIELD_DEFAULT,
                   help="a second round: this many more noanswer questions")
    b.add_argument("--force", action="store_true", help="rebuild even if up to date")
    b.add_argument("--config", help="config whose pool measures the datasheet's recall (default: demo)")
    b.add_argument("--datasheet", help="also splice the datasheet into this Markdown file (e.g. data/README.md)")
    b.add_argument("--no-datasheet", action="store_true", help="skip indexing and the datasheet")
    b.set_defaults(func=lambda a: _build(a, log, out))
    s = dsub.add_parser("stats", help="counts of a dataset folder")
    s.add_argument("path", help="dataset folder or built dataset name")
    add_field_flag(s, DataSection, "split", "--split", default=FIELD_DEFAULT, metavar="NAME",
                   help="a BEIR folder's qrels split: count only the queries judged in it, or none: every query")
    s.set_defaults(func=lambda a: _stats(a, out))


def _build(args: argparse.Namespace, log, out) -> int:
    from ltrr.config import load_config, validate
    from ltrr.data.build import build_dataset

    if args.no_datasheet and (args.datasheet or args.config):
        raise LtrrError(f"--no-datasheet skips the datasheet: drop it, or {'--datasheet' if args.datasheet else '--config'}")
    cfg = None if args.no_datasheet else load_config(args.config) if args.config else load_config("demo")
    folder = build_dataset(
        args.name, out=args.out, seed=args.seed, n_per_type=args.n_per_type,
        n_noanswer=args.n_noanswer, n_multihop=args.n_multihop, grow_per_type=args.grow_per_type,
        grow_noanswer=args.grow_noanswer, force=args.force, log=log,
    )
    if cfg is None:
        return 0
    data = cfg.to_dict()
    data["data"]["dataset"] = str(folder)
    data["data"]["max_queries"] = 0  # the datasheet describes every query, not a run's sample
    data["data"]["exclude_qtypes"] = []
    cfg = validate(data, cfg.source)
    text = write_datasheet(cfg, folder, datasheet=args.datasheet, log=log)
    out(text.split("### Which family")[1].split("\n\n")[1] if "### Which family" in text else "")
    return 0


def write_datasheet(cfg, folder: Path, *, datasheet: str | None, log) -> str:
    """Run the config's pool over the dataset and write DATASHEET.md (and ``datasheet``)."""

    from ltrr.data.datasheet import DATASHEET_MEASURES, family_wins, render_datasheet
    from ltrr.data.io import write_text_atomic
    from ltrr.eval.retrieval import expand_measures, measure_tables
    from ltrr.pipeline import Run

    run = Run(cfg, log=log)
    run.stage_index()
    pool = run.pool.load(run.index_dir)
    ds = run.dataset
    log(f"[datasheet] running {len(pool.arm_names)} arms over {len(ds.queries)} queries ...")
    from ltrr._log import progress_enabled

    results = pool.search(ds.queries, show_progress=progress_enabled())
    k = max(a.k for a in pool.arms if not a.is_no_retrieval)
    measures = expand_measures(DATASHEET_MEASURES, [a.k for a in pool.arms if not a.is_no_retrieval])
    retrieving = [a.name for a in pool.arms if not a.is_no_retrieval]
    tables = measure_tables(results, ds.queries, ds.qrels, measures, arms=retrieving)
    fams: dict[str, str] = {}
    for arm in pool.arms:
        if arm.is_no_retrieval or arm.is_packed or arm.reranker not in (None, "none"):
            continue
        fams.setdefault(cfg.retrievers[arm.retriever]["type"], arm.name)
    wins = family_wins(results, ds.qrels, fams)
    meta = json.loads((folder / "meta.json").read_text())
    text = render_datasheet(meta, ds.queries, tables, wins, k)
    write_text_atomic(folder / "DATASHEET.md", text + "\n")
    write_text_atomic(folder / "family_wins.json", json.dumps(wins, indent=2))
    if datasheet:
        _splice(Path(datasheet), text)
        log(f"[datasheet] updated {datasheet}")
    log(f"[datasheet] {folder / 'DATASHEET.md'}")
    return text


_START, _END = "<!-- datasheet:start -->", "<!-- datasheet:end -->"


def _splice(path: Path, text: str) -> None:
    """Replace the generated section of a README between the datasheet markers."""
    from ltrr.data.io import write_text_atomic

    old = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{_START}\n{text}\n{_END}"
    if _START in old and _END in old:
        new = old[: old.index(_START)] + block + old[old.index(_END) + len(_END):]
    else:
        new = (old.rstrip() + "\n\n" if old else "") + block + "\n"
    write_text_atomic(path, new)


def _stats(args: argparse.Namespace, out) -> int:
    from ltrr._tables import markdown_table
    from ltrr.data.io import load_dataset

    ds = load_dataset(args.path, split=args.split or "")
    q = ds.queries
    out(f"dataset {ds.path}: {len(q)} queries, {q['group'].nunique()} groups, {len(ds.corpus)} documents, "
         f"{0 if ds.qrels is None else len(ds.qrels)} qrels")
    per = q.groupby("qtype").agg(queries=("qid", "size"), groups=("group", "nunique"))
    per["mean_words"] = q.groupby("qtype")["question"].apply(lambda s: s.str.split().str.len().mean())
    per["mean_answers"] = q.groupby("qtype")["answers"].apply(lambda s: s.map(len).mean())
    # counts print as integers, means with one decimal
    per = per.astype({"queries": "int64", "groups": "int64"}).astype(object)
    for col in ("mean_words", "mean_answers"):
        per[col] = per[col].map(lambda v: f"{v:.1f}")
    out(markdown_table(per))
    return 0
