"""Training's batches, epoch after epoch: each epoch's plan over the corpus's LengthIndex
(mt.batching), drawn from (train.seed, epoch), and the stream that builds them a few updates ahead.

A plan holds the batches' order and nothing a pair long: the cuts are the index's, the same every
epoch, and a batch's rows are drawn from its groups when it is built, each group's ties in an order
seeded by the epoch and the group. A position in the stream is (epoch, batches taken), all a
checkpoint needs to resume it exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.batching import Batch, LengthIndex, Pairs
from mt.config import PAD, RunConfig
from mt.plumbing.seeds import derived_seed

log = logging.getLogger(__name__)


@dataclass
class EpochPlan:
    """One epoch's batches: batch j is positions cuts[b]: cuts[b + 1] of the corpus's LengthIndex,
    where b = shuffled[j], its ties drawn from `seed`."""

    index: LengthIndex
    cuts: Tensor  # (batches + 1,) int64, the same every epoch
    shuffled: Tensor  # (batches,) int32: the batches in training order
    seed: int

    def __len__(self) -> int:
        return len(self.shuffled)

    def rows(self, j: int) -> Tensor:
        b = int(self.shuffled[j])
        return self.index.rows(int(self.cuts[b]), int(self.cuts[b + 1]), self.seed)

    def taken(self, n: int) -> Tensor:
        """(G,) how many pairs of each group the first n batches hold."""
        took = torch.zeros(len(self.shuffled), dtype=torch.bool)
        took[self.shuffled[:n]] = True
        counts = torch.zeros(len(self.index.lengths), dtype=torch.long)
        for first, cuts in _batch_chunks(self.cuts):
            sizes, batch, group = self.index.segments(cuts)
            counts.index_add_(0, group, sizes * took[first + batch])
        return counts


# batches looked at together where an epoch's every batch is: memory flat in the corpus
BATCHES_AT_ONCE = 1 << 16


def _batch_chunks(cuts: Tensor) -> Iterator[tuple[int, Tensor]]:
    """(first batch, the cuts of BATCHES_AT_ONCE batches from it) over all the batches `cuts` bound."""
    for first in range(0, len(cuts) - 1, BATCHES_AT_ONCE):
        yield first, cuts[first : first + BATCHES_AT_ONCE + 1]


def epoch_plan(corpus: Pairs, max_tokens: int, seed: int, epoch: int) -> EpochPlan:
    """An epoch's batches: ordered, and their length ties broken, by draws seeded by (seed, epoch)."""
    index = corpus.length_index()
    cuts = index.cuts(max_tokens)
    draw = derived_seed(seed, epoch)
    shuffled = torch.randperm(len(cuts) - 1, generator=torch.Generator().manual_seed(draw), dtype=torch.int32)
    return EpochPlan(index, cuts, shuffled, draw)


def fill_ratio(plan: EpochPlan) -> float:
    """Fraction of non-pad positions over source and target of the epoch's batches: from the groups
    alone, since every pair of a group is as long as the others."""
    index = plan.index
    cost = index.lengths + 1  # (G, 2) with eos / bos
    real = float((cost.sum(1) * index.starts.diff()).sum())
    padded = 0.0
    for _, cuts in _batch_chunks(plan.cuts):
        sizes, batch, group = index.segments(cuts)
        longest = torch.zeros(len(cuts) - 1, 2, dtype=torch.long)  # (batches, 2)
        longest.scatter_reduce_(0, batch[:, None].expand(-1, 2), cost[group], "amax")
        padded += float((longest.sum(1) * cuts.diff()).sum())
    return real / padded


