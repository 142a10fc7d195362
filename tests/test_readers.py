"""The readers issue 16 found trusting their files, each reproduced by hand (tests/test_fuzz.py covers
them all at random): a damaged compressed corpus, a damaged tokenizer model, gzip translate input,
damaged metrics and cards, and a second training on a run directory that is already training."""

import gzip
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mt.cli import main
from mt.config import load_config
from mt.train import train
from test_errors import file_hashes, run_main, sets

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """A 4-step run on the small corpus, scored on its test split: (run dir, the overrides that made it)."""
    run = tmp_path_factory.mktemp("readers") / "run"
    overrides = tiny + ["train.max_steps=4"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    assert main(["evaluate", "--run", str(run), "--device", "cpu"]) == 0
    return run, overrides


@pytest.fixture
def run(trained, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained[0], copy)
    return copy


def test_a_damaged_gzip_corpus_is_one_line(capsys, small_corpus, tiny, tmp_path):
    """Issue 16's first traceback: corrupted deflate data inside a .gz corpus file (zlib.error)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    packed = bytearray(gzip.compress((corpus / "train.de").read_bytes(), mtime=0))
    packed[len(packed) // 2] ^= 0xFF  # inside the deflate stream: the header and the size are intact
    (corpus / "train.de").unlink()
    (corpus / "train.de.gz").write_bytes(bytes(packed))
    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(tmp_path / "run"),
        *sets(tiny + [f"data.dir={corpus}"]),
    )
    last = err.splitlines()[-1]  # after the log's "run directory ..." line
    assert code == 2 and "Traceback" not in err and err.count("error:") == 1
    assert last.startswith(
        f"mt: error: {corpus}/train.de.gz: damaged compressed file (Error -3 while decompressing"
    )
    assert last.endswith("; download or copy it again")
    assert not (tmp_path / "run").exists()  # nothing was written


def test_a_damaged_tokenizer_model_is_one_line(capsys, run):
    """Issue 16's second traceback: sentencepiece's RuntimeError on a damaged DIR/spm.model."""
    good = (run / "spm.model").read_bytes()
    (run / "spm.model").write_bytes(good[: len(good) // 2])
    before = file_hashes(run)
    code, err = run_main(capsys, "translate", "--run", str(run), "--input", str(run / "ref-test.txt"))
    assert code == 2 and err == (
        f"mt: error: {run}/spm.model: not the tokenizer best.pt was trained with (its "
        f"sha256 differs: damaged or replaced); restore the run's spm.model\n"
    )
    assert file_hashes(run) == before
    ckpt = torch.load(run / "best.pt", weights_only=True)  # a checkpoint that cannot vouch for its tokenizer
    del ckpt["tokenizer_sha256"]
    torch.save(ckpt, run / "best.pt")
    before = file_hashes(run)
    code, err = run_main(capsys, "translate", "--run", str(run), "--input", str(run / "ref-test.txt"))
    assert code == 2 and err == (
        f"mt: error: {run}/best.pt: damaged or not an mt checkpoint (tokenizer_sha256 is missing); delete "
        f"it or train again\n"
    )
    assert file_hashes(run) == before


def test_translate_reads_gzip_input(capsys, run, tmp_path):
    text = (run / "ref-test.txt").read_bytes()
    (tmp_path / "in.de").write_bytes(text)
    (tmp_path / "in.de.gz").write_bytes(gzip.compress(text))
    assert main(["translate", "--run", str(run), "--input", str(tmp_path / "in.de")]) == 0
    plain = capsys.readouterr().out
    assert main(["translate", "--run", str(run), "--input", str(tmp_path / "in.de.gz")]) == 0
    assert capsys.readouterr().out == plain and plain.count("\n") == text.count(b"\n")
    (tmp_path / "bad.gz").write_bytes(gzip.compress(text)[:40])
    code, err = run_main(capsys, "translate", "--run", str(run), "--input", str(tmp_path / "bad.gz"))
    assert code == 2 and err == (
        f"mt: error: {tmp_path}/bad.gz: damaged compressed file (Compressed file ended "
        f"before the end-of-stream marker was reached); download or copy it again\n"
    )


def test_a_bad_metrics_line_is_named_and_nothing_is_rewritten(capsys, run, trained, tmp_path):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:-5]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    before = file_hashes(run)
    code, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.md"))
    assert code == 2 and err == (
        f"mt: error: {run}/metrics.jsonl: line 2: not JSON; fix or delete that line "
        f"(mt writes one JSON object a line)\n"
    )
    code, err = run_main(
        capsys, "train", "configs/toy.yaml", "--run-dir", str(run), *sets(trained[1] + ["train.max_steps=6"])
    )
    assert code == 2 and err.splitlines()[-1] == (
        f"mt: error: {run}/metrics.jsonl: line 2: not JSON; fix or "
        f"delete that line (mt writes one JSON object a line)"
    )
    assert file_hashes(run) == before
    (run / "metrics.jsonl").write_text("\n".join([lines[0], lines[2]]) + "\n" + '{"step": 4, "lo')  # torn end
    assert main(["report", str(run), "--out", str(tmp_path / "r.md")]) == 0
    assert (
        f"{run}/metrics.jsonl: line 3 is incomplete (cut short while being written?); left out"
        in capsys.readouterr().err
    )


def test_a_damaged_card_is_named_and_kept(capsys, run, tmp_path):
    (run / "card.json").write_text('{"config": {"name": "x"}, "results": [1, 2]}')
    before = file_hashes(run)
    for args in (["evaluate", "--run", str(run)], ["report", str(run), "--out", str(tmp_path / "r.md")]):
        code, err = run_main(capsys, *args)
        assert code == 2 and err == (
            f"mt: error: {run}/card.json: damaged (config.hash is missing); restore it, "
            f"or delete it and run `mt evaluate --run {run}` to write a new one\n"
        )
    assert file_hashes(run) == before


def test_a_card_field_of_another_type_is_named(capsys, run, tmp_path):
    card = json.loads((run / "card.json").read_text())
    card["results"]["test"]["bleu"] = "high"
    (run / "card.json").write_text(json.dumps(card))
    code, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.md"))
    assert code == 2 and err == (
        f"mt: error: {run}/card.json: damaged (results.test.bleu: expected float, got str 'high'); "
        f"restore it, or delete it and run `mt evaluate --run {run}` to write a new one\n"
    )


@pytest.mark.parametrize("damage", ["renamed", "dropped", "null"])
def test_a_card_result_without_its_length_penalty_is_named(capsys, run, tmp_path, damage):
    """Issue 24: the report type-checked beam and length_penalty but did not require them, then read
    them (KeyError: 'length_penalty'); a damaged key of a result is now refused, naming it."""
    card = json.loads((run / "card.json").read_text())
    result = card["results"]["test"]
    value = result.pop("length_penalty")
    if damage == "renamed":
        result["length_penaltz"] = value  # what a flipped bit makes of it
    elif damage == "null":
        result["length_penalty"] = None
    (run / "card.json").write_text(json.dumps(card, indent=2))
    before = file_hashes(run)
    code, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.md"))
    what = ": expected float, got null" if damage == "null" else " is missing"
    assert code == 2 and err == (
        f"mt: error: {run}/card.json: damaged (results.test.length_penalty{what}); "
        f"restore it, or delete it and run `mt evaluate --run {run}` to write a new one\n"
    )
    assert file_hashes(run) == before
    assert not (tmp_path / "r.md").exists()


def test_a_second_training_on_a_run_directory_is_refused(capsys, run, trained):
    """Refused while another process holds DIR/train.lock; a holder killed with SIGKILL leaves no lock."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from mt.rundir import locked\nwith locked(Path(sys.argv[1])):\n"
            "    print('held', flush=True); time.sleep(120)",
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        before = file_hashes(run)
        code, err = run_main(
            capsys,
            "train",
            "configs/toy.yaml",
            "--run-dir",
            str(run),
            *sets(trained[1] + ["train.max_steps=6"]),
        )
        assert code == 2 and err.splitlines()[-1].startswith(
            f"mt: error: {run} is being trained by mt train (pid {holder.pid}, since "
        )
        assert err.endswith(
            "; wait for it to finish or stop it (Ctrl-C saves and exits), or use another --run-dir\n"
        )
        assert file_hashes(run) == before
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    assert (
        main(["train", "configs/toy.yaml", "--run-dir", str(run), *sets(trained[1] + ["train.max_steps=6"])])
        == 0
    )
    assert torch.load(run / "last.pt", weights_only=True)["progress"]["step"] == 6
