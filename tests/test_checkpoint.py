"""mt/run/checkpoint.py: what a checkpoint holds (plain data only, RNG states included), loading that
refuses code, damage and another config's weights, and averaging the last checkpoints."""

import hashlib
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from conftest import mt_cli, run_main

from mt.config import RunConfig, config_to_dict, load_config
from mt.model import Seq2Seq
from mt.plumbing.errors import RunDirError
from mt.run.checkpoint import rng_state, write_average
from mt.training.train import train

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


def test_malicious_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    run = tmp_path / "run"
    run.mkdir()
    torch.save({"model": Payload(), "config": {}, "vocab_size": 1}, run / "best.pt")
    result = mt_cli("translate", "--run", str(run), stdin="Hallo\n")
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


def test_python_rng_state_survives_weights_only_loading(tmp_path):
    state = rng_state(torch.device("cpu"))
    torch.save({"rng": state}, tmp_path / "r.pt")
    loaded = torch.load(tmp_path / "r.pt", weights_only=True)["rng"]
    assert loaded["python"] == state["python"] and torch.equal(loaded["torch"], state["torch"])
    assert pickle.dumps(loaded["python"]) == pickle.dumps(state["python"])


def test_checkpoint_from_an_incompatible_config(capsys, trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    ckpt = torch.load(run / "best.pt", weights_only=True)
    ckpt["config"]["model"]["layers"] = 2
    torch.save(ckpt, run / "best.pt")
    code, err = run_main(capsys, "translate", "--run", str(run))
    assert code == 2
    assert err == (
        f"mt: error: {run}/best.pt: weights do not fit the model its config describes (32 missing, e.g. "
        f"encoder.1.self_attn.qkv_proj.weight); the checkpoint comes from an incompatible config\n"
    )


def test_not_a_checkpoint(capsys, tmp_path):
    (tmp_path / "best.pt").write_bytes(b"this is not a checkpoint")
    code, err = run_main(capsys, "translate", "--run", str(tmp_path))
    assert code == 2
    assert err == f"mt: error: {tmp_path}/best.pt: damaged or not a checkpoint; delete it or train again\n"
