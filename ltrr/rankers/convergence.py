"""Solver convergence warnings as report lines, not as noise in the middle of the tables."""

from __future__ import annotations

import contextlib

__all__ = ["recorded_convergence_warnings", "convergence_notes"]


@contextlib.contextmanager
def recorded_convergence_warnings():
    """Catch scikit-learn's ConvergenceWarning during a fit and keep it for the report.

    The warning would otherwise print in the middle of the eval tables. Yields a list that
    receives one entry per distinct message; other warnings pass through unchanged.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    caught: list[str] = []
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always", ConvergenceWarning)
        yield caught
    for w in ws:
        if issubclass(w.category, ConvergenceWarning):
            if str(w.message) not in caught:
                caught.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def convergence_notes(messages: list[str], router) -> list[str]:
    """``liblinear did not converge in 1000 iterations`` for each caught message."""
    max_iter = getattr(getattr(router, "ranker_", None), "max_iter", None)
    notes = []
    for m in messages:
        solver = "liblinear" if "iblinear" in m else "the solver"
        notes.append(f"{solver} did not converge" + (f" in {max_iter} iterations" if max_iter else f" ({m.strip()})"))
    return notes
