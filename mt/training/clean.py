"""Corpus cleaning (data.clean): the verdict on each training pair as it is binarized (mt.training.corpus), in
one streaming pass: an empty side or more than data.max_len pieces (always), then the rules of
data.clean: length ratio, source equal to target, a side in the other side's language, a source or
target that is a line of the val or test files (a leak, which silently inflates test BLEU), and exact
duplicates. A pair counts under the first rule it breaks; mt.training.corpus lists the removed pairs' line
numbers and rules beside the binarized ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor

from mt.config import DataConfig
from mt.data import TextSource, iter_lines, split_sources
from mt.plumbing.script import words

# in the order they are tried: a pair counts under the first it breaks
RULES = ("empty", "too_long", "ratio", "copy", "language", "leak", "duplicate")


def source_identity(source: TextSource) -> list:
    """What says a source changed: a file's path, size and modification time; a list's content hash."""
    if isinstance(source, Path):
        stat = source.stat()
        return [str(source.resolve()), stat.st_size, stat.st_mtime_ns]
    return ["lines", hashlib.sha256("\n".join(source).encode()).hexdigest()]


def source_lines(source: TextSource) -> Iterator[str]:
    return iter_lines(source) if isinstance(source, Path) else iter(source)


def cleaning_applies(cfg: DataConfig) -> bool:
    return cfg.clean.apply == "always" or (cfg.clean.apply == "auto" and cfg.corpus == "files")


def held_out_sources(cfg: DataConfig) -> list[TextSource]:
    """The val and test files (both sides) a training pair must not repeat: those that exist."""
    sides = [side for split in ("val", "test") for side in split_sources(cfg, split)]
    return [side for side in sides if not isinstance(side, Path) or side.exists()]


_PUNCTUATION = ".,;:!?\"'()[]«»„“”‘’-。，、；：！？「」『』（）《》"


def _words(line: str) -> list[str]:
    """`line`'s words for the language rule: mt.plumbing.script's (characters in Chinese or Japanese text),
    lower-cased, without their punctuation."""
    stripped = (w.strip(_PUNCTUATION) for w in words(line.lower()))
    return [w for w in stripped if w]


class Languages:
    """Which side's language a line is in, told from the val files' words: those that occur on only one
    of their sides. A line with more words only the other side uses than words only its own side uses
    is in the other language (a pair with its sides exchanged, a copied side)."""

    def __init__(self, val_source: list[str], val_target: list[str]):
        src, tgt = ({w for line in side for w in _words(line)} for side in (val_source, val_target))
        self.side_of = dict.fromkeys(src - tgt, 0) | dict.fromkeys(tgt - src, 1)  # one side's words only

    def wrong(self, line: str, side: int) -> bool:
        found = [self.side_of.get(w.strip(_PUNCTUATION)) for w in words(line.lower())]  # as `_words`
        return found.count(1 - side) > found.count(side)


def pair_keys(pairs: list[tuple[str, str]]) -> list[int]:
    """64-bit keys of pairs for the duplicate rule, the same in every process (Python's own `hash` of
    a string is salted per process, and binarizing encodes in several)."""
    digests = (hashlib.blake2b(f"{s}\n{t}".encode(), digest_size=8).digest() for s, t in pairs)
    return [int.from_bytes(d, "little", signed=True) for d in digests]


class SeenPairs:
    """Which pairs came before, in about 8 bytes a pair (a set of millions of Python ints takes ~70):
    their `pair_keys`, the recent ones in a set that is merged into a sorted tensor when it grows."""

    MERGE = 1 << 18

    def __init__(self) -> None:
        self.old = torch.empty(0, dtype=torch.int64)
        self.recent: set[int] = set()

    def first_seen(self, keys: list[int]) -> list[bool]:
        """For each pair's key in order, whether it is new (it is remembered)."""
        before = [False] * len(keys)
        if len(self.old) and keys:
            query = torch.tensor(keys, dtype=torch.int64)
            at = torch.searchsorted(self.old, query).clamp(max=len(self.old) - 1)
            before = (self.old[at] == query).tolist()
        new = []
        for key, seen in zip(keys, before):
            new.append(not seen and key not in self.recent)
            if new[-1]:
                self.recent.add(key)
        if len(self.recent) >= self.MERGE:
            self.old, self.recent = _inserted(self.old, torch.tensor(sorted(self.recent))), set()
        return new


