"""TREC run and qrels files: round trip, ordering scores, errors that name file and line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import DataError
from ltrr.data.io import load_dataset, load_qrels
from ltrr.data.trec import (
    RunKey,
    ordering_scores,
    read_run_key,
    read_trec_qrels,
    read_trec_run,
    write_trec_qrels,
    write_trec_run,
    write_trec_runs,
)


def _results() -> pd.DataFrame:
    rows = []
    for q in ("q1", "q2"):
        for r in range(1, 4):
            rows.append({"qid": q, "arm": "bm25", "rank": r, "docid": f"d{r}{q}", "score": 10.0 / r + 1e-13 * r})
            # a sampled reranking: first-stage scores, another order
            rows.append({"qid": q, "arm": "bm25+stoch", "rank": r, "docid": f"s{r}", "score": float(r)})
    return pd.DataFrame(rows)


def test_run_round_trip_exact(tmp_path):
    res = _results()
    bm = res[res["arm"] == "bm25"].reset_index(drop=True)
    back = read_trec_run(write_trec_run(bm, tmp_path / "bm25.trec"))
    pd.testing.assert_frame_equal(back, bm[["qid", "docid", "rank", "score", "arm"]], check_dtype=False)
    assert back["score"].tolist() == bm["score"].tolist()  # repr: bit for bit
    line = (tmp_path / "bm25.trec").read_text().splitlines()[0].split()
    assert line[1] == "Q0" and line[5] == "bm25" and line[3] == "1"


def test_scores_that_do_not_order_the_ranking_are_replaced_by_reciprocal_rank(tmp_path):
    res = _results()
    scores = ordering_scores(res)
    stoch = res["arm"] == "bm25+stoch"
    assert np.allclose(scores[stoch], 1.0 / res.loc[stoch, "rank"])
    assert scores[~stoch].tolist() == res.loc[~stoch, "score"].tolist()
    back = read_trec_run(write_trec_run(res[stoch], tmp_path / "s.trec"))
    # sorting by the written score gives ltrr's ranking
    for _, g in back.groupby("qid"):
        assert g.sort_values("score", ascending=False)["rank"].tolist() == [1, 2, 3]
    tie = pd.DataFrame({"qid": ["q"] * 2, "arm": ["a"] * 2, "rank": [1, 2], "score": [1.0, 1.0]})
    assert ordering_scores(tie).tolist() == [1.0, 0.5]
    # a routed run (q1 routed to bm25, q2 to the sampled arm) keeps each chosen arm's own decision
    routed = res[((res["qid"] == "q1") & ~stoch) | ((res["qid"] == "q2") & stoch)]
    back = read_trec_run(write_trec_run(routed, tmp_path / "routed.trec", tag="routed"))
    assert set(back["arm"]) == {"routed"}
    assert back.loc[back["qid"] == "q1", "score"].tolist() == routed.loc[routed["qid"] == "q1", "score"].tolist()
    assert back.loc[back["qid"] == "q2", "score"].tolist() == [1.0, 0.5, 1 / 3]


def test_a_gzipped_run_reads_and_ranks_from_zero_get_finite_scores(tmp_path):
    """PyTerrier saves runs as .res.gz (read as 'not UTF-8'); a frame ranked from 0 with tied
    scores was written with an infinite score (1/0)."""
    import gzip

    res = pd.DataFrame({"qid": ["q1"] * 3, "docid": ["a", "b", "c"], "rank": [0, 1, 2], "score": [2.0, 2.0, 1.0],
                        "arm": ["t"] * 3})
    path = write_trec_run(res, tmp_path / "x.res")
    assert "inf" not in path.read_text()
    back = read_trec_run(path)
    assert back["score"].tolist() == [1.0, 0.5, pytest.approx(1 / 3)]
    gz = tmp_path / "x.res.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    pd.testing.assert_frame_equal(read_trec_run(gz), back)


def test_write_runs_keyed_and_replaced_when_inputs_change(tmp_path):
    res = _results()
    queries = pd.DataFrame({"qid": ["q1", "q2"], "question": ["a", "b"]})
    qrels = pd.DataFrame({"qid": ["q1"], "docid": ["d1q1"], "relevance": [1]})
    key = RunKey.of("fp1", queries, qrels, "ds")
    runs = {a: g for a, g in res.groupby("arm", sort=False)}
    paths = write_trec_runs(runs, tmp_path / "trec", key, log=lambda m: None)
    assert sorted(p.name for p in paths.values()) == ["bm25+stoch.trec", "bm25.trec"]
    assert read_run_key(tmp_path / "trec") == key
    other = RunKey.of("fp1", queries.assign(question=["a", "c"]), qrels, "ds")
    assert other.differences(key) == ["topics"]
    said = []
    write_trec_runs({"bm25": runs["bm25"]}, tmp_path / "trec", other, log=said.append)
    assert "topics differ" in said[0] and "replacing" in said[0]
    assert not (tmp_path / "trec" / "bm25+stoch.trec").exists()  # no file of the old inputs stays
    assert json.loads((tmp_path / "trec" / "runs.json").read_text())["key"]["topics"] == other.topics


def test_an_id_a_trec_file_cannot_hold_is_refused_before_the_folder_is_touched(tmp_path):
    """A docid with whitespace (legal elsewhere) failed after some run files of the new inputs
    were written beside the old runs.json: a folder of runs of two inputs."""
    res = _results()
    queries = pd.DataFrame({"qid": ["q1", "q2"], "question": ["a", "b"]})
    qrels = pd.DataFrame({"qid": ["q1"], "docid": ["d1q1"], "relevance": [1]})
    runs = {a: g for a, g in res.groupby("arm", sort=False)}
    write_trec_runs(runs, tmp_path / "trec", RunKey.of("fp1", queries, qrels, "ds"), log=lambda m: None)
    before = {p.name: p.read_bytes() for p in (tmp_path / "trec").iterdir()}
    bad = {"bm25+stoch": runs["bm25+stoch"],
           "bm25": runs["bm25"].assign(docid=lambda d: d["docid"].where(d["rank"] < 2, "doc 7"))}
    with pytest.raises(DataError, match="cannot hold the docid 'doc 7'"):
        write_trec_runs(bad, tmp_path / "trec", RunKey.of("fp2", queries, qrels, "ds"), log=lambda m: None)
    assert {p.name: p.read_bytes() for p in (tmp_path / "trec").iterdir()} == before


@pytest.mark.parametrize(("line", "what"), [
    ("q1 Q0 d1 1 2.5", "has 6 fields .* this one has 5"),
    ("q1 Q0 d1 first 2.5 tag", "rank 'first' is not an integer"),
    ("q1 Q0 d1 1 high tag", "score 'high' is not a number"),
])
def test_malformed_run_line_names_file_and_line(tmp_path, line, what):
    p = tmp_path / "bad.run"
    p.write_text("q1 Q0 d0 0 3.0 tag\n\nq1 Q0 d2 2 1.0 tag\n" + line + "\n")
    with pytest.raises(DataError, match=rf"bad\.run:4: .*{what}"):
        read_trec_run(p)


def test_trec_qrels_read_and_sniffed(tmp_path):
    qrels = pd.DataFrame({"qid": ["1", "1", "2"], "docid": ["a", "b", "c"], "relevance": [1, 2, 1]})
    for name in ("q.txt", "q.qrels", "q.tsv"):
        write_trec_qrels(qrels, tmp_path / name)
        back = load_qrels(tmp_path / name)
        assert back[["qid", "docid", "relevance"]].values.tolist() == qrels.values.tolist()
    beir = tmp_path / "beir.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\n1\ta\t1\n")
    assert load_qrels(beir)["docid"].tolist() == ["a"]
    (tmp_path / "bad.qrels").write_text("1 0 a 1\n1 0 b\n")
    with pytest.raises(DataError, match=r"bad\.qrels:2: a TREC qrels line has 4 fields"):
        read_trec_qrels(tmp_path / "bad.qrels")


def test_qrels_of_another_topic_set_are_an_error(tmp_path):
    (tmp_path / "queries.jsonl").write_text('{"qid": "q1", "question": "what"}\n{"qid": "q2", "question": "who"}\n')
    (tmp_path / "corpus.jsonl").write_text('{"docid": "d1", "text": "x"}\n')
    (tmp_path / "qrels.trec").write_text("301 0 d1 1\n302 0 d1 1\n")
    with pytest.raises(DataError, match=r"qrels\.trec: none of the 2 qids of the qrels \(e\.g\. '301'.*'q1'"):
        load_dataset(tmp_path)
    (tmp_path / "qrels.trec").write_text("q1 0 d1 1\n301 0 d1 1\n")  # a partial match is fine
    assert load_dataset(tmp_path).qrels["qid"].tolist() == ["q1", "301"]


def _tree(root):
    """Every file under ``root`` with its bytes: what a call wrote or removed anywhere there."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("name", "why"), [
    ("../escaped", "holds '/'"),
    ("sub/run", "holds '/'"),
    ("..\\escaped", r"holds '\\\\'"),
    ("..", "names a folder"),
    (".hidden", "starts with '.'"),
    ("a\0b", "holds a NUL"),
])
def test_a_run_name_that_is_not_a_plain_file_name_writes_nothing(tmp_path, name, why):
    """A run named ``../escaped`` was written to ``trec/../escaped.trec``, outside the folder."""
    res = _results()
    key = RunKey.of("fp1", pd.DataFrame({"qid": ["q1"], "question": ["a"]}), None, "ds")
    write_trec_runs({"bm25": res[res["arm"] == "bm25"]}, tmp_path / "trec", key, log=lambda m: None)
    before = _tree(tmp_path)
    other = RunKey.of("fp2", pd.DataFrame({"qid": ["q1"], "question": ["a"]}), None, "ds")
    with pytest.raises(DataError, match=f"run name .* cannot name a file inside the runs folder: it {why}"):
        write_trec_runs({"bm25": res[res["arm"] == "bm25"], name: res[res["arm"] == "bm25"]},
                        tmp_path / "trec", other, log=lambda m: None)
    assert _tree(tmp_path) == before  # nothing written, nothing removed, inside the folder or out


