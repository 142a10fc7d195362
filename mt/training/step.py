"""One optimizer update (`train_step`) and the learning rate it is made at: what `mt train`,
scripts/bench_train.py and the overfit test all run."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from mt.batching import Batch
from mt.config import TrainConfig
from mt.devices import autocast
from mt.training import distributed
from mt.training.loss import label_smoothed_loss


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak` at step `warmup`, then peak * sqrt(warmup / step). Steps count from 1."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def learning_rate(t: TrainConfig, step: int) -> float:
    """train.schedule at update `step` (from 1): inverse_sqrt, or linear: the same warmup, then straight down
    to 0 at the budget, train.max_steps. Never the wall clock: a config names one model on any machine,
    and train.max_minutes only stops a run early."""
    if t.schedule == "inverse_sqrt":
        return inverse_sqrt_lr(step, t.lr, t.warmup_steps)
    return t.lr * max(0.0, min(step / t.warmup_steps, 1.0 - step / t.max_steps))


def dropout_on(t: TrainConfig, step: int) -> bool:
    """train.dropout_start at update `step` (from 1): the model's dropout off for that share of
    train.max_steps, then on. A function of the step alone, so a resumed run switches where an
    uninterrupted one does."""
    return step > t.dropout_start * t.max_steps


def batch_loss(model: torch.nn.Module, batch: Batch, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and NLL of a batch's target tokens, teacher-forced, over the output
    layer's pieces (model.output_pieces: the smoothing spreads over those); `model` may be wrapped in
    DistributedDataParallel."""
    logits = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V')
    target = getattr(model, "module", model).output_ids(batch.tgt_out)  # (B, T) output positions
    return label_smoothed_loss(logits.flatten(0, 1), target.flatten(), epsilon)


@dataclass
class StepStats:
    """What one update saw, summed over every rank's micro-batches."""

    loss: float  # label-smoothed loss, summed over target tokens
    nll: float  # negative log-likelihood, summed over target tokens
    target_tokens: int
    tokens: int  # source + target non-pad tokens
    stepped: bool  # the parameters were updated; else a non-finite loss or gradient, or an overflow
    overflow: bool  # fp16: the grad scaler skipped the update and lowered its scale (not an error)
    stop: bool  # some rank was asked to stop (Ctrl-C, SIGTERM)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: list[Batch],
    cfg: TrainConfig,
    lr: float,
    *,
    scaler: torch.amp.GradScaler | None = None,
    device: torch.device = torch.device("cpu"),
    ranks: distributed.Ranks = distributed.Ranks(),
    stop_requested: bool = False,
) -> StepStats:
    """One optimizer update at learning rate `lr` from the micro-batches `batches`, the loss normalised
    by their total target tokens; `model` may be wrapped in DistributedDataParallel. The losses are
    summed on the device and read once, with the gradient norm: one host sync per update (fp16: three).

    Under torchrun each rank backpropagates its share (every world-th batch) and DDP sums the shares'
    gradients once, on the last micro-batch, dividing by the number of ranks, which the loss weight
    undoes. A rank without a share (an epoch's last update) joins the gradient sync with weight zero.
    """
    scaler = scaler or torch.amp.GradScaler(device.type, enabled=False)
    for group in optimizer.param_groups:
        group["lr"] = lr
    mine, weight = batches[ranks.rank :: ranks.world], ranks.world / sum(b.ntokens for b in batches)
    if not mine:
        mine, weight = batches[:1], 0.0
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss, nll
    counts = [0.0, 0.0, float(stop_requested)]  # target tokens, tokens (from host copies), stop
    for i, batch in enumerate(mine):
        if weight:
            counts[0], counts[1] = (
                counts[0] + batch.ntokens,
                counts[1] + batch.ntokens + int(batch.src_mask.sum()),
            )
        batch = batch.to(device)
        accumulate_only = i < len(mine) - 1 and isinstance(model, DistributedDataParallel)
        with model.no_sync() if accumulate_only else contextlib.nullcontext():
            with autocast(device, cfg.precision):
                loss, nll = batch_loss(model, batch, cfg.label_smoothing)
            scaler.scale(loss * weight).backward()
        if weight:
            sums += torch.stack([loss.detach(), nll.detach()]).double()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm or math.inf)
    counts_t = torch.tensor(counts, dtype=torch.float64)
    counts_t = counts_t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else counts_t
    totals = distributed.all_sum(torch.cat([sums, counts_t]), ranks)  # (5,) on the device
    loss_sum, nll_sum, target_tokens, tokens, stops, norm = torch.cat(
        [totals, norm.detach().double().view(1)]
    ).tolist()  # the update's host sync
    # with fp16 the grad scaler itself skips steps whose gradients overflow, and lowers its scale
    stepped = math.isfinite(loss_sum) and (scaler.is_enabled() or math.isfinite(norm))
    scale = scaler.get_scale() if scaler.is_enabled() else 0.0
    if stepped:
        scaler.step(optimizer)
    scaler.update()
    overflow = stepped and scaler.is_enabled() and scaler.get_scale() < scale
    optimizer.zero_grad(set_to_none=True)
    return StepStats(
        loss_sum, nll_sum, int(target_tokens), int(tokens), stepped and not overflow, overflow, stops > 0
    )
