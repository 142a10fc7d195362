"""mt/evaluate.py: scoring a run's checkpoint (the averaged one too) and writing its card, rebuilt from
metrics.jsonl where it is missing."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import REPORT, ROOT, TINY, metrics

from mt.cli import main
from mt.config import load_config
from mt.evaluate import evaluate_run
from mt.generated.toy import toy_corpus
from mt.plumbing.metrics import corpus_scores
from mt.run.folder import load_run
from mt.training.train import train
from mt.translate import SearchRequest, translate_lines
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
    assert (
        len(
            translate_lines(
                SearchRequest(model, tokenizer, ["Der Hund läuft.", "", "Die Frau liest."]), cfg.decode
            )
        )
        == 3
    )
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
    # compute is counted by training's end (or scripts/run_compute.py), not by evaluate: it has no corpus
    assert (rebuilt.pop("multiply_adds"), rebuilt.pop("pipeline_multiply_adds")) == (None, None)
    kept = {key: value for key, value in original.items() if "multiply_adds" not in key}
    assert rebuilt == {key: value for key, value in kept.items() if key not in ("stopped", "wall_s")}
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


@pytest.mark.slow
def test_an_english_to_chinese_run_is_scored_with_the_zh_tokenizer(tmp_path):
    """en->zh on the toy corpus's Chinese side: validation, evaluation and the card score BLEU with
    sacreBLEU's zh tokenizer (tok:zh), under which the trained model is far above where it started;
    13a, which counts each unspaced Chinese sentence as one word, sees almost nothing either way."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for split, n in [("train", 400), ("val", 40), ("test", 40)]:
        for lang, lines in zip(("en", "zh"), toy_corpus(languages=("en", "zh"))[split]):
            (folder / f"{split}.{lang}").write_text(
                "".join(line + "\n" for line in lines[:n]), encoding="utf-8"
            )
    overrides = TINY + REPORT + [f"data.dir={folder}", "data.src_lang=en", "data.tgt_lang=zh"]
    overrides += ["tokenizer.vocab_size=400", "model.d_model=64", "model.d_ff=128"]
    overrides += ["train.max_steps=250", "train.valid_every=50"]
    run = tmp_path / "run"
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    validations = [r for r in metrics(run) if "val_bleu" in r]
    assert validations[0]["val_bleu"] < 1 and validations[-1]["val_bleu"] > 25
    result = evaluate_run(Translator.from_run(run, device="cpu"), "test")
    assert "|tok:zh|" in result["bleu_signature"] and result["bleu"] > 20
    card = json.loads((run / "card.json").read_text())
    assert card["results"]["test"]["bleu_signature"] == result["bleu_signature"]
    assert card["tokenizer"]["normalization"] == "identity" and card["tokenizer"]["character_coverage"] == 1.0
    hyps = (run / result["hyp_file"]).read_text(encoding="utf-8").splitlines()
    refs = (run / result["ref_file"]).read_text(encoding="utf-8").splitlines()
    assert corpus_scores(hyps, refs, tokenize="13a")["bleu"] < 5  # 13a
    assert "，" in "".join(refs) and "，" in "".join(hyps)  # full-width punctuation kept (not NFKC's ",")
