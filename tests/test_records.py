"""mt/records.py: the one description of each run file, and the check every reader makes with it."""

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from mt.records import Card, Checkpoint, Result, metrics_row_problem, problem
from mt.schema import within


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
    ],
)
def test_problem_names_the_first_key_that_departs(record, expected):
    assert problem(Schema, record) == expected


def test_metrics_rows_are_told_apart_by_their_kind():
    assert metrics_row_problem({"step": 2, "skipped_update": "non-finite", "nonfinite_total": 1}) == ""
    assert metrics_row_problem({"step": 2, "val_bleu": 1.0}) == "elapsed_s is missing"
    assert metrics_row_problem({"step": -1, "val_bleu": 1.0, "elapsed_s": 2}) == (
        "step: -1 is out of range, must be >= 0"
    )
    assert metrics_row_problem({"step": 2}) == "an object with none of loss, val_bleu, skipped_update"
    assert metrics_row_problem([]) == "a JSON list with none of loss, val_bleu, skipped_update"


@pytest.mark.slow
def test_what_mt_writes_fits_its_records(tiny, tmp_path):
    """A trained and evaluated run: its card, every eval-*.json, metrics line and checkpoint fit."""
    from mt.cli import main
    from mt.config import load_config
    from mt.train import train

    run = tmp_path / "run"
    train(
        load_config(
            "configs/toy.yaml",
            tiny + ["train.max_steps=4", "train.keep_last=2", "train.average_last=2", "train.valid_every=2"],
        ),
        run,
    )
    assert main(["evaluate", "--run", str(run), "--device", "cpu", "--beam", "2"]) == 0
    card = json.loads((run / "card.json").read_text())
    assert problem(Card, card) == ""
    evals = sorted(run.glob("eval-*.json"))
    assert [p.name for p in evals] == ["eval-test-beam2.json"]
    result = json.loads(evals[0].read_text())
    assert problem(Result, result) == "" and card["results"]["test-beam2"] == result
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {metrics_row_problem(row) for row in rows} == {""} and len(rows) == 4
    names = sorted(p.name for p in run.glob("*.pt"))
    assert names == ["averaged.pt", "best.pt", "ckpt-0000002.pt", "ckpt-0000004.pt", "last.pt"]
    for name in names:
        assert problem(Checkpoint, torch.load(run / name, weights_only=True)) == "", name
