"""mt/cli.py: the command line end to end on the toy config (train, translate, evaluate), and its
one-line errors."""

import json
import re

import pytest
from conftest import mt_cli

from mt.plumbing.metrics import corpus_scores


@pytest.mark.slow
def test_train_translate_evaluate_toy(tmp_path, tiny):
    run = tmp_path / "run"
    sets = [
        arg
        for item in tiny + ["train.max_steps=12", "train.valid_every=6", "train.log_every=3"]
        for arg in ("--set", item)
    ]
    result = mt_cli("train", "configs/toy.yaml", "--run-dir", str(run), *sets)
    assert result.returncode == 0, result.stderr
    for name in ["config.yaml", "spm.model", "train.log", "metrics.jsonl", "last.pt", "best.pt"]:
        assert (run / name).is_file(), name
    cleaning = json.loads((run / "card.json").read_text())["cleaning"]  # a files corpus: data.clean applies
    removed = (run / "removed-pairs.tsv").read_text().splitlines()
    assert set(cleaning["removed"]) == {"empty", "too_long", "ratio", "copy", "language", "leak", "duplicate"}
    assert cleaning["pairs_read"] == 400 == cleaning["kept"] + len(removed) > cleaning["kept"]
    assert sum(cleaning["removed"].values()) == len(removed) and cleaning["lines"] == "removed-pairs.tsv"
    assert f"kept {cleaning['kept']} of 400 training pairs; removed " in result.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in records if "loss" in r]
    val_rows = [r for r in records if "val_bleu" in r]
    assert [r["step"] for r in train_rows] == [3, 6, 9, 12] and [r["step"] for r in val_rows] == [6, 12]
    assert set(train_rows[0]) >= {"step", "epoch", "loss", "nll", "lr", "tokens_per_s", "elapsed_s"}
    assert set(val_rows[0]) >= {"step", "val_loss", "val_bleu"}
    log = (run / "train.log").read_text()
    assert "non-pad fraction" in log and " step 6/12 | epoch 1 | loss " in log
    assert re.search(r"step 12/12 \| .* \| elapsed \d+s \| eta 0m00s\n", log)

    lines = "Der Hund sieht die Katze.\n\nDie Frau lacht.\n   \n"
    out = mt_cli("translate", "--run", str(run), stdin=lines)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 4 and out.stdout.endswith("\n")
    assert out.stdout.splitlines()[1] == out.stdout.splitlines()[3] == ""

    (tmp_path / "in.txt").write_text(lines)
    out = mt_cli(
        "translate",
        "--run",
        str(run),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "o.txt"),
    )
    assert out.returncode == 0 and len((tmp_path / "o.txt").read_text().splitlines()) == 4
    assert out.stderr.splitlines()[-1] == f"wrote {tmp_path / 'o.txt'} (4 lines)"

    out = mt_cli("translate", "--run", str(run), "--beam", "3", "--n-best", "2", stdin=lines)
    assert out.returncode == 0, out.stderr
    rows = [line.split(" ||| ") for line in out.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 1, 2, 2, 3]  # empty lines get one empty hypothesis
    assert all(len(r) == 3 for r in rows) and rows[2][1] == ""
    bad = mt_cli("translate", "--run", str(run), "--beam", "2", "--n-best", "3", stdin=lines)
    assert bad.returncode == 2
    assert bad.stderr == (
        "mt: error: --n-best 3 is more than --beam 2: beam search keeps only that many "
        "hypotheses; add --beam 3 or more\n"
    )
    bad = mt_cli("translate", "--run", str(run), "--n-best", "3", stdin=lines)
    assert bad.returncode == 2
    assert bad.stderr == (
        "mt: error: --n-best 3 is more than the run's beam (1): beam search keeps only that many "
        "hypotheses; add --beam 3 or more\n"
    )

    ev = mt_cli("evaluate", "--run", str(run), "--split", "test", "--beam", "2")
    assert ev.returncode == 0, ev.stderr
    assert json.loads((run / "eval-test-beam2.json").read_text())["beam"] == 2

    ev = mt_cli("evaluate", "--run", str(run), "--split", "test")
    assert ev.returncode == 0, ev.stderr
    scores = json.loads((run / "eval-test.json").read_text())
    assert {"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences"} <= set(scores)
    hyps, refs = ((run / scores[f]).read_text().splitlines() for f in ("hyp_file", "ref_file"))
    assert scores["sentences"] == len(hyps) == len(refs) == 40
    assert (
        scores["bleu"] == corpus_scores(hyps, refs, tokenize="13a")["bleu"]
    )  # the written translations give the recorded score
    assert f"BLEU {scores['bleu']:.2f}" in ev.stdout


