"""mt/training/distributed.py: data-parallel training under torchrun on CPU (gloo, 2 processes) against
single-process accumulation; refusals of devices and backends (the precisions: test_devices.py)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mt.config import ModelConfig, RunConfig
from mt.model import Seq2Seq
from mt.plumbing.errors import ConfigError
from mt.plumbing.seeds import derived_seed
from mt.training.distributed import Ranks, start
from mt.training.session import learner

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "ddp_driver.py"
# 450-token batches give 27 batches an epoch: an odd number, so one rank gets none in the epoch's last
# update, and 16 updates of 2 batches cross into epoch 2
DDP = ["train.max_tokens=450", "train.valid_every=5", "model.dropout=0.0"]


def launch(
    out: Path, run: Path, sets: list[str], nproc: int, env: dict | None = None
) -> subprocess.CompletedProcess:
    """tests/ddp_driver.py under torchrun (nproc > 1) or plain python; weights after each step go to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    args = [str(DRIVER), str(out), "train", "configs/toy.yaml", "--run-dir", str(run)]
    for item in sets:
        args += ["--set", item]
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        launcher + args, capture_output=True, text=True, cwd=ROOT, env=full_env, timeout=600
    )


def losses(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def ddp_and_single(tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    sets = tiny + DDP + ["train.max_steps=16"]
    ddp = launch(root / "ddp-steps", root / "ddp", sets, nproc=2)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = launch(root / "single-steps", root / "single", sets + ["train.accumulate=2"], nproc=1)
    assert single.returncode == 0, single.stderr[-3000:]
    return root, sets


@pytest.mark.slow
def test_two_processes_equal_one_process_accumulating_their_batches(ddp_and_single):
    root, _ = ddp_and_single
    for step in range(1, 17):
        a = torch.load(root / "ddp-steps" / f"step-{step}.pt", weights_only=True)
        b = torch.load(root / "single-steps" / f"step-{step}.pt", weights_only=True)
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=f"step {step}: {name}")
    assert losses(root / "ddp") == losses(root / "single")  # losses and token counts are all-reduced
    log = (root / "ddp" / "train.log").read_text()
    assert "processes 2" in log and log.count("model: ") == 1  # one log, written by rank 0 alone
    assert log.count("epoch 1: 27 batches") == 1
    card = json.loads((root / "ddp" / "card.json").read_text())
    assert card["hardware"]["processes"] == 2 and card["training"]["epochs"] == 2


@pytest.mark.slow
def test_only_rank_zero_writes(ddp_and_single):
    root, _ = ddp_and_single
    files = sorted(p.name for p in (root / "ddp").iterdir())
    assert files == [
        "best.pt",
        "card.json",
        "config.yaml",
        "last.pt",
        "metrics.jsonl",
        "removed-pairs.tsv",
        "spm.model",
        "train.lock",
        "train.log",
    ]
    steps = [s for s, _ in losses(root / "ddp")]
    assert steps == sorted(set(steps))  # one metrics writer: no duplicated rows
    assert len(torch.load(root / "ddp" / "last.pt", weights_only=True)["rng"]) == 2  # both ranks' RNG states


@pytest.mark.slow
def test_resume_under_torchrun_is_exact(ddp_and_single):
    root, sets = ddp_and_single
    first = launch(root / "r-steps", root / "resumed", sets[:-1] + ["train.max_steps=7"], nproc=2)
    assert first.returncode == 0, first.stderr[-3000:]
    second = launch(root / "r-steps", root / "resumed", sets, nproc=2)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming" in second.stderr and "step 7" in second.stderr
    a = torch.load(root / "ddp" / "last.pt", weights_only=True)["model"]
    b = torch.load(root / "resumed" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert losses(root / "ddp") == losses(root / "resumed")


@pytest.mark.slow
def test_a_failing_rank_stops_the_others(tiny, tmp_path):
    result = launch(
        tmp_path / "steps",
        tmp_path / "run",
        tiny + DDP + ["train.max_steps=50"],
        nproc=2,
        env={"FAIL_RANK": "1"},
    )
    assert result.returncode != 0
    assert "RuntimeError: injected failure" in result.stderr  # rank 1's own error
    assert "mt: error: [rank 0] lost contact with the other processes (" in result.stderr
    assert "another rank probably failed: see its error above" in result.stderr


@pytest.mark.slow
def test_rank_zero_failing_to_prepare_the_corpus_stops_the_others_with_its_reason(
    tiny, small_corpus, tmp_path
):
    """Rank 0 alone learns the BPE and binarizes; the other ranks say that they wait, and when rank 0
    fails they say why and stop (a wait has no 10-minute limit: binarizing takes as long as the corpus)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in small_corpus.iterdir():
        (corpus / path.name).write_bytes(path.read_bytes())
    lines = (corpus / "train.en").read_bytes().split(b"\n")
    (corpus / "train.en").write_bytes(b"\n".join(lines[:2] + [b"caf\xe9"] + lines[3:]))
    sets = tiny[:-1] + [f"data.dir={corpus}"] + DDP + ["train.max_steps=5"]
    result = launch(tmp_path / "steps", tmp_path / "run", sets, nproc=2)
    reason = f"{corpus / 'train.en'}: line 3 is not valid UTF-8; re-encode the file as UTF-8"
    assert result.returncode != 0
    assert "rank 1 waits while rank 0 learns the joint BPE" in result.stderr
    assert f"mt: error: [rank 0] {reason}" in result.stderr  # rank 0's own error
    assert f"mt: error: [rank 1] rank 0 failed while it learns the joint BPE: {reason}" in result.stderr


def test_nccl_without_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError) as e:
        start(Ranks(0, 2, 0), "auto", "nccl")
    assert str(e.value) == "train.dist_backend: nccl needs CUDA GPUs and none is visible; use gloo (or auto)"


def test_more_processes_than_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError) as e:
        start(Ranks(2, 3, 2), "cuda", "auto")
    assert str(e.value) == (
        "torchrun started more processes on this node than there are GPUs (2 visible, local "
        "rank 2); use --nproc_per_node 2 or fewer"
    )


def test_single_process_needs_no_process_group():
    assert start(Ranks(), "cpu", "auto") == torch.device("cpu")
    assert not torch.distributed.is_initialized()


def first_dropout_mask(cfg: RunConfig, ranks: Ranks) -> tuple[int, torch.Tensor]:
    """(torch's seed, the first dropout mask drawn) of a new training's rank once `learner` has set it
    up, every rank having started from train.seed (distributed.start_training: the same weights)."""
    with torch.random.fork_rng():
        torch.manual_seed(cfg.train.seed)
        model = Seq2Seq(ModelConfig(d_model=8, n_heads=1, layers=1, d_ff=8, max_positions=8), vocab_size=10)
        learner(cfg, model, torch.device("cpu"), None, ranks)
        return torch.initial_seed(), torch.nn.functional.dropout(torch.ones(256), 0.5) > 0


def test_each_rank_draws_dropout_masks_of_its_own():
    """Under torchrun every rank reseeds from train.seed and its rank (the weights were drawn alike
    before), so no two ranks drop the same units; one process keeps train.seed."""
    cfg = RunConfig()
    drawn = [first_dropout_mask(cfg, Ranks(rank, 3, rank)) for rank in range(3)]
    assert [seed for seed, _ in drawn] == [derived_seed(cfg.train.seed, rank) for rank in range(3)]
    masks = [mask for _, mask in drawn]
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[0], masks[2])
    assert not torch.equal(masks[1], masks[2])
    assert first_dropout_mask(cfg, Ranks())[0] == cfg.train.seed


# one rank of a 2-process gloo group: train.seed's weights and the ranks' first dropout masks, gathered
TWO_RANKS = """
import json, torch
from mt.config import ModelConfig, RunConfig
from mt.model import Seq2Seq
from mt.training import distributed
from mt.training.session import learner
cfg, ranks = RunConfig(), distributed.ranks_from_env()
device = distributed.start_training(cfg.train, ranks)
model = Seq2Seq(ModelConfig(d_model=8, n_heads=1, layers=1, d_ff=8, max_positions=8), vocab_size=10)
learner(cfg, model, device, None, ranks)
mask = torch.nn.functional.dropout(torch.ones(256), 0.5) > 0
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
drawn = distributed.gather((weights.tolist(), mask.tolist()), ranks)
if ranks.main:
    print(json.dumps(drawn))
distributed.stop(together=True)
"""


@pytest.mark.slow  # two processes that import torch and join a group: about 25 s beside other work
def test_two_gloo_ranks_start_from_the_same_weights_and_drop_different_units():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_RANKS],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for rank in range(2)
    ]
    (out, err), (_, err1) = (rank.communicate(timeout=120) for rank in ranks)
    assert [rank.returncode for rank in ranks] == [0, 0], err[-2000:] + err1[-2000:]
    (weights0, mask0), (weights1, mask1) = json.loads(out)
    assert weights0 == weights1
    assert mask0 != mask1 and 64 < sum(mask0) < 192
