"""The agent stage's SFT step (`ltrr.agent.stage.sft_policy`): a finished policy of the same
settings and seed is kept when the stage does not force; other settings, another seed or
``force`` train again."""

from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from ltrr.agent import stage
from ltrr.agent.section import AgentSection
from ltrr.agent.sft import SFTSpec


class Trained(Exception):
    pass


def _run(tmp_path, seed=7, sft=None, agent=None, model="m.gguf", label="fp-labels"):
    from ltrr.generation.section import GenerationSection

    agent = AgentSection.from_mapping({"sft": sft or {}, **(agent or {})})
    config = SimpleNamespace(agent=agent, seed=seed, generation=GenerationSection.from_mapping({"model": model}),
                             protocol=SimpleNamespace(design_size=0.7))
    return SimpleNamespace(config=config, workdir=tmp_path, fingerprint_of=lambda stage: label)


@pytest.fixture
def finished(tmp_path, monkeypatch):
    folder = tmp_path / "agent" / "policies" / "sft"
    folder.mkdir(parents=True)
    record = {"spec": json.loads(json.dumps(asdict(SFTSpec.from_mapping({})))), "seed": 7, "loss": [],
              "inputs": stage._sft_inputs(_run(tmp_path))}
    (folder / "sft.json").write_text(json.dumps(record))

    def train(*a, **k):  # anything past the check would train
        raise Trained

    monkeypatch.setattr(stage, "labels_table", train)
    return folder, record


def test_a_finished_policy_of_the_same_settings_is_kept(tmp_path, finished):
    """Its record names the labels, base model, partition and loop settings it was made of
    (another holdout, base model or labels trained again; before, only [agent] sft and the seed
    were compared); a record from before they were kept is compared as before."""
    folder, record = finished
    lines = []
    got, rec = stage.sft_policy(_run(tmp_path), force=False, log=lines.append)
    assert got == folder and rec == record and "skipped" in lines[0]


def test_a_policy_recorded_before_a_setting_existed_is_kept_at_its_default(tmp_path, finished):
    """A record without a later field (``arm_choice``) reads as that field's default; another value
    of it trains again."""
    folder, record = finished
    del record["spec"]["arm_choice"], record["inputs"]  # neither was recorded then
    (folder / "sft.json").write_text(json.dumps(record))
    got, rec = stage.sft_policy(_run(tmp_path), force=False, log=lambda m: None)
    assert got == folder and rec == record
    with pytest.raises(Trained):
        stage.sft_policy(_run(tmp_path, sft={"arm_choice": "type"}), force=False, log=lambda m: None)


@pytest.mark.parametrize("change", [{"seed": 8}, {"sft": {"epochs": 2.0}}, {"force": True},
                                    {"agent": {"holdout_arms": ["bm25-top1"]}}, {"agent": {"k": 5}},
                                    {"model": "another.gguf"}, {"label": "relabelled"}])
def test_other_settings_another_seed_or_force_train_again(tmp_path, finished, change):
    force = change.pop("force", False)
    with pytest.raises(Trained):
        stage.sft_policy(_run(tmp_path, **change), force=force, log=lambda m: None)


def test_the_agent_partition_leaves_out_queries_with_a_failed_label(tmp_path):
    """As the protocol does (`keep_queries`): a query with a failed item is in neither part and
    moves no other query (its NaN failed the eval after every rollout, or scripted SFT wrongly)."""
    import pandas as pd

    from ltrr.agent.run import partition
    from ltrr.eval.protocol import design_test_partition

    queries = pd.DataFrame({"qid": [f"q{i:02d}" for i in range(40)], "qtype": ["a", "b"] * 20})
    full = design_test_partition(queries, design_size=0.7, random_state=7)
    gone = {full.train[0], full.test[0]}
    labels = pd.DataFrame([(q, arm, 1.0, q in gone and arm == "bm25") for q in queries["qid"] for arm in ("bm25", "none")],
                          columns=["qid", "arm", "utility", "failed"])
    (tmp_path / "labels").mkdir()
    labels.to_parquet(tmp_path / "labels" / "labels.parquet")
    run = SimpleNamespace(dataset=SimpleNamespace(queries=queries), labels_dir=tmp_path / "labels",
                          config=SimpleNamespace(seed=7, protocol=SimpleNamespace(design_size=0.7)))
    design, test = partition(run)
    assert design == [q for q in full.train if q not in gone] and test == [q for q in full.test if q not in gone]
