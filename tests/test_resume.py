"""Never lose work: exact resume, crash-safe checkpoints, signals, non-finite losses, safe loading."""

import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import mt.step
import mt.train
from mt.checkpoint import rng_state
from mt.config import load_config
from mt.train import TrainingError, train

ROOT = Path(__file__).resolve().parents[1]
# an epoch is 15 updates of 2 batches, so runs cross epochs; dropout makes the RNG state matter
RESUME = ["train.accumulate=2", "train.warmup_steps=5", "train.valid_every=7", "model.dropout=0.1"]


@pytest.fixture
def tiny_resume(tiny):
    return tiny + RESUME


@pytest.fixture
def tiny_config(tiny_resume):
    return lambda *extra: load_config(ROOT / "configs/toy.yaml", tiny_resume + list(extra))


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def train_losses(run: Path) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["nll"]) for r in metrics(run) if "loss" in r]


def weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["model"]


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def mt_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mt", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
        **kw,
    )


@pytest.mark.slow
def test_stop_and_resume_equals_one_go(tmp_path, tiny_config):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(tiny_config("train.max_steps=20"), straight)
    first = train(tiny_config("train.max_steps=10"), resumed)
    assert first["step"] == 10
    second = train(tiny_config("train.max_steps=20"), resumed)
    assert second["step"] == 20

    assert_same_weights(weights(straight / "last.pt"), weights(resumed / "last.pt"))
    assert train_losses(straight) == train_losses(resumed)
    epochs = [r["epoch"] for r in metrics(straight) if "loss" in r]
    assert epochs[4] == 1 and epochs[-1] == 2  # resumed at step 10, mid-epoch, then crossed into epoch 2
    progress = torch.load(resumed / "last.pt", weights_only=True)["progress"]
    assert (progress["step"], progress["epoch"], progress["batch_index"]) == (20, 2, 10)
    # re-running a finished run trains no further and keeps its metrics
    before = metrics(resumed)
    assert train(tiny_config("train.max_steps=20"), resumed)["step"] == 20
    assert metrics(resumed) == before


@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_resumes_from_the_previous_one(tmp_path, tiny_resume):
    # The second torch.save writes a few bytes of the temporary file, then the process SIGKILLs itself.
    driver = (
        "import os, signal, sys, torch\n"
        "real, calls = torch.save, []\n"
        "def dying_save(obj, f):\n"
        "    calls.append(1)\n"
        "    if len(calls) == 2:\n"
        "        f.write(b'half a checkpoint'); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "    real(obj, f)\n"
        "torch.save = dying_save\n"
        "from mt.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    run, straight = tmp_path / "run", tmp_path / "straight"
    args = ["train", "configs/toy.yaml", "--run-dir", str(run)]
    for item in tiny_resume + ["train.max_steps=14", "train.save_every=4", "train.valid_every=100"]:
        args += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run(
        [sys.executable, "-c", driver, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )
    assert killed.returncode == -signal.SIGKILL
    assert (run / ".last.pt.tmp").read_bytes() == b"half a checkpoint"
    assert torch.load(run / "last.pt", weights_only=True)["progress"]["step"] == 4  # the intact first save
    assert max(r["step"] for r in metrics(run)) >= 8  # metrics ran ahead of the checkpoint

    again = mt_cli(*args)
    assert again.returncode == 0, again.stderr
    assert f"resuming {run}/last.pt: step 4, epoch 1 (batch 8), no validation yet" in again.stderr
    args[3] = str(straight)
    assert mt_cli(*args).returncode == 0
    assert_same_weights(weights(straight / "last.pt"), weights(run / "last.pt"))
    assert train_losses(straight) == train_losses(run)


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_checkpoints_and_says_how_to_resume(tmp_path, sig, code, tiny_resume):
    run = tmp_path / "run"
    args = ["train", "configs/toy.yaml", "--run-dir", str(run)]
    for item in tiny_resume + ["train.max_steps=100000", "train.valid_every=100000"]:
        args += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    deadline = time.time() + 300
    while not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 2):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == code, stderr
    step = torch.load(run / "last.pt", weights_only=True)["progress"]["step"]
    assert step >= 4
    assert stderr.rstrip().splitlines()[-1] == (
        f"mt: training stopped by {signal.Signals(sig).name} at step {step}; resume with: "
        f"mt train {' '.join(args[1:4])} " + " ".join(f"--set {s}" for s in args[5::2])
    )
    assert "Traceback" not in stderr


def test_malicious_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    run = tmp_path / "run"
    run.mkdir()
    torch.save({"model": Payload(), "config": {}, "vocab_size": 1}, run / "best.pt")
    result = mt_cli("translate", "--run", str(run), input="Hallo\n")
    assert result.returncode == 2
    assert result.stderr == (
        f"mt: error: {run / 'best.pt'}: refused: it holds objects other than tensors and "
        f"plain data, which could run code; only load checkpoints written by mt\n"
    )
    assert not marker.exists()
    with open(run / "best.pt", "rb") as f:  # the file really is armed: a plain unpickler runs it
        torch.load(f, weights_only=False)
    assert marker.exists()


def test_checkpoints_hold_only_plain_data(tmp_path, tiny_config):
    run = tmp_path / "run"
    train(tiny_config("train.max_steps=2"), run)
    ckpt = torch.load(run / "last.pt", weights_only=True)
    assert set(ckpt) == {
        "model",
        "optimizer",
        "scaler",
        "config",
        "vocab_size",
        "tokenizer_sha256",
        "progress",
        "rng",
    }
    assert ckpt["tokenizer_sha256"] == hashlib.sha256((run / "spm.model").read_bytes()).hexdigest()
    assert len(ckpt["rng"]) == 1 and set(ckpt["rng"][0]) >= {"python", "torch"}  # one state per process
    assert ckpt["progress"]["step"] == 2 and ckpt["progress"]["batch_index"] == 4

    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, (str, int)) and plain(v) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return all(plain(v) for v in x)
        return x is None or isinstance(x, (bool, int, float, str, torch.Tensor))

    assert plain(ckpt)


