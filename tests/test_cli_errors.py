"""Bad input on the command line: each kind gets one ``ltrr: error:`` line, exit code 2, and
nothing half-written (a reviewer's ~200 cases; these are the ones that failed that rule)."""

from __future__ import annotations

import hashlib
import json
import socket
import sqlite3

import pytest
from test_cli import _err, _tiny

from ltrr.cli import main


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("LTRR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_data_build_never_replaces_a_folder_that_is_not_a_build(env, capsys):
    """`--out` named a folder of the user's: the build replaced it whole (its files were gone)."""
    mine = env / "precious"
    (mine / "sub").mkdir(parents=True)
    (mine / "thesis.txt").write_text("years of work")
    assert main(["data", "build", "demo", "--out", str(mine), "--no-datasheet"]) == 2
    assert "precious exists and is not a built dataset" in _err(capsys)
    assert (mine / "thesis.txt").read_text() == "years of work" and (mine / "sub").is_dir()
    afile = env / "corpus.jsonl"
    afile.write_text("{}\n")
    assert main(["data", "build", "demo", "--out", str(afile), "--no-datasheet"]) == 2
    assert "corpus.jsonl exists and is not a built dataset" in _err(capsys)
    assert afile.read_text() == "{}\n" and sorted(p.name for p in env.iterdir()) == ["corpus.jsonl", "precious"]


@pytest.mark.parametrize("flag, value", [("--n-noanswer", "-1"), ("--n-per-type", "-1"), ("--seed", "-1"),
                                         ("--grow-per-type", "-3")])
def test_data_build_refuses_a_negative_count_or_seed(env, capsys, flag, value):
    """`--n-noanswer -1` built all but one (a Python slice), `--seed -1` was a numpy traceback."""
    assert main(["data", "build", "demo", "--out", str(env / "ds"), "--no-datasheet", flag, value]) == 2
    assert f"must be an integer >= 0, got {value}" in _err(capsys)
    assert not (env / "ds").exists()


def test_data_build_flag_conflicts_fail_before_building(env, capsys):
    assert main(["data", "build", "demo", "--out", str(env / "ds"), "--no-datasheet", "--datasheet", "x.md"]) == 2
    assert "--no-datasheet skips the datasheet: drop it, or --datasheet" in _err(capsys)
    assert main(["data", "build", "demo", "--out", str(env / "ds"), "--config", str(env / "nope.toml")]) == 2
    assert "nope.toml does not exist" in _err(capsys)  # before the dataset is built, not after
    assert not (env / "ds").exists()


@pytest.mark.parametrize("group", ["data", "cache"])
def test_a_command_group_without_its_action_is_a_usage_error(capsys, group):
    with pytest.raises(SystemExit, match="^2$"):
        main([group])
    assert "the following arguments are required: ACTION" in capsys.readouterr().err


def test_a_file_system_error_is_one_line_not_a_traceback(env, capsys):
    """Only `LtrrError` was caught: a folder where a file belongs, or an unwritable path, was a
    traceback with exit code 1."""
    _, ds = _tiny(env)
    (ds / "queries.jsonl").unlink()
    (ds / "queries.jsonl").mkdir()
    assert main(["data", "stats", str(ds)]) == 2
    err = _err(capsys)
    assert "Is a directory" in err and "queries.jsonl" in err and "Traceback" not in err


def test_cache_stats_refuses_a_file_that_is_not_a_cache_and_leaves_it_untouched(env, capsys):
    """It opened any SQLite file read-write and gave it the cache's tables."""
    foreign = env / "users.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()
    empty = env / "empty.sqlite"
    empty.write_bytes(b"")
    for path, why in ((foreign, "is an SQLite file but not an ltrr generation cache"),
                      (empty, "not an ltrr generation cache")):
        before = _digest(path)
        assert main(["cache", "stats", str(path)]) == 2
        assert why in _err(capsys)
        assert _digest(path) == before


def test_cache_merge_checks_every_source_before_it_writes(env, capsys):
    """A bad second source left the first one merged into a new file."""
    from ltrr.generation.base import DecodingParams, Generation
    from ltrr.generation.cache import GenerationCache, cache_key

    good = env / "good.sqlite"
    with GenerationCache(good) as cache:
        key = cache_key("echo", "echo-1", DecodingParams(), "hello")
        cache.put_many([(key, "echo", "echo-1", DecodingParams(), Generation(text="hi"))])
    junk = env / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    into = env / "merged.sqlite"
    assert main(["cache", "merge", str(good), str(junk), "--into", str(into)]) == 2
    assert "junk.sqlite is not an ltrr generation cache" in _err(capsys)
    assert not into.exists()
    bad_export = env / "x.jsonl.xz"
    bad_export.write_bytes(b"\xfd7zXZ")
    (env / "x.json").write_text(json.dumps({"sha256": "0" * 64, "rows": 1}))  # its checksum sidecar
    assert main(["cache", "merge", str(good), str(bad_export), "--into", str(into)]) == 2
    assert "does not match the recorded" in _err(capsys)
    assert not into.exists()


def test_search_refuses_a_negative_k_and_an_index_of_other_documents(env, capsys):
    """Two dataset folders of one name shared one index, and search read it unchecked."""
    cfg, ds = _tiny(env)
    assert main(["search", str(cfg), "--arm", "bm25", "-k", "-1", "capital"]) == 2
    assert "-k must be an integer >= 0 (0: every passage of the arm), got -1" in _err(capsys)
    other = env / "other" / "tiny"
    other.mkdir(parents=True)
    (other / "corpus.jsonl").write_text(json.dumps({"docid": "z", "title": "Zebra", "text": "Zebras are striped."})
                                        + "\n")
    (other / "queries.jsonl").write_text((ds / "queries.jsonl").read_text())
    cfg2 = env / "other.toml"
    cfg2.write_text(cfg.read_text().replace(f'dataset = "{ds}"', f'dataset = "{other}"')
                    .replace(str(env / "run"), str(env / "run2")))
    assert main(["index", str(cfg2)]) == 0
    assert main(["index", str(cfg)]) == 0
    capsys.readouterr()
    assert len(list((env / "data" / "indexes").iterdir())) == 2  # one index per folder, though both are "tiny"
    assert main(["search", str(cfg), "--arm", "bm25", "--json", "capital of australia"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["docid"] == "canberra"
    assert main(["search", str(cfg2), "--arm", "bm25", "--json", "zebras"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["docid"] == "z"
    (ds / "corpus.jsonl").write_text((ds / "corpus.jsonl").read_text().replace("Canberra is", "Canberra was"))
    assert main(["search", str(cfg), "--arm", "bm25", "capital"]) == 2
    assert "was built over other documents than the dataset's; rebuild it with `ltrr index CONFIG`" in _err(capsys)


def test_label_flag_conflicts_fail_before_any_stage(env, capsys):
    cfg, _ = _tiny(env)
    for argv, why in ((["--cache-only", "--no-cache"], "--cache-only labels from the generation cache here: not "
                                                       "with --no-cache"),
                      (["--cache-only", "--scheduler", "local:1"], "not with --scheduler"),
                      (["--scheduler", "tcp://127.0.0.1:9", "--scheduler-timeout", "-5"],
                       "--scheduler-timeout (seconds) must be a number > 0, got -5.0")):
        assert main(["label", str(cfg), *argv]) == 2
        assert why in _err(capsys)
    assert not (env / "data" / "indexes").exists() and not (env / "run").exists()


@pytest.mark.parametrize("table, key, value, why", [
    ("labels", "metric", "f2", "[labels] unknown metric"),
    ("generation", "template", "shortanswer", "[generation]"),
    ("generation", "modle", "fake", "[generation] unknown option(s) ['modle']"),
])
def test_a_bad_label_name_fails_before_the_index_and_retrieval(env, capsys, table, key, value, why):
    cfg, _ = _tiny(env)
    cfg.write_text(cfg.read_text() + f'\n[{table}]\n{key} = "{value}"\n')
    for cmd in ("label", "run"):
        assert main([cmd, str(cfg)]) == 2
        assert why in _err(capsys)
        assert not (env / "data" / "indexes").exists() and not (env / "run").exists()


def test_retrieve_router_needs_trec(env, capsys):
    cfg, _ = _tiny(env)
    assert main(["retrieve", str(cfg), "--router", "x"]) == 2
    assert "--router names the router whose choices --trec writes" in _err(capsys)
    assert not (env / "run").exists()


def test_a_stage_run_alone_refuses_outputs_made_for_another_config(env, capsys):
    """Two configs sharing a workdir: `ltrr features` (and train, eval) took the other one's
    outputs and said "inputs unchanged"."""
    cfg, _ = _tiny(env)
    assert main(["retrieve", str(cfg)]) == 0
    other = env / "k1.toml"
    other.write_text(cfg.read_text().replace("k = 2", "k = 1"))
    capsys.readouterr()
    assert main(["features", str(other)]) == 2
    err = _err(capsys)
    assert "stage features reads the retrieve stage's outputs" in err and "retrieve is to run" in err
    assert not (env / "features").exists()
    assert main(["features", str(cfg)]) == 0  # the config they were made for
    assert (env / "features" / "tiny" / "raw.parquet").exists()


def test_policy_eval_refuses_a_negative_seed(env, capsys):
    cfg, _ = _tiny(env)
    assert main(["policy", "eval", str(cfg), "--seed", "-1"]) == 2
    assert "--seed must be an integer >= 0, got -1" in _err(capsys)


def test_serve_refuses_a_bad_port_and_an_address_in_use_before_loading(env, capsys):
    assert main(["serve", str(env / "nomodel"), "--port", "99999"]) == 2
    assert "serve port must be an integer in [0, 65535], got 99999" in _err(capsys)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", str(env / "nomodel"), "--port", str(port)]) == 2
        assert f"cannot listen on 127.0.0.1:{port}" in _err(capsys)


def test_a_config_that_is_a_folder_or_not_utf8(env, capsys):
    (env / "adir.toml").mkdir()
    assert main(["status", str(env / "adir.toml")]) == 2
    assert "adir.toml is a directory, not a file" in _err(capsys)
    latin = env / "latin.toml"
    latin.write_bytes('[run]\nname = "caf\u00e9"\n'.encode("latin-1"))
    assert main(["status", str(latin)]) == 2
    assert "latin.toml is not UTF-8 text (byte 17); save it as UTF-8" in _err(capsys)


def test_eval_metric_is_refused_as_it_is_never_read(env, capsys):
    cfg, _ = _tiny(env)
    cfg.write_text(cfg.read_text() + '\n[eval]\nmetric = "f2"\n')
    assert main(["status", str(cfg)]) == 2
    assert "[eval] metric = 'f2' is not read" in _err(capsys)


def test_a_bad_relevance_grade_names_its_row(env, capsys):
    _, ds = _tiny(env)
    (ds / "qrels.jsonl").write_text(json.dumps({"qid": "q1", "docid": "canberra", "relevance": "high"}) + "\n")
    assert main(["data", "stats", str(ds)]) == 2
    assert "qrels row 0 (qid 'q1'): relevance 'high' is not an integer grade" in _err(capsys)


def test_status_says_a_bad_pool_is_an_error_before_any_stage_runs(env, capsys):
    cfg, _ = _tiny(env)
    cfg.write_text(cfg.read_text().replace("k = 2", "k = -3"))
    assert main(["status", str(cfg)]) == 2
    assert "arms[0] ('bm25').k must be an integer >= 1, got -3" in _err(capsys)


@pytest.mark.parametrize("text, why", [("{not json", "eval.json: not valid JSON"),
                                       ("{}", "eval.json: not an `ltrr agent eval` document (no metric, normaliser)"),
                                       ("[1]", "eval.json: expected a JSON object")])
def test_agent_compare_and_sweep_refuse_a_bad_eval_json(env, capsys, text, why):
    """A malformed eval.json was a JSONDecodeError traceback, `{}` a KeyError."""
    for name in ("a", "b"):
        (env / name).mkdir()
        (env / name / "eval.json").write_text(text)
    assert main(["agent", "compare", str(env / "a"), str(env / "b")]) == 2
    assert why in _err(capsys)
    assert main(["agent", "sweep", str(env / "a"), str(env / "b"), "--alphas", "0.1,0.2"]) == 2
    assert why in _err(capsys)
    assert main(["agent", "compare", str(env / "nothing"), str(env / "a")]) == 2
    assert "nothing: no evaluation (eval.json); run `ltrr agent eval` first" in _err(capsys)


def test_dask_flags_refused_before_any_cluster_or_stage(env, capsys):
    """`train --scheduler` trained an SVM here and recorded it as trained on Dask; `label
    --scheduler` with [generation] use_cache = false generated everything, kept nothing, then
    failed on a missing shard."""
    cfg, _ = _tiny(env)
    assert main(["train", str(cfg), "--ranker", "svm-pointwise", "--scheduler", "local:2"]) == 2
    assert "svm-pointwise does not train on Dask; --scheduler trains lambdamart-listwise" in _err(capsys)
    cfg.write_text(cfg.read_text() + '\n[generation]\nuse_cache = false\n')
    assert main(["label", str(cfg), "--scheduler", "local:2"]) == 2
    assert "--scheduler fills the generation cache: it cannot run with the cache off" in _err(capsys)
    assert not (env / "data" / "indexes").exists() and not (env / "run").exists()


def test_cache_extract_names_the_path_it_cannot_write(env, capsys, monkeypatch):
    """The error named the temporary file beside the destination, and said to delete it."""
    from ltrr.generation.base import DecodingParams, Generation
    from ltrr.generation.cache import GenerationCache, cache_key

    source = env / "c.sqlite"
    with GenerationCache(source) as cache:
        key = cache_key("echo", "echo-1", DecodingParams(), "hi")
        cache.put_many([(key, "echo", "echo-1", DecodingParams(), Generation(text="x"))])
    blocked = env / "blocked"
    blocked.write_text("a file, not a folder")
    assert main(["cache", "extract", str(blocked / "x.sqlite"), "--identity", "echo-1", "--from", str(source)]) == 2
    err = _err(capsys)
    assert f"cannot write {blocked / 'x.sqlite'}" in err and ".tmp" not in err


def test_a_stage_behind_a_waiting_one_says_so_in_words(env):
    """Labels recorded here while this config's retrieval is to run: the label stage waits on it."""
    from ltrr._errors import NotBuiltError
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import check_inputs_current

    cfg, _ = _tiny(env)
    assert main(["retrieve", str(cfg)]) == 0
    Run(load_config(str(cfg))).record("label", "labels-of-this-retrieval", 1.0)
    other = env / "k1.toml"
    other.write_text(cfg.read_text().replace("k = 2", "k = 1"))
    with pytest.raises(NotBuiltError, match=r"stage train reads the label stage's outputs in .*, and label waits "
                                            r"\(on retrieve\): they are not this config's"):
        check_inputs_current(Run(load_config(str(other))), "train")


@pytest.mark.parametrize("command", ["features", "eval", "train", "protocol"])
def test_a_stage_command_refuses_an_unknown_name_before_any_work(env, capsys, command):
    """`ltrr features` with an unknown `[features] set` rewrote features/<name> and exited 0
    (`ltrr run`, `label` and `status` refuse it); eval, train and protocol refused it only after
    starting work. Each checks the config's names first (`check_config_names`)."""
    cfg, _ = _tiny(env)
    assert main(["retrieve", str(cfg)]) == 0
    capsys.readouterr()
    cfg.write_text(cfg.read_text() + '\n[features]\nset = "paperx"\n')
    before = sorted(p for p in env.rglob("*") if p != cfg)
    assert main([command, str(cfg)]) == 2
    assert "[features] set: unknown feature set 'paperx'" in _err(capsys)
    assert sorted(p for p in env.rglob("*") if p != cfg) == before  # nothing written


def test_status_reports_a_dataset_folder_that_is_not_there_and_no_builder_makes(env, capsys):
    """A mistyped `[data] dataset` folder was "to build", and status said `ltrr run` would build it
    (the data stage then failed "dataset ... does not exist")."""
    cfg, ds = _tiny(env)
    cfg.write_text(cfg.read_text().replace(f'dataset = "{ds}"', f'dataset = "{env / "tinyy"}"'))
    assert main(["status", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"  data      missing        no {env / 'tinyy'}, and no [data] builder to build it" in out
    assert "retrieve  waits          on data" in out
    assert out.rstrip().splitlines()[-1].startswith(f"the dataset is missing (no {env / 'tinyy'}, and no [data] "
                                                    f"builder to build it): `ltrr run {cfg}` would stop at its")
    assert "runs data" not in out and "to build       no " + str(env / "tinyy") not in out


def test_an_empty_default_reads_as_none_in_a_flags_help(capsys):
    """`ltrr data stats --help` said "(default: , as [data] split)"."""
    import argparse

    from ltrr.cli._flags import FIELD_DEFAULT, add_field_flag
    from ltrr.data.section import DataSection

    parser = argparse.ArgumentParser()
    add_field_flag(parser, DataSection, "split", "--split", default=FIELD_DEFAULT)
    text = " ".join(parser.format_help().split())
    assert "(default: none, as [data] split)" in text and "(default: ," not in text
    with pytest.raises(SystemExit, match="0"):
        main(["data", "stats", "--help"])
    assert "(default: none, as [data] split)" in " ".join(capsys.readouterr().out.split())
