"""irds:<id> datasets end to end, offline: a dataset registered with ir_datasets from local files."""

from __future__ import annotations

import json
from typing import NamedTuple

import pandas as pd
import pytest
from _irtiny import config_text, write_dataset

from ltrr._errors import ConfigError, DataError
from ltrr.cli import main
from ltrr.data.irds import load_irds
from ltrr.data.trec import read_run_key, read_trec_run

NAME = "ltrr-test/tiny"


def _register(folder):
    """Register the tiny dataset with ir_datasets the documented way (local files)."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    src = write_dataset(folder / "src")
    docs = [json.loads(x) for x in (src / "corpus.jsonl").read_text().splitlines()]
    (folder / "docs.tsv").write_text("".join(f"{d['docid']}\t{' '.join(d['text'].split())}\n" for d in docs))
    queries = [json.loads(x) for x in (src / "queries.jsonl").read_text().splitlines()]
    (folder / "queries.tsv").write_text("".join(f"{q['qid']}\t{' '.join(q['question'].split())}\n" for q in queries))
    if NAME not in ir_datasets.registry:
        ir_datasets.registry.register(NAME, Dataset(
            TsvDocs(LocalDownload(folder / "docs.tsv")), TsvQueries(LocalDownload(folder / "queries.tsv")),
            TrecQrels(LocalDownload(src / "qrels.trec"), {1: "relevant"})))
    return queries


@pytest.fixture(scope="module")
def irds_home(tmp_path_factory):
    root = tmp_path_factory.mktemp("irds")
    mp = pytest.MonkeyPatch()
    mp.setenv("IR_DATASETS_HOME", str(root / "home"))  # nothing cached: no download is possible either
    mp.setenv("LTRR_DATA_DIR", str(root / "data"))
    queries = _register(root)
    yield root, queries
    mp.undo()


def test_load_irds_with_and_without_answers(irds_home):
    root, queries = irds_home
    ds = load_irds(f"irds:{NAME}")
    assert len(ds.queries) == 66 and len(ds.corpus) == 400 and len(ds.qrels) == 60
    assert ds.queries["answers"].map(len).sum() == 0  # TSV queries carry no answers
    pd.DataFrame([{"qid": q["qid"], "answers": q["answers"]} for q in queries]).to_parquet(root / "answers.parquet")
    ds = load_irds(f"irds:{NAME}", answers=root / "answers.parquet")
    assert ds.queries.set_index("qid").loc["n0", "answers"] == ["nothing"]
    (root / "bad.jsonl").write_text('{"qid": "w0", "answers": ["x"]}\n{"qid": "zz9", "answers": ["y"]}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: 1 qid\(s\) of the answers file are not queries .*'zz9'"):
        load_irds(f"irds:{NAME}", answers=root / "bad.jsonl")
    with pytest.raises(ConfigError, match=r"unknown ir_datasets id 'ltrr-test/tinny'.*did you mean irds:ltrr-test/tiny"):
        load_irds("irds:ltrr-test/tinny")


def test_retrieve_evaluate_and_write_trec_offline(irds_home, capsys):
    root, _ = irds_home
    cfg = root / "c.toml"
    cfg.write_text(config_text(f"irds:{NAME}", root / "run",
                               extra="") + '[eval]\nretrieval_measures = ["nDCG@10", "R@{k}", "RR"]\n')
    assert main(["retrieve", str(cfg), "--trec", str(root / "trec")]) == 0
    out = capsys.readouterr().out
    assert "\n| nDCG@10 |" in out and "\n| R@5 |" in out and "\n| RR |" in out and "P@1" not in out
    for arm in ("bm25", "bm25+stoch", "dense"):
        run = read_trec_run(root / "trec" / f"{arm}.trec")
        assert set(run["arm"]) == {arm} and run["qid"].nunique() == 66
    assert not (root / "trec" / "none.trec").exists()  # the no-retrieval arm retrieves nothing
    assert read_run_key(root / "trec").dataset == f"irds:{NAME}"
    assert (root / "run" / "reports" / "retrieval.csv").read_text().startswith("measure,qtype,arm,value")
    # the saved run is keyed by its inputs: unchanged it is reused and said; another corpus under
    # the same id is searched again, never reused silently
    assert main(["retrieve", str(cfg)]) == 0
    assert "[retrieve] skipped: inputs unchanged" in "".join(capsys.readouterr())
    docs = (root / "docs.tsv").read_text()
    (root / "docs.tsv").write_text(docs.replace("\t", "\tedited ", 1))
    try:
        assert main(["retrieve", str(cfg)]) == 0
        assert "[retrieve] skipped" not in "".join(capsys.readouterr())
    finally:
        (root / "docs.tsv").write_text(docs)
    # no answers: retrieval and its evaluation work, labelling says why not in one line
    assert main(["label", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "have no answers, so they can be retrieved and evaluated" in err
    cfg.write_text(cfg.read_text().replace("[eval]", '[eval]\nk = 3').replace('retrieval_measures = ["nDCG@10"',
                                                                              'retrieval_measures = ["nDCG@ten"'))
    assert main(["retrieve", str(cfg)]) == 2
    assert "[eval] retrieval_measures: unknown retrieval measure 'nDCG@ten'" in capsys.readouterr().err


def test_unknown_irds_id_is_one_clear_error(irds_home, capsys):
    root, _ = irds_home
    cfg = root / "u.toml"
    cfg.write_text(config_text("irds:no/such-set", root / "u"))
    assert main(["retrieve", str(cfg)]) == 2
    assert "unknown ir_datasets id 'no/such-set'" in capsys.readouterr().err


def test_a_split_is_refused_for_an_ir_datasets_id_and_taken_for_a_beir_folder(irds_home, tmp_path):
    """An ir_datasets id names its split itself (``beir/nq`` vs ``beir/msmarco/dev``); a BEIR
    folder's ``[data] split`` keeps the queries judged in ``qrels/<split>.tsv``."""
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    root, _ = irds_home
    cfg = tmp_path / "c.toml"
    cfg.write_text(config_text(f"irds:{NAME}", tmp_path / "run", extra='split = "test"'))
    with pytest.raises(ConfigError, match=r"\[data\] split is for a BEIR folder; an ir_datasets id names its split"):
        _ = Run(load_config(cfg)).dataset
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "T", "text": "t1"}) + "\n")
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"{q}?", "metadata": {"answers": ["a"]}})
                                                + "\n" for q in ("q1", "q2")))
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td1\t1\n")
    cfg.write_text(config_text(beir, tmp_path / "run", extra='split = "dev"'))
    assert Run(load_config(cfg)).dataset.queries["qid"].tolist() == ["q2"]


