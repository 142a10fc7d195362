"""Never lose work, end to end: a stopped and resumed run equals one trained in one go, a SIGKILL while
a checkpoint is written resumes from the previous one, and SIGTERM/SIGINT checkpoint and say how to
resume."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import metrics, mt_cli, weights

from mt.training.step import train_step
from mt.training.train import train

ROOT = Path(__file__).resolve().parents[1]


def train_losses(run: Path) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["nll"]) for r in metrics(run) if "loss" in r]


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def resumed_after_a_lost_save(tmp_path: Path, tiny_config, *extra: str) -> tuple[Path, Path]:
    """4 updates in one go, and 1, then 2 more whose checkpoint is lost (last.pt put back at step 1, as
    a kill before the save leaves it), then resumed to 4: (the one-go run, the resumed run)."""
    straight, run = tmp_path / "straight", tmp_path / "run"
    train(tiny_config("train.max_steps=4", *extra), straight)
    train(tiny_config("train.max_steps=1", *extra), run)
    at_one = (run / "last.pt").read_bytes()
    train(tiny_config("train.max_steps=3", *extra), run)
    (run / "last.pt").write_bytes(at_one)
    assert train(tiny_config("train.max_steps=4", *extra), run)["step"] == 4
    return straight, run


def test_a_resumed_run_equals_one_go(tmp_path, tiny_config):
    """The fast path, with nothing optional installed (test_stop_and_resume_equals_one_go crosses an
    epoch): the same weights and losses as one go, the redone steps logged once."""
    straight, run = resumed_after_a_lost_save(tmp_path, tiny_config)
    assert_same_weights(weights(straight / "last.pt"), weights(run / "last.pt"))
    assert train_losses(straight) == train_losses(run) and [s for s, _, _ in train_losses(run)] == [2, 4]


def test_tensorboard_shows_each_step_of_a_resumed_run_once(tmp_path, tiny_config):
    """TensorBoard's losses, read back from the three sessions' event files, are metrics.jsonl's, the
    redone steps 2-3 once (purge_step)."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    EventAccumulator = accumulator.EventAccumulator
    straight, run = resumed_after_a_lost_save(tmp_path, tiny_config, "train.tensorboard=true")
    assert train_losses(straight) == train_losses(run)
    for folder in (straight, run):
        events = EventAccumulator(str(folder))
        events.Reload()
        assert len(list(folder.glob("events.out.tfevents.*"))) == (1 if folder == straight else 3)
        losses = [(e.step, e.value) for e in events.Scalars("loss")]
        assert losses == [(step, pytest.approx(loss, rel=1e-6)) for step, loss, _ in train_losses(run)]


