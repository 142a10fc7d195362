"""The training objective: label-smoothed cross entropy over non-pad target tokens (its gradient
written out by hand: the loss is the largest single cost of a CPU training step at V = 8000). A batch's
teacher-forced loss is mt.training.step's `batch_loss`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mt.config import PAD

LOGITS_IN_FP32_AT_ONCE = 2**28  # logits at a time in fp32 when they come in bf16 or fp16 (1 GiB)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row label-smoothed CE and NLL with the gradient written out: softmax - smoothed target.

    Autograd through log_softmax + gather + mean makes about eight passes over the (N, V) logits;
    this makes three, which is a tenth of a CPU training step at V = 8000. Logits in bf16 or fp16
    (autocast) are kept as they are for the backward pass and read in fp32 a chunk of rows at a
    time, never copied to fp32 whole (3 GiB for 25k tokens at V = 32k).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        rows = _chunk_rows(logits)
        stats = []
        for chunk, gold in zip(logits.split(rows), target.split(rows)):
            chunk = chunk.float()  # (n, V); no copy for fp32
            lse = torch.logsumexp(chunk, dim=-1)  # (n,)
            stats.append((lse - chunk.gather(1, gold[:, None]).squeeze(1), lse - chunk.mean(dim=-1)))
        # (N,) each; uniform: the mean over V of -log p
        nll, uniform = stats[0] if len(stats) == 1 else (torch.cat(parts) for parts in zip(*stats))
        ctx.save_for_backward(logits, target)
        ctx.epsilon = epsilon
        return (1.0 - epsilon) * nll + epsilon * uniform, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        logits, target = ctx.saved_tensors
        eps, rows = ctx.epsilon, _chunk_rows(logits)
        if rows >= logits.size(0):
            return _grad(logits, target, grad_loss, grad_nll, eps).to(logits.dtype), None, None
        grad = torch.empty_like(logits)  # (N, V) in the logits' dtype, filled a chunk at a time
        for start in range(0, logits.size(0), rows):
            part = slice(start, start + rows)
            grad[part] = _grad(logits[part], target[part], grad_loss[part], grad_nll[part], eps)
        return grad, None, None


def _grad(logits: Tensor, target: Tensor, grad_loss: Tensor, grad_nll: Tensor, eps: float) -> Tensor:
    """(n, V) fp32 gradient of rows' loss and NLL: softmax - smoothed target, scaled by the incoming grads."""
    grad = torch.softmax(logits, dim=-1, dtype=torch.float32)  # (n, V)
    grad.mul_((grad_loss + grad_nll)[:, None]).sub_((eps / logits.size(1)) * grad_loss[:, None])
    grad.scatter_add_(1, target[:, None], (-(1.0 - eps) * grad_loss - grad_nll)[:, None])
    return grad


def _chunk_rows(logits: Tensor) -> int:
    """Rows a chunk: all of them in fp32, else as many as LOGITS_IN_FP32_AT_ONCE elements hold."""
    N, V = logits.shape
    return max(N, 1) if logits.dtype == torch.float32 else max(1, LOGITS_IN_FP32_AT_ONCE // V)


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross entropy and summed NLL over non-pad targets.

    The smoothed target puts 1 - epsilon on the gold token plus epsilon / V on every one of the V
    entries (gold included), as `F.cross_entropy(label_smoothing=epsilon)` does.

    Args:
        logits: (N, V); target: (N,) ids, PAD positions ignored.
    Returns:
        (loss_sum, nll_sum), both scalars; divide by the number of non-pad targets.
    """
    loss, nll = _SmoothedCrossEntropy.apply(logits, target, epsilon)  # (N,) each, fp32
    real = target != PAD
    # boolean indexing would wait for the GPU to count the rows, and breaks a compiled graph: mask instead
    if loss.is_cuda or torch.compiler.is_compiling():
        return loss.masked_fill(~real, 0.0).sum(), nll.masked_fill(~real, 0.0).sum()
    return loss[real].sum(), nll[real].sum()  # on CPU, the summation order mt's figures were measured with
