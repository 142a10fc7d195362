"""mt/evaluate.py: scoring a run's checkpoint (the averaged one too) and writing its card, rebuilt from
metrics.jsonl where it is missing."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from mt.cli import main
from mt.evaluate import evaluate_run
from mt.run.folder import load_run
from mt.translate import translate_lines
from mt.translator import Translator


def test_a_runs_averaged_model_loads_translates_and_evaluates(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    sets = [
        a
        for o in tiny + ["train.max_steps=12", "train.keep_last=3", "train.average_last=2"]
        for a in ("--set", o)
    ]
    assert main(["train", "configs/toy.yaml", "--run-dir", str(run), *sets]) == 0
    assert [p.name for p in sorted(run.glob("ckpt-*.pt"))] == [
        "ckpt-0000004.pt",
        "ckpt-0000008.pt",
        "ckpt-0000012.pt",
    ]
    averaged = torch.load(run / "averaged.pt", weights_only=True)
    assert [Path(p).name for p in averaged["averaged"]] == ["ckpt-0000008.pt", "ckpt-0000012.pt"]
    cfg, tokenizer, model = load_run(run, "averaged")
    assert len(translate_lines(model, tokenizer, ["Der Hund läuft.", "", "Die Frau liest."], cfg.decode)) == 3
    capsys.readouterr()
    assert main(["evaluate", "--run", str(run), "--checkpoint", "averaged"]) == 0
    assert "BLEU lc " in capsys.readouterr().out
    assert json.loads((run / "eval-test-averaged.json").read_text())["checkpoint"].endswith("averaged.pt")
    assert json.loads((run / "card.json").read_text())["training"]["best_metric"] == "bleu"
    assert main(["average", "--run", str(run), "--last", "3"]) == 0
    assert len(torch.load(run / "averaged.pt", weights_only=True)["averaged"]) == 3


@pytest.mark.slow
def test_evaluate_rebuilds_a_missing_card_from_last_pt(two_runs, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(two_runs[0], run)
    (run / "card.json").unlink()  # deleted, or a run trained before cards existed
    evaluate_run(Translator.from_run(run, device="cpu"), "test")
    card = json.loads((run / "card.json").read_text())
    rebuilt, original = card["training"], json.loads((two_runs[0] / "card.json").read_text())["training"]
    assert (rebuilt.pop("rebuilt_from"), rebuilt.pop("stopped")) == (
        "last.pt",
        "unknown: card.json rebuilt from last.pt",
    )
    assert rebuilt.pop("wall_s") <= original["wall_s"]  # last.pt's clock stopped at its save
    assert rebuilt == {key: value for key, value in original.items() if key not in ("stopped", "wall_s")}
    assert (rebuilt["steps"], rebuilt["epochs"]) == (30, 1)
    assert card["code"]["recorded_by"] == "evaluate" and "test" in card["results"]
    (run / "card.json").unlink()
    (run / "last.pt").unlink()  # best.pt alone: no counters to rebuild the training record from
    evaluate_run(Translator.from_run(run, device="cpu"), "test")
    card = json.loads((run / "card.json").read_text())
    parameters = json.loads((two_runs[0] / "card.json").read_text())["parameters"]
    assert "training" not in card and card["parameters"] == parameters


@pytest.mark.slow
def test_an_ensemble_is_evaluated_as_a_setting_of_its_own(run, trained):
    alone = evaluate_run(Translator.from_run(run, device="cpu", beam=2))
    together = evaluate_run(Translator.from_run(run, device="cpu", ensemble=[str(trained[0])], beam=2))
    assert (alone["key"], together["key"]) == ("test-beam2", "test-beam2-ens2")
    assert together["ensemble"] == [str(run), str(trained[0])]
    assert together["bleu"] == pytest.approx(alone["bleu"], abs=1e-6)  # a run with a copy of itself
    card = json.loads((run / "card.json").read_text())
    assert {"test-beam2", "test-beam2-ens2"} <= set(card["results"])
