"""Labelling on Dask workers (a 2-worker LocalCluster, tiny real model): identical labels, resume,
a killed worker, bad schedulers."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from ltrr.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from _tiny_llm import save_tiny_llm
    from test_pipeline_e2e import _dataset

    root = tmp_path_factory.mktemp("dist")
    save_tiny_llm(root / "tiny", seed=0)
    mp = pytest.MonkeyPatch()
    mp.setenv("LTRR_DATA_DIR", str(root / "data"))
    mp.chdir(root)
    ds = _dataset(root)

    def config(name: str) -> str:
        path = root / f"{name}.toml"
        path.write_text(f"""
[run]
name = "{name}"
seed = 7
workdir = "{root / name}"
[data]
dataset = "{ds}"
max_queries = 16
[retrievers.bm25]
type = "bm25"
[[arms]]
name = "bm25"
retriever = "bm25"
k = 2
[[arms]]
name = "bm25-top1"
retriever = "bm25"
k = 1
cost = 0.5
[[arms]]
name = "none"
retriever = "none"
[generation]
backend = "transformers"
model = "{root / 'tiny'}"
template = "short_answer"
max_new_tokens = 4
cache = "{root / name / 'cache.sqlite'}"
[labels]
metric = "f1"
likelihood = true
noise_floor = false
""")
        return str(path)

    yield root, config
    mp.undo()


def test_two_workers_from_an_empty_cache_give_identical_labels(project, capsys):
    root, config = project
    one, two = config("one"), config("two")
    assert main(["index", one]) == 0
    assert main(["label", one]) == 0
    capsys.readouterr()
    assert main(["label", two, "--scheduler", "local:2"]) == 0
    out = capsys.readouterr().out
    assert "[label] dask local:2: 4 of 4 chunks" in out
    calls = int(out.split("[label] dask: 4 chunks, ")[1].split(" generator calls")[0])
    assert calls > 0
    a = (root / "one" / "labels" / "labels.parquet").read_bytes()
    b = (root / "two" / "labels" / "labels.parquet").read_bytes()
    assert a == b
    assert json.loads((root / "two" / "labels" / "summary.json").read_text())["generator_calls"] == 0
    # a re-run sends nothing: every item is in the cache
    assert main(["label", two, "--scheduler", "local:2", "--force"]) == 0
    assert "0 of 4 chunks" in capsys.readouterr().out


def test_the_prebuilt_cache_is_imported_before_the_workers_are_sent_anything(project, capsys, monkeypatch):
    """``[generation] prebuilt`` with ``--scheduler``: the workers generate only what the shipped
    cache lacks (they were sent every chunk, and their rows then shadowed the prebuilt ones)."""
    import ltrr.generation.prebuilt as prebuilt

    root, config = project
    one = config("one")
    if not (root / "one" / "labels" / "labels.parquet").exists():
        assert main(["index", one]) == 0 and main(["label", one]) == 0
    shipped = root / "shipped" / "tiny-generations.jsonl.xz"
    assert main(["cache", "export", one, str(shipped)]) == 0
    monkeypatch.setattr(prebuilt, "prebuilt_path", lambda name: shipped)
    cfg = Path(config("pre"))
    cfg.write_text(cfg.read_text().replace("[generation]\n", '[generation]\nprebuilt = "tiny"\n'))
    capsys.readouterr()
    assert main(["label", str(cfg), "--scheduler", "local:2"]) == 0
    out = capsys.readouterr().out
    assert out.index("prebuilt generation cache 'tiny': sha256 verified") < out.index("[label] dask local:2: 0 of 4 chunks")
    assert (root / "pre" / "labels" / "labels.parquet").read_bytes() == (root / "one" / "labels" / "labels.parquet").read_bytes()


def test_a_killed_worker_loses_nothing(project, capsys):
    from dask.distributed import Client, LocalCluster

    from ltrr.generation.cache import GenerationCache

    root, config = project
    cfg = config("killed")
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    pids = list(client.run(os.getpid).values())
    shards = root / "killed" / "dask-shards" / "killed"

    killed = []
    finished = threading.Event()

    def kill_when_started():
        # polls until the label call returns, not for a fixed time: on a loaded machine the
        # workers' first shard file can take longer than any fixed wait (a fresh-clone CI run
        # beside two labelling processes took over 30 s)
        while not finished.is_set():
            if shards.exists() and any(shards.glob("worker-*.sqlite")):
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    try:
        assert main(["label", cfg, "--scheduler", cluster.scheduler_address]) == 0
    finally:
        finished.set()
        killer.join()
        client.close()
        cluster.close()
    assert killed and "[label] dask" in capsys.readouterr().out
    check = GenerationCache(root / "killed" / "cache.sqlite").check()
    assert check["corrupt"] == 0
    lab = (root / "killed" / "labels" / "labels.parquet").read_bytes()
    assert lab == (root / "one" / "labels" / "labels.parquet").read_bytes()


def test_bad_schedulers(project, capsys):
    _, config = project
    cfg = config("bad")
    assert main(["index", cfg]) == 0
    assert main(["label", cfg, "--scheduler", "tcp://127.0.0.1:9", "--scheduler-timeout", "2", "--force"]) == 2
    assert "no Dask scheduler answered at tcp://127.0.0.1:9 within 2s" in capsys.readouterr().err
    assert main(["label", cfg, "--scheduler", "yarn", "--force"]) == 2
    assert "--scheduler must be local[:N] or tcp://HOST:PORT" in capsys.readouterr().err
    assert main(["label", cfg, "--scheduler", "local:2", "--shard", "0/2"]) == 2
    assert "give --shard or --scheduler, not both" in capsys.readouterr().err


def test_an_interrupted_runs_shards_reach_the_cache_before_anything_is_sent(project, capsys):
    """Shards were merged only after every task had succeeded: an interrupted or failed Dask
    labelling kept none of its workers' output, and the next run generated it all again."""
    from ltrr.generation.base import DecodingParams, Generation
    from ltrr.generation.cache import GenerationCache, cache_key

    root, config = project
    cfg = config("leftover")
    assert main(["retrieve", cfg]) == 0
    shard_dir = root / "leftover" / "dask-shards" / "leftover"
    shard_dir.mkdir(parents=True)
    key = cache_key("echo", "echo-1", DecodingParams(), "a worker's finished item")
    with GenerationCache(shard_dir / "worker-4242.sqlite") as shard:
        shard.put_many([(key, "echo", "echo-1", DecodingParams(), Generation(text="kept"))])
    capsys.readouterr()
    # the scheduler is unreachable: the run fails, but only after the leftover shard is merged
    assert main(["label", cfg, "--scheduler", "tcp://127.0.0.1:9", "--scheduler-timeout", "1"]) == 2
    assert "no Dask scheduler answered at tcp://127.0.0.1:9" in capsys.readouterr().err
    with GenerationCache(root / "leftover" / "cache.sqlite") as cache:
        assert cache.get_many([key])[key].text == "kept"


def test_a_scheduler_without_workers_or_with_another_ltrr_is_one_line(project, capsys, monkeypatch):
    """A scheduler with no worker (or whose workers die importing ltrr) made a labelling wait
    forever; workers of another ltrr version labelled without a word."""
    import socket

    from dask.distributed import LocalCluster

    import ltrr
    from ltrr._errors import ConfigError
    from ltrr.dist import connect

    with LocalCluster(n_workers=0, processes=True, dashboard_address=None) as empty:
        with pytest.raises(ConfigError, match=r"no Dask worker joined the scheduler at tcp://.* within 2s"):
            connect(empty.scheduler_address, timeout=2)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as one:
        connect(one.scheduler_address, timeout=10).close()  # the same ltrr: connected
        monkeypatch.setattr(ltrr, "__version__", "0.0.0-other")
        with pytest.raises(ConfigError, match=r"runs ltrr .*, this is ltrr 0.0.0-other; install one version"):
            connect(one.scheduler_address, timeout=10)
    with socket.socket() as silent:  # accepts the connection and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        # given up after the timeout (distributed's own connect was still waiting after 300 s)
        with pytest.raises(ConfigError, match=f"no Dask scheduler answered at {address} within 1s"):
            connect(address, timeout=1)
