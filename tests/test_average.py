"""Checkpoint averaging, the early-stopping metric, and the lower-cased BLEU beside the cased one."""

import json
from pathlib import Path

import pytest
import torch

from mt.cli import main
from mt.config import RunConfig, config_to_dict, load_config
from mt.errors import RunDirError
from mt.model import Seq2Seq
from mt.checkpoint import write_average
from mt.records import Progress
from mt.rundir import load_run
from mt.translate import score, translate_lines

ROOT = Path(__file__).resolve().parents[1]


def hand_made(path: Path, cfg: RunConfig, seed: int) -> dict:
    torch.manual_seed(seed)
    model = Seq2Seq(cfg.model, 50)
    ckpt = {
        "model": model.state_dict(),
        "config": config_to_dict(cfg),
        "vocab_size": 50,
        "tokenizer_sha256": "0" * 64,
    }
    torch.save(ckpt, path)
    return ckpt["model"]


def small_config(**model) -> RunConfig:
    overrides = ["model.d_model=16", "model.d_ff=32", "model.layers=1", "model.n_heads=2"]
    return load_config(ROOT / "configs/toy.yaml", overrides + [f"model.{k}={v}" for k, v in model.items()])


def test_the_average_of_two_checkpoints_is_their_mean(tmp_path):
    a = hand_made(tmp_path / "ckpt-0000001.pt", small_config(), 1)
    b = hand_made(tmp_path / "ckpt-0000002.pt", small_config(), 2)
    hand_made(tmp_path / "ckpt-0000000.pt", small_config(), 3)  # older: not among the last 2
    averaged = torch.load(write_average(tmp_path, 2), weights_only=True)
    assert averaged["model"].keys() == a.keys()
    for key in a:
        torch.testing.assert_close(averaged["model"][key], (a[key] + b[key]) / 2, rtol=0, atol=1e-7)
    assert [Path(p).name for p in averaged["averaged"]] == ["ckpt-0000001.pt", "ckpt-0000002.pt"]


def test_averaging_refuses_other_configs_and_too_few_checkpoints(tmp_path):
    hand_made(tmp_path / "ckpt-0000001.pt", small_config(), 1)
    hand_made(tmp_path / "ckpt-0000002.pt", small_config(d_ff=64), 2)
    with pytest.raises(
        RunDirError,
        match=r"ckpt-0000002.pt: another config than .*ckpt-0000001.pt "
        r"\(model.d_ff: 32 vs 64\); average checkpoints of one run$",
    ):
        write_average(tmp_path, 2)
    with pytest.raises(
        RunDirError,
        match=r": 2 kept checkpoints \(ckpt-\*.pt\), fewer than the 3 to average; "
        r"set train.keep_last >= 3",
    ):
        write_average(tmp_path, 3)


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
    assert "lower-cased BLEU" in capsys.readouterr().out
    assert json.loads((run / "eval-test-averaged.json").read_text())["checkpoint"].endswith("averaged.pt")
    assert json.loads((run / "card.json").read_text())["training"]["best_metric"] == "bleu"
    assert main(["average", "--run", str(run), "--last", "3"]) == 0
    assert len(torch.load(run / "averaged.pt", weights_only=True)["averaged"]) == 3


@pytest.mark.parametrize(
    "metric,expected", [("bleu", [True, True, False, False]), ("loss", [True, False, True, False])]
)
def test_best_metric_decides_what_improves(metric, expected):
    progress = Progress()
    results = [(10.0, 3.0), (12.0, 3.1), (11.0, 2.9), (11.5, 2.95)]  # (val BLEU, val loss)
    got = [progress.record({"val_bleu": b, "val_chrf": 0.0, "val_loss": loss}, metric) for b, loss in results]
    assert got == expected
    assert progress.bad_validations == 1 + (metric == "bleu")


def test_lowercased_bleu_ignores_case_and_cased_bleu_does_not():
    refs = ["The dog bit the man.", "It was not unexpected."]
    result = score(["the DOG bit the man.", "it was NOT unexpected."], refs)
    assert result["bleu_lc"] == pytest.approx(100.0) and result["bleu"] < 50
    assert "case:lc" in result["bleu_lc_signature"] and "case:mixed" in result["bleu_signature"]
