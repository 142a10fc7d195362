"""How another engine follows each field of one of mt's config dataclasses (ModelConfig, DecodeConfig):
one table a field, its entry one of these kinds, shared by the CTranslate2 engine (mt.ct2) and the
Hugging Face export (mt.hf). A field the table leaves out, or marks Unsupported, is never silently
ignored: the engine refuses it in one line, or the export's model card says it is left out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Carried:
    """The engine's argument `argument` of the call `at` (CTranslate2: "spec", "load", "search"; the
    Hugging Face export: "generate", its generation_config) carries the field, valued `value(config)`
    (None: the argument is left out)."""

    argument: str
    value: Callable[[Any], Any]
    at: str = "search"


@dataclass(frozen=True)
class Approximated(Carried):
    """Carried as the nearest the engine has, which differs from mt where `caveat` says: the export
    writes the caveat where a user reads it (the model card)."""

    caveat: str = ""


@dataclass(frozen=True)
class ByMt:
    """mt itself does what the field asks, around the engine's call (`how` says where), or the field
    does not change what the engine computes."""

    how: str


@dataclass(frozen=True)
class Unsupported:
    """The engine cannot do what the field asks: set, it is refused (or left out, and said) with `why`."""

    why: str


def carried(config, table: dict, at: str) -> dict[str, Any]:
    """The arguments of the engine's call `at` that `table`'s Carried (and Approximated) entries make of
    `config`, each that is not None."""
    found = {e.argument: e.value(config) for e in table.values() if isinstance(e, Carried) and e.at == at}
    return {argument: value for argument, value in found.items() if value is not None}


def first_unmapped(config, table: dict) -> tuple[str, Any, Any] | None:
    """(name, value, table entry or None) of the first field of dataclass `config` that differs from
    its default and that `table` refuses or does not name; None where there is none."""
    for name, value, entry in set_fields(config, table):
        if not isinstance(entry, (Carried, ByMt)):
            return name, value, entry
    return None


def set_fields(config, table: dict) -> list[tuple[str, Any, Any]]:
    """(name, value, table entry or None) of each field of dataclass `config` that differs from its
    default."""
    default = type(config)()
    return [
        (f.name, getattr(config, f.name), table.get(f.name))
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(default, f.name)
    ]
