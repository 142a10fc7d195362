"""mt/training/tuning.py: `mt tune` and the end of a training (`mt train` and `mt.training.train.train` alike)
choose the beam and length penalty on val, write them into the card's `tuning` (their one home), and
every way of opening the run translates with them unless told otherwise."""

import dataclasses
import json
import shutil

import pytest
import sacrebleu
import yaml
from conftest import ROOT, sets

from mt.cli import main
from mt.config import load_config, read_saved_config
from mt.data import load_split
from mt.plumbing.errors import ConfigError
from mt.run.card import card_tuning
from mt.run.folder import result_name
from mt.run.records import Tried
from mt.serving.limits import ServeLimits
from mt.serving.worker import Worker
from mt.training.train import train
from mt.training.tuning import Grid, best_setting, tune
from mt.translator import Translator


def test_the_grid_tries_greedy_once_and_every_penalty_with_each_wider_beam():
    assert Grid((1, 3), (0.6, 2.0)).searches() == [(1, 1.0), (3, 0.6), (3, 2.0)]
    assert Grid((5, 2), (1.0,)).searches() == [(2, 1.0), (5, 1.0)]


def test_the_grids_beams_govern_the_pools_that_mbr_and_reranking_choose_among(capsys):
    assert Grid((1, 3), mbr=True).pool_beams() == (3,)
    assert Grid((1, 3), rerank="runs/en-de").pool_beams() == (3, 6)
    assert Grid().pool_beams() == (5,)
    with pytest.raises(ConfigError) as e:
        Grid((1,), rerank="runs/en-de")
    assert str(e.value) == (
        "tune: MBR and reranking choose among the largest beam's hypotheses, and the grid's beams are [1]; "
        "add a beam above 1 (--beams 1 5)"
    )
    assert main(["tune", "--run", "no-such-run", "--beams", "1", "--mbr"]) == 2
    assert capsys.readouterr().err.endswith("add a beam above 1 (--beams 1 5)\n")


def test_the_best_setting_is_the_highest_bleu_and_on_a_tie_the_cheaper_one():
    def row(beam: int, alpha: float, bleu: float) -> Tried:
        return Tried(beam=beam, length_penalty=alpha, bleu=bleu, chrf=50.0, length_ratio=1.0)

    assert best_setting([row(1, 1.0, 30.0), row(5, 2.0, 31.5), row(3, 1.0, 31.0)]) == row(5, 2.0, 31.5)
    assert best_setting([row(5, 1.0, 31.0), row(3, 2.0, 31.0), row(3, 1.5, 31.0)]) == row(3, 1.5, 31.0)


