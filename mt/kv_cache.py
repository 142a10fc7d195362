"""The decoder's keys and values during incremental decoding (`Seq2Seq.decode` with a cache), kept so
that each new position attends to the earlier ones without recomputing them."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Decoder state for incremental decoding, owned by the caller.

    self_kv[i]: layer i's self-attention keys/values, (B, H, L, Dh) each, of which the first `length`
    positions are decoded; after a `reorder` L = length + 1, so the next step writes its position in
    place instead of concatenating (one copy of the prefix per beam step instead of two).
    cross_kv[i]: layer i's cross-attention keys/values of the memory, computed once, (B, H, S, Dh) each;
    B sentences, whose rows of self_kv may be G * B (their beams, see `Attention.forward`).
    """

    def __init__(self, n_layers: int):
        self.length = 0
        self.self_kv: list[tuple[Tensor, Tensor] | None] = [None] * n_layers
        self.cross_kv: list[tuple[Tensor, Tensor] | None] = [None] * n_layers

    def append(self, i: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add layer i's keys/values of new positions, (B, H, T_new, Dh) each; returns those of all
        positions, (B, H, length + T_new, Dh) each. `length` moves on in `Seq2Seq.decode`."""
        t, end = self.length, self.length + k.size(2)
        cached = self.self_kv[i]
        if cached is None:
            kv = (k, v)
        elif cached[0].size(2) == end:  # room left by reorder
            cached[0][:, :, t:] = k
            cached[1][:, :, t:] = v
            kv = cached
        else:
            kv = (torch.cat([cached[0][:, :, :t], k], dim=2), torch.cat([cached[1][:, :, :t], v], dim=2))
        self.self_kv[i] = kv
        return kv

    @torch.no_grad()  # decoding state: an out= copy has no gradient
    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        """Keep target rows `index` (N',) of the self-attention cache (e.g. the surviving beams) and,
        unless `sentences` is None, sentences `sentences` (B',) of the cross-attention cache.

        Without `sentences` every sentence keeps its cross-attention keys/values: `index` only moves
        rows among the beams of a sentence (the default, with greedy, where rows are sentences, both
        are `index`)."""

        def pick_positions(x: Tensor) -> Tensor:  # (B, H, L, Dh) -> (B', H, length + 1, Dh), last one empty
            out = x.new_empty(index.numel(), x.size(1), self.length + 1, x.size(3))
            torch.index_select(x[:, :, : self.length], 0, index, out=out[:, :, : self.length])
            return out

        self.self_kv = [
            None if kv is None else (pick_positions(kv[0]), pick_positions(kv[1])) for kv in self.self_kv
        ]
        if sentences is not None:
            self.cross_kv = [
                None if kv is None else tuple(x.index_select(0, sentences) for x in kv)
                for kv in self.cross_kv
            ]
