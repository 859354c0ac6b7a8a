"""Stage lines and progress bars: bars on a terminal, one start and one end line in logs.

A long stage draws a progress bar only when someone watches it: stderr is a terminal, or the
code runs in a Jupyter kernel. Redirected to a file (``make demo > log``), a stage prints one
line when it starts and one when it ends, with counts and seconds, and the progress bars of the
libraries underneath (sentence-transformers, bm25s, transformers, huggingface_hub) are turned
off too, so a log holds no carriage-return redraws.

``ltrr --quiet`` shows warnings and results only; ``ltrr --verbose`` adds debug lines (why a
stage ran or was skipped) and the transformers library's info messages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

__all__ = ["logger", "progress_enabled", "configure", "bar", "quiet_worker_restarts"]

logger = logging.getLogger("ltrr")


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at emit time (pytest's capture swaps it)."""

    def __init__(self):
        super().__init__(sys.stdout)

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; we always follow sys.stdout
        pass


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel: IPython's shell is the kernel's ZMQ shell (an
    ``ipykernel`` merely imported, as nbclient's users do, is not a notebook)."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    try:
        shell = get() if get is not None else None
    except Exception:  # an IPython without a shell
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _interactive() -> bool:
    if _in_notebook():
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress_enabled() -> bool:
    """True when progress bars should draw: a watched terminal or notebook and not ``--quiet``."""
    # an unconfigured logger (the Python API, a notebook) counts as the default level, INFO
    if (logger.level or logging.INFO) > logging.INFO:
        return False
    return _interactive()


def configure(level: int = logging.INFO) -> None:
    """Set up the command line's output: ltrr's lines on stdout at ``level``.

    Off a terminal (or with ``--quiet``), the progress bars of the libraries underneath are
    turned off through their environment switches, before those libraries are imported.
    """
    logger.setLevel(level)
    if not any(isinstance(h, _StdoutHandler) for h in logger.handlers):
        h = _StdoutHandler()
        h.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(h)
    logger.propagate = False
    if not progress_enabled():
        # tqdm reads TQDM_<PARAM> as the default of each parameter: bars that libraries create
        # without an explicit ``disable`` (transformers' GGUF loader) stay off; ours pass
        # ``disable`` explicitly.
        os.environ["TQDM_DISABLE"] = "1"
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if level > logging.DEBUG:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def bar(iterable=None, **kwargs):
    """A tqdm bar that draws only when `progress_enabled` (``disable`` may narrow it further)."""
    from tqdm.auto import tqdm

    kwargs["disable"] = kwargs.get("disable", False) or not progress_enabled()
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, **kwargs)


@contextlib.contextmanager
def quiet_worker_restarts() -> Iterator[None]:
    """Silence joblib's loky warning that a worker stopped while jobs were queued, inside the block.

    loky restarts a worker whose memory grew by 300 MB since its first task (its leak check); a
    worker that imports torch for its second fit (a neural ranker after a GBDT) grows that much
    once, is replaced, and the queued fits run on the new one with the same results (the eval's
    tables are byte-identical with 1 and 2 processes). The warning would be the only line of a
    clean run that looks like a fault, so it is dropped here; every other warning shows.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="A worker stopped while some jobs were given to the executor",
                                category=UserWarning)
        yield