def _inserted(old: Tensor, new: Tensor) -> Tensor:
    """Sorted `old` with sorted `new` (none of them in it) merged in, each key placed where it goes:
    sorting both again would hold two more copies of `old` (at 40M keys 2.5 s and 600 MB a merge)."""
    at = torch.searchsorted(old, new) + torch.arange(len(new))  # (R,) the new keys' places
    merged = torch.empty(len(old) + len(new), dtype=old.dtype)
    merged[at] = new
    keeps_old = torch.ones(len(merged), dtype=torch.bool)
    keeps_old[at] = False
    return merged.masked_scatter_(keeps_old, old)


class Cleaner:
    """The verdict on each training pair, in corpus order: "" (kept) or the first rule it breaks
    (RULES), with a count per rule. Pairs that are empty or over `max_len` pieces always go; the rules
    of data.clean only where they apply."""

    def __init__(self, cfg: DataConfig):
        self.max_len = cfg.max_len
        self.rules = cfg.clean if cleaning_applies(cfg) else None
        self.seen = SeenPairs()
        self.held_out: list[set[str]] = [set(), set()]  # source lines, target lines
        if self.rules and self.rules.leaks:
            for i, side in enumerate(held_out_sources(cfg)):
                self.held_out[i % 2].update(source_lines(side))
            self.held_out[0].discard(""), self.held_out[1].discard("")
        if self.rules and self.rules.languages:
            self.languages = Languages(*(list(source_lines(side)) for side in split_sources(cfg, "val")))
        self.counts = dict.fromkeys(self._active(), 0)

    def _active(self) -> list[str]:
        """The rules that can remove a pair here: empty and too_long always, the others as configured."""
        r = self.rules
        if not r:
            return ["empty", "too_long"]
        on = {
            "ratio": r.max_ratio > 0,
            "copy": r.copies,
            "language": r.languages,
            "leak": r.leaks,
            "duplicate": r.duplicates,
        }
        return [rule for rule in RULES if on.get(rule, True)]

    @property
    def deduplicates(self) -> bool:
        return bool(self.rules and self.rules.duplicates)

    def verdicts(self, pairs: list[tuple[str, str]], lengths: list[tuple[int, int]]) -> list[str]:
        found = [self.rule(pair, n) for pair, n in zip(pairs, lengths)]
        kept = [pair for pair, rule in zip(pairs, found) if not rule]
        return self.judged(found, pair_keys(kept) if self.deduplicates else [])

    def judged(self, found: list[str], keys: list[int]) -> list[str]:
        """The verdicts `rule` gave, with the duplicate rule applied to the pairs it kept (their
        `pair_keys`, in order, where the rule applies), counted. Binarizing's processes give the first
        and this one process judges, in corpus order."""
        found = list(found)
        if self.deduplicates:
            kept = [i for i, rule in enumerate(found) if not rule]
            for i, new in zip(kept, self.seen.first_seen(keys)):
                found[i] = "" if new else "duplicate"
        for rule in found:
            if rule:
                self.counts[rule] += 1
        return found

    def rule(self, pair: tuple[str, str], lengths: tuple[int, int]) -> str:
        """The first rule but the duplicate rule that `pair` breaks, or "" (kept so far)."""
        shorter, longer = sorted(lengths)
        if not shorter:
            return "empty"
        if longer > self.max_len:
            return "too_long"
        r = self.rules
        if not r:
            return ""
        if r.max_ratio and longer > r.max_ratio * shorter:
            return "ratio"
        if r.copies and pair[0] == pair[1]:
            return "copy"
        if r.languages and (self.languages.wrong(pair[0], 0) or self.languages.wrong(pair[1], 1)):
            return "language"
        if r.leaks and (pair[0] in self.held_out[0] or pair[1] in self.held_out[1]):
            return "leak"
        return ""


def cleaning_identity(cfg: DataConfig) -> list:
    """What the verdicts depend on beyond the training files, the tokenizer and data.max_len."""
    if not cleaning_applies(cfg):
        return []
    return [dataclasses.asdict(cfg.clean), [source_identity(s) for s in held_out_sources(cfg)]]
