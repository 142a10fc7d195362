"""mt/training/validation.py: validation during training decodes with train.valid_beam, whatever the run's
decode section says."""

import json
from pathlib import Path

from conftest import metrics

import mt.training.validation
from mt.config import load_config
from mt.decode_config import DecodeConfig
from mt.training.train import train

ROOT = Path(__file__).resolve().parents[1]


def test_validation_decodes_with_valid_beam_whatever_decode_says(tmp_path, tiny, monkeypatch):
    real, seen = mt.training.validation.translate_lines, []

    def spy(request, cfg):
        seen.append(cfg)
        return real(request, cfg)

    monkeypatch.setattr(mt.training.validation, "translate_lines", spy)
    overrides = tiny + [
        "train.max_steps=4",
        "train.valid_beam=2",
        "decode.beam=5",
        "decode.length_penalty=0.3",
        "decode.max_len_a=3.0",
    ]
    run = tmp_path / "run"
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    assert seen == [DecodeConfig(beam=2)]  # one validation, at step 4, with mt's default search otherwise
    assert [r["valid_beam"] for r in metrics(run) if "val_bleu" in r] == [2]
    assert json.loads((run / "card.json").read_text())["training"]["valid_beam"] == 2