def test_dropout_start_trains_its_share_without_dropout_and_resumes_across_the_switch(
    tmp_path, tiny_config, monkeypatch
):
    """train.dropout_start=0.5 of 6 updates: updates 1-3 are those of a run with no dropout, 4-6 are not; a
    run killed after update 2 (its last.pt from train.save_every) resumes across the switch to the same
    weights and losses as one go."""
    logged = ["train.log_every=1", "train.valid_every=100", "train.tune=false", "model.dropout=0.3"]
    scheduled = [*logged, "train.max_steps=6", "train.dropout_start=0.5"]
    straight, none, killed = tmp_path / "straight", tmp_path / "none", tmp_path / "killed"
    train(tiny_config(*scheduled), straight)
    train(tiny_config(*logged, "train.max_steps=6", "model.dropout=0.0"), none)
    assert train_losses(straight)[:3] == train_losses(none)[:3]
    assert all(a[1] != b[1] for a, b in zip(train_losses(straight)[3:], train_losses(none)[3:]))
    updates = []

    def dies_at_the_third(*args, **kwargs):
        updates.append(1)
        if len(updates) == 3:
            raise RuntimeError("killed")
        return train_step(*args, **kwargs)

    monkeypatch.setattr("mt.training.train.train_step", dies_at_the_third)
    with pytest.raises(RuntimeError, match="killed"):
        train(tiny_config(*scheduled, "train.save_every=1"), killed)
    monkeypatch.undo()
    assert torch.load(killed / "last.pt", weights_only=True)["progress"]["step"] == 2
    train(tiny_config(*scheduled, "train.save_every=1"), killed)
    assert_same_weights(weights(straight / "last.pt"), weights(killed / "last.pt"))
    assert train_losses(straight) == train_losses(killed)


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
    # The second checkpoint writes a few bytes of its temporary file, then the process SIGKILLs itself.
    driver = (
        "import os, signal, sys\n"
        "from mt.run import checkpoint\n"
        "from mt.plumbing.files import atomic_write\n"
        "real, calls = checkpoint.write_bytes, []\n"
        "def dying_write(path, data):\n"
        "    calls.append(1)\n"
        "    if len(calls) == 2:\n"
        "        with atomic_write(path) as f:\n"
        "            f.write(b'half a checkpoint'); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "    real(path, data)\n"
        "checkpoint.write_bytes = dying_write\n"
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


def separate_qkv(ckpt: dict) -> dict:
    """A checkpoint as mt wrote it before self-attention's fused projection: each self_attn's qkv_proj
    split into q_proj and kv_proj, and Adam's moments in that order (q weight, q bias, kv weight, kv bias)."""
    model, state, order = {}, ckpt["optimizer"]["state"], []
    for key, value in ckpt["model"].items():
        if ".self_attn.qkv_proj." in key:
            q, kv = value.split([value.size(0) // 3, 2 * value.size(0) // 3])
            model[key.replace("qkv_proj", "q_proj")], model[key.replace("qkv_proj", "kv_proj")] = q, kv
        else:
            model[key] = value
    tied = ("tgt_embed.weight", "out_proj.weight") if ckpt["config"]["model"]["tie_embeddings"] else ()
    names = [k for k in ckpt["model"] if k not in tied]  # Adam's order: the parameters, each once
    for i, name in enumerate(names):
        if name.endswith("qkv_proj.weight"):
            j = i + 1  # its bias
            split = {
                n: {
                    k: v.split([v.size(0) // 3, 2 * v.size(0) // 3]) if v.dim() else (v, v)
                    for k, v in state[n].items()
                }
                for n in (i, j)
            }
            order += [{k: v[0] for k, v in split[i].items()}, {k: v[0] for k, v in split[j].items()}]
            order += [{k: v[1] for k, v in split[i].items()}, {k: v[1] for k, v in split[j].items()}]
        elif not name.endswith("qkv_proj.bias"):
            order.append(state[i])
    group = ckpt["optimizer"]["param_groups"][0]
    optimizer = {
        "state": dict(enumerate(order)),
        "param_groups": [{**group, "params": list(range(len(order)))}],
    }
    return {**ckpt, "model": model, "optimizer": optimizer}


@pytest.mark.slow
def test_a_run_saved_with_separate_q_and_kv_projections_resumes_as_if_never_stopped(tmp_path, tiny_config):
    """Runs trained before the fused q/k/v projection keep their work: the old last.pt resumes with the
    same weights, Adam moments and losses as the new one."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(tiny_config("train.max_steps=20"), straight)
    train(tiny_config("train.max_steps=10"), resumed)
    ckpt = torch.load(resumed / "last.pt", weights_only=True)
    assert "encoder.0.self_attn.qkv_proj.weight" in ckpt["model"]
    torch.save(separate_qkv(ckpt), resumed / "last.pt")
    assert "encoder.0.self_attn.q_proj.weight" in weights(resumed / "last.pt")
    train(tiny_config("train.max_steps=20"), resumed)
    assert_same_weights(weights(straight / "last.pt"), weights(resumed / "last.pt"))
    assert train_losses(straight) == train_losses(resumed)


def test_a_run_saved_before_eval_and_auto_coverage_resumes_as_if_never_stopped(tmp_path, tiny_config):
    """A last.pt written before eval.bleu_tokenize and tokenizer.character_coverage 0 (auto) existed,
    with the coverage it was learned with (1.0) and no eval section, resumes: the keys it lacks take
    their defaults, and a resumed run keeps its spm.model whatever the coverage says."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(tiny_config("train.max_steps=20"), straight)
    train(tiny_config("train.max_steps=10"), resumed)
    ckpt = torch.load(resumed / "last.pt", weights_only=True)
    del ckpt["config"]["eval"]
    ckpt["config"]["tokenizer"]["character_coverage"] = 1.0
    torch.save(ckpt, resumed / "last.pt")
    train(tiny_config("train.max_steps=20"), resumed)
    assert_same_weights(weights(straight / "last.pt"), weights(resumed / "last.pt"))
    assert train_losses(straight) == train_losses(resumed)


def test_too_few_models_to_average_warns_and_a_lost_card_record_is_rewritten(tmp_path, tiny_config, caplog):
    """A training that ends with fewer kept models than train.average_last still writes its card; a
    finished run whose card lost its training record (stopped before writing it) gets it back."""
    cfg = tiny_config("train.max_steps=14", "train.keep_last=5", "train.average_last=5", "train.tune=false")
    with caplog.at_level(logging.WARNING, logger="mt"):
        assert train(cfg, tmp_path)["step"] == 14
    assert f"{tmp_path}: 2 kept checkpoints (ckpt-*.pt), fewer than the 5 to average" in caplog.text
    assert "no averaged.pt written" in caplog.text
    assert not (tmp_path / "averaged.pt").exists()
    card = json.loads((tmp_path / "card.json").read_text())
    record = card.pop("training")
    assert record["steps"] == 14 and record["multiply_adds"] > 0
    (tmp_path / "card.json").write_text(json.dumps(card))
    before = metrics(tmp_path)
    assert train(cfg, tmp_path)["step"] == 14
    rewritten = json.loads((tmp_path / "card.json").read_text())["training"]
    same = ["steps", "epochs", "multiply_adds", "pipeline_multiply_adds", "best_step", "best_val_bleu"]
    assert {k: rewritten[k] for k in same} == {k: record[k] for k in same}
    assert metrics(tmp_path) == before  # no update taken, nothing logged twice
