"""Typed config sections: the base of the frozen spec each subpackage keeps of its config table.

A config table (``[agent]``, ``[policy]``, ...) is described once, by a frozen dataclass whose
fields are the table's keys. Each field says its type, its default (or that it is required), a
help text and, where the key has one, its unit; `ltrr.config` assembles the sections into a
`Config`, and the CLI takes its flags' types, help and units from the same fields
(`ltrr.cli._flags.add_field_flag`). One name and one unit per concept, declared where the
concept lives.

A section validates a mapping with `Section.from_mapping` (unknown keys, types, required keys,
and the ranges and fixed choices a field declares; the messages name the key, ``config key
[agent].k must be int, got str 'x'``, ``config key [agent].k must be an integer >= 1, got -3``) and gives back
exactly that mapping with `Section.to_dict`, so a config's fingerprint does not depend on the
classes holding it. It is also a read-only `Mapping` of its keys, so ``cfg.agent["k"]`` and
``cfg.agent.get("k")`` read the same value as ``cfg.agent.k``.

The dataclass is frozen: a section is not changed, a new one is built
(`dataclasses.replace`). Its list and dict values stay plain lists and dicts (compared with
``== []`` by users and carried into JSON), copied when the section is built, so no caller's
object is shared with it; change them by building a new section, never in place.

This module is on the ground floor: it imports only the standard library, `ltrr._errors` and
`ltrr._checks` (the range test and words it shares with every other check of a value), and so
does every ``ltrr.<package>.section`` built on it (a contract in setup.cfg checks it).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from ltrr._checks import in_range, range_words
from ltrr._errors import ConfigError

__all__ = ["REQUIRED", "Section", "section", "setting", "settings_of"]


class _Required:
    """The default of a required key (one instance, `REQUIRED`)."""

    _instance: ClassVar[_Required | None] = None

    def __new__(cls) -> _Required:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __deepcopy__(self, memo: dict) -> _Required:
        return self


REQUIRED = _Required()

_TYPES = (str, int, float, bool, list, dict)


def setting(type_: type, default: Any = REQUIRED, *, help: str, unit: str | None = None,
            low: float | None = None, high: float | None = None, low_open: bool = False,
            high_open: bool = False, choices: tuple[str, ...] | None = None,
            items: type | tuple[type, ...] | None = None, min_items: int = 0) -> Any:
    """A field of a section: one config key.

    Parameters
    ----------
    type_ : type
        The key's type: ``str``, ``int``, ``float``, ``bool``, ``list`` or ``dict``, checked
        with `isinstance` (so a float key wants ``0.5`` or ``1.0``, not ``1``), except that a
        bool is never taken for an int.
    default : object, default REQUIRED
        The value when the key is absent (copied for each section built), or `REQUIRED`.
        ``None`` is allowed as a "decided later" default (``[policy] enabled``).
    help : str
        One line saying what the key does, for the docs and the CLI's ``--help``.
    unit : str, optional
        The key's unit where it has one ("tokens", "cost units", "share of the top arm cost").
    low, high : number, optional
        The smallest and largest value allowed (of a number, or of each item of a list), both
        included unless ``low_open`` or ``high_open`` says otherwise. ``NaN`` is never in range.
    low_open, high_open : bool, default False
        Leave ``low`` (``high``) itself out of the range: ``low=0, low_open=True`` is ``> 0``.
    choices : tuple of str, optional
        The fixed words a string (or each item of a list) may be. Names found in a registry of a
        package above the config are not choices: the run's pre-check
        (`ltrr.pipeline.labels.check_config_names`) looks them up.
    items : type or tuple of types, optional
        The type of each item of a list setting (``int``, ``str``, ``(int, float)``); a bool is
        never taken for a number.
    min_items : int, default 0
        The fewest items a list setting may hold.

    Returns
    -------
    dataclasses.Field
        The field, with ``type``, ``default``, ``help``, ``unit`` and the constraints (``low``,
        ``high``, ``low_open``, ``high_open``, ``choices``, ``items``, ``min_items``) in its
        metadata.

    Examples
    --------
    >>> @section("demo")
    ... class DemoSection(Section):
    ...     budget: int = setting(int, 512, help="tokens per answer", unit="tokens", low=1)
    >>> DemoSection.from_mapping({"budget": 64}).budget
    64
    >>> DemoSection.from_mapping({"budget": 0})
    Traceback (most recent call last):
    ...
    ltrr._errors.ConfigError: config key [demo].budget must be an integer >= 1, got 0
    """
    if type_ not in _TYPES:
        raise TypeError(f"setting type must be one of {', '.join(t.__name__ for t in _TYPES)}, got {type_!r}")
    item_types = (items if isinstance(items, tuple) else (items,)) if items is not None else None
    if type_ is not list and (items is not None or min_items):
        raise TypeError(f"items and min_items are for a list setting, not a {type_.__name__} one")
    # the type the bounds and choices apply to: the value's own, or a list's items'
    of = item_types if type_ is list else (type_,)
    if (low is not None or high is not None) and (of is None or not all(t in (int, float) for t in of)):
        raise TypeError("low and high bound a number (or a list of numbers, items=int or float)")
    if choices is not None and (of != (str,) or not choices or not all(isinstance(c, str) for c in choices)):
        raise TypeError("choices are a non-empty tuple of the words a str (or a list of str, items=str) may be")
    meta = {"type": type_, "default": default, "help": help, "unit": unit, "low": low, "high": high,
            "low_open": low_open, "high_open": high_open,
            "choices": tuple(choices) if choices is not None else None, "items": item_types,
            "min_items": min_items}
    if default is REQUIRED:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _bounds(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {"low": meta["low"], "high": meta["high"], "low_open": meta["low_open"], "high_open": meta["high_open"]}


def _is(val: Any, types: tuple[type, ...]) -> bool:
    return isinstance(val, types) and (bool in types or not isinstance(val, bool))


def _check_value(key: str, val: Any, meta: Mapping[str, Any]) -> None:
    """The range, choices and item checks of one value (its type is checked already); the
    message names ``key`` (``[agent].k``, ``[policy].trainers[1]``), what is allowed and the
    value got."""
    if meta["type"] is list:
        if len(val) < meta["min_items"]:
            raise ConfigError(f"config key {key} must hold at least {meta['min_items']} "
                              f"item{'s' if meta['min_items'] > 1 else ''}, got {val!r}")
        for i, item in enumerate(val):
            where = f"{key}[{i}]"
            if meta["items"] is not None and not _is(item, meta["items"]):
                raise ConfigError(f"config key {where} must be {' or '.join(t.__name__ for t in meta['items'])}, "
                                  f"got {type(item).__name__} {item!r}")
            _check_scalar(where, item, meta)
        return
    _check_scalar(key, val, meta)


def _check_scalar(key: str, val: Any, meta: Mapping[str, Any]) -> None:
    if meta["choices"] is not None and val not in meta["choices"]:
        raise ConfigError(f"config key {key} must be one of {', '.join(meta['choices'])}, got {val!r}")
    if (meta["low"] is not None or meta["high"] is not None) and not in_range(val, **_bounds(meta)):
        kind = "an integer" if isinstance(val, int) and (meta["items"] or (meta["type"],)) == (int,) else "a number"
        raise ConfigError(f"config key {key} must be {kind} {range_words(**_bounds(meta))}, got {val!r}")


def section(table: str, *, open: bool = False):
    """Class decorator: a frozen, keyword-only dataclass section of the ``[table]`` config table.

    ``open=True`` marks a table whose unknown keys are kept (in the section's ``extra`` field,
    which the class declares) for someone else to validate, as ``[generation]``'s go to the
    generator backend.
    """

    def wrap(cls: type[Section]) -> type[Section]:
        cls.TABLE = table
        cls.OPEN = open
        return dataclasses.dataclass(frozen=True, kw_only=True, eq=False)(cls)

    return wrap


def settings_of(cls: Any) -> tuple[dataclasses.Field, ...]:
    """The fields of a section (class or instance) that are config keys, in the table's order."""
    return _settings(cls if isinstance(cls, type) else type(cls))


