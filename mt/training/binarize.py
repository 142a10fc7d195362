"""Binarizing: a training corpus's pairs encoded into flat arrays of ids and lengths, the pairs that
data.clean removes listed beside them; mt.training.corpus caches the result.

One pass streams the files a chunk of pairs at a time. The chunks are decoded, encoded and judged by
the rules (all but the duplicate rule) in as many worker processes as cores, a few chunks in flight;
this process judges duplicates, which need every earlier pair, and writes in corpus order. The
bytes are the same for any number of processes (tests/test_corpus.py).
"""

from __future__ import annotations

import array
import collections
import itertools
import logging
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from tqdm import tqdm

from mt.config import DataConfig
from mt.data import TextSource, decoded_line, misaligned, raw_lines
from mt.plumbing.errors import DataError
from mt.plumbing.seeds import derived_seed
from mt.tokenizer import Tokenizer
from mt.training.clean import Cleaner, pair_keys

log = logging.getLogger(__name__)

PAIRS_ENCODED_AT_ONCE = 10_000  # pairs encoded at a time


def id_dtype(largest: int) -> torch.dtype:
    """The smallest of uint16 and int32 that holds values up to `largest`."""
    return torch.uint16 if largest < 2**16 else torch.int32


TYPECODE = {torch.uint16: "H", torch.int32: "i"}
SIDES = ("src.ids", "tgt.ids", "src.len", "tgt.len")  # the files `binarize` writes, with removed.tsv


def binarize_processes(sources: tuple[TextSource, TextSource]) -> int:
    """Processes that encode: one for a corpus of under 16 MB (encoded in about as long as a worker
    takes to start), else as many as this process may use cores."""
    size = sum(s.stat().st_size if isinstance(s, Path) else sum(map(len, s)) for s in sources)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 1 if size < 16 * 2**20 else cores


def binarize(
    sources: tuple[TextSource, TextSource],
    tokenizer: Tokenizer,
    cfg: DataConfig,
    folder: Path,
    total: int | None = None,
    dropout: tuple[float, int] | None = None,
) -> dict:
    """Encode the pairs data.clean keeps into folder/{src,tgt}.{ids,len} and list the others in
    folder/removed.tsv; returns the counts for meta.json. Streams: reads a chunk of pairs at a time,
    encoded in `binarize_processes` processes (the bytes written are the same for any number).
    `dropout`: (BPE-dropout probability, seed): each chunk's side sampled with a seed of its own; the
    rules measure lengths in the plain pieces all the same, so every view keeps the same pairs."""
    ids_type, len_type = id_dtype(tokenizer.vocab_size - 1), id_dtype(cfg.max_len)
    judge = Cleaner(cfg)  # the duplicate rule and the counts, in corpus order, here
    started, processes = time.perf_counter(), binarize_processes(sources)
    settings = EncodeSettings(_names(sources), tokenizer.proto, cfg, dropout, ids_type, len_type)
    encoded = _encoded_chunks(sources, settings, processes)
    kept, read = _write(encoded, judge, folder, total)
    if not kept:
        raise DataError(
            f"no training pairs left of {read} (removed: {_removed_text(judge.counts)}); "
            f"raise data.max_len, or relax data.clean"
        )
    seconds = time.perf_counter() - started
    log.info(
        "binarized %d pairs in %.1f s (%.0f pairs/s, %d processes)", read, seconds, read / seconds, processes
    )
    log_kept(kept, read, judge.counts)
    return {
        "pairs": kept,
        "dropped": read - kept,
        "removed": judge.counts,
        "ids_dtype": str(ids_type),
        "len_dtype": str(len_type),
    }