def widened(batch: Batch, multiple: int, most: int) -> Batch:
    """`batch` with PAD columns (masks False) added to each side up to a multiple of `multiple`, never
    past `most` positions (train.pad_multiple, model.max_positions): the same pairs in fewer shapes."""
    if multiple == 1:
        return batch
    src_grow, tgt_grow = (
        max(min(-(-n // multiple) * multiple, most), n) - n for n in (batch.src.size(1), batch.tgt_in.size(1))
    )

    def grown(t: Tensor, by: int) -> Tensor:  # (B, L) -> (B, L + by): ids with PAD, masks with False
        return F.pad(t, (0, by), value=False if t.dtype == torch.bool else PAD)

    return Batch(
        grown(batch.src, src_grow),
        grown(batch.src_mask, src_grow),
        grown(batch.tgt_in, tgt_grow),
        grown(batch.tgt_out, tgt_grow),
        grown(batch.tgt_mask, tgt_grow),
        batch.ntokens,
    )


class BatchStream:
    """The training batches, epoch after epoch, each epoch in its seeded order. A position is
    (epoch from 1, batches of that epoch already taken), all a checkpoint needs to resume the stream.
    Given several views of the corpus (BPE-dropout's samples), epoch e reads view (e - 1) mod n.

    A worker thread pads the batches of the next `take` while the caller trains on these (and, for a
    GPU, pins them so the copy is asynchronous)."""

    def __init__(
        self,
        corpus: Pairs | list[Pairs],
        max_tokens: int,
        seed: int,
        pin_memory: bool = False,
        pad_to: tuple[int, int] = (1, 1 << 30),
    ):
        self.views = corpus if isinstance(corpus, list) else [corpus]
        self.max_tokens, self.seed, self.pin = max_tokens, seed, pin_memory
        self.pad_to = pad_to  # (multiple, most positions): train.pad_multiple, model.max_positions
        self.plans: dict[int, EpochPlan] = {}
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="mt-batches")
        self.ahead: tuple[tuple[int, int, int], Future] | None = None

    @classmethod
    def training(cls, corpus: Pairs | list[Pairs], cfg: RunConfig, device: torch.device) -> BatchStream:
        """The stream `mt train` reads: cfg's budget, seed and padding; batches pinned for a GPU."""
        pad_to = (cfg.train.pad_multiple, cfg.model.max_positions)
        return cls(corpus, cfg.train.max_tokens, cfg.train.seed, device.type == "cuda", pad_to)

    def plan(self, epoch: int) -> EpochPlan:
        if epoch not in self.plans:
            self.plans = {e: p for e, p in self.plans.items() if e >= epoch - 1}  # keep two at most
            corpus = self.corpus(epoch)
            self.plans[epoch] = epoch_plan(corpus, self.max_tokens, self.seed, epoch)
            if epoch == 1:
                log.info(
                    "epoch 1: %d batches, non-pad fraction %.3f",
                    len(self.plans[1]),
                    fill_ratio(self.plans[1]),
                )
        return self.plans[epoch]

    def corpus(self, epoch: int) -> Pairs:
        return self.views[(epoch - 1) % len(self.views)]

    def consumed(self, epoch: int, index: int) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """The pairs of every batch taken before position (epoch, index), by length: (source lengths,
        target lengths (without eos/bos), how many pairs of each) per epoch, from its groups."""
        for e in range(1, epoch + 1):
            plan = epoch_plan(self.corpus(e), self.max_tokens, self.seed, e)
            lengths = plan.index.lengths  # (G, 2)
            yield lengths[:, 0], lengths[:, 1], plan.taken(len(plan) if e < epoch else min(index, len(plan)))

    def _build(self, epoch: int, index: int, n: int) -> tuple[list[Batch], int, int]:
        epoch = max(epoch, 1)
        if index >= len(self.plan(epoch)):
            epoch, index = epoch + 1, 0
        plan = self.plan(epoch)
        corpus = self.corpus(epoch)
        rows = [plan.rows(j) for j in range(index, min(index + n, len(plan)))]
        batches = [widened(corpus.batch(r), *self.pad_to) for r in rows]
        return [b.pin_memory() for b in batches] if self.pin else batches, epoch, index + len(batches)

    def take(self, epoch: int, index: int, n: int) -> tuple[list[Batch], int, int]:
        """Up to n batches from position (epoch, index), moving to the next epoch at an epoch's end
        (epoch 0 = not started); returns them and the position after them."""
        ready = self.ahead is not None and self.ahead[0] == (epoch, index, n)
        found = self.ahead[1].result() if ready else self._build(epoch, index, n)
        self.ahead = ((found[1], found[2], n), self.worker.submit(self._build, found[1], found[2], n))
        return found
