"""The training objective: label-smoothed cross entropy over non-pad target tokens (its gradient
written out by hand: the loss is the largest single cost of a CPU training step at V = 8000), and the
teacher-forced loss of a batch.
"""

from __future__ import annotations


import torch
from torch import Tensor

from mt.batching import Batch
from mt.tokenizer import PAD


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row label-smoothed CE and NLL with the gradient written out: softmax - smoothed target.

    Autograd through log_softmax + gather + mean makes about eight passes over the (N, V) logits;
    this makes three, which is a tenth of a CPU training step at V = 8000.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        nll = lse - logits.gather(1, target[:, None]).squeeze(1)  # (N,)
        uniform = lse - logits.mean(dim=-1)  # (N,) mean over V of -log p
        ctx.save_for_backward(logits, target)
        ctx.epsilon = epsilon
        return (1.0 - epsilon) * nll + epsilon * uniform, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        logits, target = ctx.saved_tensors
        eps, V = ctx.epsilon, logits.size(1)
        grad = torch.softmax(logits, dim=-1)  # (N, V)
        grad.mul_((grad_loss + grad_nll)[:, None]).sub_((eps / V) * grad_loss[:, None])
        grad.scatter_add_(1, target[:, None], (-(1.0 - eps) * grad_loss - grad_nll)[:, None])
        return grad, None, None


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross entropy and summed NLL over non-pad targets.

    The smoothed target puts 1 - epsilon on the gold token plus epsilon / V on every one of the V
    entries (gold included), as `F.cross_entropy(label_smoothing=epsilon)` does.

    Args:
        logits: (N, V); target: (N,) ids, PAD positions ignored.
    Returns:
        (loss_sum, nll_sum), both scalars; divide by the number of non-pad targets.
    """
    loss, nll = _SmoothedCrossEntropy.apply(logits.float(), target, epsilon)  # (N,) each
    real = target != PAD
    if loss.is_cuda:  # boolean indexing would wait for the GPU to count the rows: mask instead
        return loss.masked_fill(~real, 0.0).sum(), nll.masked_fill(~real, 0.0).sum()
    return loss[real].sum(), nll[real].sum()  # on CPU, the summation order mt's figures were measured with


def batch_loss(model: torch.nn.Module, batch: Batch, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and NLL of a batch's target tokens, teacher-forced."""
    logits = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V)
    return label_smoothed_loss(logits.flatten(0, 1), batch.tgt_out.flatten(), epsilon)
