"""mt/training/loss.py: the label-smoothed loss against a hand computation and torch's cross entropy (values
and gradients), with padding contributing nothing."""

import math

import pytest
import torch
import torch.nn.functional as F

from mt.config import PAD
from mt.training.loss import label_smoothed_loss


def test_loss_matches_hand_computation():
    # one target over V = 3 with logits (0, ln 2, ln 5): p = (1/8, 2/8, 5/8), gold = 1
    logits = torch.tensor([[0.0, math.log(2.0), math.log(5.0)]])
    target = torch.tensor([1])
    nll = -math.log(2 / 8)
    uniform = -(math.log(1 / 8) + math.log(2 / 8) + math.log(5 / 8)) / 3
    loss, nll_sum = label_smoothed_loss(logits, target, 0.3)
    assert loss.item() == pytest.approx(0.7 * nll + 0.3 * uniform, rel=1e-6)
    assert nll_sum.item() == pytest.approx(nll, rel=1e-6)


@pytest.mark.parametrize("compiling", [False, True])  # under torch.compile pads are masked, not indexed out
def test_padding_contributes_nothing(monkeypatch, compiling):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    logits = torch.randn(4, 7)
    target = torch.tensor([3, PAD, 5, PAD])
    loss, nll = label_smoothed_loss(logits, target, 0.1)
    loss_real, nll_real = label_smoothed_loss(logits[[0, 2]], target[[0, 2]], 0.1)
    torch.testing.assert_close(loss, loss_real)
    torch.testing.assert_close(nll, nll_real)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
def test_loss_and_gradient_match_torch_cross_entropy(epsilon):
    torch.manual_seed(0)
    logits = torch.randn(30, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (30,))
    target[:4] = PAD
    loss, nll = label_smoothed_loss(logits, target, epsilon)
    ref = F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=epsilon, reduction="sum")
    ref_nll = F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(loss.double(), ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(nll.double(), ref_nll, rtol=1e-6, atol=1e-6)
    ours = torch.autograd.grad(loss + 0.5 * nll, logits)[0]
    theirs = torch.autograd.grad(ref + 0.5 * ref_nll, logits)[0]
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("chunk", [2**28, 7 * 11])  # one chunk; chunks of 7 rows (V = 11), the last short
def test_bf16_logits_are_read_in_fp32_without_a_whole_copy(monkeypatch, chunk):
    """Logits from autocast (bf16) give the fp32 loss of the same (rounded) values, and a gradient in
    bf16 equal to fp32's rounded; however many chunks the rows are read in."""
    monkeypatch.setattr("mt.training.loss.LOGITS_IN_FP32_AT_ONCE", chunk)
    torch.manual_seed(0)
    half = (3 * torch.randn(30, 11)).bfloat16().requires_grad_()
    full = half.detach().float().requires_grad_()
    target = torch.randint(1, 11, (30,))
    target[::4] = PAD
    for logits in (half, full):
        loss, nll = label_smoothed_loss(logits, target, 0.1)
        (loss + 0.5 * nll).backward()
        assert loss.dtype == nll.dtype == torch.float32
    torch.testing.assert_close(loss, label_smoothed_loss(half, target, 0.1)[0])  # fp32 maths on bf16 values
    assert half.grad.dtype == torch.bfloat16
    torch.testing.assert_close(half.grad, full.grad.bfloat16())
