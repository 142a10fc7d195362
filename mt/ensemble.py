"""Ensembles: models of one tokenizer decoding as one model does, from the mean of their next-token
log-probabilities; mt.decode's searches take an `Ensemble` where they take a Seq2Seq."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from mt.model import Seq2Seq


class Ensemble:
    """Models of one tokenizer decoding as one: each keeps its own memory and KV cache, and the next
    token's scores are the mean of their log-probabilities (which greedy and beam search normalise
    again). Search uses it as it uses a Seq2Seq; an ensemble of one decodes as its model does."""

    def __init__(self, models: list[Seq2Seq]):
        self.models = models
        self.cfg = dataclasses.replace(models[0].cfg, max_positions=min(m.cfg.max_positions for m in models))
        self.training = False

    def eval(self) -> Ensemble:
        return self.train(False)

    def train(self, mode: bool = True) -> Ensemble:
        for m in self.models:
            m.train(mode)
        self.training = mode
        return self

    def to(self, device) -> Ensemble:
        self.models = [m.to(device) for m in self.models]
        return self

    def encode(self, src: Tensor, src_mask: Tensor) -> Stacked:
        return Stacked([m.encode(src, src_mask) for m in self.models])  # each (B, S, D)

    def new_cache(self) -> Stacked:
        return Stacked([m.new_cache() for m in self.models])

    def to_pieces(self, scores: Tensor) -> Tensor:  # Seq2Seq.to_pieces: `decode` gives them by piece id
        return scores

    def decode(self, tgt_in: Tensor, memory: Stacked, src_mask: Tensor, cache: Stacked | None = None):
        """As Seq2Seq.decode: (B, T, V) scores (the models' mean log-probabilities) and the caches."""
        caches = cache.parts if cache is not None else [None] * len(self.models)
        lprobs = [
            torch.log_softmax(m.to_pieces(m.decode(tgt_in, part, src_mask, c)[0]).float(), dim=-1)
            for m, part, c in zip(self.models, memory.parts, caches)
        ]
        return torch.stack(lprobs).mean(0), cache


@dataclass
class Stacked:
    """One memory or KV cache per model of an `Ensemble`, indexed and reordered together."""

    parts: list

    def __getitem__(self, index: Tensor) -> Stacked:  # memory[keep]: the sentences still running
        return Stacked([part[index] for part in self.parts])

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:  # KVCache.reorder
        for part in self.parts:
            part.reorder(index, sentences)
