"""The training corpus as token ids on disk: sampled for the tokenizer, binarized once in a streaming
pass, memory-mapped after; batches made from it lazily.

Millions of pairs do not fit in Python lists (about 1 KB a sentence). `binarize` reads the training
files line by line, encodes them in chunks, and appends the ids of the pairs it keeps to flat arrays
of the smallest integer type that holds the vocabulary (uint16 up to 65,536 pieces), with one
lengths array per side. The arrays live in a cache folder named by the corpus files and the
tokenizer, with a meta.json of their sizes and sha256 written last; a later start (and every
torchrun rank) checks and memory-maps them, so the page cache holds one copy. A stale or damaged
folder is rebuilt, never trusted.

`load` memory-maps them as `batching.Pairs`, which mt.batching plans into batches and pads.
"""

from __future__ import annotations

import array
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor
from tqdm import tqdm

from mt.batching import Pairs
from mt.config import DataConfig, RunConfig
from mt.data import (
    TextSource,
    count_lines,
    downloads_dir,
    empty_file,
    misaligned,
    source_identity,
    source_lines,
    training_sources,
)
from mt.plumbing.errors import DataError
from mt.plumbing.files import file_sha256, write_failure, write_text
from mt.plumbing.script import tokenizer_settings
from mt.tokenizer import Tokenizer, train_tokenizer
from mt.training.clean import Cleaner, cleaning_identity

log = logging.getLogger(__name__)

FORMAT = 2
CHUNK = 10_000  # pairs encoded at a time


def cache_root() -> Path:
    """$MT_CACHE_DIR, else binarized/ beside the downloads (data/ of a checkout, ~/.cache/mt)."""
    return Path(os.environ.get("MT_CACHE_DIR") or downloads_dir() / "binarized")


def _paired(sources: tuple[TextSource, TextSource]) -> Iterator[tuple[str, str]]:
    """The two sides' normalised lines in step; a side that ends early is an error naming both."""
    src, tgt = (source_lines(s) for s in sources)
    n = 0
    for n, pair in enumerate(zip(src, tgt), 1):
        yield pair
    rest = [sum(1 for _ in side) for side in (src, tgt)]  # zip stopped at the shorter side
    if any(rest):
        names = [
            s if isinstance(s, Path) else f"the {side} side" for s, side in zip(sources, ("source", "target"))
        ]
        raise misaligned(names[0], n + rest[0], names[1], n + rest[1])


# ---- the tokenizer's sample -------------------------------------------------------------------------


def tokenizer_sample(cfg: DataConfig, limit: int, seed: int, path: Path) -> tuple[int, int]:
    """Write at most `limit` training lines (source side, then target side) to `path`, one per line:
    all of them when there are no more, else a seeded uniform sample in corpus order. Streams the
    files twice (count, then pick); returns (lines written, lines in the corpus)."""
    sources = training_sources(cfg)
    counts = [count_lines(s) for s in sources]
    for source, n in zip(sources, counts):
        if not n:
            raise empty_file(source)
    if counts[0] != counts[1]:
        for source in sources:  # a line that is not UTF-8 is the more precise error
            all(True for _ in source_lines(source))
        raise misaligned(sources[0], counts[0], sources[1], counts[1])
    total = sum(counts)
    picked = None
    if total > limit:  # positions of the sample, sorted, walked alongside the lines
        order = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:limit]
        picked = iter(order.sort().values.tolist())
    wanted = next(picked) if picked else 0
    written, index = 0, 0
    try:
        with open(path, "w", encoding="utf-8") as f:
            for source in sources:
                text = False
                for line in source_lines(source):
                    if picked is None or index == wanted:
                        f.write(line + "\n")
                        written, text = written + 1, text or bool(line)
                        wanted = next(picked, -1) if picked else 0
                    index += 1
                if picked is None and not text:
                    raise empty_file(source)
    except OSError as e:  # reading errors are DataErrors (mt.data): this is the sample's write
        raise write_failure(path, e) from None
    return written, total


def learn_tokenizer(cfg: RunConfig) -> tuple[Tokenizer, int, dict]:
    """Joint BPE learned from at most tokenizer.sample_sentences training lines (seeded by
    train.seed), with the character coverage and normalization their script asks for (mt.plumbing.script);
    returns it, the number of training pairs, and the card's record of those settings and why."""
    with tempfile.TemporaryDirectory(prefix="mt-bpe-") as folder:
        sample = Path(folder) / "sample.txt"
        written, total = tokenizer_sample(cfg.data, cfg.tokenizer.sample_sentences, cfg.train.seed, sample)
        with open(sample, encoding="utf-8") as lines:
            settings = tokenizer_settings(cfg.tokenizer.character_coverage, lines)
        coverage, normalization = settings["character_coverage"], settings["normalization"]
        tokenizer = train_tokenizer(sample, cfg.tokenizer.vocab_size, coverage, normalization)
    how = "all" if written == total else f"a seeded sample of {written} (tokenizer.sample_sentences) of the"
    log.info("joint BPE learned from %s %d training lines: %d pieces", how, total, tokenizer.vocab_size)
    log.info(
        "BPE: character coverage %g, %s normalization (%s)", coverage, normalization, settings["chosen_by"]
    )
    return tokenizer, total // 2, settings