def _write(encoded: Iterator[Encoded], judge: Cleaner, folder: Path, total: int | None) -> tuple[int, int]:
    """The chunks' kept pairs appended to folder's arrays, the removed ones' line numbers and rules to
    removed.tsv, each chunk judged for duplicates first; returns (pairs kept, pairs read)."""
    files = [open(folder / name, "wb") for name in SIDES]
    removed = open(folder / "removed.tsv", "w", encoding="utf-8")
    kept = read = 0
    try:
        with tqdm(total=total, unit=" pairs", desc="binarize", mininterval=2, disable=None) as bar:
            for chunk in encoded:
                verdicts = judge.judged(chunk.verdicts, chunk.keys)
                for f, values in zip(files, chunk.without(verdicts)):
                    values.tofile(f)
                removed.writelines(f"{read + i + 1}\t{rule}\n" for i, rule in enumerate(verdicts) if rule)
                kept, read = kept + verdicts.count(""), read + len(verdicts)
                bar.update(len(verdicts))
        for f in [*files, removed]:
            f.flush()
            os.fsync(f.fileno())
    finally:
        for f in [*files, removed]:
            f.close()
    return kept, read


@dataclass
class Encoded:
    """One chunk of pairs encoded: the ids and lengths of the pairs the rules but the duplicate rule
    kept, each pair's verdict so far, and the kept pairs' `pair_keys` (where the duplicate rule applies)."""

    arrays: list[array.array]  # src ids, tgt ids, src len, tgt len
    verdicts: list[str]
    keys: list[int]

    def without(self, verdicts: list[str]) -> list[array.array]:
        """The arrays without the pairs `verdicts` now also removes (duplicates)."""
        candidates = [rule for rule in self.verdicts if not rule]
        final = [rule for before, rule in zip(self.verdicts, verdicts) if not before]
        if final.count("") == len(candidates):
            return self.arrays
        src_len, tgt_len = self.arrays[2], self.arrays[3]
        out = [array.array(a.typecode) for a in self.arrays]
        src_at = tgt_at = 0
        for rule, s, t in zip(final, src_len, tgt_len):
            if not rule:
                out[0].extend(self.arrays[0][src_at : src_at + s])
                out[1].extend(self.arrays[1][tgt_at : tgt_at + t])
                out[2].append(s)
                out[3].append(t)
            src_at, tgt_at = src_at + s, tgt_at + t
        return out


def _encoded_chunks(
    sources: tuple[TextSource, TextSource], settings: EncodeSettings, processes: int
) -> Iterator[Encoded]:
    """The corpus's chunks encoded, in order: here, or in `processes` worker processes that each
    encode a chunk while this one reads the next (a few chunks in flight, never the whole file)."""
    chunks = enumerate(_raw_chunks(sources))
    if processes == 1:
        _start_worker(settings)
        yield from (_encode_chunk(number, chunk) for number, chunk in chunks)
        return
    spawn = multiprocessing.get_context("spawn")  # not fork: this process may hold threads and torch's state
    with spawn.Pool(processes, _start_worker, (settings,)) as pool:
        pending: collections.deque = collections.deque()
        try:
            for number, chunk in chunks:
                pending.append(pool.apply_async(_encode_chunk, (number, chunk)))
                if len(pending) > 2 * processes:
                    yield pending.popleft().get()
        except DataError:  # the files end unevenly: an error on an earlier line is named first
            while pending:
                pending.popleft().get()
            raise
        while pending:
            yield pending.popleft().get()


def _raw_chunks(sources: tuple[TextSource, TextSource]) -> Iterator[tuple[int, list]]:
    """(first line number, PAIRS_ENCODED_AT_ONCE pairs of lines as stored) a chunk at a time; a side that
    ends early is an error naming both."""
    src, tgt = (raw_lines(s) for s in sources)
    n = 0
    while chunk := list(itertools.islice(zip(src, tgt), PAIRS_ENCODED_AT_ONCE)):
        yield n + 1, chunk
        n += len(chunk)
    rest = [sum(1 for _ in side) for side in (src, tgt)]  # zip stopped at the shorter side
    if any(rest):
        names = _names(sources)
        raise misaligned(names[0], n + rest[0], names[1], n + rest[1])


