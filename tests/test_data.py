"""Schema, loaders and the demo generator."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ltrr._errors import DataError, NotBuiltError
from ltrr.data.io import load_corpus, load_dataset, load_qrels, load_queries, read_jsonl
from ltrr.data.schema import validate_queries


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_malformed_jsonl_line_reports_file_and_line(tmp_path):
    p = _write(tmp_path / "q.jsonl", ['{"qid": "1", "question": "a?"}', '{"qid": "2", "question": '])
    with pytest.raises(DataError, match=r"q\.jsonl:2: invalid JSON"):
        read_jsonl(p)


def test_non_object_line(tmp_path):
    p = _write(tmp_path / "q.jsonl", ['["a", "b"]'])
    with pytest.raises(DataError, match=r"q\.jsonl:1: expected a JSON object"):
        load_queries(p)


def test_missing_field_named_with_line(tmp_path):
    p = _write(tmp_path / "q.jsonl", ['{"qid": "1", "question": "a?"}', '{"qid": "2"}'])
    with pytest.raises(DataError, match=r"q\.jsonl:2: missing field question"):
        load_queries(p)


@pytest.mark.parametrize("q", ["", "   ", "\t\n"])
def test_empty_or_whitespace_question(tmp_path, q):
    p = _write(tmp_path / "q.jsonl", [json.dumps({"qid": "7", "question": q, "answers": ["x"]})])
    with pytest.raises(DataError, match=r"question of qid '7' is empty"):
        load_queries(p)


def test_duplicate_qids(tmp_path):
    rows = [{"qid": "1", "question": "a?"}, {"qid": "1", "question": "b?"}]
    p = _write(tmp_path / "q.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(DataError, match=r"duplicate qid '1'"):
        load_queries(p)


def test_duplicate_docids(tmp_path):
    rows = [{"docid": "d", "text": "x"}, {"docid": "d", "text": "y"}]
    p = _write(tmp_path / "c.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(DataError, match=r"duplicate docid 'd'"):
        load_corpus(p)


def test_answers_must_be_strings_and_non_empty_when_required():
    df = pd.DataFrame({"qid": ["1"], "question": ["a?"], "answers": [[1, 2]]})
    with pytest.raises(DataError, match=r"answers of qid '1' must be strings, got int"):
        validate_queries(df)
    df = pd.DataFrame({"qid": ["1"], "question": ["a?"], "answers": [[]]})
    with pytest.raises(DataError, match=r"qid '1' has an empty answer list"):
        validate_queries(df, require_answers=True)


def test_defaults_filled():
    df = validate_queries(pd.DataFrame({"qid": [1, 2], "question": ["a?", "b?"], "answers": ["x", ["y", "z"]]}))
    assert df["qid"].tolist() == ["1", "2"]
    assert df["group"].tolist() == ["1", "2"]
    assert df["qtype"].tolist() == ["unknown", "unknown"]
    assert df["answers"].tolist() == [["x"], ["y", "z"]]


def test_parquet_and_jsonl_roundtrip(tmp_path):
    q = pd.DataFrame({"qid": ["a", "b"], "question": ["x?", "y?"], "answers": [["1"], ["2", "two"]],
                      "qtype": ["t", "t"], "group": ["g", "g"]})
    q.to_parquet(tmp_path / "queries.parquet")
    c = pd.DataFrame({"docid": ["d1"], "title": ["T"], "text": ["body"]})
    with (tmp_path / "corpus.jsonl").open("w") as fh:
        for r in c.to_dict("records"):
            fh.write(json.dumps(r) + "\n")
    ds = load_dataset(tmp_path)
    assert ds.queries["answers"].map(list).tolist() == [["1"], ["2", "two"]]
    assert ds.corpus["docid"].tolist() == ["d1"]
    assert ds.qrels is None


def test_beir_folder(tmp_path):
    (tmp_path / "qrels").mkdir()
    _write(tmp_path / "corpus.jsonl", [json.dumps({"_id": "d1", "title": "T", "text": "t1"}),
                                       json.dumps({"_id": "d2", "title": "U", "text": "t2"})])
    _write(tmp_path / "queries.jsonl", [json.dumps({"_id": "q1", "text": "what?", "metadata": {"answers": ["a"]}})])
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    ds = load_dataset(tmp_path)
    assert ds.queries.loc[0, "question"] == "what?"
    assert list(ds.queries.loc[0, "answers"]) == ["a"]
    assert ds.qrels.to_dict("records") == [{"qid": "q1", "docid": "d2", "relevance": 1}]


def _beir_with_splits(folder):
    (folder / "qrels").mkdir()
    _write(folder / "corpus.jsonl", [json.dumps({"_id": "d1", "title": "T", "text": "t1"})])
    _write(folder / "queries.jsonl", [json.dumps({"_id": q, "text": f"{q}?", "metadata": {"answers": ["a"]}})
                                      for q in ("q1", "q2", "q3")])
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td1\t0\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td1\t1\n")


def test_a_beir_split_keeps_its_judgments_and_only_the_queries_judged_in_it(tmp_path):
    """A BEIR folder holds the queries of every split in one queries.jsonl; a split's
    judgments say which are its queries (q2, judged 0, is a train query too)."""
    _beir_with_splits(tmp_path)
    train = load_dataset(tmp_path, split="train")
    assert train.queries["qid"].tolist() == ["q1", "q2"]
    assert train.qrels["qid"].tolist() == ["q1", "q2"]
    test = load_dataset(tmp_path, split="test")
    assert test.queries["qid"].tolist() == ["q3"]
    everything = load_dataset(tmp_path)  # no split: every query, the test split's judgments
    assert everything.queries["qid"].tolist() == ["q1", "q2", "q3"]
    assert everything.qrels["qid"].tolist() == ["q3"]


def test_an_unknown_beir_split_is_one_error_naming_the_splits(tmp_path):
    _beir_with_splits(tmp_path)
    with pytest.raises(DataError, match=r"no qrels split 'dev' \(qrels/dev\.tsv\); its splits: test, train"):
        load_dataset(tmp_path, split="dev")
    (tmp_path / "qrels" / "train.tsv").unlink()
    (tmp_path / "qrels" / "test.tsv").unlink()
    with pytest.raises(DataError, match=r"its splits: none \(the split option is for a BEIR folder\)"):
        load_dataset(tmp_path, split="test")


def test_a_qrels_tsv_beside_the_queries_is_read(tmp_path):
    """data/README.md: a dataset folder holds queries.*, corpus.* and optionally qrels.*; a
    qrels.tsv at the top was skipped without a word (and retrieval evaluation with it)."""
    _write(tmp_path / "corpus.jsonl", [json.dumps({"docid": "d1", "title": "T", "text": "t1"})])
    _write(tmp_path / "queries.jsonl", [json.dumps({"qid": "q1", "question": "what?", "answers": ["a"]})])
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert load_dataset(tmp_path).qrels.to_dict("records") == [{"qid": "q1", "docid": "d1", "relevance": 1}]


def test_ids_that_look_like_missing_values_stay_ids_and_an_empty_one_is_an_error(tmp_path):
    p = tmp_path / "test.tsv"
    p.write_text("query-id\tcorpus-id\tscore\nNA\tnull\t1\nq2\tN/A\t1\nq3\tNone\t0\n")
    assert load_qrels(p).values.tolist() == [["NA", "null", 1], ["q2", "N/A", 1], ["q3", "None", 0]]
    p.write_text("query-id\tcorpus-id\tscore\nq1\t\t1\n")
    with pytest.raises(DataError, match=r"test\.tsv: qrels row 0 has no docid"):
        load_qrels(p)


def test_family_wins_counts_relevant_documents_only():
    from ltrr.data.datasheet import family_wins

    results = pd.DataFrame({"qid": ["q1", "q1"], "arm": ["bm25", "dense"], "docid": ["d1", "d2"], "rank": [1, 1]})
    qrels = pd.DataFrame({"qid": ["q1", "q1"], "docid": ["d1", "d2"], "relevance": [0, 1]})
    wins = family_wins(results, qrels, {"bm25": "bm25", "dense": "dense"})
    assert wins["only"] == {"bm25": 0, "dense": 1}


def test_bad_qrels(tmp_path):
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\thigh\n")
    with pytest.raises(DataError, match=r"qrels\.tsv"):
        load_qrels(tmp_path / "qrels.tsv")


def test_missing_dataset_is_not_built(tmp_path, monkeypatch):
    """A builder's dataset not built yet: the build command. Any other name: no command that
    cannot work (`ltrr data build nosuch` is "unknown dataset builder")."""
    monkeypatch.setenv("LTRR_DATA_DIR", str(tmp_path))
    with pytest.raises(NotBuiltError, match=r"is not built .*; run `ltrr data build demo`$"):
        load_dataset("demo")
    with pytest.raises(NotBuiltError, match=r"no dataset folder 'nosuch' and no built dataset of that name") as exc:
        load_dataset("nosuch")
    assert "ltrr data build nosuch" not in str(exc.value) and "NAME one of: demo" in str(exc.value)


def test_build_dataset_names_the_dataset_and_hints_force_only_where_it_rebuilds(tmp_path):
    """An up-to-date build named the builder ('demo'), not the dataset, and said "use --force
    to rebuild" under `ltrr retrieve`, whose --force never rebuilds the data."""
    from ltrr.data.build import build_dataset

    folder = tmp_path / "demo-grown"
    folder.mkdir()
    params = {"builder": "demo", "seed": 13, "n_per_type": 200, "n_noanswer": 200, "n_multihop": 300}
    (folder / "meta.json").write_text(json.dumps({"name": "demo", "params": params}))
    said = []
    assert build_dataset("demo", out=folder, log=said.append) == folder  # kept, as up to date
    assert said == [f"dataset 'demo-grown' (builder 'demo') is up to date in {folder} (use --force to rebuild)"]
    said.clear()
    build_dataset("demo", out=folder, rebuild_flag=None, log=said.append)  # the pipeline's data stage
    assert said == [f"dataset 'demo-grown' (builder 'demo') is up to date in {folder}"]


