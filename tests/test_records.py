"""mt/records.py: the one description of each run file, and the check every reader makes with it."""

import json

import pytest
import torch

from mt.records import CARD, CHECKPOINT, RESULT, Field, Record, metrics_row_problem, optional, problem

SCHEMA = Record(
    {
        "n": Field("integer", minimum=1),
        "x": optional("number", null=True),
        "inner": optional("object", record=Record({"s": Field("string")}, closed=True)),
        "each": optional("object", each=Record({"ok": Field("boolean")})),
    }
)


@pytest.mark.parametrize(
    "record, expected",
    [
        ({"n": 1}, ""),
        ({"n": 1, "x": None, "inner": {"s": "a"}, "each": {"a": {"ok": True}}, "newer": [1]}, ""),
        ({}, "n is missing"),
        ({"n": True}, "n is true or false, not an integer"),  # JSON's true is not 1
        ({"n": 1.0}, "n is a number, not an integer"),
        ({"n": 0}, "n is 0, below 1"),
        ({"n": None}, "n is null"),
        ({"n": 1, "x": "1"}, "x is a string, not a number"),
        ({"n": 1, "x": float("nan")}, ""),
        ({"n": 1, "inner": []}, "inner is a list, not an object"),
        ({"n": 1, "inner": {}}, "inner.s is missing"),
        ({"n": 1, "inner": {"s": "a", "t": 1}}, "inner.t is not a key mt writes"),
        ({"n": 1, "each": {"a": {"ok": True}, "b": {"ok": 1}}}, "each.b.ok is an integer, not true or false"),
        ({"n": 1, "each": {"a": 3}}, "each.a is an integer, not an object"),
        ([1], "the file is a list, not an object"),
    ],
)
def test_problem_names_the_first_key_that_departs(record, expected):
    assert problem(record, SCHEMA) == expected


def test_metrics_rows_are_told_apart_by_their_kind():
    assert metrics_row_problem({"step": 2, "skipped_update": "non-finite", "nonfinite_total": 1}) == ""
    assert metrics_row_problem({"step": 2, "val_bleu": 1.0}) == "elapsed_s is missing"
    assert metrics_row_problem({"step": -1, "val_bleu": 1.0, "elapsed_s": 2}) == "step is -1, below 0"
    assert metrics_row_problem({"step": 2}) == "an object with none of loss, val_bleu, skipped_update"
    assert metrics_row_problem([]) == "a list with none of loss, val_bleu, skipped_update"


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
    assert problem(card, CARD) == ""
    evals = sorted(run.glob("eval-*.json"))
    assert [p.name for p in evals] == ["eval-test-beam2.json"]
    result = json.loads(evals[0].read_text())
    assert problem(result, RESULT) == "" and card["results"]["test-beam2"] == result
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {metrics_row_problem(row) for row in rows} == {""} and len(rows) == 4
    names = sorted(p.name for p in run.glob("*.pt"))
    assert names == ["averaged.pt", "best.pt", "ckpt-0000002.pt", "ckpt-0000004.pt", "last.pt"]
    for name in names:
        assert problem(torch.load(run / name, weights_only=True), CHECKPOINT) == "", name
