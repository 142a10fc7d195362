"""What the Python API takes, checked before anything runs (mt.translator): lines as a list of str, a
device by name, one item per line; each refused in one error that names the argument and what was
given.
"""

from __future__ import annotations

import reprlib
from typing import Any

import torch

from mt.devices import resolve_device
from mt.plumbing.errors import ConfigError


def as_lines(name: str, lines: Any, kind: type | tuple[type, ...] = str) -> list:
    """`lines` (a list, tuple or any iterable of `kind`) as a list, else a TypeError naming the
    argument `name`, or the item by its index, and what was given. A str is refused, not read as its
    characters: every method gives a list, one item per line, and one line goes in as a list of one
    (docs/api.md, "Arguments", says why a str is not taken as one line)."""
    expected = "str" if kind is str else "str or Path"
    if isinstance(lines, (str, bytes)):
        raise TypeError(
            f"{name}: expected a list of {expected}, got {described(lines)}; pass a list: "
            f"[{reprlib.repr(lines)}]"
        )
    try:
        lines = list(lines)
    except TypeError:
        raise TypeError(f"{name}: expected a list of {expected}, got {described(lines)}") from None
    for i, line in enumerate(lines):
        if not isinstance(line, kind):
            raise TypeError(f"{name}[{i}]: expected {expected}, got {described(line)}")
    return lines


def described(value: Any) -> str:
    """How a TypeError shows a value given: "int 3", "str 'Der Hund.'", "None"."""
    return "None" if value is None else f"{type(value).__name__} {reprlib.repr(value)}"


def device_of(device: Any) -> torch.device:
    """from_run's `device` ("auto", "cpu", "cuda", "cuda:1" or a torch.device) as a torch.device, or one
    clear error (torch's names every device type it knows)."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"device: expected str or torch.device, got {described(device)}")
    try:
        return resolve_device(device)
    except RuntimeError:
        raise ConfigError(
            f"device={device}: not a device; pass auto, cpu or cuda (cuda:N)", "device"
        ) from None


def one_per_line(name: str, items: list[str] | None, lines: list[str], none: str = "") -> None:
    """`items` (None: not given) has one entry per line, else a ConfigError naming `name`."""
    if items is not None and len(items) != len(lines):
        raise ConfigError(f"{name}: {len(items)} given for {len(lines)} lines; give one per line{none}", name)
