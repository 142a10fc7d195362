"""mt/run/records.py: the one description of each run file, the check every reader makes with it, and
Progress, whose train.best_metric decides what improves."""

import dataclasses
import json
import math

import pytest
import torch

from mt.plumbing.metrics import BEST_METRICS, BY_KEY
from mt.plumbing.schema import build
from mt.run.progress import Checkpoint, Progress, current_progress
from mt.run.records import Card, Result, Training, metrics_row_problem, problem


def test_metrics_rows_are_told_apart_by_their_kind():
    assert metrics_row_problem({"step": 2, "skipped_update": "non-finite", "nonfinite_total": 1}) == ""
    assert metrics_row_problem({"step": 2, "val_bleu": 1.0}) == "elapsed_s is missing"
    assert metrics_row_problem({"step": -1, "val_bleu": 1.0, "elapsed_s": 2}) == (
        "step: -1 is out of range, must be >= 0"
    )
    assert metrics_row_problem({"step": 2}) == "an object with none of loss, val_bleu, skipped_update"
    assert metrics_row_problem([]) == "a JSON list with none of loss, val_bleu, skipped_update"


def test_the_training_record_has_a_best_val_field_for_each_metric_training_may_follow():
    """card.training_record writes best_val_<key> for each of BEST_METRICS; Training describes them."""
    described = {f.name for f in dataclasses.fields(Training) if f.name.startswith("best_val_")}
    assert described == {f"best_val_{key}" for key in BEST_METRICS}


@pytest.mark.parametrize(
    "metric,expected,best",
    [
        ("bleu", [True, True, False, False], (12.0, 40.0, 3.1)),
        ("chrf", [True, False, False, True], (11.5, 42.0, 2.95)),
        ("loss", [True, False, True, False], (11.0, 39.0, 2.9)),
    ],
)
def test_best_metric_decides_what_improves(metric, expected, best):
    progress = Progress()
    results = [
        (10.0, 41.0, 3.0),
        (12.0, 40.0, 3.1),
        (11.0, 39.0, 2.9),
        (11.5, 42.0, 2.95),
    ]  # BLEU, chrF, loss
    got = [
        progress.record({"val_bleu": b, "val_chrf": c, "val_loss": loss}, metric) for b, c, loss in results
    ]
    assert got == expected
    assert progress.best == dict(zip(("bleu", "chrf", "loss"), best))  # the best validation's
    assert progress.bad_validations == {"bleu": 2, "chrf": 0, "loss": 1}[metric]


def test_a_metric_with_lower_is_better_picks_the_lowest(monkeypatch):
    """best_metric follows each metric's direction (mt.plumbing.metrics), not "higher" for every score."""
    lower = dataclasses.replace(BY_KEY["chrf"], higher_is_better=False)
    monkeypatch.setitem(BY_KEY, "chrf", lower)
    progress = Progress()
    got = [progress.record({"val_bleu": 1.0, "val_chrf": c, "val_loss": 1.0}, "chrf") for c in (40, 42, 39)]
    assert got == [True, False, True] and progress.best["chrf"] == 39


def test_a_checkpoint_from_before_the_best_record_reads_as_now():
    """Checkpoints written before `Progress.best` held best_bleu, best_chrf and best_loss."""
    old = {**dataclasses.asdict(Progress(step=7, validated_step=5)), "best_bleu": 3.0, "best_chrf": 9.0}
    old = {k: v for k, v in old.items() if k != "best"} | {"best_loss": 4.5}
    assert current_progress(old)["best"] == {"bleu": 3.0, "chrf": 9.0, "loss": 4.5}
    assert build(Progress, current_progress(old)) == Progress(
        step=7, validated_step=5, best={"bleu": 3.0, "chrf": 9.0, "loss": 4.5}
    )
    never = {**old, "validated_step": -1, "best_bleu": -1.0, "best_chrf": -1.0, "best_loss": math.inf}
    assert current_progress(never)["best"] == {}


@pytest.mark.slow
def test_what_mt_writes_fits_its_records(tiny, tmp_path):
    """A trained and evaluated run: its card, every eval-*.json, metrics line and checkpoint fit."""
    from mt.cli import main
    from mt.config import load_config
    from mt.training.train import train

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