def test_nonfinite_loss_skips_the_update(tmp_path, monkeypatch, tiny_config):
    real, calls = mt.step.batch_loss, []

    def flaky(model, batch, eps):
        calls.extend([1] if model.training else [])  # validation computes losses too
        loss, nll = real(model, batch, eps)
        return (loss * float("nan"), nll) if len(calls) == 5 and model.training else (loss, nll)  # 3rd update

    monkeypatch.setattr(mt.step, "batch_loss", flaky)
    run = tmp_path / "run"
    result = train(tiny_config("train.max_steps=6", "train.accumulate=2"), run)
    assert result["step"] == 6 and len(calls) == 14  # 7 updates tried, 6 made
    skipped = [r for r in metrics(run) if "skipped_update" in r]
    assert skipped == [{"step": 2, "skipped_update": "non-finite", "nonfinite_total": 1}]
    assert all(torch.isfinite(w).all() for w in weights(run / "last.pt").values())


def test_diverging_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, tiny_config):
    real, calls = mt.step.batch_loss, []

    def diverging(model, batch, eps):
        calls.extend([1] if model.training else [])
        loss, nll = real(model, batch, eps)
        return (
            (loss * float("inf"), nll) if len(calls) > 8 and model.training else (loss, nll)
        )  # after 4 updates

    monkeypatch.setattr(mt.step, "batch_loss", diverging)
    run = tmp_path / "run"
    with pytest.raises(TrainingError) as e:
        train(tiny_config("train.max_steps=50", "train.save_every=4", "train.max_nonfinite=3"), run)
    assert str(e.value) == (
        f"the loss was not finite in 3 updates in a row after step 4 (train.max_nonfinite); "
        f"{run}/last.pt is untouched; lower train.lr or check the data"
    )
    assert torch.load(run / "last.pt", weights_only=True)["progress"]["step"] == 4
    assert len([r for r in metrics(run) if "skipped_update" in r]) == 3


def test_python_rng_state_survives_weights_only_loading(tmp_path):
    state = rng_state(torch.device("cpu"))
    torch.save({"rng": state}, tmp_path / "r.pt")
    loaded = torch.load(tmp_path / "r.pt", weights_only=True)["rng"]
    assert loaded["python"] == state["python"] and torch.equal(loaded["torch"], state["torch"])
    assert pickle.dumps(loaded["python"]) == pickle.dumps(state["python"])
