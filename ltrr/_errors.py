"""Project exceptions.

Every error a user can cause is one of these. The CLI turns them into one line on stderr and a
non-zero exit code; library users catch them as the standard exception they subclass.
"""

from __future__ import annotations

__all__ = [
    "LtrrError",
    "ConfigError",
    "DataError",
    "MissingDependencyError",
    "NotBuiltError",
    "GenerationError",
]


class LtrrError(Exception):
    """Base class of every error ltrr raises on purpose."""


class ConfigError(LtrrError, ValueError):
    """A configuration value, key or name is invalid."""


class DataError(LtrrError, ValueError):
    """Input data is malformed: a bad line, a missing field, a duplicate id, an empty query."""


class MissingDependencyError(LtrrError, ImportError):
    """An optional backend is not installed; the message says what to install."""


class NotBuiltError(LtrrError, FileNotFoundError):
    """A stage output (an index, a dataset, a labels table, a model) does not exist yet."""


class GenerationError(LtrrError, RuntimeError):
    """A generator call failed for good, after its bounded retries."""
