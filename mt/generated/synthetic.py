"""A generated corpus with the shape of a WMT-scale task, for GPU-sized workloads on a bare machine
(configs/base.yaml, scripts/bench_train.py): no download, made in the process in seconds.

Shape, not language: sentence lengths follow a log-normal close to WMT14 en-de's (median 20 words,
mean about 23, a tail past 80), words a Zipf law over 40,000 made-up words a side. The target is a
fixed word-for-word translation of the source in which every "adjective" (a seventh of the words)
moves behind the word after it, so a model has something to learn and BLEU something to measure.

`generated_corpus` gives text, for `mt train` (data.corpus: synthetic); `piece_pairs` gives token ids of the
same length distribution at about 1.3 pieces a word, for a benchmark that needs no tokenizer.
"""

from __future__ import annotations

import functools
import math
import random

import torch
from torch import Tensor

from mt.config import EOS

WORDS = 40_000  # per side
MEDIAN_WORDS, LENGTH_SIGMA, MAX_WORDS = 20.0, 0.55, 120
ZIPF_SHIFT = 2.7  # Zipf-Mandelbrot: p(rank r) ~ 1 / (r + shift)
HELD_OUT = 1000  # val and test pairs at most: 1% of train, at least 10
SOURCE_LETTERS = ("bdfghklmnprstwz", "aeiouäöü", ("", "", "n", "r", "s", "ch", "st"))  # onsets, vowels, codas
TARGET_LETTERS = ("bcdfglmnprstvw", "aeiouy", ("", "", "n", "r", "s", "th", "ng"))
PIECES_PER_WORD = torch.tensor([0.0, 0.75, 0.2, 0.05])  # P(a word is 1, 2, 3 pieces)


@functools.lru_cache(maxsize=2)
def _words(seed: int, onsets: str, vowels: str, codas: tuple[str, ...]) -> list[str]:
    """WORDS distinct pseudo-words of 1-4 syllables, the frequent ranks shorter (as in real text)."""
    rng = random.Random(seed)
    found: dict[str, None] = {}
    while len(found) < WORDS:
        syllables = min(4, 1 + int(math.log10(len(found) + 1) / 1.5) + rng.randint(0, 1))
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables))
        found.setdefault(word, None)
    return list(found)


def _lengths(n: int, generator: torch.Generator) -> Tensor:
    """(n,) sentence lengths in words: log-normal around MEDIAN_WORDS, within [1, MAX_WORDS]."""
    normal = torch.randn(n, generator=generator)
    return (MEDIAN_WORDS * torch.exp(LENGTH_SIGMA * normal)).round().clamp(1, MAX_WORDS).long()


def _ranks(total: int, generator: torch.Generator) -> Tensor:
    """(total,) word ranks drawn from the Zipf law over WORDS."""
    weights = 1.0 / (torch.arange(WORDS, dtype=torch.float64) + ZIPF_SHIFT)
    return torch.multinomial(weights, total, replacement=True, generator=generator)


def _translate(ranks: list[int]) -> list[int]:
    """The target's word order: an adjective (rank % 7 == 3) swaps with the word after it."""
    out, i = list(ranks), 0
    while i < len(out) - 1:
        if out[i] % 7 == 3:
            out[i], out[i + 1] = out[i + 1], out[i]
            i += 1
        i += 1
    return out


def _sentences(n: int, seed: int) -> tuple[list[str], list[str]]:
    generator = torch.Generator().manual_seed(seed)
    src_words, tgt_words = _words(0, *SOURCE_LETTERS), _words(1, *TARGET_LETTERS)
    lengths = _lengths(n, generator)
    ranks = _ranks(int(lengths.sum()), generator).tolist()
    src, tgt, start = [], [], 0
    for length in lengths.tolist():
        sentence = ranks[start : start + length]
        start += length
        src.append(" ".join(src_words[r] for r in sentence).capitalize() + " .")
        tgt.append(" ".join(tgt_words[r] for r in _translate(sentence)).capitalize() + " .")
    return src, tgt


@functools.lru_cache(maxsize=1)
def generated_corpus(train_pairs: int) -> dict[str, tuple[list[str], list[str]]]:
    """{"train" | "val" | "test": (source lines, target lines)}: train_pairs, then 1% as many (10 to
    HELD_OUT) each; the source side stands for German ("de"), the target for English."""
    held_out = min(HELD_OUT, max(10, train_pairs // 100))
    return {
        "train": _sentences(train_pairs, 1),
        "val": _sentences(held_out, 2),
        "test": _sentences(held_out, 3),
    }


def piece_pairs(n: int, vocab_size: int, seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """n pairs of token ids without a tokenizer: (src ids, tgt ids, src lengths, tgt lengths), the ids
    flat per side (int32, Zipf over the vocabulary's ordinary pieces) and the lengths (n,) in pieces:
    the words' lengths at PIECES_PER_WORD, the target's within 10% of the source's."""
    generator = torch.Generator().manual_seed(seed)
    words = _lengths(n, generator)
    src_len = torch.zeros(n, dtype=torch.long).index_add_(
        0,
        torch.repeat_interleave(torch.arange(n), words),
        torch.multinomial(PIECES_PER_WORD, int(words.sum()), replacement=True, generator=generator),
    )
    ratio = 1.0 + 0.1 * torch.randn(n, generator=generator)
    tgt_len = (src_len * ratio).round().clamp(1, None).long()
    ordinary = 1.0 / (torch.arange(EOS + 1, vocab_size, dtype=torch.float64) - EOS + ZIPF_SHIFT)

    def ids(total: int) -> Tensor:
        return (torch.multinomial(ordinary, total, replacement=True, generator=generator) + EOS + 1).int()

    return ids(int(src_len.sum())), ids(int(tgt_len.sum())), src_len.int(), tgt_len.int()
