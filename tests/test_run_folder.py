"""mt/run/folder.py: reading a run directory checks its files and writes nothing (a replaced spm.model, a
bad metrics line), resuming needs the same config, DIR/train.lock refuses a second training, and
train.tensorboard mirrors metrics.jsonl."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import file_hashes, refused, run_main, sets

from mt.cli import main
from mt.config import TrainConfig
from mt.plumbing.errors import ConfigError, RunDirError
from mt.run.folder import locked
from mt.run.metrics_log import tensorboard_writer

ROOT = Path(__file__).resolve().parents[1]


def test_a_damaged_tokenizer_model_is_one_line(capsys, run):
    """Issue 16's second traceback: sentencepiece's RuntimeError on a damaged DIR/spm.model."""
    good = (run / "spm.model").read_bytes()
    (run / "spm.model").write_bytes(good[: len(good) // 2])
    translate = ["translate", "--run", str(run), "--input", str(run / "ref-test.txt")]
    assert refused(capsys, run, *translate) == (
        f"mt: error: {run}/spm.model: not the tokenizer best.pt was trained with (its "
        f"sha256 differs: damaged or replaced); restore the run's spm.model\n"
    )
    ckpt = torch.load(run / "best.pt", weights_only=True)  # a checkpoint that cannot vouch for its tokenizer
    del ckpt["tokenizer_sha256"]
    torch.save(ckpt, run / "best.pt")
    assert refused(capsys, run, *translate) == (
        f"mt: error: {run}/best.pt: damaged or not an mt checkpoint (tokenizer_sha256 is missing); delete "
        f"it or train again\n"
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


HOLD_LOCK = (
    "import sys; from pathlib import Path; from mt.run.folder import locked\n"
    "with locked(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.read()"
)


def test_a_lock_another_process_holds_refuses_this_one_in_one_line_naming_it(tmp_path):
    """Two real processes (two threads share a pid, so they cannot tell a lock named per process from
    one named per folder): while one holds DIR/train.lock, the other is refused with the exact line
    naming it; once it ends, the lock is this one's."""
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        holding = (run / "train.lock").read_text()
        with pytest.raises(RunDirError) as e:
            with locked(run):
                pass
    finally:
        holder.stdin.close()
        holder.wait(60)
    assert re.fullmatch(rf"mt train \(pid {holder.pid}, since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\)\n", holding)
    assert str(e.value) == (
        f"{run} is being trained by {holding.strip()}; wait for it to finish or stop it (Ctrl-C saves "
        f"and exits), or use another --run-dir"
    )
    with locked(run):
        assert (run / "train.lock").read_text().startswith(f"mt train (pid {os.getpid()}, since ")
    assert sorted(p.name for p in run.iterdir()) == ["train.lock"]


def test_a_second_training_on_a_run_directory_is_refused(capsys, run, trained):
    """Refused while another process holds DIR/train.lock; a holder killed with SIGKILL leaves no lock."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from mt.run.folder import locked\nwith locked(Path(sys.argv[1])):\n"
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


def test_resume_with_a_different_config_is_refused(capsys, trained, tmp_path):
    src, overrides = trained
    run = tmp_path / "run"
    shutil.copytree(src, run)
    before = file_hashes(run)
    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(run),
        *sets(
            overrides
            + ["train.lr=0.005", "model.d_ff=128", "train.max_steps=8", "train.valid_beam=4", "decode.beam=4"]
        ),
    )
    assert code == 2  # decode.* may change (translate's defaults), valid_beam may not (what best.pt means)
    assert err.splitlines()[-1] == (
        f"mt: error: {run} holds a run with a different config (model.d_ff: 64 -> 128, "
        f"train.lr: 0.002 -> 0.005, train.valid_beam: 1 -> 4); resume with the same config, use another "
        f"--run-dir, or --force-new to start "
        f"over"
    )
    assert file_hashes(run) == before

    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(run),
        "--force-new",
        *sets(overrides + ["model.d_ff=128"]),
    )
    assert code == 0, err
    archived = [p for p in run.iterdir() if p.name.startswith("replaced-")]
    assert len(archived) == 1 and file_hashes(archived[0]) == {
        k: v for k, v in before.items() if k in {p.name for p in archived[0].iterdir()}
    }
    assert torch.load(run / "last.pt", weights_only=True)["config"]["model"]["d_ff"] == 128


@pytest.mark.slow
def test_tensorboard_events_read_back_equal_metrics_jsonl(tiny, tmp_path, capsys):
    """train.tensorboard: every number of every metrics.jsonl row is a scalar of the same name at the
    row's step (stored as float32); rank 0 writes it (tests/test_distributed.py lists rank 0's files)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    overrides = [
        *tiny,
        "train.max_steps=12",
        "train.valid_every=6",
        "train.log_every=3",
        "train.tensorboard=true",
    ]
    assert (
        run_main(
            capsys,
            "train",
            "configs/toy.yaml",
            "--run-dir",
            str(run),
            *sets(overrides),
        )[0]
        == 0
    )
    events = EventAccumulator(str(run))
    events.Reload()
    board = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    wanted: dict[str, list] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and type(value) in (int, float):
                wanted.setdefault(key, []).append((row["step"], pytest.approx(value, rel=1e-6, abs=1e-30)))
    assert {"loss", "lr", "tokens_per_s", "val_bleu", "val_chrf", "val_loss"} <= set(wanted)
    assert board == wanted


def test_tensorboard_without_the_package_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ConfigError) as e:
        tensorboard_writer(TrainConfig(tensorboard=True))
    assert str(e.value) == (
        "train.tensorboard: needs the tensorboard package; pip install 'mt[tensorboard]' (or tensorboard), "
        "or set train.tensorboard: false"
    )
    assert tensorboard_writer(TrainConfig()) is None
