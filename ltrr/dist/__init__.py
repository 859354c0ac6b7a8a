"""Scale-out on Dask (``pip install 'ltrr[dist]'``): labelling on workers, GBDT rankers on Dask.

`ltrr.dist.label.fill_cache_on_dask` sends chunks of queries to Dask workers; each worker keeps
its own generator and writes its own shard of the generation cache, and finished shards are
merged into the run's cache by the checksummed `GenerationCache.merge`. Dask is imported only
here, when a scheduler is given.
"""

from __future__ import annotations

from ltrr._errors import ConfigError, MissingDependencyError

import contextlib
from collections.abc import Iterator

__all__ = ["connect", "connected", "check_scheduler"]


def check_scheduler(scheduler: str) -> str:
    """Validate a ``--scheduler`` value before any work: ``local``, ``local:N`` or ``tcp://...``."""
    if scheduler == "local" or scheduler.startswith("local:"):
        n = scheduler.partition(":")[2] or "2"
        if not n.isdigit() or int(n) < 1:
            raise ConfigError(f"--scheduler local:N needs a positive worker count, got {scheduler!r}")
        return scheduler
    if not scheduler.startswith(("tcp://", "tls://")):
        raise ConfigError(f"--scheduler must be local[:N] or tcp://HOST:PORT, got {scheduler!r}")
    return scheduler


def connect(scheduler: str, *, timeout: float = 30.0):
    """A Dask `Client`: ``local`` / ``local:N`` starts a `LocalCluster` of N single-threaded worker
    processes (default 2); ``tcp://HOST:PORT`` connects to a running scheduler."""
    check_scheduler(scheduler)
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise MissingDependencyError("--scheduler needs Dask: pip install 'ltrr[dist]'") from None
    if scheduler.startswith("local"):
        n = int(scheduler.partition(":")[2] or "2")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(cluster)
    try:
        return Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"no Dask scheduler answered at {scheduler} within {timeout:g}s ({type(exc).__name__})") from None


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
