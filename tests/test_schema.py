"""mt/plumbing/schema.py: the one validator of config.yaml and every run record, through records.problem: each
departure from a record's dataclasses is named by its first key."""

from dataclasses import dataclass
from typing import ClassVar

import pytest

from mt.plumbing.schema import within
from mt.run.records import problem


@dataclass(frozen=True, kw_only=True)
class Inner:
    s: str


@dataclass(frozen=True, kw_only=True)
class Each:
    open_keys: ClassVar[bool] = True
    ok: bool


@dataclass(frozen=True, kw_only=True)
class Schema:
    open_keys: ClassVar[bool] = True
    n: int = within(lo=1)
    x: float | None = None
    inner: Inner = None
    each: dict[str, Each] = None
    names: list[str] = None


@pytest.mark.parametrize(
    "record, expected",
    [
        ({"n": 1}, ""),
        ({"n": 1, "x": None, "inner": {"s": "a"}, "each": {"a": {"ok": True}}, "newer": [1]}, ""),
        ({}, "n is missing"),
        ({"n": True}, "n: expected int, got bool True"),  # JSON's true is not 1
        ({"n": 1.0}, "n: expected int, got float 1.0"),
        ({"n": 0}, "n: 0 is out of range, must be >= 1"),
        ({"n": None}, "n: expected int, got null"),
        ({"n": 1, "x": "one"}, "x: expected float, got str 'one'"),
        ({"n": 1, "x": float("nan")}, ""),
        ({"n": 1, "inner": []}, "inner: expected a mapping, got list"),
        ({"n": 1, "inner": {}}, "inner.s is missing"),
        ({"n": 1, "inner": {"s": "a", "t": 1}}, "unknown key 'inner.t'; valid keys: s"),
        ({"n": 1, "each": {"a": {"ok": True}, "b": {"ok": 1}}}, "each.b.ok: expected bool, got int 1"),
        ({"n": 1, "each": {"a": 3}}, "each.a: expected a mapping, got int"),
        ([1], "config: expected a mapping, got list"),
        ({"n": 1, "names": ["a", "b"]}, ""),
        ({"n": 1, "names": "a"}, "names: expected list, got str 'a'"),
        ({"n": 1, "names": ["a", 3]}, "names[1]: expected str, got int 3"),
    ],
)
def test_problem_names_the_first_key_that_departs(record, expected):
    assert problem(Schema, record) == expected