def test_a_beir_query_without_answers_among_queries_with_them_has_none(tmp_path):
    """`"metadata": {}` beside queries with answers was "answers of qid 'q2' must be a list of
    strings, got float" (pandas' NaN); a query table of our own with a row lacking answers too."""
    _write(tmp_path / "corpus.jsonl", [json.dumps({"_id": "d1", "title": "T", "text": "t1"})])
    _write(tmp_path / "queries.jsonl", [json.dumps({"_id": "q1", "text": "one?", "metadata": {"answers": ["a"]}}),
                                        json.dumps({"_id": "q2", "text": "two?", "metadata": {}}),
                                        json.dumps({"_id": "q3", "text": "three?"})])
    ds = load_dataset(tmp_path)
    assert ds.queries["answers"].map(list).tolist() == [["a"], [], []]
    with pytest.raises(DataError, match=r"qid 'q2' has an empty answer list"):
        load_dataset(tmp_path, require_answers=True)
    own = _write(tmp_path / "own.jsonl", [json.dumps({"qid": "q1", "question": "one?", "answers": ["a"]}),
                                          json.dumps({"qid": "q2", "question": "two?"})])
    assert load_queries(own)["answers"].map(list).tolist() == [["a"], []]


def test_unsupported_format(tmp_path):
    (tmp_path / "q.csv").write_text("qid,question\n1,a\n")
    with pytest.raises(DataError, match=r"unsupported table format '.csv'"):
        load_queries(tmp_path / "q.csv")