# ---- binarizing ---------------------------------------------------------------------------------------


def id_dtype(largest: int) -> torch.dtype:
    """The smallest of uint16 and int32 that holds values up to `largest`."""
    return torch.uint16 if largest < 2**16 else torch.int32


_TYPECODE = {torch.uint16: "H", torch.int32: "i"}
_SIDES = ("src.ids", "tgt.ids", "src.len", "tgt.len")
_FILES = _SIDES + ("removed.tsv",)  # removed.tsv: line number and rule of each pair left out


def binarize(
    sources: tuple[TextSource, TextSource],
    tokenizer: Tokenizer,
    cleaner: Cleaner,
    folder: Path,
    total: int | None = None,
    dropout: tuple[float, int] | None = None,
) -> dict:
    """Encode the pairs `cleaner` keeps into folder/{src,tgt}.{ids,len} and list the others in
    folder/removed.tsv; returns the counts for meta.json. Holds one chunk of pairs at a time.
    `dropout`: (BPE-dropout probability, seed): each chunk's side sampled with a seed of its own; the
    rules measure lengths in the plain pieces all the same, so every view keeps the same pairs."""
    ids_type, len_type = id_dtype(tokenizer.vocab_size - 1), id_dtype(cleaner.max_len)
    files = [open(folder / name, "wb") for name in _SIDES]
    removed = open(folder / "removed.tsv", "w", encoding="utf-8")
    kept = read = 0
    try:
        pairs = _paired(sources)
        with tqdm(total=total, unit=" pairs", desc="binarize", mininterval=2, disable=None) as bar:
            while chunk := [pair for _, pair in zip(range(CHUNK), pairs)]:
                arrays = [array.array(_TYPECODE[t]) for t in (ids_type, ids_type, len_type, len_type)]
                src, tgt, lengths = _encode(chunk, tokenizer, read // CHUNK, dropout)
                verdicts = cleaner.verdicts(chunk, lengths)
                kept += _append(arrays, src, tgt, verdicts)
                removed.writelines(f"{read + i + 1}\t{rule}\n" for i, rule in enumerate(verdicts) if rule)
                for f, values in zip(files, arrays):
                    values.tofile(f)
                read += len(chunk)
                bar.update(len(chunk))
        for f in [*files, removed]:
            f.flush()
            os.fsync(f.fileno())
    finally:
        for f in [*files, removed]:
            f.close()
    counts = cleaner.counts
    if not kept:
        raise DataError(
            f"no training pairs left of {read} (removed: {_removed_text(counts)}); "
            f"raise data.max_len, or relax data.clean"
        )
    _log_kept(kept, read, counts)
    return {
        "pairs": kept,
        "dropped": read - kept,
        "removed": counts,
        "ids_dtype": str(ids_type),
        "len_dtype": str(len_type),
    }


def _encode(
    chunk: list[tuple[str, str]], tokenizer: Tokenizer, number: int, dropout: tuple[float, int] | None
) -> tuple[list[list[int]], list[list[int]], list[tuple[int, int]]]:
    """Chunk `number`'s sides as ids (with BPE-dropout, each side sampled with a seed of its own) and
    each pair's lengths in plain pieces (what data.max_len and data.clean measure)."""
    sides = [[pair[side] for pair in chunk] for side in (0, 1)]
    p, seed = dropout or (0.0, 0)
    ids = [
        tokenizer.encode_sampled(lines, p, seed * 1_000_003 + 2 * number + side)
        if p
        else tokenizer.encode(lines)
        for side, lines in enumerate(sides)
    ]
    plain = [tokenizer.encode(lines) for lines in sides] if p else ids
    return ids[0], ids[1], [(len(s), len(t)) for s, t in zip(*plain)]


def _log_kept(kept: int, read: int, removed: dict[str, int]) -> None:
    log.info("kept %d of %d training pairs; removed %s", kept, read, _removed_text(removed))


def _removed_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {rule.replace('_', ' ')}" for rule, n in counts.items())


def _append(
    arrays: list[array.array], src: list[list[int]], tgt: list[list[int]], verdicts: list[str]
) -> int:
    """Add the pairs whose verdict is "" to (src ids, tgt ids, src len, tgt len); returns how many."""
    kept = 0
    for s, t, rule in zip(src, tgt, verdicts):
        if not rule:
            arrays[0].extend(s), arrays[1].extend(t), arrays[2].append(len(s)), arrays[3].append(len(t))
            kept += 1
    return kept


def _problem(folder: Path, identity: list) -> str:
    """Why `folder` cannot be used ("" = it can): missing, stale (other corpus files) or damaged."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return "not built yet" if not folder.exists() else "meta.json missing or unreadable"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("identity") != identity:
        return "the corpus files changed since it was built"
    try:
        for name in _FILES:
            path, expected = folder / name, meta["files"][name]
            if (
                not path.is_file()
                or path.stat().st_size != expected["bytes"]
                or file_sha256(path) != expected["sha256"]
            ):
                return f"{name} is damaged (size or sha256 differ from meta.json)"
        if {meta["ids_dtype"], meta["len_dtype"]} - {str(t) for t in _TYPECODE}:
            return "meta.json names an unknown id type"
        counts = [meta["pairs"], meta["dropped"], *meta["removed"].values()]
        if not all(type(n) is int and n >= 0 for n in counts):
            return "meta.json's counts are damaged"
    except (KeyError, TypeError, AttributeError):
        return "meta.json is damaged"
    return ""


def prepare(cfg: DataConfig, tokenizer: Tokenizer, total: int | None = None, view: int = 0) -> Path:
    """The checked binarized-corpus folder of the training split for this tokenizer, built (or
    rebuilt) if need be. The build goes to a temporary folder renamed into place when complete.
    `view` n > 0: the pairs encoded with BPE-dropout cfg.bpe_dropout, sampled from seed n."""
    sources = training_sources(cfg)
    identity = [source_identity(s) for s in sources] + [
        hashlib.sha256(tokenizer.proto).hexdigest(),
        cfg.max_len,
    ]
    identity += [cleaning_identity(cfg)]
    # the sampler named: views that sentencepiece drew (salted per process) before mt's loop are not reused
    identity += [cfg.bpe_dropout, view, "mt-bpe-dropout"] if view else []
    name = [i[0] if i[0] != "lines" else i[1] for i in identity[:2]] + identity[2:]  # not size or time
    key = hashlib.sha256(json.dumps(name).encode()).hexdigest()[:16]
    folder = cache_root() / f"{cfg.corpus}-{cfg.src_lang}-{cfg.tgt_lang}-{key}"
    problem = _problem(folder, identity)
    if not problem:
        meta = json.loads((folder / "meta.json").read_text())
        log.info("binarized corpus %s", folder)
        _log_kept(meta["pairs"], meta["pairs"] + meta["dropped"], meta["removed"])
        return folder
    log.info("binarizing the training pairs into %s (%s)", folder, problem)
    building = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    try:
        building.mkdir(parents=True)
        dropout = (cfg.bpe_dropout, view) if view else None
        counts = binarize(sources, tokenizer, Cleaner(cfg), building, total, dropout)
        files = {
            name: {"bytes": (building / name).stat().st_size, "sha256": file_sha256(building / name)}
            for name in _FILES
        }
        write_text(
            building / "meta.json",
            json.dumps({"format": FORMAT, "identity": identity, **counts, "files": files}, indent=1),
        )
        if folder.exists():  # stale or damaged: out of the way first (a folder cannot be renamed over)
            old = folder.with_name(f"{folder.name}.old-{os.getpid()}")
            os.replace(folder, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(building, folder)
    except OSError as e:  # reading errors are DataErrors (mt.data): this is the cache's write
        raise write_failure(building, e) from None
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return folder


def cleaning_report(folder: Path, removed_copy: Path) -> dict:
    """What binarizing `folder` read, kept and removed (per rule, for the card); the removed pairs' line
    numbers and rules are copied to `removed_copy` (a run's removed-pairs.tsv)."""
    meta = json.loads((folder / "meta.json").read_text())
    try:
        shutil.copyfile(folder / "removed.tsv", removed_copy)
    except OSError as e:
        raise write_failure(removed_copy, e) from None
    read = meta["pairs"] + meta["dropped"]
    return {"pairs_read": read, "kept": meta["pairs"], "removed": meta["removed"], "lines": removed_copy.name}


# ---- the corpus in memory ------------------------------------------------------------------------------


def training_pairs(cfg: DataConfig, folder: Path) -> Pairs:
    """What training reads of a folder that `prepare` made: its pairs, and with data.both_directions
    each of them reversed after them."""
    pairs = load(folder)
    return pairs.both_directions() if cfg.both_directions else pairs


def load(folder: Path) -> Pairs:
    """Memory-map the pairs of a folder that `prepare` made (checked there)."""
    meta = json.loads((folder / "meta.json").read_text())
    dtypes = {str(t): t for t in _TYPECODE}

    def mapped(name: str, dtype: str) -> Tensor:
        size = meta["files"][name]["bytes"] // dtypes[dtype].itemsize
        return torch.from_file(str(folder / name), shared=False, size=size, dtype=dtypes[dtype])

    return Pairs.of(
        mapped("src.ids", meta["ids_dtype"]),
        mapped("tgt.ids", meta["ids_dtype"]),
        mapped("src.len", meta["len_dtype"]),
        mapped("tgt.len", meta["len_dtype"]),
    )
