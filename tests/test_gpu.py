"""The CUDA paths, run where a GPU is visible (`pytest -m gpu`); skipped everywhere else, CI included."""

import json
import warnings
from pathlib import Path

import pytest
import torch

from mt.batching import make_batch, source_batch
from mt.config import ModelConfig, TrainConfig, load_config
from mt.decode import Sources, beam_search, greedy_decode
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.training.step import train_step
from mt.training.train import train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[1]
CUDA = [
    "train.device=cuda",
    "train.max_steps=60",
    "train.valid_every=30",
    "train.log_every=10",
    "train.lr=0.005",
]


def train_losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_toy_training_loss_falls(tmp_path, tiny, precision):
    run = tmp_path / precision
    train(load_config(ROOT / "configs/toy.yaml", tiny + CUDA + [f"train.precision={precision}"]), run)
    losses = train_losses(run)
    assert len(losses) == 6 and losses[-1] < losses[0] - 1.0
    card = json.loads((run / "card.json").read_text())
    assert card["hardware"]["device"] == "cuda" and card["training"]["steps"] == 60


def test_resume_on_cuda(tmp_path, tiny):
    """Within CUDA's determinism (atomics in some backward kernels), 30 + 30 steps match 60 in one go."""
    sets = tiny + CUDA + ["model.dropout=0.1"]
    train(load_config(ROOT / "configs/toy.yaml", sets), tmp_path / "straight")
    train(load_config(ROOT / "configs/toy.yaml", sets + ["train.max_steps=30"]), tmp_path / "resumed")
    train(load_config(ROOT / "configs/toy.yaml", sets), tmp_path / "resumed")
    assert train_losses(tmp_path / "straight") == pytest.approx(train_losses(tmp_path / "resumed"), abs=2e-3)
    a, b = (torch.load(tmp_path / r / "last.pt", weights_only=True)["model"] for r in ("straight", "resumed"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-4)


def test_cached_and_uncached_decoding_agree_on_cuda(trained_model, tokenizer, toy):
    model = trained_model.to("cuda")
    src, mask = (t.cuda() for t in source_batch(tokenizer.encode(toy["test"][0][:16])))
    for search in (
        lambda c: greedy_decode(model, Sources(src, mask), use_cache=c),
        lambda c: [h[0] for h in beam_search(model, Sources(src, mask), DecodeConfig(beam=4), use_cache=c)],
    ):
        assert [h.tokens for h in search(True)] == [h.tokens for h in search(False)]
    trained_model.to("cpu")


def test_cpu_and_cuda_give_the_same_greedy_translations(trained_model, tokenizer, toy):
    src, mask = source_batch(tokenizer.encode(toy["test"][0][:16]))
    on_cpu = greedy_decode(trained_model.to("cpu"), Sources(src, mask))
    on_gpu = greedy_decode(trained_model.to("cuda"), Sources(src.cuda(), mask.cuda()))
    trained_model.to("cpu")
    assert [h.tokens for h in on_cpu] == [h.tokens for h in on_gpu]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_training_step_syncs_with_the_host_once(precision):
    """Counters stay on the device: the update's one sync is reading its losses and gradient norm."""
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(d_model=64, n_heads=4, layers=2, d_ff=128), 100).cuda()
    optimizer = torch.optim.Adam(model.parameters(), fused=True)
    batches = [make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12], [13, 14, 15]]).pin_memory() for _ in range(2)]
    cfg = TrainConfig(precision=precision)
    device = torch.device("cuda")
    train_step(model, optimizer, batches, cfg, 1e-3, device=device)  # warm-up: lazy initialisation may sync
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            train_step(model, optimizer, batches, cfg, 1e-3, device=device)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # the first use of the debug mode in a process also warns that it is a prototype: not a sync
    syncs = [w for w in caught if "called a synchronizing" in str(w.message)]
    assert len(syncs) == 1, [str(w.message) for w in syncs]
