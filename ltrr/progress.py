"""A long stage's progress on disk, so ``ltrr status`` can tell from another terminal how far it got.

A labelling takes hours; its terminal bar is seen only where it runs. `StageProgress` writes a
small JSON snapshot beside the stage's record (``stages/<stage>.progress.json``), atomically and
at most every few seconds: the phase, items done of total, the recent rate, the process and host.
It is removed when the stage finishes; after a crash or Ctrl-C it stays, marked stopped, and
`describe_progress` words it for ``ltrr status``: running (how long is left at the recent rate)
or stopped (the stage resumes from the generation cache, so running it again continues from there).

A snapshot counts only when its ``fingerprint`` is the stage's current one: progress towards
other inputs is not progress towards these.

Examples
--------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "label.progress.json"
>>> clock = iter(range(0, 1000, 10)).__next__
>>> with StageProgress(path, fingerprint="fp", phase="label", total=400, every_s=0, clock=clock) as p:
...     p.update(100)
...     snap = read_progress(path)
>>> snap["done"], snap["total"], snap["state"]
(100, 400, 'running')
>>> path.exists()  # finished: nothing left behind
False
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ltrr._atomic import write_json_atomic
from ltrr._log import bar, configure  # re-exported: a script's bars and log lines as ltrr's own

__all__ = ["PROGRESS_SUFFIX", "StageProgress", "bar", "configure", "describe_progress", "describe_shards",
           "progress_path", "read_progress"]

#: The snapshot of stage ``S`` is ``stages/S.progress.json``, beside its record ``stages/S.json``.
PROGRESS_SUFFIX = ".progress.json"
_WINDOW_S = 300.0  # the recent rate is measured over the last five minutes of snapshots


def progress_path(record: str | Path, *, shard: tuple[int, int] | None = None) -> Path:
    """The progress snapshot beside a stage record (``stages/label.json`` ->
    ``stages/label.progress.json``), or a shard's (``shard=(1, 4)`` ->
    ``stages/label.shard-1-of-4.progress.json``: each ``--shard`` process writes its own)."""
    record = Path(record)
    if shard is not None:
        return record.with_name(f"{record.stem}.shard-{int(shard[0])}-of-{int(shard[1])}{PROGRESS_SUFFIX}")
    return record.with_name(record.stem + PROGRESS_SUFFIX)


def describe_shards(record: str | Path, fingerprint: str | None = None, *,
                    now: Callable[[], float] = time.time) -> tuple[str, str] | None:
    """``(state, line)`` for ``ltrr status`` from the ``--shard`` processes' snapshots of a stage
    (`progress_path` with ``shard``), pooled; None when there is none of ``fingerprint``'s inputs.

    A shard that finished removes its snapshot, so the line counts the shards that have one.
    ``running`` while any of them runs (how long is left at their pooled recent rate), else
    ``stopped``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> record = pathlib.Path(tempfile.mkdtemp()) / "label.json"
    >>> for i, done in enumerate((100, 300)):
    ...     _ = write_json_atomic(progress_path(record, shard=(i, 2)), {"fingerprint": "fp", "phase": "label",
    ...         "state": "stopped", "done": done, "total": 1000, "updated": 0.0, "host": "elsewhere"})
    >>> describe_shards(record, "fp", now=lambda: 60.0)[1]
    'label shards stopped: 2 shards at 400 of 2,000 items (20%), the last 60 s ago; running them again resumes them from the generation cache'
    """
    record = Path(record)
    docs = []
    for path in sorted(record.parent.glob(f"{record.stem}.shard-*-of-*{PROGRESS_SUFFIX}")):
        doc = read_progress(path)
        if doc is not None and (fingerprint is None or doc.get("fingerprint") == fingerprint):
            described = describe_progress(doc, now=now)  # never None for a snapshot
            if described is not None:
                docs.append((doc, described[0]))
    if not docs:
        return None
    done, total = sum(int(d["done"]) for d, _ in docs), sum(int(d["total"]) for d, _ in docs)
    counted = _counted(done, total)
    phases = "/".join(sorted({str(d.get("phase", "stage")) for d, _ in docs}))
    ago = _span(now() - max(float(d["updated"]) for d, _ in docs))
    running = [d for d, state in docs if state == "running"]
    if running:
        rate = sum(float(d.get("items_per_s") or 0.0) for d in running)
        left_items = sum(int(d["total"]) - int(d["done"]) for d in running)
        left = f", about {_span(left_items / rate)} left" if rate > 0 and left_items > 0 else ""
        return "running", (f"{phases} shards running: {len(running)} of {len(docs)} shards, {counted}{left} "
                           f"(updated {ago} ago)")
    return "stopped", (f"{phases} shards stopped: {len(docs)} shard{'s' * (len(docs) != 1)} at {counted}, the last {ago} ago; "
                       "running them again resumes them from the generation cache")


class StageProgress:
    """Items done of a total, written to ``path`` as JSON at most every ``every_s`` seconds.

    A context manager: leaving the block normally removes the file (the stage record says the
    rest); leaving it by an exception (a crash, Ctrl-C) writes a last snapshot marked ``stopped``
    with the exception's class, and keeps it.

    The file holds one process's snapshot. A process that finds another live process's
    ``running`` snapshot there (a second ``ltrr label`` of the workdir, ``--cache-only`` beside a
    long run) leaves it alone and writes none of its own, so ``ltrr status`` keeps following the
    first; and a process removes or marks only a snapshot that is still its own.

    Parameters
    ----------
    path : path
        The snapshot (`progress_path` of the stage record).
    fingerprint : str
        The stage's input fingerprint: a snapshot of other inputs is ignored by `describe_progress`.
    phase : str
        What is being counted (``label``, ``replicate``).
    total : int
        Items in the phase.
    every_s : float
        The least time between two writes (the last snapshot is always written).
    clock : callable
        Seconds since the epoch (``time.time``; a test gives its own).
    """

    def __init__(self, path: str | Path, *, fingerprint: str, phase: str, total: int, every_s: float = 5.0,
                 clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.fingerprint, self.phase, self.total = str(fingerprint), str(phase), int(total)
        self.every_s, self.clock = float(every_s), clock
        self.done = 0
        self.started = clock()
        self._written = float("-inf")
        self._seen: deque[tuple[float, int]] = deque()
        self._quiet = False  # another live process's snapshot is in the file: write none

    def __enter__(self) -> StageProgress:
        other = read_progress(self.path)
        self._quiet = bool(other and other.get("state") == "running" and not self._mine(other)
                           and _alive(other) is True)  # on this host and alive; another host: overwritten, as before
        self._write("running")
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if self._quiet or not self._mine(read_progress(self.path)):
            return  # another process's snapshot (or none): not this one's to remove or mark
        if kind is None:
            self.path.unlink(missing_ok=True)
        else:
            self._write("stopped", reason=kind.__name__)

    @staticmethod
    def _mine(doc: dict | None) -> bool:
        return doc is not None and doc.get("pid") == os.getpid() and doc.get("host") == socket.gethostname()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more items done; write a snapshot if ``every_s`` has passed since the last."""
        self.done += int(n)
        if self.clock() - self._written >= self.every_s:
            self._write("running")

    def _write(self, state: str, **extra: Any) -> None:
        if self._quiet:
            return
        now = self.clock()
        self._seen.append((now, self.done))
        while len(self._seen) > 2 and now - self._seen[1][0] >= _WINDOW_S:
            self._seen.popleft()
        (t0, d0), (t1, d1) = self._seen[0], self._seen[-1]
        rate = (d1 - d0) / (t1 - t0) if t1 > t0 else None
        write_json_atomic(self.path, {
            "fingerprint": self.fingerprint, "phase": self.phase, "state": state, "done": self.done,
            "total": self.total, "items_per_s": rate, "started": self.started, "updated": now,
            "pid": os.getpid(), "host": socket.gethostname(), **extra}, indent=1)
        self._written = now


