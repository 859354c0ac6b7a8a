"""Config loading and validation: every error names the key."""

from __future__ import annotations

import pytest

from ltrr._errors import ConfigError
from ltrr.config import load_config, packaged_configs

BASE = """
[run]
name = "t"
[data]
dataset = "demo"
[retrievers.bm25]
type = "bm25"
[[arms]]
name = "bm25"
retriever = "bm25"
[[arms]]
name = "none"
retriever = "none"
"""


def _cfg(tmp_path, text, name="c.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_packaged_demo_loads():
    assert "demo" in packaged_configs()
    cfg = load_config("demo")
    assert [a["name"] for a in cfg.arms] == ["bm25", "bm25+reg", "bm25+stoch", "dense", "dense+reg", "dense+stoch", "none"]
    assert cfg.seed == 13
    assert str(cfg.workdir) == "runs/demo"


def test_defaults_filled(tmp_path):
    cfg = load_config(_cfg(tmp_path, BASE))
    assert cfg.run["seed"] == 13 and cfg.labels["metric"] == "f1"
    assert str(cfg.workdir) == "runs/t"


def test_yaml_equivalent(tmp_path):
    y = _cfg(tmp_path, "run: {name: t}\ndata: {dataset: demo}\nretrievers: {bm25: {type: bm25}}\n"
             "arms: [{name: bm25, retriever: bm25}, {name: none, retriever: none}]\n", "c.yaml")
    t = load_config(_cfg(tmp_path, BASE))
    assert load_config(y).to_dict() == t.to_dict()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (("[run]", "[run]\nsede = 1"), r"unknown config key \[run\]\.sede"),
        (("[run]", "[runn]\nx=1\n[run]"), r"unknown config section \[runn\]"),
        (('name = "t"', "name = 3"), r"\[run\]\.name must be str, got int"),
        (('name = "t"', 'name = "t"\nseed = "x"'), r"\[run\]\.seed must be int"),
        (('dataset = "demo"', ""), r"\[data\]\.dataset is required"),
        (('retriever = "bm25"', 'retriever = "bm26"'), r"\[arms\]\[0\]\.retriever: unknown retriever 'bm26'"),
        (('name = "none"', 'name = "bm25"'), r"\[arms\]\[1\]\.name: duplicate arm name 'bm25'"),
        (('type = "bm25"', 'kind = "bm25"'), r"\[retrievers\.bm25\]\.type is required"),
    ],
)
def test_bad_keys_are_named(tmp_path, edit, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_cfg(tmp_path, BASE.replace(*edit, 1)))


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid TOML"):
        load_config(_cfg(tmp_path, "[run\nname="))
    with pytest.raises(ConfigError, match=r"does not exist"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match=r"no packaged config of that name"):
        load_config("nosuchconfig")
    with pytest.raises(ConfigError, match=r"\.toml, \.yaml or \.yml"):
        load_config(_cfg(tmp_path, "x", "c.ini"))


def test_pool_level_errors_name_the_key(tmp_path):
    from ltrr.retrieval import Pool

    cfg = load_config(_cfg(tmp_path, BASE.replace('type = "bm25"', 'type = "bm25"\nk3 = 1', 1)))
    with pytest.raises(ConfigError, match=r"c\.toml: .*k3"):
        Pool.from_run_config(cfg)


def test_fingerprint_tracks_sections(tmp_path):
    a = load_config(_cfg(tmp_path, BASE))
    b = load_config(_cfg(tmp_path, BASE.replace('name = "t"', 'name = "t"\nseed = 7'), "d.toml"))
    assert a.fingerprint("data") == b.fingerprint("data")
    assert a.fingerprint("run") != b.fingerprint("run")


def test_extends_merges_tables_and_replaces_arrays(tmp_path):
    _cfg(tmp_path, BASE + '[labels]\nmetric = "em"\nextra_metrics = ["f1"]\n', "base.toml")
    child = _cfg(tmp_path, 'extends = "base.toml"\n[run]\nname = "child"\n[labels]\nextra_metrics = []\n'
                 '[[arms]]\nname = "only"\nretriever = "bm25"\n', "child.toml")
    cfg = load_config(child)
    assert cfg.run["name"] == "child" and cfg.data["dataset"] == "demo"
    assert cfg.labels["metric"] == "em" and cfg.labels["extra_metrics"] == []  # merged, then replaced
    assert [a["name"] for a in cfg.arms] == ["only"]  # arrays are replaced whole


def test_packaged_demo_full_is_the_smollm2_demo_without_sampling():
    full, demo = load_config("demo-full"), load_config("demo-smollm2")
    assert full.data["max_queries"] == 0 and demo.data["max_queries"] == 300
    assert str(full.workdir) == "runs/demo-full"
    assert full.arms == demo.arms and full.generation == demo.generation and full.labels == demo.labels


@pytest.mark.parametrize("text, match", [
    ('extends = "nope.toml"\n', "does not exist"),
    ("extends = 3\n", "extends must be"),
    ('extends = "loop.toml"\n', "extends itself"),
])
def test_extends_errors(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_cfg(tmp_path, text, "loop.toml"))


@pytest.mark.parametrize(("suffix", "text"), [
    (".toml", "x = " + "[" * 5000 + "]" * 5000 + "\n"),
    (".yaml", "x: " + "[" * 5000 + "]" * 5000 + "\n"),
])
def test_a_config_nested_thousands_deep_is_one_config_error(tmp_path, suffix, text):
    """A TOML of 5,000 nested arrays ended in a RecursionError traceback."""
    p = tmp_path / f"deep{suffix}"
    p.write_text(text)
    with pytest.raises(ConfigError, match=rf"deep\{suffix}: nested too deeply to read"):
        load_config(p)
