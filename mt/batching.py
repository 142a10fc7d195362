"""Batches: the one token-budget planner and the one padded-`Batch` builder, used by training (each
epoch's plan over the binarized corpus, `BatchStream`), validation and translation (`token_batches`,
`make_batch`, `source_batch`).

Pairs are grouped by length: sorted by (longer side, source, target) lengths with eos/bos counted, cut
into batches whose cost, sentences x longest side (padding included, as fairseq's --max-tokens),
stays <= max_tokens unless one pair alone exceeds it. Training breaks length ties and orders the
batches by seeded draws, new every epoch; validation and translation keep the input order for ties.

Masks (the convention everywhere in mt): boolean, True = real token / may attend.
"""

from __future__ import annotations

import array
import logging
import random
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor

from mt.tokenizer import BOS, EOS, PAD

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """A padded batch. Masks: True = real token."""

    src: Tensor  # (B, S) source ids + eos
    src_mask: Tensor  # (B, S) bool
    tgt_in: Tensor  # (B, T) bos + target ids
    tgt_out: Tensor  # (B, T) target ids + eos
    tgt_mask: Tensor  # (B, T) bool, real positions of tgt_in (= of tgt_out)
    ntokens: int  # non-pad tokens in tgt_out

    def to(self, device: torch.device | str) -> Batch:
        """A copy on `device`; from pinned memory (see `pin_memory`) the copy to a GPU is asynchronous."""
        return self._map(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> Batch:
        return self._map(lambda t: t.pin_memory())

    def _map(self, fn) -> Batch:
        tensors = (self.src, self.src_mask, self.tgt_in, self.tgt_out, self.tgt_mask)
        return Batch(*(fn(t) for t in tensors), self.ntokens)


def gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """values[index] as int64. A uint16 array (mt.training.corpus) is read through an int16 view of the same
    bits, the mask undoing the sign: torch 2.4 has no indexing kernel for uint16."""
    if values.dtype == torch.uint16:
        return values.view(torch.int16)[index].long() & 0xFFFF
    return values[index].long()


def _concat(ids: Tensor, starts: Tensor, lengths: Tensor) -> Tensor:
    """ids[start: start + length] for each row, end to end, in ids' dtype."""
    pieces = [ids[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())]
    return torch.cat(pieces) if pieces else ids[:0]


def _padded(
    ids: Tensor, starts: Tensor, lengths: Tensor, first: int | None, last: int | None
) -> tuple[Tensor, Tensor]:
    """Rows [first] + ids[start: start + length] + [last], right-padded: (ids (B, L), mask (B, L))."""
    ids = ids if ids.numel() else torch.zeros(1, dtype=ids.dtype)  # every row empty: nothing to gather
    shift = int(first is not None)
    position = torch.arange(int(lengths.max()) + 1)  # (L,)
    inside = (position >= shift) & (position < lengths[:, None] + shift)  # (B, L)
    offsets = (starts[:, None] + position - shift).clamp(0, ids.numel() - 1)  # (B, L)
    out = torch.where(inside, gather_rows(ids, offsets), PAD)
    if first is not None:
        out[:, 0] = first
    if last is not None:
        out[torch.arange(out.size(0)), lengths] = last
    return out, out != PAD


def _flat(seqs: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Id lists -> (their ids end to end (N,) int32, their lengths (B,) int32)."""
    return (
        torch.tensor([i for s in seqs for i in s], dtype=torch.int32),
        torch.tensor([len(s) for s in seqs], dtype=torch.int32),
    )


@dataclass
class Pairs:
    """Token-id pairs, flat per side, with per-pair lengths and start offsets: in memory (`from_ids`),
    or memory-mapped from the binarized training corpus (mt.training.corpus.load)."""

    src: Tensor  # (source tokens,) uint16 or int32
    tgt: Tensor  # (target tokens,)
    src_len: Tensor  # (P,) pieces per sentence, without bos/eos
    tgt_len: Tensor  # (P,)
    src_start: Tensor  # (P,) int64 offset of each sentence in `src`
    tgt_start: Tensor  # (P,)

    @staticmethod
    def of(src: Tensor, tgt: Tensor, src_len: Tensor, tgt_len: Tensor) -> Pairs:
        starts = [torch.cumsum(n.long(), 0) - n.long() for n in (src_len, tgt_len)]
        return Pairs(src, tgt, src_len, tgt_len, *starts)

    @staticmethod
    def from_ids(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Pairs:
        (src, src_len), (tgt, tgt_len) = _flat(src_ids), _flat(tgt_ids)
        return Pairs.of(src, tgt, src_len, tgt_len)

    def __len__(self) -> int:
        return self.src_len.numel()

    def both_directions(self) -> Pairs:
        """These pairs, then each reversed (target -> source): a copy in memory, twice the pairs."""
        return Pairs.of(
            torch.cat([self.src, self.tgt]),
            torch.cat([self.tgt, self.src]),
            torch.cat([self.src_len, self.tgt_len]),
            torch.cat([self.tgt_len, self.src_len]),
        )

    def subset(self, rows: Tensor) -> Pairs:
        """The pairs `rows` (R,), in that order, with their ids copied end to end."""
        src_len, tgt_len = gather_rows(self.src_len, rows), gather_rows(self.tgt_len, rows)  # (R,)
        src = _concat(self.src, self.src_start[rows], src_len)
        tgt = _concat(self.tgt, self.tgt_start[rows], tgt_len)
        return Pairs.of(src, tgt, src_len.to(self.src_len.dtype), tgt_len.to(self.tgt_len.dtype))

    def batch(self, rows: Tensor) -> Batch:
        """The padded batch of pairs `rows` (B,), in that order."""
        src_len, tgt_len = gather_rows(self.src_len, rows), gather_rows(self.tgt_len, rows)  # (B,)
        src, src_mask = _padded(self.src, self.src_start[rows], src_len, None, EOS)
        tgt_in, tgt_mask = _padded(self.tgt, self.tgt_start[rows], tgt_len, BOS, None)
        tgt_out, _ = _padded(self.tgt, self.tgt_start[rows], tgt_len, None, EOS)
        return Batch(src, src_mask, tgt_in, tgt_out, tgt_mask, int(tgt_mask.sum()))


def make_batch(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Batch:
    """The padded batch of these pairs, in this order."""
    return Pairs.from_ids(src_ids, tgt_ids).batch(torch.arange(len(src_ids)))


def source_batch(src_ids: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Source id lists -> (src (B, S), src_mask (B, S)); eos closes every source."""
    ids, lengths = _flat(src_ids)
    return _padded(ids, torch.cumsum(lengths.long(), 0) - lengths.long(), lengths.long(), None, EOS)


# ---- planning ------------------------------------------------------------------------------------------


def batch_sizes(lengths: list[int], counts: list[int], max_tokens: int) -> list[int]:
    """Sizes of the token-budget batches cut from pairs sorted by cost length, given as runs
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


def length_batches(
    src_cost: Tensor, tgt_cost: Tensor, order: Tensor, max_tokens: int
) -> tuple[Tensor, list[int]]:
    """`order` (P,) stably sorted by (longer side, source, target) cost lengths (eos/bos counted),
    and the sizes of the token-budget batches that cut it, in that order."""
    key = (torch.maximum(src_cost, tgt_cost) << 42) | (src_cost << 21) | tgt_cost  # (P,)
    order = order[key[order].argsort(stable=True)]
    lengths, counts = torch.unique_consecutive(key[order] >> 42, return_counts=True)
    return order, batch_sizes(lengths.tolist(), counts.tolist(), max_tokens)


def token_batches(src_lens: list[int], tgt_lens: list[int], max_tokens: int) -> list[list[int]]:
    """Sentence indices grouped into token-budget batches by their cost lengths (eos/bos counted):
    shortest batches first, equal lengths in input order (validation, translation)."""
    if not src_lens:
        return []
    src, tgt = torch.tensor(src_lens, dtype=torch.long), torch.tensor(tgt_lens, dtype=torch.long)
    order, sizes = length_batches(src, tgt, torch.arange(len(src_lens)), max_tokens)
    return [chunk.tolist() for chunk in order.split(sizes)]


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


def epoch_plan(src_len: Tensor, tgt_len: Tensor, max_tokens: int, seed: int, epoch: int) -> EpochPlan:
    """An epoch's batches from the pairs' lengths (without eos/bos): length ties broken, then the
    batches ordered, by draws seeded by (seed, epoch)."""
    rng = random.Random(seed * 100_003 + epoch)
    ties = torch.frombuffer(
        array.array("d", (rng.random() for _ in range(len(src_len)))), dtype=torch.float64
    )
    order = ties.argsort(stable=True)
    del ties
    order, sizes = length_batches(src_len.long() + 1, tgt_len.long() + 1, order, max_tokens)
    shuffled = list(range(len(sizes)))
    rng.shuffle(shuffled)
    return EpochPlan(order.int(), [0] + torch.tensor(sizes).cumsum(0).tolist(), shuffled)


def fill_ratio(corpus: Pairs, plan: EpochPlan) -> float:
    """Fraction of non-pad positions over source and target of the epoch's batches."""
    sizes = torch.tensor(plan.bounds).diff()  # (batches,)
    real = total = 0
    for lengths in (corpus.src_len, corpus.tgt_len):
        n = gather_rows(lengths, plan.order.long()).float() + 1  # (P,) in plan order, batch by batch
        real += float(n.sum())
        total += float((torch.segment_reduce(n, "max", lengths=sizes) * sizes).sum())
    return real / total


class BatchStream:
    """The training batches, epoch after epoch, each epoch in its seeded order. A position is
    (epoch from 1, batches of that epoch already taken), all a checkpoint needs to resume the stream.
    Given several views of the corpus (BPE-dropout's samples), epoch e reads view (e - 1) mod n.

    A worker thread pads the batches of the next `take` while the caller trains on these (and, for a
    GPU, pins them so the copy is asynchronous)."""

    def __init__(self, corpus: Pairs | list[Pairs], max_tokens: int, seed: int, pin_memory: bool = False):
        self.views = corpus if isinstance(corpus, list) else [corpus]
        self.max_tokens, self.seed, self.pin = max_tokens, seed, pin_memory
        self.plans: dict[int, EpochPlan] = {}
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="mt-batches")
        self.ahead: tuple[tuple[int, int, int], Future] | None = None

    def plan(self, epoch: int) -> EpochPlan:
        if epoch not in self.plans:
            self.plans = {e: p for e, p in self.plans.items() if e >= epoch - 1}  # keep two at most
            corpus = self.corpus(epoch)
            self.plans[epoch] = epoch_plan(corpus.src_len, corpus.tgt_len, self.max_tokens, self.seed, epoch)
            if epoch == 1:
                log.info(
                    "epoch 1: %d batches, non-pad fraction %.3f",
                    len(self.plans[1]),
                    fill_ratio(corpus, self.plans[1]),
                )
        return self.plans[epoch]

    def corpus(self, epoch: int) -> Pairs:
        return self.views[(epoch - 1) % len(self.views)]

    def consumed(self, epoch: int, index: int) -> Iterator[tuple[Tensor, Tensor]]:
        """The lengths (without eos/bos) of the pairs of every batch taken before position (epoch,
        index): (src_len, tgt_len) per epoch, its plans made again (the worker may be using the cache)."""
        for e in range(1, epoch + 1):
            corpus = self.corpus(e)
            plan = epoch_plan(corpus.src_len, corpus.tgt_len, self.max_tokens, self.seed, e)
            taken = [plan.rows(j) for j in range(len(plan) if e < epoch else min(index, len(plan)))]
            rows = torch.cat(taken) if taken else torch.zeros(0, dtype=torch.long)
            yield corpus.src_len[rows], corpus.tgt_len[rows]

    def _build(self, epoch: int, index: int, n: int) -> tuple[list[Batch], int, int]:
        epoch = max(epoch, 1)
        if index >= len(self.plan(epoch)):
            epoch, index = epoch + 1, 0
        plan = self.plan(epoch)
        corpus = self.corpus(epoch)
        batches = [corpus.batch(plan.rows(j)) for j in range(index, min(index + n, len(plan)))]
        return [b.pin_memory() for b in batches] if self.pin else batches, epoch, index + len(batches)

    def take(self, epoch: int, index: int, n: int) -> tuple[list[Batch], int, int]:
        """Up to n batches from position (epoch, index), moving to the next epoch at an epoch's end
        (epoch 0 = not started); returns them and the position after them."""
        ready = self.ahead is not None and self.ahead[0] == (epoch, index, n)
        found = self.ahead[1].result() if ready else self._build(epoch, index, n)
        self.ahead = ((found[1], found[2], n), self.worker.submit(self._build, found[1], found[2], n))
        return found
