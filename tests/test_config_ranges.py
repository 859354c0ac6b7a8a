"""Ranges, fixed choices and registry names of the config, checked before any stage runs.

A value out of range or a word not among a key's choices fails when the config loads (the
sections' `setting(low=, high=, choices=, items=)`, checked by `Section.from_mapping`); a name
a registry or a file of a package above the config resolves fails in the run's pre-check
(`ltrr.pipeline.labels.check_config_names`), which `ltrr run`, `ltrr label` and `ltrr status`
make before any stage. Each used to load, and failed hours later (after retrieval and
labelling), some with an error that did not name the key (``[generation] chunk_size = 0``:
``range() arg 3 must not be zero``; ``-1``: ``KeyError('qid')``).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from ltrr._errors import ConfigError
from ltrr._sections import Section, section, setting
from ltrr.cli import main
from ltrr.config import load_config, packaged_configs, validate

ROOT = Path(__file__).resolve().parents[1]
DEMO = load_config("demo").to_dict()

# (table, key, bad value, the message's fragment): every key a section constrains
BAD_VALUES = [
    ("run", "seed", -1, r"\[run\]\.seed must be an integer in \[0, 4294967295\], got -1"),
    ("run", "seed", 2**32, r"\[run\]\.seed must be an integer in \[0, 4294967295\], got 4294967296"),
    ("data", "build_seed", -1, r"\[data\]\.build_seed must be an integer >= 0, got -1"),
    ("data", "n_per_type", -5, r"\[data\]\.n_per_type must be an integer >= 0, got -5"),
    ("data", "n_noanswer", -1, r"\[data\]\.n_noanswer must be an integer >= 0, got -1"),
    ("data", "n_multihop", -1, r"\[data\]\.n_multihop must be an integer >= 0, got -1"),
    ("data", "grow_per_type", -3, r"\[data\]\.grow_per_type must be an integer >= 0, got -3"),
    ("data", "grow_noanswer", -3, r"\[data\]\.grow_noanswer must be an integer >= 0, got -3"),
    ("data", "max_queries", -5, r"\[data\]\.max_queries must be an integer >= 0, got -5"),
    ("generation", "max_new_tokens", 0, r"\[generation\]\.max_new_tokens must be an integer >= 1, got 0"),
    ("generation", "chunk_size", 0, r"\[generation\]\.chunk_size must be an integer >= 1, got 0"),
    ("generation", "chunk_size", -1, r"\[generation\]\.chunk_size must be an integer >= 1, got -1"),
    ("generation", "max_prompt_tokens", -1, r"\[generation\]\.max_prompt_tokens must be an integer >= 0, got -1"),
    ("generation", "context_budget", -1, r"\[generation\]\.context_budget must be an integer >= 0, got -1"),
    ("labels", "replicate", "bogus", r"\[labels\]\.replicate must be one of test, all, got 'bogus'"),
    ("train", "rankers", ["lambdamart-listwise", 3], r"\[train\]\.rankers\[1\] must be str, got int 3"),
    ("eval", "splits", [1], r"\[eval\]\.splits\[0\] must be str, got int 1"),
    ("eval", "test_size", 5.0, r"\[eval\]\.test_size must be a number in \(0, 1\), got 5\.0"),
    ("eval", "test_size", 0.0, r"\[eval\]\.test_size must be a number in \(0, 1\), got 0\.0"),
    ("eval", "test_size", 1.0, r"\[eval\]\.test_size must be a number in \(0, 1\), got 1\.0"),
    ("eval", "test_size", math.nan, r"\[eval\]\.test_size must be a number in \(0, 1\), got nan"),
    ("eval", "n_folds", 0, r"\[eval\]\.n_folds must be an integer >= 1, got 0"),
    ("eval", "n_bootstrap", -1, r"\[eval\]\.n_bootstrap must be an integer >= 1, got -1"),
    ("eval", "correction", "bogus", r"\[eval\]\.correction must be one of none, bonferroni, holm, got 'bogus'"),
    ("eval", "k", 0, r"\[eval\]\.k must be an integer >= 1, got 0"),
    ("eval", "n_jobs", 0, r"\[eval\]\.n_jobs must be an integer >= 1, got 0"),
    ("protocol", "design_size", 1.5, r"\[protocol\]\.design_size must be a number in \(0, 1\), got 1\.5"),
    ("protocol", "design_size", 0.0, r"\[protocol\]\.design_size must be a number in \(0, 1\), got 0\.0"),
    ("protocol", "rankers", [1], r"\[protocol\]\.rankers\[0\] must be str, got int 1"),
    ("protocol", "train_labels", [1], r"\[protocol\]\.train_labels\[0\] must be str, got int 1"),
    ("protocol", "feature_sets", [1], r"\[protocol\]\.feature_sets\[0\] must be str, got int 1"),
    ("protocol", "n_folds", 1, r"\[protocol\]\.n_folds must be an integer >= 2, got 1"),
    ("protocol", "routers", [{}], r"\[protocol\]\.routers\[0\] must be str, got dict \{\}"),
    ("protocol", "seeds", ["a"], r"\[protocol\]\.seeds\[0\] must be int, got str 'a'"),
    ("protocol", "seeds", [7, -1], r"\[protocol\]\.seeds\[1\] must be an integer in \[0, 4294967295\], got -1"),
    ("protocol", "n_jobs", 0, r"\[protocol\]\.n_jobs must be an integer >= 1, got 0"),
    ("policy", "budget", 7.0, r"\[policy\]\.budget must be a number in \[0, 1\], got 7\.0"),
    ("policy", "budget", -1.0, r"\[policy\]\.budget must be a number in \[0, 1\], got -1\.0"),
    ("policy", "fractions", [0.5, 2.0], r"\[policy\]\.fractions\[1\] must be a number in \[0, 1\], got 2\.0"),
    ("policy", "fractions", ["x"], r"\[policy\]\.fractions\[0\] must be int or float, got str 'x'"),
    ("policy", "fractions", [True], r"\[policy\]\.fractions\[0\] must be int or float, got bool True"),
    ("policy", "representation", "bogus", r"\[policy\]\.representation must be one of features, lm, got 'bogus'"),
    ("policy", "trainers", ["bogus"], r"\[policy\]\.trainers\[0\] must be one of grpo, exact, got 'bogus'"),
    ("policy", "trainers", [], r"\[policy\]\.trainers must hold at least 1 item, got \[\]"),
    ("policy", "cost", "bogus", r"\[policy\]\.cost must be one of config, tokens, got 'bogus'"),
    ("policy", "latency_weight", -1.0, r"\[policy\]\.latency_weight must be a number >= 0, got -1\.0"),
    ("policy", "pooling", "bogus", r"\[policy\]\.pooling must be one of last, mean, got 'bogus'"),
    ("policy", "n_folds", 1, r"\[policy\]\.n_folds must be an integer >= 2, got 1"),
    ("agent", "k", -3, r"\[agent\]\.k must be an integer >= 1, got -3"),
    ("agent", "k", 0, r"\[agent\]\.k must be an integer >= 1, got 0"),
    ("agent", "max_turns", -1, r"\[agent\]\.max_turns must be an integer >= 0, got -1"),
    ("agent", "max_obs_tokens", 0, r"\[agent\]\.max_obs_tokens must be an integer >= 1, got 0"),
    ("agent", "max_new_tokens", 0, r"\[agent\]\.max_new_tokens must be an integer >= 1, got 0"),
    ("agent", "alpha", 1.5, r"\[agent\]\.alpha must be a number in \[0, 1\], got 1\.5"),
    ("agent", "token_price", -1.0, r"\[agent\]\.token_price must be a number in \[0, inf\), got -1\.0"),
    ("agent", "token_price", math.inf, r"\[agent\]\.token_price must be a number in \[0, inf\), got inf"),
    ("agent", "n_eval", 0, r"\[agent\]\.n_eval must be an integer >= 1, got 0"),
    ("agent", "holdout_arms", [1], r"\[agent\]\.holdout_arms\[0\] must be str, got int 1"),
    ("agent", "rollout_batch", 0, r"\[agent\]\.rollout_batch must be an integer >= 1, got 0"),
]

# values at the edge of each range, which load
EDGE_VALUES = [
    ("run", "seed", 0), ("run", "seed", 2**32 - 1), ("data", "max_queries", 0), ("data", "n_noanswer", 0),
    ("generation", "chunk_size", 1), ("generation", "max_prompt_tokens", 0), ("eval", "n_folds", 2),
    ("eval", "test_size", 0.999), ("eval", "correction", "none"), ("protocol", "seeds", []),
    ("policy", "budget", 0.0), ("policy", "budget", 1.0), ("policy", "fractions", [0, 1.0]),
    ("policy", "trainers", ["exact"]), ("policy", "latency_weight", 0.0), ("agent", "max_turns", 0),
    ("agent", "alpha", 1.0), ("agent", "token_price", 0.0), ("labels", "replicate", "all"),
]


def test_eval_n_folds_of_1_is_refused_only_with_the_kfold_split():
    """Only the kfold split reads [eval] n_folds: 1 is fine for the others."""
    d = _with("eval", "n_folds", 1)
    d["eval"]["splits"] = ["balanced", "leave-one-type-out"]
    assert validate(d).eval.n_folds == 1
    d["eval"]["splits"] = ["balanced", "kfold"]
    with pytest.raises(ConfigError, match=r"\[eval\]\.n_folds must be an integer >= 2 for the kfold split, got 1"):
        validate(d, "<t>")


def _with(table: str, key: str, value) -> dict:
    d = copy.deepcopy(DEMO)
    d[table][key] = value
    return d


@pytest.mark.parametrize("table, key, value, match", BAD_VALUES,
                         ids=[f"{t}.{k}={v!r}" for t, k, v, _ in BAD_VALUES])
def test_a_value_out_of_range_or_choices_fails_on_load_naming_the_key(table, key, value, match):
    with pytest.raises(ConfigError, match=r"^<t>: config key " + match + "$"):
        validate(_with(table, key, value), "<t>")


@pytest.mark.parametrize("table, key, value", EDGE_VALUES, ids=[f"{t}.{k}={v!r}" for t, k, v in EDGE_VALUES])
def test_a_value_at_the_edge_of_its_range_loads_unchanged(table, key, value):
    cfg = validate(_with(table, key, value))
    assert getattr(cfg, table)[key] == value and type(getattr(cfg, table)[key]) is type(value)


def test_every_constrained_key_is_in_the_table():
    """Each constrained key of every section has a bad value above (a new constraint gets a row)."""
    from ltrr._sections import settings_of
    from ltrr.config import section_classes

    constrained = {(name, f.name) for name, cls in section_classes().items() for f in settings_of(cls)
                   if any(f.metadata[m] is not None for m in ("low", "high", "choices", "items"))
                   or f.metadata["min_items"]}
    assert constrained == {(t, k) for t, k, _, _ in BAD_VALUES}


@pytest.mark.parametrize("name", packaged_configs())
def test_every_shipped_config_loads_and_its_values_are_in_range(name):
    """Every shipped config loads; its table with every key written out (the defaults too) loads
    again to the same fingerprint: validation changes no value."""
    cfg = load_config(name)
    again = validate(cfg.to_dict(), cfg.source)
    assert again.to_dict() == cfg.to_dict() and again.fingerprint() == cfg.fingerprint()


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").rglob("*.toml")))
def test_every_benchmark_config_loads(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    load_config(path)


def test_the_fixed_words_match_their_users():
    """The sections keep the fixed words their users (above the config) check again."""
    from ltrr.eval import stats
    from ltrr.eval.section import CORRECTIONS
    from ltrr.policy import estimator, router, section, states

    assert stats.CORRECTIONS is CORRECTIONS
    assert section.REPRESENTATIONS == router.REPRESENTATIONS
    assert section.TRAINERS == estimator.TRAINERS
    assert section.POOLINGS == states.POOLINGS


def test_a_setting_refuses_constraints_of_another_type():
    with pytest.raises(TypeError, match="choices"):
        setting(int, 1, help="h", choices=("a",))
    with pytest.raises(TypeError, match="low and high"):
        setting(str, "a", help="h", low=0)
    with pytest.raises(TypeError, match="items and min_items"):
        setting(int, 1, help="h", items=int)
    with pytest.raises(TypeError, match="low and high"):
        setting(list, [], help="h", items=str, low=0)


def test_a_section_checks_open_and_closed_bounds():
    @section("toy")
    class Toy(Section):
        share: float = setting(float, 0.5, help="h", low=0, high=1, high_open=True)
        count: int = setting(int, 1, help="h", low=0, low_open=True)
        words: list = setting(list, [], help="h", items=str, choices=("a", "b"))

    assert Toy.from_mapping({"share": 0.0, "count": 1, "words": ["b", "a"]}).words == ["b", "a"]
    with pytest.raises(ConfigError, match=r"^config key \[toy\]\.share must be a number in \[0, 1\), got 1\.0$"):
        Toy.from_mapping({"share": 1.0})
    with pytest.raises(ConfigError, match=r"^config key \[toy\]\.count must be an integer > 0, got 0$"):
        Toy.from_mapping({"count": 0})
    with pytest.raises(ConfigError, match=r"^config key \[toy\]\.words\[1\] must be one of a, b, got 'c'$"):
        Toy.from_mapping({"words": ["a", "c"]})


# ---- names: the run's pre-check ------------------------------------------------------------------
BAD_NAMES = [
    ("data", "builder", "bogus", r"\[data\] builder: unknown dataset builder 'bogus'"),
    ("labels", "noise_floor_arm", "nope", r"\[labels\] noise_floor_arm: unknown arm 'nope'"),
    ("labels", "metric", "bogus", r"\[labels\] .*bogus"),
    ("generation", "template", "bogus", r"\[generation\] .*bogus"),
    ("generation", "backend", "bogus", r"\[generation\] .*bogus"),
    ("features", "set", "bogus", r"\[features\] set: unknown feature set 'bogus'"),
    ("train", "ranker", "bogus", r"\[train\] ranker: unknown ranker 'bogus'"),
    ("train", "rankers", ["bogus"], r"\[train\] rankers: unknown ranker 'bogus'"),
    ("train", "params", {"bogus": {}}, r"\[train\] params names 'bogus', not a ranker"),
    ("protocol", "rankers", ["lambdamart-listwse"], r"\[protocol\] rankers: unknown ranker 'lambdamart-listwse'"),
    ("protocol", "feature_sets", ["bogus"], r"\[protocol\] feature_sets\[0\]: unknown feature set 'bogus'"),
    ("protocol", "routers", ["bogus"], r"\[protocol\] routers\[0\]: .*bogus"),
    ("protocol", "routers", ["oracle"], r"\[protocol\] routers\[0\]: 'oracle': .*the oracle is no candidate"),
    ("eval", "splits", ["bogus"], r"\[eval\] splits: unknown split family 'bogus'"),
    ("eval", "retrieval_measures", ["bogus@@"], r"\[eval\] retrieval_measures: "),
    ("policy", "params", {"bogus": 1}, r"\[policy\] params: 'bogus' is not a BudgetPolicy parameter"),
    ("agent", "reward", "bogus", r"\[agent\] reward: unknown reward 'bogus'; choose one of: ltrr, router-r1"),
    ("agent", "metric", "bogus", r"\[agent\] metric: .*bogus"),
    ("agent", "holdout_arms", ["nope"], r"\[agent\] holdout_arms\[0\]: unknown arm 'nope'"),
    ("agent", "sft", {"bogus": 1}, r"\[agent\] sft.*bogus"),
    ("agent", "grpo", {"bogus": 1}, r"\[agent\] grpo.*bogus"),
]


@pytest.mark.parametrize("table, key, value, match", BAD_NAMES, ids=[f"{t}.{k}" for t, k, _, _ in BAD_NAMES])
def test_an_unknown_name_fails_the_pre_check_naming_the_key(table, key, value, match, tmp_path, monkeypatch):
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import check_config_names

    monkeypatch.chdir(tmp_path)
    run = Run(validate(_with(table, key, value)), log=lambda m: None)
    with pytest.raises(ConfigError, match=match):
        check_config_names(run)


@pytest.mark.parametrize("name", packaged_configs())
def test_every_shipped_config_passes_the_pre_check(name, tmp_path, monkeypatch):
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import check_config_names

    monkeypatch.chdir(tmp_path)
    check_config_names(Run(load_config(name), log=lambda m: None))


# ---- the command line ---------------------------------------------------------------------------
def _config(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "bad.toml"
    p.write_text(f'extends = "demo"\n[run]\nname = "bad"\nworkdir = "{tmp_path / "run"}"\n{body}', encoding="utf-8")
    return p


@pytest.mark.parametrize("body, message", [
    ('[eval]\ncorrection = "holm2"\n', "config key [eval].correction must be one of none, bonferroni, holm, "
                                       "got 'holm2'"),
    ("[generation]\nchunk_size = 0\n", "config key [generation].chunk_size must be an integer >= 1, got 0"),
    ("[policy]\nbudget = 7.0\n", "config key [policy].budget must be a number in [0, 1], got 7.0"),
    ('[protocol]\nrankers = ["lambdamart-listwse"]\n', "[protocol] rankers: unknown ranker 'lambdamart-listwse'"),
    ('[agent]\nreward = "bogus"\n', "[agent] reward: unknown reward 'bogus'"),
])
def test_status_of_a_bad_config_is_one_error_line_and_exit_2(tmp_path, monkeypatch, capsys, body, message):
    """`ltrr status` said every stage was "to run" and exited 0 for a config `ltrr run` would
    fail on hours later."""
    monkeypatch.chdir(tmp_path)
    cfg = _config(tmp_path, body)
    assert main(["status", str(cfg)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("ltrr: error: ") and message in err
    assert not (tmp_path / "run").exists()


def test_run_refuses_an_unknown_name_before_any_stage(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = _config(tmp_path, '[train]\nranker = "bogus"\n')
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[train] ranker: unknown ranker 'bogus'" in err
    assert not (tmp_path / "run").exists()
