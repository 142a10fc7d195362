"""The pieces an output layer scores (model.output_pieces: target): the joint vocabulary stays whole
(one sentencepiece model, one tied embedding table), but the output projection, the softmax and the
loss cover only the pieces that occur on the target side of the training corpus, plus the specials.
With the default's joint 8k vocabulary about half of the pieces never occur in English, and the
output layer is a quarter of the model's multiply-adds at every target token.

Positions in the output layer are the sorted piece ids, so the specials (ids 0-3, always in it) keep
their ids there: PAD is still the loss's ignored target, EOS still ends a search.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mt.config import BOS, EOS, PAD, UNK

SPECIALS = (PAD, UNK, BOS, EOS)


def target_pieces(targets: list[Tensor], vocab_size: int) -> Tensor:
    """The pieces of the training targets (every BPE-dropout view's: `targets` holds each view's flat
    target ids) and the specials, sorted: (V',). Counted in chunks, so a corpus of any size fits."""
    seen = torch.zeros(vocab_size, dtype=torch.bool)
    seen[list(SPECIALS)] = True
    for ids in targets:
        for chunk in ids.split(1 << 24):
            seen |= torch.bincount(chunk.long(), minlength=vocab_size) > 0
    return seen.nonzero().flatten()


class OutputPieces(nn.Module):
    """The output layer's piece ids (a buffer, saved with the weights) and the maps to and from them."""

    def __init__(self, vocab_size: int, target_pieces: Tensor | list[int]):
        super().__init__()
        ids = torch.as_tensor(target_pieces, dtype=torch.long).unique()  # (V',) sorted
        assert ids[: len(SPECIALS)].tolist() == list(SPECIALS), f"the specials are output pieces: {ids[:4]}"
        assert ids[-1] < vocab_size, f"piece {ids[-1].item()} >= vocab_size {vocab_size}"
        self.register_buffer("ids", ids)
        index = torch.full((vocab_size,), UNK, dtype=torch.long).scatter_(0, ids, torch.arange(len(ids)))
        self.register_buffer("index", index, persistent=False)  # (V,): a piece outside the layer -> UNK
        self._rows = (None, None)  # (key, rows) of the projection, while its weights stay the same

    def positions(self, ids: Tensor) -> Tensor:
        """Piece ids (any shape) -> output positions; a piece the layer lacks goes to UNK's (the only
        way to score it: a validation reference may hold a piece no training target has)."""
        return self.index[ids]

    def to_pieces(self, logits: Tensor, vocab_size: int) -> Tensor:
        """(..., V') -> (..., V) by piece id, the pieces the layer lacks at the dtype's lowest value: a
        softmax gives them 0 and the others what a softmax over V' gives, so search, sampling and
        scoring work in piece ids as they do over the whole vocabulary."""
        full = logits.new_full((*logits.shape[:-1], vocab_size), torch.finfo(logits.dtype).min)
        return full.index_copy_(-1, self.ids, logits)  # (..., V)

    def rows(self, weight: Tensor) -> Tensor:
        """The projection's rows (V', D) of `weight` (V, D). In eval mode without autograd (a search)
        the slice is kept, so a search slices once, not every step. A weight's version does not tell
        an update (fused Adam writes without bumping it), so the slice is dropped whenever the module
        goes back to training or loads weights, and kept only for the same tensor, type and device."""
        if self.training or torch.is_grad_enabled():
            return weight[self.ids]
        key = (weight.data_ptr(), weight.dtype, weight.device)
        if self._rows[0] != key:
            self._rows = (key, weight[self.ids])
        return self._rows[1]

    def train(self, mode: bool = True) -> OutputPieces:
        self._rows = (None, None)  # training changes the weights: a later search slices them anew
        return super().train(mode)

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        self._rows = (None, None)  # the model is loading other weights
        super()._load_from_state_dict(*args, **kwargs)


def written_pieces(models: list) -> list[int] | None:
    """The pieces every one of `models` (Seq2Seq) writes, sorted: what target-side text is cut into
    (`Tokenizer.writing`); None where each writes every piece (model.output_pieces: all)."""
    sets = [set(m.output.ids.tolist()) for m in models if m.output is not None]
    return sorted(set.intersection(*sets)) if sets else None