def _names(sources: tuple[TextSource, TextSource]) -> list:
    """What an error calls each side: its file, or which side of a generated corpus it is."""
    return [
        s if isinstance(s, Path) else f"the {side} side" for s, side in zip(sources, ("source", "target"))
    ]


@dataclass(frozen=True)
class EncodeSettings:
    """What a process that encodes chunks starts from (sent to each spawned worker)."""

    names: list  # what an error calls each side (`_names`)
    proto: bytes  # the tokenizer's model
    cfg: DataConfig
    dropout: tuple[float, int] | None  # (BPE-dropout probability, seed), or none
    ids_type: torch.dtype
    len_type: torch.dtype


@dataclass
class ChunkEncoder:
    """What a process that encodes chunks holds, made once from its EncodeSettings."""

    names: list
    tokenizer: Tokenizer
    cleaner: Cleaner
    dropout: tuple[float, int] | None
    codes: list[str]  # array typecodes of source ids, target ids, source lengths, target lengths


_worker: ChunkEncoder | None = None  # this process's, set by `_start_worker`


def _start_worker(settings: EncodeSettings) -> None:
    """Set this process up to encode chunks (`_encode_chunk`); a worker process leaves Ctrl-C to the
    main process, which stops the pool."""
    global _worker
    if multiprocessing.parent_process():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    s = settings
    codes = [TYPECODE[t] for t in (s.ids_type, s.ids_type, s.len_type, s.len_type)]
    _worker = ChunkEncoder(s.names, Tokenizer(s.proto), Cleaner(s.cfg), s.dropout, codes)


def _encode_chunk(number: int, raw: tuple[int, list]) -> Encoded:
    """Chunk `number` (its first line number, its pairs as stored) decoded, encoded and judged by
    every rule but the duplicate rule."""
    first, lines = raw
    w = _worker
    chunk = [
        tuple(decoded_line(side, name, first + i) for side, name in zip(pair, w.names))
        for i, pair in enumerate(lines)
    ]
    src, tgt, lengths = _encode(chunk, w.tokenizer, number, w.dropout)
    verdicts = [w.cleaner.rule(pair, n) for pair, n in zip(chunk, lengths)]
    arrays = [array.array(code) for code in w.codes]
    for s, t, rule in zip(src, tgt, verdicts):
        if not rule:
            arrays[0].extend(s), arrays[1].extend(t), arrays[2].append(len(s)), arrays[3].append(len(t))
    kept = [pair for pair, rule in zip(chunk, verdicts) if not rule]
    return Encoded(arrays, verdicts, pair_keys(kept) if w.cleaner.deduplicates else [])


def _encode(
    chunk: list[tuple[str, str]], tokenizer: Tokenizer, number: int, dropout: tuple[float, int] | None
) -> tuple[list[list[int]], list[list[int]], list[tuple[int, int]]]:
    """Chunk `number`'s sides as ids (with BPE-dropout, each side sampled with a seed of its own: chunk
    and side as one key) and each pair's lengths in plain pieces (what data.max_len and data.clean
    measure)."""
    sides = [[pair[side] for pair in chunk] for side in (0, 1)]
    p, seed = dropout or (0.0, 0)
    ids = [
        tokenizer.encode_sampled(lines, p, derived_seed(seed, 2 * number + side))
        if p
        else tokenizer.encode(lines)
        for side, lines in enumerate(sides)
    ]
    plain = [tokenizer.encode(lines) for lines in sides] if p else ids
    return ids[0], ids[1], [(len(s), len(t)) for s, t in zip(*plain)]


def log_kept(kept: int, read: int, removed: dict[str, int]) -> None:
    log.info("kept %d of %d training pairs; removed %s", kept, read, _removed_text(removed))


def _removed_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {rule.replace('_', ' ')}" for rule, n in counts.items())