@pytest.fixture(scope="module")
def learned(tiny, tmp_path_factory):
    """A toy run that has learned something (val BLEU above 2 at each setting), so that the settings
    tune scores differ and its choice is one of BLEU, not of a tie at 0. Read only."""
    run = tmp_path_factory.mktemp("learned") / "run"
    overrides = tiny + ["model.layers=2", "train.max_steps=600", "train.lr=0.005", "train.valid_every=600"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    return run


def test_tune_scores_each_setting_as_sacrebleu_does_and_the_run_then_decodes_with_the_best(learned, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(learned, run)
    grid = Grid((2, 3), (0.5, 3.0))  # no greedy: whatever wins differs from the defaults
    tuning = tune(run, device="cpu", grid=grid)
    assert [(t["beam"], t["length_penalty"]) for t in tuning["tried"]] == grid.searches()
    # not all four apart: which settings tie is the CPU's arithmetic's (issue 80), that some differ is not
    assert min(t["bleu"] for t in tuning["tried"]) > 2 and len({t["bleu"] for t in tuning["tried"]}) > 1
    src, ref = load_split(read_saved_config(run / "config.yaml").data, "val")
    plain = Translator.from_run(run, device="cpu")
    for tried in tuning["tried"]:
        hyps = plain.translate(src, beam=tried["beam"], length_penalty=tried["length_penalty"])
        bleu = sacrebleu.corpus_bleu(hyps, [ref])
        assert tried["bleu"] == round(bleu.score, 2)
        assert tried["length_ratio"] == round(bleu.sys_len / bleu.ref_len, 4)
    chosen = tuning["chosen"]
    assert chosen == dataclasses.asdict(best_setting([Tried(**t) for t in tuning["tried"]]))
    assert chosen["beam"] > 1
    config = (run / "config.yaml").read_text()
    assert config == (learned / "config.yaml").read_text()  # one writer of the tuned decoding: the card
    assert json.loads((run / "card.json").read_text())["tuning"]["chosen"] == chosen
    opened = Translator.from_run(run, device="cpu")
    assert (opened.decode.beam, opened.decode.length_penalty) == (chosen["beam"], chosen["length_penalty"])
    assert Translator.from_run(run, device="cpu", beam=1).decode.beam == 1  # a keyword still wins
    assert card_tuning(run, run / "best.pt")["chosen"] == chosen


def test_a_flag_wins_over_the_tuned_setting_on_the_command_line(run, capsys):
    tune(run, device="cpu", grid=Grid((4,), (2.0,)))
    assert main(["evaluate", "--run", str(run), "--device", "cpu", "--split", "val"]) == 0
    assert main(["evaluate", "--run", str(run), "--device", "cpu", "--split", "val", "--beam", "1"]) == 0
    results = json.loads((run / "card.json").read_text())["results"]
    assert results["val-beam4-lp2"]["beam"] == 4 and results["val"]["beam"] == 1
    # each result is stored once; val-tuned, which `mt report --setting val-tuned` compares across runs,
    # names the run's own decoding's
    assert [key for key in results if key.endswith("-tuned")] == []
    assert result_name(run, "val-tuned") == "val-beam4-lp2" and result_name(run, "val-beam4") == "val-beam4"


@pytest.mark.slow
def test_sampling_on_a_tuned_run_needs_no_beam_in_any_door(fluent, tmp_path, capsys):
    """`--sample` given alone wins over the run's tuned beam 3 with what it implies (beam 1): on the
    command line, through the API's keywords (per call and at opening), and in an HTTP request."""
    from fastapi.testclient import TestClient

    from mt.serving.app import create_app, server_info

    run = tmp_path / "run"
    shutil.copytree(fluent, run)
    tune(run, device="cpu", grid=Grid((3,), (2.0,)))
    assert Translator.from_run(run, device="cpu").decode.beam == 3
    lines, options = (
        ["Ein Hund läuft .", "Zwei Männer spielen im Schnee ."],
        {"sample": "topk:50", "temperature": 1.5, "seed": 7},
    )
    want = Translator.from_run(run, device="cpu", beam=1, **options).translate(lines)
    assert want != Translator.from_run(run, device="cpu").translate(lines)  # sampled, not searched
    assert Translator.from_run(run, device="cpu").translate(lines, **options) == want
    assert Translator.from_run(run, device="cpu", **options).translate(lines) == want
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("".join(line + "\n" for line in lines))
    flags = ["--sample", "topk:50", "--temperature", "1.5", "--seed", "7"]
    assert (
        main(
            [
                "translate",
                "--run",
                str(run),
                "--device",
                "cpu",
                *flags,
                "--input",
                str(src),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert out.read_text().splitlines() == want
    worker = Worker(Translator.from_run(run, device="cpu"), ServeLimits())
    worker.start()
    with TestClient(create_app(worker, server_info(worker.translator, worker.limits))) as client:
        got = client.post("/translate", json={"lines": lines, **options}).json()
    assert [t["translation"] for t in got["translations"]] == want and got["beam"] == 1


def train_args(run, tiny, *extra) -> list[str]:
    overrides = tiny + ["train.max_steps=4", "train.tune=true", *extra]
    return ["train", str(ROOT / "configs/toy.yaml"), "--run-dir", str(run), *sets(overrides)]


def test_mt_train_tunes_at_its_end_once(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(train_args(run, tiny)) == 0
    card = json.loads((run / "card.json").read_text())
    assert (
        len(card["tuning"]["tried"]) == len(Grid().searches()) and card["tuning"]["checkpoint"] == "best.pt"
    )
    assert "the run now translates with them unless told otherwise" in capsys.readouterr().err
    assert main(train_args(run, tiny)) == 0  # already finished, and tuned for this best.pt: not again
    assert "best of" not in capsys.readouterr().err
    assert json.loads((run / "card.json").read_text())["tuning"] == card["tuning"]


def test_the_python_api_ends_a_training_as_mt_train_does(tiny, tmp_path):
    """mt.training.train.train with train.tune tunes at its end, as `mt train` does (one entry point, in the
    training), and returns the tuning; trained again, the run is finished and tuned: nothing new."""
    run = tmp_path / "run"
    cfg = load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=4", "train.tune=true"])
    result = train(cfg, run)
    card = json.loads((run / "card.json").read_text())
    assert result["tuning"] == card["tuning"] and len(card["tuning"]["tried"]) == len(Grid().searches())
    assert train(cfg, run)["tuning"] is None
    untuned = tmp_path / "untuned"
    assert (
        train(load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=4"]), untuned)["tuning"] is None
    )
    assert "tuning" not in json.loads((untuned / "card.json").read_text())


def test_a_resumed_training_leaves_the_run_tuned(tiny, tmp_path):
    """Resuming writes the config's decode section (beam 4, which the grid never chooses) into
    config.yaml, and the card's tuning of best.pt still decides how the run decodes: config.yaml is
    the layer below it, never a second copy to keep in step."""
    run = tmp_path / "run"
    config_decoding = ["decode.beam=4", "decode.length_penalty=0.3"]
    assert main(train_args(run, tiny, *config_decoding)) == 0
    assert main(train_args(run, tiny, *config_decoding, "train.max_steps=8")) == 0
    tuning = json.loads((run / "card.json").read_text())["tuning"]
    decode = yaml.safe_load((run / "config.yaml").read_text())["decode"]
    chosen = tuning["chosen"]
    assert (decode["beam"], decode["length_penalty"]) == (4, 0.3)
    opened = Translator.from_run(run, device="cpu").decode
    assert (opened.beam, opened.length_penalty) == (chosen["beam"], chosen["length_penalty"])
    assert card_tuning(run, run / "best.pt")["chosen"] == chosen


def test_a_run_that_samples_is_not_tuned(run):
    text = (run / "config.yaml").read_text().replace("sample: ''", "sample: topk:5")
    (run / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match="decode.sample is 'topk:5': the run samples instead of searching"):
        tune(run, device="cpu", grid=Grid((2,), (1.0,)))


def test_tuning_keeps_a_configs_n_best_within_the_chosen_beam(run):
    text = (run / "config.yaml").read_text().replace("beam: 1", "beam: 5").replace("n_best: 1", "n_best: 5")
    (run / "config.yaml").write_text(text)
    chosen = tune(run, device="cpu", grid=Grid((2,), (1.0,)))["chosen"]
    assert chosen["beam"] == 2
    assert Translator.from_run(run, device="cpu").decode.n_best == 2


def test_tune_false_leaves_the_configs_decoding(tiny, tmp_path):
    run = tmp_path / "run"
    assert main(train_args(run, tiny, "train.tune=false", "decode.beam=2")) == 0
    assert "tuning" not in json.loads((run / "card.json").read_text())
    assert Translator.from_run(run, device="cpu").decode.beam == 2


def test_a_damaged_config_yaml_is_named_when_the_run_opens(run):
    (run / "config.yaml").write_text("decode: [", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config.yaml: line 1 is not valid YAML"):
        Translator.from_run(run, device="cpu")


def test_mt_tune_on_the_command_line(run, capsys):
    args = ["tune", "--run", str(run), "--device", "cpu", "--beams", "2", "--length-penalties", "0.5", "1.5"]
    assert main(args) == 0
    tuning = json.loads((run / "card.json").read_text())["tuning"]
    assert [(t["beam"], t["length_penalty"]) for t in tuning["tried"]] == [(2, 0.5), (2, 1.5)]
    c = tuning["chosen"]
    assert capsys.readouterr().err.endswith(
        f"{run}: beam 2, length penalty {c['length_penalty']:g} (val BLEU {c['bleu']:.2f}, length ratio "
        f"{c['length_ratio']:.3f}; best of 2 tried); the run now translates with them unless told otherwise\n"
    )
    assert main(["tune", "--run", str(run / "missing")]) == 2
    assert capsys.readouterr().err == f"mt: error: {run / 'missing'}: run directory not found\n"