def test_bom_jsonl_is_read(tmp_path):
    """A JSONL file saved by a Windows editor starts with a UTF-8 byte-order mark."""
    p = tmp_path / "queries.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps({"qid": "q1", "question": "capital of france?", "answers": ["Paris"]}).encode() + b"\n")
    q = load_queries(p)
    assert q["qid"].tolist() == ["q1"] and q.loc[0, "question"] == "capital of france?"


def test_crlf_line_endings_and_bom_corpus(tmp_path):
    p = tmp_path / "corpus.jsonl"
    rows = [json.dumps({"docid": f"d{i}", "title": "T", "text": f"text {i}"}) for i in range(3)]
    p.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(rows).encode() + b"\r\n\r\n")
    c = load_corpus(p)
    assert c["docid"].tolist() == ["d0", "d1", "d2"]
    assert c["text"].tolist() == ["text 0", "text 1", "text 2"]  # no stray \r


def test_bom_qrels_tsv(tmp_path):
    p = tmp_path / "test.tsv"
    p.write_bytes(b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\r\nq1\td2\t1\r\n")
    assert load_qrels(p).to_dict("records") == [{"qid": "q1", "docid": "d2", "relevance": 1}]


def test_string_answers_is_one_alias_never_split(tmp_path):
    """A string ``answers`` is documented as a list of one alias (data/README.md)."""
    p = _write(tmp_path / "queries.jsonl", [json.dumps({"qid": "q1", "question": "who?", "answers": "Smith, John"})])
    assert load_queries(p).loc[0, "answers"] == ["Smith, John"]


def test_not_utf8_is_one_clear_error(tmp_path):
    p = tmp_path / "queries.jsonl"
    p.write_bytes(json.dumps({"qid": "q1", "question": "x"}).encode() + b"\n" + '{"qid": "q2", "question": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(DataError, match=r"queries.jsonl:2: not UTF-8 text .*save the file as UTF-8"):
        load_queries(p)


def _jsonl(path, rows):
    return _write(path, [json.dumps(r) for r in rows])


def test_numeric_ids_are_text_value_by_value_and_a_null_id_names_its_line(tmp_path):
    """A JSON number id became text only after pandas had made the whole column float: 1 read
    as "1.0" in the queries and corpus while the qrels said "1", and nothing matched."""
    d = tmp_path / "own"
    d.mkdir()
    _jsonl(d / "queries.jsonl", [{"qid": 1, "question": "a?"}, {"qid": 3.5, "question": "b?"},
                                 {"qid": "007", "question": "c?"}, {"qid": 7, "question": "d?"}])
    _jsonl(d / "corpus.jsonl", [{"docid": 1, "text": "x"}, {"docid": 2.5, "text": "y"}])
    _jsonl(d / "qrels.jsonl", [{"qid": 1, "docid": 1, "relevance": 1}, {"qid": 7, "docid": 1, "relevance": 1}])
    ds = load_dataset(d)
    assert ds.queries["qid"].tolist() == ["1", "3.5", "007", "7"]
    assert ds.corpus["docid"].tolist() == ["1", "2.5"]
    assert ds.qrels[["qid", "docid"]].values.tolist() == [["1", "1"], ["7", "1"]]
    _jsonl(d / "corpus.jsonl", [{"docid": 1, "text": "x"}, {"docid": None, "text": "y"}])
    with pytest.raises(DataError, match=r"corpus.jsonl:2: docid must be a string or a number, got null"):
        load_corpus(d / "corpus.jsonl")
    _jsonl(tmp_path / "beir.jsonl", [{"_id": "d1", "text": "x"}, {"text": "no id"}])
    with pytest.raises(DataError, match=r"beir.jsonl:2: missing field _id"):  # was the docid "None"
        load_corpus(tmp_path / "beir.jsonl")


def test_a_row_without_qtype_or_group_gets_the_defaults():
    """In a file where some rows have them, the others were NaN (one group of every such query,
    and a traceback in leave-one-type-out)."""
    df = validate_queries(pd.DataFrame([{"qid": "a", "question": "x?", "qtype": "t1", "group": "g"},
                                        {"qid": "b", "question": "y?"}]))
    assert df["qtype"].tolist() == ["t1", "unknown"] and df["group"].tolist() == ["g", "b"]


def test_an_answers_file_string_is_one_alias(tmp_path):
    """`[data] answers` attached its answers unchecked: "paris" was scored as p, a, r, i, s."""
    from ltrr.data.irds import attach_answers

    queries = validate_queries(pd.DataFrame({"qid": ["007", "7"], "question": ["x?", "y?"]}))
    _jsonl(tmp_path / "answers.jsonl", [{"qid": "007", "answers": "paris"}, {"qid": "7", "answers": ["a", "b"]}])
    out = attach_answers(queries, tmp_path / "answers.jsonl")
    assert out["answers"].tolist() == [["paris"], ["a", "b"]]
    _jsonl(tmp_path / "bad.jsonl", [{"qid": "7", "answers": [3]}])
    with pytest.raises(DataError, match=r"bad.jsonl: queries: answers of qid '7' must be strings, got int 3"):
        attach_answers(queries, tmp_path / "bad.jsonl")


def test_a_jsonl_line_nested_thousands_deep_is_one_error_naming_file_and_line(tmp_path, monkeypatch, capsys):
    """``ltrr data stats`` on a queries.jsonl line of 100,000 nested arrays ended in a traceback."""
    from ltrr.cli import main

    (tmp_path / "ds").mkdir()
    _write(tmp_path / "ds" / "corpus.jsonl", ['{"docid": "d1", "text": "x"}'])
    _write(tmp_path / "ds" / "queries.jsonl",
           ['{"qid": "1", "question": "a?"}', '{"qid": "2", "question": ' + "[" * 100_000 + "]" * 100_000 + "}"])
    with pytest.raises(DataError, match=r"queries\.jsonl:2: JSON nested too deeply to read"):
        read_jsonl(tmp_path / "ds" / "queries.jsonl")
    monkeypatch.chdir(tmp_path)
    assert main(["data", "stats", "ds"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ltrr: error: ") and "queries.jsonl:2: JSON nested too deeply" in err[0]