@pytest.mark.parametrize("files", [
    {"../victim/important.txt": "x", "../victim/run.trec": "y", "/abs/elsewhere.trec": "z",
     "notes.txt": "n", ".": "d", "sub": "s", "..": "p"},
    ["../victim/important.txt", "../victim/run.trec", "notes.txt"],
    "../victim/run.trec",
    7,
])
def test_replacing_old_runs_removes_only_plain_trec_names_inside_the_folder(tmp_path, files):
    """A received runs.json listing ``../victim/important.txt`` had that file deleted."""
    res = _results()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "important.txt").write_text("keep me")
    (victim / "run.trec").write_text("keep me too")
    out = tmp_path / "trec"
    out.mkdir()
    (out / "notes.txt").write_text("not a run")
    (out / "sub").mkdir()
    (out / "sub" / "x.trec").write_text("inside a subfolder")
    (out / "old.trec").write_text("q1 Q0 d1 1 1.0 old\n")  # a plain *.trec name: ltrr's to replace
    listed = {**files, "old.trec": "old"} if isinstance(files, dict) else (
        [*files, "old.trec"] if isinstance(files, list) else files)
    (out / "runs.json").write_text(json.dumps(
        {"key": {"config": "OTHER", "topics": "t", "qrels": None, "dataset": ""}, "files": listed}))
    key = RunKey.of("fp1", pd.DataFrame({"qid": ["q1"], "question": ["a"]}), None, "ds")
    write_trec_runs({"bm25": res[res["arm"] == "bm25"]}, out, key, log=lambda m: None)  # no error
    assert (victim / "important.txt").read_text() == "keep me"
    assert (victim / "run.trec").read_text() == "keep me too"
    assert (out / "notes.txt").read_text() == "not a run" and (out / "sub" / "x.trec").is_file()
    assert (out / "old.trec").exists() == (not isinstance(files, (dict, list)))
    assert read_run_key(out) == key and (out / "bm25.trec").is_file()


