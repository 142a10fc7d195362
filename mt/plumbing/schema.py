"""Typed dataclasses checked against parsed YAML or JSON: the one validator for the config (mt.config)
and for every record a run directory holds (mt.run.records).

A field's annotation is the type of its value: int, float (an int is taken), str, bool, dict, list, a
class such as torch.Tensor, a dataclass (a nested mapping, checked the same way), `dict[str, X]` (every
value an X), `list[X]` (every item an X) or `X | None` (null allowed). A field without a default must
be given; a field with one may be left out, and when given must be of its type (a default of None does
not allow null). Its metadata may add `choices` or a range: see `choice` and `within`.

Two class attributes change how a mapping is read: `open_keys = True` lets keys the dataclass does not
list through (a file a newer mt wrote may have more; such a record holds its numbers as numbers, where a
YAML config may quote one: '5e-4'), and `all_required = True` makes every field required (counters mt
always writes, whose defaults only start a new run).

`build` returns the instance; a departure raises `Mismatch`, whose message names the key path
("train.lr: 0.0 is out of range, must be > 0.0"), and which each caller turns into the UserError of
its file (ConfigError, RunDirError).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import reprlib
import types
import typing
from typing import Any


class Mismatch(ValueError):
    """A mapping departs from its dataclass; the message names the key path."""


def choice(default: str, *choices: str, **more) -> Any:
    """A field whose value must be one of `choices`; `more`: other metadata (a flag's help)."""
    return dataclasses.field(default=default, metadata={"choices": choices, **more})


def within(default: Any = dataclasses.MISSING, lo: float | None = None, hi: float | None = None, **more):
    """A field whose value must lie in [lo, hi] (`lo_open=True`: above lo); no default = required."""
    return dataclasses.field(default=default, metadata={"lo": lo, "hi": hi, **more})


@functools.cache
def fields_of(cls: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)  # annotations are strings (`from __future__ import annotations`)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}  # name -> (field, its type)


def build(cls: type, raw: Any, path: str = "", aliases: dict[str, str] | None = None) -> Any:
    """Dataclass `cls` from the mapping `raw`, every value checked; `aliases` ({"learning_rate": "lr"})
    name our key for what users of other toolkits call it, in the message for an unknown key."""
    if not isinstance(raw, dict):
        raise Mismatch(f"{path or 'config'}: expected a mapping, got {_describe(raw, plain=True)}")
    fields = fields_of(cls)
    unknown = [key for key in raw if key not in fields]
    if unknown and not getattr(cls, "open_keys", False):
        key = unknown[0]
        aliases = aliases or {}
        close = difflib.get_close_matches(str(key), fields, n=1) or [
            aliases[a] for a in difflib.get_close_matches(str(key), aliases, n=1) if aliases[a] in fields
        ]
        hint = f"; did you mean '{close[0]}'? " if close else "; "
        raise Mismatch(f"unknown key '{_join(path, key)}'{hint}valid keys: {', '.join(fields)}")
    values = {}
    for name, (f, kind) in fields.items():
        required = getattr(cls, "all_required", False) or (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        if name in raw:  # a record mt wrote (open_keys) holds numbers as numbers; YAML may quote them
            text_numbers = not getattr(cls, "open_keys", False)
            values[name] = check_value(_join(path, name), f, kind, raw[name], aliases, text_numbers)
        elif required:
            raise Mismatch(f"{_join(path, name)} is missing")
    return cls(**values)


def check_value(
    path: str, f: dataclasses.Field, kind: Any, value: Any, aliases=None, text_numbers: bool = True
) -> Any:
    """Field `f` (of type `kind`) given `value`: checked (type, then choices and range), and returned
    built (a nested dataclass) or coerced (int -> float; with `text_numbers` '5e-4' -> float: YAML 1.1
    reads 5e-4 as a string)."""
    value = _typed(path, kind, value, aliases, text_numbers)
    meta = f.metadata
    if "choices" in meta and value not in meta["choices"]:
        raise Mismatch(f"{path}: {value!r} is not one of {', '.join(meta['choices'])}")
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and (value != value or value < lo or (meta.get("lo_open") and value == lo)):
        bound = f"> {lo}" if meta.get("lo_open") else f">= {lo}"
        raise Mismatch(f"{path}: {value!r} is out of range, must be {bound}")
    if hi is not None and not value <= hi:
        raise Mismatch(f"{path}: {value!r} is out of range, must be <= {hi}")
    return value


def _typed(path: str, kind: Any, value: Any, aliases, text_numbers: bool = True) -> Any:
    """`value` as a `kind`, or a Mismatch naming what was expected and what was found."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(kind):
            return None
        (kind,) = [k for k in typing.get_args(kind) if k is not type(None)]
    if dataclasses.is_dataclass(kind):
        return build(kind, value, path, aliases)
    if typing.get_origin(kind) is dict:  # dict[str, X]: every value an X
        each = typing.get_args(kind)[1]
        items = _typed(path, dict, value, aliases).items()
        return {key: _typed(_join(path, key), each, item, aliases, text_numbers) for key, item in items}
    if typing.get_origin(kind) is list:  # list[X]: every item an X
        each = typing.get_args(kind)[0]
        items = _typed(path, list, value, aliases)
        return [_typed(f"{path}[{i}]", each, item, aliases, text_numbers) for i, item in enumerate(items)]
    if kind is float and isinstance(value, str) and text_numbers:
        try:
            value = float(value)
        except ValueError:
            pass
    if kind is float and type(value) is int:
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = "a mapping" if kind is dict else kind.__name__
        raise Mismatch(f"{path}: expected {expected}, got {_describe(value)}")
    return value


def _describe(value: Any, plain: bool = False) -> str:
    """How a message shows a value found: "str 'three'", "null", "list" (`plain`: "str")."""
    if value is None:
        return "null"
    if plain or isinstance(value, (dict, list, tuple)):
        return type(value).__name__
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)