@functools.cache
def _settings(cls: Any) -> tuple[dataclasses.Field, ...]:
    return tuple(f for f in dataclasses.fields(cls) if "type" in f.metadata)


class Section(Mapping):
    """Base of a config section: a frozen dataclass that is also a read-only mapping of its keys.

    Subclasses are declared with `section` and their keys with `setting`; see the module
    docstring.

    Examples
    --------
    >>> @section("toy")
    ... class ToySection(Section):
    ...     k: int = setting(int, 3, help="passages per search")
    >>> s = ToySection.from_mapping({"k": 5})
    >>> s.k, s["k"], dict(s), s.to_dict()
    (5, 5, {'k': 5}, {'k': 5})
    """

    TABLE: ClassVar[str] = ""
    OPEN: ClassVar[bool] = False

    @classmethod
    def from_mapping(cls, mapping: Any, where: str | None = None):
        """Validate a config table and build the section, with defaults for absent keys.

        Parameters
        ----------
        mapping : dict
            The table as read from the config file.
        where : str, optional
            The table's name in messages (default: the class's table).

        Returns
        -------
        Section
            The section; its `to_dict` is the table with every key filled in.

        Raises
        ------
        ConfigError
            For a table that is not a dict, an unknown key (outside an open table), a value of
            the wrong type, out of its range or not one of its choices (`setting`), or a
            missing required key; the message names the key.
        """
        name = cls.TABLE if where is None else where
        if not isinstance(mapping, dict):
            raise ConfigError(f"config key [{name}] must be a table, got {type(mapping).__name__}")
        specs = settings_of(cls)
        keys = [f.name for f in specs]
        unknown = sorted(set(mapping) - set(keys))
        extra: dict = {}
        if cls.OPEN:
            extra, unknown = {k: copy.deepcopy(mapping[k]) for k in unknown}, []
        if unknown:
            raise ConfigError(f"unknown config key [{name}].{unknown[0]}; allowed keys: {', '.join(sorted(keys))}")
        values: dict[str, Any] = {}
        for f in specs:
            type_, default = f.metadata["type"], f.metadata["default"]
            if f.name in mapping:
                val = mapping[f.name]
                if not isinstance(val, type_) or (isinstance(val, bool) and type_ is not bool):
                    raise ConfigError(f"config key [{name}].{f.name} must be {type_.__name__}, "
                                      f"got {type(val).__name__} {val!r}")
                _check_value(f"[{name}].{f.name}", val, f.metadata)
                values[f.name] = copy.deepcopy(val)
            elif default is REQUIRED:
                raise ConfigError(f"config key [{name}].{f.name} is required")
            else:
                values[f.name] = copy.deepcopy(default)
        if cls.OPEN:
            values["extra"] = extra
        return cls(**values)

    def to_dict(self) -> dict:
        """The table as a plain dict (a deep copy): every key in the table's order, then an open
        table's extra keys."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in settings_of(self)}
        out.update(copy.deepcopy(self._extra()))
        return out

    def _extra(self) -> dict:
        return getattr(self, "extra", {}) if self.OPEN else {}

    def __getitem__(self, key: str) -> Any:
        if any(f.name == key for f in settings_of(self)):
            return getattr(self, key)
        extra = self._extra()
        if key in extra:
            return extra[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from (f.name for f in settings_of(self))
        yield from self._extra()

    def __len__(self) -> int:
        return len(settings_of(self)) + len(self._extra())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.items())})"
