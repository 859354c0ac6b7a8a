"""Renamed flags: one name and one unit per concept, the old names still accepted.

``--part design|test`` (was ``--on``), ``--questions N`` (was ``--n``, ``--max-queries``),
``--cost-budget`` and ``--token-budget(s)`` (were ``--budget``, ``--budgets``,
``--context-budget``). An old name parses as before and prints one deprecation line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["add_renamed"]


class _OldName(argparse.Action):
    """Stores like the new flag and says, on stderr, that this name is deprecated."""

    def __init__(self, option_strings, dest, *, new: str, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"ltrr: warning: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_renamed(parser: argparse.ArgumentParser, new: str, old: Sequence[str], **kwargs: Any) -> argparse.Action:
    """Add flag ``new`` (``add_argument`` keyword arguments) and its ``old`` names.

    The old names are hidden from the help and store into the same destination; a required
    flag is satisfied by either name.
    """
    required = kwargs.pop("required", False)
    target = parser.add_mutually_exclusive_group(required=True) if required else parser
    action = target.add_argument(new, **kwargs)
    same = {k: kwargs[k] for k in ("type", "choices", "metavar") if k in kwargs}
    for name in old:
        target.add_argument(name, dest=action.dest, action=_OldName, new=new, help=argparse.SUPPRESS,
                            default=argparse.SUPPRESS, **same)
    return action
