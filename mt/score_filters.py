"""The rules on a search step's next-piece scores (mt.decode's greedy and beam loops): no repeated n-gram,
no eos before a minimum length, a forced target prefix. `score_filters` builds them once a search from
the DecodeConfig, and each loop applies them at one site, as Transformers' LogitsProcessorList is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from mt.config import EOS, PAD
from mt.decode_config import DecodeConfig


@dataclass
class Step:
    """What a step's filters read: the step t (from 1), each row's pieces so far (b, t - 1: bos left
    out) and each row's input sentence (b,; None where no prefix is forced: nothing reads it)."""

    t: int
    history: Tensor
    rows: Tensor | None


Filters = Callable[[Tensor, Step], tuple[Tensor, "Tensor | None"]]


def score_filters(cfg: DecodeConfig, prefix: Tensor | None) -> Filters:
    """cfg's rules as one function, (scores (b, V), step) -> (scores, mask). The scores: the model's,
    before they are normalised, with the pieces banned taken out of its distribution, as CTranslate2
    applies its options (so both engines search the same scores): a repeated n-gram
    (decode.no_repeat_ngram), eos before decode.min_len pieces. The mask (b, V) of 0 and -inf, or None:
    what may then be chosen, the log-probability of what is left as it was (the forced `prefix`)."""
    edits = []
    if cfg.no_repeat_ngram:
        edits.append(lambda scores, step: block_repeats(scores, step.history, cfg.no_repeat_ngram))
    if cfg.min_len:
        edits.append(lambda scores, step: no_eos_before(scores, step.t, cfg.min_len))

    def filtered(scores: Tensor, step: Step) -> tuple[Tensor, Tensor | None]:
        for edit in edits:
            scores = edit(scores, step)
        return scores, None if prefix is None else force_prefix(scores, prefix, step.rows, step.t)

    return filtered


def force_prefix(scores: Tensor, prefix: Tensor, rows: Tensor, t: int) -> Tensor | None:
    """Step t's mask (b, V): -inf on every piece but the prefix's t-th for a row still inside its forced
    target prefix, 0 elsewhere (None: past every prefix). prefix: (B, P) ids by input sentence, PAD past
    each one's end; rows: (b,) the input sentence of each row. The forced piece keeps its own score, so
    log-probabilities stay true."""
    if t > prefix.size(1):
        return None
    wanted = prefix[rows, t - 1]  # (b,)
    only = torch.full_like(scores, float("-inf")).scatter_(1, wanted[:, None], 0.0)  # (b, V)
    return only.masked_fill((wanted == PAD)[:, None], 0.0)


def no_eos_before(scores: Tensor, t: int, min_len: int) -> Tensor:
    """Step t's scores (b, V), eos banned while a row holds fewer than `min_len` pieces."""
    if t > min_len:
        return scores
    return scores.index_fill(1, torch.tensor([EOS], device=scores.device), torch.finfo(scores.dtype).min)


def block_repeats(scores: Tensor, history: Tensor, n: int) -> Tensor:
    """Step scores (b, V) where no token may complete an n-gram the row's `history` (b, L: its pieces so
    far, bos left out) already holds (n = 0: all allowed). Applied to the logits before they are
    normalised, as CTranslate2's no_repeat_ngram_size is, so both engines search the same scores."""
    if n == 0 or history.size(1) < n:
        return scores
    windows = history.unfold(1, n, 1)  # (b, L - n + 1, n): every n-gram so far
    repeats = (windows[:, :, :-1] == history[:, None, history.size(1) - n + 1 :]).all(-1)  # (b, L - n + 1)
    banned = torch.zeros_like(scores, dtype=torch.int32).scatter_add_(1, windows[:, :, -1], repeats.int())
    return scores.masked_fill(banned > 0, torch.finfo(scores.dtype).min)  # (b, V)