def test_unknown_key_is_one_line_exit_2(tmp_path):
    result = mt_cli(
        "train", "configs/toy.yaml", "--run-dir", str(tmp_path / "r"), "--set", "train.lerning_rate=1"
    )
    assert result.returncode == 2  # blamed on the flag that brought it; JoeyNMT's name hints at ours
    assert result.stderr == (
        "mt: error: --set train.lerning_rate=1: unknown key 'train.lerning_rate'; did you "
        "mean 'lr'? valid keys: "
        "lr, warmup_steps, schedule, max_tokens, pad_multiple, max_steps, max_minutes, label_smoothing, "
        "dropout_start, precision, device, dist_backend, clip_norm, accumulate, patience, best_metric, "
        "keep_last, average_last, valid_every, valid_beam, tune, save_every, log_every, tensorboard, "
        "max_nonfinite, seed, threads, init_from, freeze\n"
    )


def test_bad_value_is_one_line_exit_2(tmp_path):
    result = mt_cli(
        "train", "configs/toy.yaml", "--run-dir", str(tmp_path / "r"), "--set", "model.dropout=-1"
    )
    assert result.returncode == 2
    assert (
        result.stderr
        == "mt: error: --set model.dropout=-1: model.dropout: -1.0 is out of range, must be >= 0.0\n"
    )
    assert not (tmp_path / "r").exists()


def test_missing_config_file(tmp_path):
    result = mt_cli("train", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert result.stderr == f"mt: error: {tmp_path / 'nope.yaml'}: config file not found\n"


def test_translate_without_checkpoint(tmp_path):
    result = mt_cli("translate", "--run", str(tmp_path), stdin="Hallo\n")
    assert result.returncode == 2
    assert result.stderr.startswith(f"mt: error: {tmp_path / 'best.pt'}: no checkpoint; train first")
    assert result.stderr.count("\n") == 1


def test_translate_missing_input_file(tmp_path):
    result = mt_cli("translate", "--run", str(tmp_path), "--input", str(tmp_path / "nope.de"))
    assert result.returncode == 2
    assert result.stderr == f"mt: error: {tmp_path / 'nope.de'}: input file not found\n"


@pytest.mark.slow
def test_checkpoints_files_and_finished_runs(tmp_path, tiny):
    run = tmp_path / "run"
    sets = [arg for item in tiny + ["train.max_steps=3", "train.valid_every=100"] for arg in ("--set", item)]
    assert mt_cli("train", "configs/toy.yaml", "--run-dir", str(run), *sets).returncode == 0
    again = mt_cli("train", "configs/toy.yaml", "--run-dir", str(run), *sets)
    assert again.returncode == 0 and "kept" not in again.stderr  # no data loaded
    training = json.loads((run / "card.json").read_text())["training"]
    bleu, chrf = training["best_val_bleu"], training["best_val_chrf"]
    assert again.stderr.splitlines()[-1].endswith(
        f"{run}: already finished at step 3 (reached train.max_steps=3); best val BLEU {bleu:.2f}, "
        f"chrF {chrf:.2f} at step 3; "
        f"raise train.max_steps (or max_minutes, patience) with --set to train further"
    )
    (run / "best.pt").unlink()  # as if stopped before its first validation
    out = mt_cli("translate", "--run", str(run), stdin="Der Hund sieht die Katze.\n")
    assert out.returncode == 0 and out.stdout.count("\n") == 1
    assert (
        f"WARNING mt.run.folder: {run}/best.pt: not written yet (no validation so far); using {run}/last.pt"
        in out.stderr
    )
    src, ref = tmp_path / "news.de", tmp_path / "news.en"
    src.write_text("Der Hund sieht die Katze.\nDie Frau lacht.\n")
    ref.write_text("The dog sees the cat.\nThe woman laughs.\n")
    ev = mt_cli("evaluate", "--run", str(run), "--checkpoint", "last", "--src", str(src), "--ref", str(ref))
    assert ev.returncode == 0, ev.stderr
    assert (
        ev.stdout.startswith("news.de: BLEU ")
        and "2 sentences" in ev.stdout
        and f"{run}/last.pt)" in ev.stdout
    )
    assert ev.stderr.splitlines()[-1] == (
        f"wrote {run}/hyp-news.de-last.txt, {run}/ref-news.de.txt, "
        f"{run}/eval-news.de-last.json, {run}/card.json"
    )
    assert json.loads((run / "eval-news.de-last.json").read_text())["sentences"] == 2
    half = mt_cli("evaluate", "--run", str(run), "--src", str(src))
    assert half.returncode == 2
    assert (
        half.stderr == "mt: error: --src and --ref go together: a source file and its reference translation\n"
    )