def read_progress(path: str | Path) -> dict | None:
    """The snapshot at ``path``, or None when there is none or it cannot be read (a stage writes
    it whole, by rename, so an unreadable one is not ltrr's)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and {"done", "total", "state", "updated"} <= set(doc) else None


def _alive(doc: dict) -> bool | None:
    """Whether the snapshot's process still runs: None when it ran on another host."""
    if doc.get("host") != socket.gethostname():
        return None
    try:
        os.kill(int(doc.get("pid", -1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # PermissionError: it exists under another user
    return True


def _counted(done: int, total: int) -> str:
    """``"250 of 1,000 items (25%)"``, or ``"250 items"`` when there is no total."""
    return f"{done:,} of {total:,} items ({100 * done / total:.0f}%)" if total else f"{done:,} items"


def _span(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def describe_progress(doc: dict | None, fingerprint: str | None = None, *,
                      now: Callable[[], float] = time.time) -> tuple[str, str] | None:
    """``(state, line)`` for ``ltrr status`` from a snapshot (`read_progress`), or None when there
    is none or it belongs to other inputs than ``fingerprint`` (when given).

    ``state`` is ``running`` (its process is alive, or it ran on another host and said it was
    running) or ``stopped`` (it said so, or its process on this host is gone: killed).

    Examples
    --------
    >>> doc = {"fingerprint": "fp", "phase": "label", "state": "stopped", "done": 250, "total": 1000,
    ...        "updated": 0.0, "host": "elsewhere", "reason": "KeyboardInterrupt"}
    >>> describe_progress(doc, "fp", now=lambda: 7200.0)[1]
    'label stopped at 250 of 1,000 items (25%) 2.0 h ago (KeyboardInterrupt); running it again resumes it from the generation cache'
    >>> describe_progress(doc, "other") is None
    True
    """
    if doc is None or (fingerprint is not None and doc.get("fingerprint") != fingerprint):
        return None
    done, total = int(doc["done"]), int(doc["total"])
    counted = _counted(done, total)
    ago = _span(now() - float(doc["updated"]))
    alive = _alive(doc)
    if doc["state"] == "running" and alive is not False:
        rate = doc.get("items_per_s")
        left = f", about {_span((total - done) / rate)} left" if rate and total > done else ""
        where = f"pid {doc.get('pid')}" if alive else f"on {doc.get('host')}"
        return "running", f"{doc.get('phase', 'stage')} running: {counted}{left} ({where}, updated {ago} ago)"
    why = f" ({doc['reason']})" if doc.get("reason") else " (its process is gone)" if alive is False else ""
    return "stopped", (f"{doc.get('phase', 'stage')} stopped at {counted} {ago} ago{why}; "
            "running it again resumes it from the generation cache")