class _TitledDoc(NamedTuple):  # as ir_datasets' MsMarcoDocument: no text field; default_text holds the title
    doc_id: str
    title: str
    body: str

    def default_text(self):
        return f"{self.title} {self.body}"


class _Topic(NamedTuple):  # as TREC topics: several fields, no text field
    query_id: str
    title: str
    description: str

    def default_text(self):
        return self.title


def test_a_title_in_default_text_is_indexed_once_and_the_query_field_is_said(tmp_path, caplog):
    """A document without a text field had its title twice (the title, then default_text()'s
    title again); a query of several fields was read through default_text() without a word."""
    import logging

    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    (tmp_path / "docs.tsv").write_text("d1\tCanberra\tthe capital of Australia.\nd2\tParis\tin France.\n")
    (tmp_path / "topics.tsv").write_text("t1\tcapital australia\tWhat is the capital city of Australia?\n")
    name = "ltrr-test/titled"
    if name not in ir_datasets.registry:
        ir_datasets.registry.register(name, Dataset(TsvDocs(LocalDownload(tmp_path / "docs.tsv"), doc_cls=_TitledDoc),
                                                    TsvQueries(LocalDownload(tmp_path / "topics.tsv"),
                                                               query_cls=_Topic)))
    with caplog.at_level(logging.INFO, logger="ltrr"):
        ds = load_irds(f"irds:{name}")
    assert ds.corpus[["title", "text"]].values.tolist() == [["", "Canberra the capital of Australia."],
                                                           ["", "Paris in France."]]
    assert ds.queries["question"].tolist() == ["capital australia"]
    assert "the queries have no text field but title, description" in caplog.text