def test_a_symlinked_old_run_is_unlinked_not_its_target(tmp_path):
    res = _results()
    target = tmp_path / "target.trec"
    target.write_text("keep me")
    out = tmp_path / "trec"
    out.mkdir()
    (out / "old.trec").symlink_to(target)
    (out / "runs.json").write_text(json.dumps(
        {"key": {"config": "OTHER", "topics": "t", "qrels": None, "dataset": ""}, "files": {"old.trec": "o"}}))
    key = RunKey.of("fp1", pd.DataFrame({"qid": ["q1"], "question": ["a"]}), None, "ds")
    write_trec_runs({"bm25": res[res["arm"] == "bm25"]}, out, key, log=lambda m: None)
    assert not (out / "old.trec").is_symlink() and target.read_text() == "keep me"


def test_a_line_over_the_cap_is_refused_by_number_before_it_is_read_whole(tmp_path, monkeypatch):
    """A 382 KB .res.gz unpacking to one 384 MiB line was read whole (1.1 GB) before its error."""
    import gzip

    import ltrr.data.lines as lines

    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 64)
    ok = "q1 Q0 d1 1 2.5 tag\n"
    for name, opener in (("run.res.gz", gzip.open), ("run.res", open)):
        with opener(tmp_path / name, "wt") as fh:
            fh.write(ok + "q1 Q0 " + "d" * 200 + " 2 1.0 tag\n" + ok)
        with pytest.raises(DataError, match=rf"{name.replace('.', '[.]')}:2: the line is longer than 64 bytes"):
            read_trec_run(tmp_path / name)
    (tmp_path / "edge.res").write_text("q1 Q0 " + "d" * (63 - len("q1 Q0  1 2.5 tag\n")) + " 1 2.5 tag\n")
    assert len((tmp_path / "edge.res").read_bytes()) == 63
    assert len(read_trec_run(tmp_path / "edge.res")) == 1  # a line within the cap reads


def test_a_gzipped_line_over_the_default_cap_is_refused(tmp_path):
    import gzip

    from ltrr.data.lines import MAX_LINE_BYTES

    with gzip.open(tmp_path / "one.res.gz", "wb", compresslevel=1) as fh:
        fh.write(b"q" * (MAX_LINE_BYTES + 10) + b"\n")
    with pytest.raises(DataError, match=r"one\.res\.gz:1: the line is longer than 16 MiB"):
        read_trec_run(tmp_path / "one.res.gz")
