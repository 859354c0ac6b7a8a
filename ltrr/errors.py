"""The errors ltrr raises on purpose, for library users to catch.

Every error a user can cause is one of these; each also subclasses the standard exception it
is a kind of (`ConfigError` and `DataError` are `ValueError`\\ s, `NotBuiltError` is a
`FileNotFoundError`, ...), so code that already catches those keeps working. The CLI turns them
into one line on stderr and a non-zero exit code.

Examples
--------
>>> from ltrr.errors import ConfigError, LtrrError
>>> issubclass(ConfigError, LtrrError) and issubclass(ConfigError, ValueError)
True
"""

from ltrr._errors import (
    ConfigError,
    DataError,
    GenerationError,
    LtrrError,
    MissingDependencyError,
    NotBuiltError,
)

__all__ = ["LtrrError", "ConfigError", "DataError", "MissingDependencyError", "NotBuiltError", "GenerationError"]
