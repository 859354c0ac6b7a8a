"""Renamed flags: one name and one unit per concept, the old names still accepted.

``--part design|test`` (was ``--on``), ``--questions N`` (was ``--n``, ``--max-queries``),
``--cost-budget`` and ``--token-budget(s)`` (were ``--budget``, ``--budgets``,
``--context-budget``). An old name parses as before and prints one deprecation line on stderr.

A flag that sets a config key is made from that key's field (`add_field_flag`): its type, help
and unit come from the section that owns the key (`ltrr._sections`), so the flag and the config
say the same thing in the same unit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ltrr._sections import Section, settings_of

__all__ = ["add_renamed", "add_field_flag", "parse_shard", "FIELD_DEFAULT"]

# `add_field_flag(default=FIELD_DEFAULT)`: the flag's default is the field's own (a command that
# reads no config, as `ltrr data build`)
FIELD_DEFAULT = object()


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


def add_field_flag(parser: argparse.ArgumentParser, section: type[Section], key: str, flag: str, *,
                   old: Sequence[str] = (), default: Any = None, **overrides: Any) -> argparse.Action:
    """Add flag ``flag`` that sets config key ``key`` of ``section``, typed and documented by the field.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Where the flag goes.
    section : type of Section
        The section class that owns the key (`ltrr.agent.section.AgentSection`, ...).
    key : str
        The key (a field of ``section``).
    flag : str
        The flag's name (``--questions``).
    old : sequence of str
        Deprecated names of the flag (`add_renamed`).
    default : object, default None
        None: the config's value applies (the help says ``(default: [table] key)``);
        `FIELD_DEFAULT`: the field's default, for a command that reads no config; else the value.
    **overrides
        ``add_argument`` keyword arguments over those of the field (``help`` replaces the
        field's text, ``metavar``, ``choices``, ...).

    Returns
    -------
    argparse.Action
        The flag's action.

    Examples
    --------
    >>> import argparse
    >>> from ltrr.agent.section import AgentSection
    >>> p = argparse.ArgumentParser()
    >>> _ = add_field_flag(p, AgentSection, "max_obs_tokens", "--max-obs-tokens")
    >>> p.parse_args(["--max-obs-tokens", "64"]).max_obs_tokens
    64
    >>> "in tokens (default: [agent] max_obs_tokens)" in " ".join(p.format_help().split())
    True
    """
    fields = {f.name: f for f in settings_of(section)}
    if key not in fields:
        raise ValueError(f"{section.__name__} has no key {key!r}; its keys: {', '.join(fields)}")
    meta = fields[key].metadata
    if meta["type"] not in (int, float, str):
        raise ValueError(f"[{section.TABLE}] {key} is a {meta['type'].__name__}: give the flag its own type and "
                         "parsing instead")
    text = overrides.pop("help", meta["help"])
    unit = f", in {meta['unit']}" if meta["unit"] else ""
    if default is FIELD_DEFAULT:
        default = meta["default"]
    where = f"[{section.TABLE}] {key}"
    # an empty string reads as a blank: "none" says the flag is off by default
    shown = "none" if isinstance(default, str) and not default else default
    text += f"{unit} (default: {where})" if default is None else f"{unit} (default: {shown}, as {where})"
    kwargs = {"type": meta["type"], "default": default, "help": text, **overrides}
    return add_renamed(parser, flag, old, **kwargs)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``--shard I/N`` as ``(I, N)`` (``None`` when not given): one clear error for anything else.

    Raises
    ------
    ConfigError
        When ``text`` is not two integers ``I/N`` with ``0 <= I < N``.
    """
    from ltrr._errors import ConfigError

    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"--shard must look like I/N (e.g. 0/2), got {text!r}") from None
    if not 0 <= i < n:
        raise ConfigError(f"--shard must be I/N with 0 <= I < N, got {i}/{n}")
    return i, n
