"""The training batches of a binarized corpus: each epoch's plan (pairs grouped by length into
token-budget batches, as `data.token_batches` groups them, and the batches shuffled, both seeded by
epoch) built from the length arrays alone, and `BatchStream`, which pads the batches one step ahead.
"""

from __future__ import annotations

import array
import logging
import random
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor

from mt.corpus import Corpus
from mt.data import Batch

log = logging.getLogger(__name__)


@dataclass
class EpochPlan:
    """One epoch's batches as indices: batch j holds pairs order[bounds[k]: bounds[k + 1]], where
    k = shuffled[j]."""

    order: Tensor  # (P,) int32 pair indices sorted by length
    bounds: list[int]  # batch b = order[bounds[b]: bounds[b + 1]]
    shuffled: list[int]  # the batches in training order

    def __len__(self) -> int:
        return len(self.shuffled)

    def rows(self, j: int) -> Tensor:
        b = self.shuffled[j]
        return self.order[self.bounds[b] : self.bounds[b + 1]].long()


def batch_sizes(lengths: list[int], counts: list[int], max_tokens: int) -> list[int]:
    """Sizes of the batches `data.token_batches` cuts from pairs sorted by cost length, given as runs
    (`counts[i]` pairs of length `lengths[i]`, increasing): a batch takes pairs while
    pairs x length <= max_tokens, at least one. Works per batch, not per pair."""
    sizes, current = [], 0
    for length, left in zip(lengths, counts):
        fit = max_tokens // length
        while left:
            if not current:
                current, left = 1, left - 1
            take = min(left, max(fit - current, 0))
            current, left = current + take, left - take
            if left:
                sizes.append(current)
                current = 0
    return sizes + [current] * (current > 0)


def epoch_plan(src_len: Tensor, tgt_len: Tensor, max_tokens: int, seed: int, epoch: int) -> EpochPlan:
    """`data.epoch_batches`'s grouping and order (the same random draws), from length arrays."""
    rng = random.Random(seed * 100_003 + epoch)
    ties = torch.frombuffer(
        array.array("d", (rng.random() for _ in range(len(src_len)))), dtype=torch.float64
    )
    order = ties.argsort(stable=True)
    del ties
    s, t = src_len.long() + 1, tgt_len.long() + 1  # with eos / bos
    key = (torch.maximum(s, t) << 42) | (s << 21) | t  # sort by (cost, source, target), ties by the draws
    del s, t
    order = order[key[order].argsort(stable=True)]
    lengths, counts = torch.unique_consecutive(key[order] >> 42, return_counts=True)
    sizes = batch_sizes(lengths.tolist(), counts.tolist(), max_tokens)
    shuffled = list(range(len(sizes)))
    rng.shuffle(shuffled)
    return EpochPlan(order.int(), [0] + torch.tensor(sizes).cumsum(0).tolist(), shuffled)


def fill_ratio(corpus: Corpus, plan: EpochPlan) -> float:
    """Fraction of non-pad positions over source and target of the epoch's batches."""
    sizes = torch.tensor(plan.bounds).diff()  # (batches,)
    real = total = 0
    for lengths in (corpus.src_len, corpus.tgt_len):
        n = lengths[plan.order.long()].float() + 1  # (P,) in plan order, batch by batch
        real += float(n.sum())
        total += float((torch.segment_reduce(n, "max", lengths=sizes) * sizes).sum())
    return real / total


class BatchStream:
    """The training batches, epoch after epoch, each epoch in its seeded order. A position is
    (epoch from 1, batches of that epoch already taken), all a checkpoint needs to resume the stream.

    A worker thread pads the batches of the next `take` while the caller trains on these (and, for a
    GPU, pins them so the copy is asynchronous)."""

    def __init__(self, corpus: Corpus, max_tokens: int, seed: int, pin_memory: bool = False):
        self.corpus, self.max_tokens, self.seed, self.pin = corpus, max_tokens, seed, pin_memory
        self.plans: dict[int, EpochPlan] = {}
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="mt-batches")
        self.ahead: tuple[tuple[int, int, int], Future] | None = None

    def plan(self, epoch: int) -> EpochPlan:
        if epoch not in self.plans:
            self.plans = {e: p for e, p in self.plans.items() if e >= epoch - 1}  # keep two at most
            self.plans[epoch] = epoch_plan(
                self.corpus.src_len, self.corpus.tgt_len, self.max_tokens, self.seed, epoch
            )
            if epoch == 1:
                log.info(
                    "epoch 1: %d batches, non-pad fraction %.3f",
                    len(self.plans[1]),
                    fill_ratio(self.corpus, self.plans[1]),
                )
        return self.plans[epoch]

    def _build(self, epoch: int, index: int, n: int) -> tuple[list[Batch], int, int]:
        epoch = max(epoch, 1)
        if index >= len(self.plan(epoch)):
            epoch, index = epoch + 1, 0
        plan = self.plan(epoch)
        batches = [self.corpus.batch(plan.rows(j)) for j in range(index, min(index + n, len(plan)))]
        return [b.pin_memory() for b in batches] if self.pin else batches, epoch, index + len(batches)

    def take(self, epoch: int, index: int, n: int) -> tuple[list[Batch], int, int]:
        """Up to n batches from position (epoch, index), moving to the next epoch at an epoch's end
        (epoch 0 = not started); returns them and the position after them."""
        ready = self.ahead is not None and self.ahead[0] == (epoch, index, n)
        found = self.ahead[1].result() if ready else self._build(epoch, index, n)
        self.ahead = ((found[1], found[2], n), self.worker.submit(self._build, found[1], found[2], n))
        return found
