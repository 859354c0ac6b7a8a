"""Scale-out on Dask (``pip install 'ltrr[dist]'``): labelling on workers, GBDT rankers on Dask.

`ltrr.dist.label.fill_cache_on_dask` sends chunks of queries to Dask workers; each worker keeps
its own generator and writes its own shard of the generation cache, and finished shards are
merged into the run's cache by the checksummed `GenerationCache.merge`. Dask is imported only
here, when a scheduler is given.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from ltrr._errors import ConfigError, MissingDependencyError

__all__ = ["connect", "connected", "check_scheduler"]


_TCP = re.compile(r"tcp://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})")


def check_scheduler(scheduler: str) -> str:
    """Validate a ``--scheduler`` value before any work: ``local``, ``local:N`` or ``tcp://HOST:PORT``."""
    if scheduler == "local" or scheduler.startswith("local:"):
        n = scheduler.partition(":")[2] or "2"
        if not n.isdigit() or int(n) < 1:
            raise ConfigError(f"--scheduler local:N needs a positive worker count, got {scheduler!r}")
        return scheduler
    m = _TCP.fullmatch(scheduler)
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise ConfigError(f"--scheduler must be local[:N] or tcp://HOST:PORT, got {scheduler!r}")
    return scheduler


def _client_within(scheduler: str, timeout: float):
    """``Client(scheduler)``, given up after ``timeout`` seconds: an endpoint that accepts the
    connection and never answers holds distributed's own connect past its timeout (measured:
    still waiting after 300 s with ``timeout=3``)."""
    import threading

    from dask.distributed import Client

    out: dict = {}

    def make():
        try:
            out["client"] = Client(scheduler, timeout=timeout)
        except Exception as exc:  # reported below, in the caller's thread
            out["error"] = exc

    thread = threading.Thread(target=make, name="ltrr-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout + 5.0)
    if "client" in out:
        return out["client"]
    why = type(out["error"]).__name__ if "error" in out else "no answer"
    raise ConfigError(f"no Dask scheduler answered at {scheduler} within {timeout:g}s ({why})")


def _check_workers(client, scheduler: str, timeout: float) -> None:
    """At least one worker, and every worker runs this ltrr: a scheduler without workers (or
    whose workers die importing ltrr) made a labelling wait forever, and another version would
    label under other rules."""
    from ltrr import __version__

    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError):
        client.close()
        raise ConfigError(f"no Dask worker joined the scheduler at {scheduler} within {timeout:g}s") from None
    try:
        versions = client.run(lambda: __import__("ltrr").__version__)
    except Exception as exc:  # a worker without ltrr (ModuleNotFoundError), or one that died
        client.close()
        raise ConfigError(f"a Dask worker of {scheduler} cannot run ltrr ({type(exc).__name__}: {exc})") from None
    other = {w: v for w, v in versions.items() if v != __version__}
    if other:
        client.close()
        worker, version = next(iter(other.items()))
        raise ConfigError(f"Dask worker {worker} runs ltrr {version}, this is ltrr {__version__}; install one "
                          f"version everywhere ({len(other)} of {len(versions)} workers differ)")


def connect(scheduler: str, *, timeout: float = 30.0):
    """A Dask `Client`: ``local`` / ``local:N`` starts a `LocalCluster` of N single-threaded worker
    processes (default 2); ``tcp://HOST:PORT`` connects to a running scheduler, within
    ``timeout`` seconds, and checks that a worker has joined and that every worker runs this
    ltrr."""
    check_scheduler(scheduler)
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise MissingDependencyError("--scheduler needs Dask: pip install 'ltrr[dist]'") from None
    if scheduler.startswith("local"):
        n = int(scheduler.partition(":")[2] or "2")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(cluster)
    client = _client_within(scheduler, timeout)
    _check_workers(client, scheduler, timeout)
    return client


@contextlib.contextmanager
def connected(scheduler: str, *, timeout: float = 30.0) -> Iterator:
    """`connect`, then close the client (and the `LocalCluster` it started) on the way out."""
    client = connect(scheduler, timeout=timeout)
    try:
        yield client
    finally:
        cluster = getattr(client, "cluster", None)
        client.close()
        if cluster is not None and scheduler.startswith("local"):
            cluster.close()
