"""Batches: the one token-budget planner and the one padded-`Batch` builder, used by training (each
epoch's plan over the binarized corpus's `LengthIndex`, mt.training.epochs), validation and translation
(`token_batches`, `make_batch`, `source_batch`).

Pairs are grouped by length: sorted by (longer side, source, target) lengths with eos/bos counted, cut
into batches whose cost, sentences x longest side (padding included, as fairseq's --max-tokens),
stays <= max_tokens unless one pair alone exceeds it. Training breaks length ties and orders the
batches by seeded draws, new every epoch; validation and translation keep the input order for ties.

Training's memory does not grow with the corpus: its pairs are sorted by length once (`LengthIndex`,
stored with the binarized corpus); pairs of equal lengths form a group, and since each pair of a group
costs the same, the batches' cuts are the same every epoch (mt.training.epochs draws their order and
each group's ties), so no array a pair long is made per epoch.

Masks (the convention everywhere in mt): boolean, True = real token / may attend.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.config import BOS, EOS, PAD
from mt.plumbing.seeds import derived_seed

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


BLOCK = 64  # pairs a stored start stands for: a pair's offset is its block's start plus the lengths before it
PAIRS_WALKED_AT_ONCE = 1 << 16  # pairs read at a time where a corpus is walked: small, so that the allocator
# hands the memory back (glibc keeps freed blocks of a few MB: 1M-pair chunks left 80 MB held at 39M pairs)


def block_starts(lengths: Tensor) -> Tensor:
    """(P,) lengths -> (ceil(P / BLOCK) + 1,) int64: where pairs 0, BLOCK, 2 BLOCK, ... start, then the
    end. Read a chunk at a time: a memory-mapped corpus is not copied."""
    sums = [torch.zeros(1, dtype=torch.long)]
    for a in range(0, len(lengths), PAIRS_WALKED_AT_ONCE):
        part = lengths[a : a + PAIRS_WALKED_AT_ONCE].long()
        sums.append(F.pad(part, (0, -len(part) % BLOCK)).view(-1, BLOCK).sum(1))
    return torch.cat(sums).cumsum(0)


def starts_of(blocks: Tensor, lengths: Tensor, rows: Tensor) -> Tensor:
    """Where pairs `rows` (R,) start in their side's ids: their block's start and the lengths of the
    pairs before them in it."""
    block = rows // BLOCK  # (R,)
    within = (block * BLOCK)[:, None] + torch.arange(BLOCK)  # (R, BLOCK)
    before = within < rows[:, None]  # (R, BLOCK)
    counted = gather_rows(lengths, within.clamp(max=max(len(lengths) - 1, 0))) * before
    return blocks[block] + counted.sum(1)


@dataclass
class Pairs:
    """Token-id pairs, flat per side, with per-pair lengths: in memory (`from_ids`), or memory-mapped
    from the binarized training corpus (mt.training.corpus.load). A pair's offset comes from the start
    of its block of BLOCK pairs, so nothing a pair long is held beyond what is mapped."""

    src: Tensor  # (source tokens,) uint16 or int32
    tgt: Tensor  # (target tokens,)
    src_len: Tensor  # (P,) pieces per sentence, without bos/eos
    tgt_len: Tensor  # (P,)
    src_blocks: Tensor  # (P / BLOCK + 1,) int64 (`block_starts`)
    tgt_blocks: Tensor
    by_length: LengthIndex | None = None  # made on first use (`length_index`) unless given

    @staticmethod
    def of(
        src: Tensor, tgt: Tensor, src_len: Tensor, tgt_len: Tensor, by_length: LengthIndex | None = None
    ) -> Pairs:
        return Pairs(src, tgt, src_len, tgt_len, block_starts(src_len), block_starts(tgt_len), by_length)

    @staticmethod
    def from_ids(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Pairs:
        (src, src_len), (tgt, tgt_len) = _flat(src_ids), _flat(tgt_ids)
        return Pairs.of(src, tgt, src_len, tgt_len)

    def __len__(self) -> int:
        return self.src_len.numel()

    def starts(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Where pairs `rows` (R,) start in `src` and in `tgt`."""
        return starts_of(self.src_blocks, self.src_len, rows), starts_of(self.tgt_blocks, self.tgt_len, rows)

    def length_index(self) -> LengthIndex:
        if self.by_length is None:
            self.by_length = length_index(self.src_len, self.tgt_len)
        return self.by_length

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
        src_start, tgt_start = self.starts(rows)
        src = _concat(self.src, src_start, src_len)
        tgt = _concat(self.tgt, tgt_start, tgt_len)
        return Pairs.of(src, tgt, src_len.to(self.src_len.dtype), tgt_len.to(self.tgt_len.dtype))

    def batch(self, rows: Tensor) -> Batch:
        """The padded batch of pairs `rows` (B,), in that order."""
        src_len, tgt_len = gather_rows(self.src_len, rows), gather_rows(self.tgt_len, rows)  # (B,)
        src_start, tgt_start = self.starts(rows)
        src, src_mask = _padded(self.src, src_start, src_len, None, EOS)
        tgt_in, tgt_mask = _padded(self.tgt, tgt_start, tgt_len, BOS, None)
        tgt_out, _ = _padded(self.tgt, tgt_start, tgt_len, None, EOS)
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
    pairs x length <= max_tokens, at least one. Works per run, not per batch or pair."""
    sizes, current = [], 0
    for length, left in zip(lengths, counts):
        fit = max(max_tokens // length, 1)
        if current:  # the open batch takes what still fits now that its longest pair is this long
            take = min(left, max(fit - current, 0))
            current, left = current + take, left - take
            if left:
                sizes.append(current)
        if left:
            full, current = divmod(left, fit)
            sizes += [fit] * full
    return sizes + [current] * (current > 0)


def _sort_key(src_cost: Tensor, tgt_cost: Tensor) -> Tensor:
    """(longer side, source, target) as one int64 that sorts the same way."""
    return (torch.maximum(src_cost, tgt_cost) << 42) | (src_cost << 21) | tgt_cost


def token_batches(src_lens: list[int], tgt_lens: list[int], max_tokens: int) -> list[list[int]]:
    """Sentence indices grouped into token-budget batches by their cost lengths (eos/bos counted, so
    at least 1): shortest batches first, equal lengths in input order (validation, translation)."""
    if not src_lens:
        return []
    index = length_index(torch.tensor(src_lens) - 1, torch.tensor(tgt_lens) - 1)
    cuts, order = index.cuts(max_tokens).tolist(), index.order.tolist()
    return [order[a:z] for a, z in zip(cuts, cuts[1:])]


@dataclass
class LengthIndex:
    """The pairs sorted once by (longer side, source, target) length, pairs of equal lengths (a group)
    in corpus order: group g is order[starts[g]: starts[g + 1]], each of its pairs `lengths[g]` long."""

    order: Tensor  # (P,) int32 (int64 past 2**31 pairs) pair indices
    lengths: Tensor  # (G, 2) int64 (source, target) pieces of each group, without eos/bos
    starts: Tensor  # (G + 1,) int64
    made: dict[int, Tensor] = field(default_factory=dict, repr=False)  # `cuts` by max_tokens

    def cuts(self, max_tokens: int) -> Tensor:
        """(batches + 1,) int64: batch b is positions cuts[b]: cuts[b + 1] of `order`, the same every
        epoch since the pairs of a group cost the same."""
        if max_tokens not in self.made:
            cost = self.lengths.max(1).values + 1  # (G,) the longer side with eos/bos, increasing
            runs, run = torch.unique_consecutive(cost, return_inverse=True)
            counts = torch.zeros(len(runs), dtype=torch.long).index_add_(0, run, self.starts.diff())
            sizes = torch.tensor(batch_sizes(runs.tolist(), counts.tolist(), max_tokens), dtype=torch.long)
            self.made[max_tokens] = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
        return self.made[max_tokens]

    def rows(self, first: int, end: int, seed: int) -> Tensor:
        """The pairs at positions first: end, each group's ties in the order `seed` draws for it."""
        g0, g1 = (int(torch.searchsorted(self.starts, p, right=True)) - 1 for p in (first, end - 1))
        parts = []
        for g in range(g0, g1 + 1):
            a, z = int(self.starts[g]), int(self.starts[g + 1])
            draw = torch.Generator().manual_seed(derived_seed(seed, g))
            ties = torch.randperm(z - a, generator=draw)[max(first, a) - a : min(end, z) - a]
            parts.append(self.order[a + ties])
        return torch.cat(parts).long()

    def segments(self, cuts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Positions cuts[0]: cuts[-1] cut by both the batches that `cuts` bound and the groups: (size,
        batch (0 = the first of `cuts`), group) of each piece (N,)."""
        inside = self.starts[(self.starts > cuts[0]) & (self.starts < cuts[-1])]
        bounds = torch.unique(torch.cat([cuts, inside]))  # (N + 1,) sorted
        batch = torch.searchsorted(cuts, bounds[:-1], right=True) - 1
        group = torch.searchsorted(self.starts, bounds[:-1], right=True) - 1
        return bounds.diff(), batch, group


def _chunk_keys(src_len: Tensor, tgt_len: Tensor) -> Iterator[tuple[int, Tensor]]:
    """(first pair, its chunk's sort keys (C,)) a chunk at a time: a memory-mapped corpus is read,
    not copied."""
    for a in range(0, len(src_len), PAIRS_WALKED_AT_ONCE):
        yield (
            a,
            _sort_key(
                src_len[a : a + PAIRS_WALKED_AT_ONCE].long(), tgt_len[a : a + PAIRS_WALKED_AT_ONCE].long()
            ),
        )


def length_index(src_len: Tensor, tgt_len: Tensor, order: Tensor | None = None) -> LengthIndex:
    """The pairs' LengthIndex in two passes: their groups counted, then each pair's index placed after
    the earlier ones of its group. `order`: where to write the (P,) index (a memory-mapped file), else
    a new tensor."""
    keys, counts = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)  # (G,) sorted
    for _, key in _chunk_keys(src_len, tgt_len):
        found, n = torch.unique(key, return_counts=True)
        keys, merged = torch.unique(torch.cat([keys, found]), return_inverse=True)
        counts = torch.zeros(len(keys), dtype=torch.long).index_add_(0, merged, torch.cat([counts, n]))
    starts = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    dtype = torch.int32 if len(src_len) < 2**31 else torch.int64
    order = torch.empty(len(src_len), dtype=dtype) if order is None else order
    placed = starts[:-1].clone()  # (G,) where each group's next pair goes
    for a, key in _chunk_keys(src_len, tgt_len):
        group = torch.searchsorted(keys, key)  # (C,)
        by_group = group.argsort(stable=True)
        in_order = group[by_group]
        rank = torch.arange(len(key)) - torch.searchsorted(in_order, in_order)  # among its group's here
        order[placed[in_order] + rank] = (by_group + a).to(dtype)
        placed += torch.bincount(group, minlength=len(keys))
    lengths = torch.stack([(keys >> 21) & (2**21 - 1), keys & (2**21 - 1)], 1)
    return LengthIndex(order, lengths, starts)
