"""scripts/train_profile.py, the op-family profile of `bench_train.py --profile`: which family each op,
record and backward node belongs to, and that a profiled update accounts for its whole wall time."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import mt.model
import mt.training.loss
from mt.batching import make_batch
from mt.config import ModelConfig, TrainConfig
from mt.model import Seq2Seq
from mt.training.step import train_step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from train_profile import FAMILIES, family_of, labelled, op_families, outermost_family  # noqa: E402


@pytest.mark.parametrize(
    "name, family",
    [
        ("aten::addmm", "matmul"),
        ("aten::linear", "matmul"),
        ("autograd::engine::evaluate_function: AddmmBackward0", "matmul"),
        ("autograd::engine::evaluate_function: MmBackward0", "matmul"),
        ("aten::scaled_dot_product_attention", "attention"),
        ("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0", "attention"),
        ("aten::layer_norm", "norms"),
        ("autograd::engine::evaluate_function: NativeLayerNormBackward0", "norms"),
        ("autograd::engine::evaluate_function: _SmoothedCrossEntropyBackward", "loss"),
        ("mt.training.loss", "loss"),
        ("mt.dropout", "dropout"),
        ("mt.grad_clip", "grad clip"),
        ("Optimizer.step#Adam.step", "optimizer"),
        ("Optimizer.zero_grad#Adam.zero_grad", "optimizer"),
        ("aten::embedding", "embedding"),
        ("autograd::engine::evaluate_function: EmbeddingBackward0", "embedding"),
        ("aten::add", None),
        ("autograd::engine::evaluate_function: MulBackward0", None),
    ],
)
def test_each_name_has_its_family(name, family):
    assert family_of(name) == family


def event(*names: str) -> SimpleNamespace:
    """A profiler event nested in the events `names` name, outermost first."""
    found = None
    for name in names:
        found = SimpleNamespace(name=name, cpu_parent=found)
    return found


def test_an_op_counts_for_its_outermost_family_and_fused_kernels_for_compiled():
    assert outermost_family(event("aten::linear", "aten::addmm", "aten::empty")) == "matmul"
    assert outermost_family(event("mt.dropout", "aten::mul")) == "dropout"
    assert outermost_family(event("aten::add")) == "elementwise"
    region = "Torch-Compiled Region: 0/0"
    assert outermost_family(event(region, "CompiledFunction")) == "compiled"  # its fused kernels
    assert outermost_family(event(region, "CompiledFunction", "aten::mm")) == "matmul"  # an extern call
    backward = "autograd::engine::evaluate_function: CompiledFunctionBackward"
    assert outermost_family(event(backward, "aten::mm")) == "matmul"
    assert outermost_family(event(backward)) == "compiled"


def test_a_profiled_update_is_shared_out_whole():
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(d_model=32, n_heads=4, layers=2, d_ff=64, dropout=0.1), 40).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12], [13, 14, 15]])

    def step(batches):
        return train_step(model, optimizer, batches, TrainConfig(clip_norm=1.0), 1e-3)

    with labelled():
        step([batch])  # the first update, as bench_train warms every batch shape
        shares = op_families(step, [batch, batch])
    assert list(shares) == FAMILIES
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.02)
    assert all(shares[f] > 0 for f in ("matmul", "attention", "norms", "loss", "dropout", "optimizer"))
    originals = (
        mt.model.Dropout.forward,
        mt.training.loss.label_smoothed_loss,
        torch.nn.utils.clip_grad_norm_,
    )
    with labelled():
        assert mt.model.Dropout.forward is not originals[0]
    assert (
        mt.model.Dropout.forward,
        mt.training.loss.label_smoothed_loss,
        torch.nn.utils.clip_grad_norm_,
    ) == originals
