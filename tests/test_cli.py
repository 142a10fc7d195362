"""The command line end to end on the toy config, and its one-line errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mt.translate import score

ROOT = Path(__file__).resolve().parents[1]


def mt(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mt", *args], input=stdin, capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


@pytest.mark.slow
def test_train_translate_evaluate_toy(tmp_path, tiny):
    run = tmp_path / "run"
    sets = [arg for item in tiny + ["train.max_steps=12", "train.valid_every=6", "train.log_every=3"]
            for arg in ("--set", item)]
    result = mt("train", "configs/toy.yaml", "--run-dir", str(run), *sets)
    assert result.returncode == 0, result.stderr
    for name in ["config.yaml", "spm.model", "train.log", "metrics.jsonl", "last.pt", "best.pt"]:
        assert (run / name).is_file(), name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in records if "loss" in r]
    val_rows = [r for r in records if "val_bleu" in r]
    assert [r["step"] for r in train_rows] == [3, 6, 9, 12] and [r["step"] for r in val_rows] == [6, 12]
    assert set(train_rows[0]) >= {"step", "epoch", "loss", "nll", "lr", "tokens_per_s", "elapsed_s"}
    assert set(val_rows[0]) >= {"step", "val_loss", "val_bleu"}
    assert "non-pad fraction" in (run / "train.log").read_text()

    lines = "Der Hund sieht die Katze.\n\nDie Frau lacht.\n   \n"
    out = mt("translate", "--run", str(run), stdin=lines)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 4 and out.stdout.endswith("\n")
    assert out.stdout.splitlines()[1] == out.stdout.splitlines()[3] == ""

    (tmp_path / "in.txt").write_text(lines)
    out = mt("translate", "--run", str(run), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.txt"))
    assert out.returncode == 0 and len((tmp_path / "o.txt").read_text().splitlines()) == 4

    out = mt("translate", "--run", str(run), "--beam", "3", "--n-best", "2", stdin=lines)
    assert out.returncode == 0, out.stderr
    rows = [line.split(" ||| ") for line in out.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 1, 2, 2, 3]  # empty lines get one empty hypothesis
    assert all(len(r) == 3 for r in rows) and rows[2][1] == ""
    bad = mt("translate", "--run", str(run), "--beam", "2", "--n-best", "3", stdin=lines)
    assert bad.returncode == 2
    assert bad.stderr == "mt: error: decode.n_best (3) must be <= decode.beam (2)\n"

    ev = mt("evaluate", "--run", str(run), "--split", "test", "--beam", "2")
    assert ev.returncode == 0, ev.stderr
    assert json.loads((run / "eval-test-beam2.json").read_text())["beam"] == 2

    ev = mt("evaluate", "--run", str(run), "--split", "test")
    assert ev.returncode == 0, ev.stderr
    scores = json.loads((run / "eval-test.json").read_text())
    assert {"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences"} <= set(scores)
    hyps, refs = ((run / scores[f]).read_text().splitlines() for f in ("hyp_file", "ref_file"))
    assert scores["sentences"] == len(hyps) == len(refs) == 40
    assert scores["bleu"] == score(hyps, refs)["bleu"]  # the written translations give the recorded score
    assert f"BLEU {scores['bleu']:.2f}" in ev.stdout


def test_unknown_key_is_one_line_exit_2(tmp_path):
    result = mt("train", "configs/toy.yaml", "--run-dir", str(tmp_path / "r"), "--set", "train.lrr=1")
    assert result.returncode == 2
    assert result.stderr == ("mt: error: configs/toy.yaml: unknown key 'train.lrr'; did you mean 'lr'? valid keys: "
                             "lr, warmup_steps, max_tokens, max_steps, max_minutes, label_smoothing, precision, "
                             "device, dist_backend, clip_norm, accumulate, patience, valid_every, valid_beam, "
                             "save_every, log_every, max_nonfinite, seed, threads\n")


def test_bad_value_is_one_line_exit_2(tmp_path):
    result = mt("train", "configs/toy.yaml", "--run-dir", str(tmp_path / "r"), "--set", "model.dropout=-1")
    assert result.returncode == 2
    assert result.stderr == "mt: error: configs/toy.yaml: model.dropout: -1.0 is out of range, must be >= 0.0\n"
    assert not (tmp_path / "r").exists()


def test_missing_config_file(tmp_path):
    result = mt("train", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert result.stderr == f"mt: error: {tmp_path / 'nope.yaml'}: config file not found\n"


def test_translate_without_checkpoint(tmp_path):
    result = mt("translate", "--run", str(tmp_path), stdin="Hallo\n")
    assert result.returncode == 2
    assert result.stderr.startswith(f"mt: error: {tmp_path / 'best.pt'}: no checkpoint; train first")
    assert result.stderr.count("\n") == 1


def test_translate_missing_input_file(tmp_path):
    result = mt("translate", "--run", str(tmp_path), "--input", str(tmp_path / "nope.de"))
    assert result.returncode == 2
    assert result.stderr == f"mt: error: {tmp_path / 'nope.de'}: input file not found\n"
