"""The training corpus as token ids on disk: sampled for the tokenizer, binarized once in a streaming
pass, memory-mapped after; batches made from it lazily.

Millions of pairs do not fit in Python lists (about 1 KB a sentence). mt.training.binarize streams
the training files into flat arrays of ids of the smallest integer type that holds the vocabulary
(uint16 up to 65,536 pieces) and one lengths array per side; the pairs sorted by length
(mt.batching.LengthIndex) are stored beside them. The arrays live in a cache folder named by the
corpus files and the tokenizer, with a meta.json of their sizes and sha256 written last; a later
start (and every torchrun rank) checks and memory-maps them, so the page cache holds one copy and
a restart holds nothing a pair long in its own memory. A stale or damaged folder is rebuilt, never
trusted.

`load` memory-maps them as `batching.Pairs`, which mt.batching plans into batches and pads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from mt.batching import LengthIndex, Pairs, length_index
from mt.config import DataConfig, RunConfig
from mt.data import (
    count_lines,
    decoded_line,
    downloads_dir,
    empty_file,
    misaligned,
    raw_lines,
    training_sources,
)
from mt.plumbing.files import file_sha256, one_at_a_time, write_failure, write_text
from mt.plumbing.script import tokenizer_settings
from mt.tokenizer import Tokenizer
from mt.training.binarize import SIDES, TYPECODE, binarize, log_kept
from mt.training.bpe import train_tokenizer
from mt.training.clean import cleaning_identity, source_identity, source_lines

log = logging.getLogger(__name__)

FORMAT = 3
INDEX = ("length.order", "length.groups")  # LengthIndex: its order; (source, target, pairs) a group
FILES = SIDES + INDEX + ("removed.tsv",)


def cache_root() -> Path:
    """$MT_CACHE_DIR, else binarized/ beside the downloads (data/ of a checkout, ~/.cache/mt)."""
    return Path(os.environ.get("MT_CACHE_DIR") or downloads_dir() / "binarized")


# ---- the tokenizer's sample -------------------------------------------------------------------------


def tokenizer_sample(cfg: DataConfig, limit: int, seed: int, path: Path) -> tuple[int, int]:
    """Write at most `limit` training lines (source side, then target side) to `path`, one per line:
    all of them when there are no more, else a seeded uniform sample in corpus order. Streams the
    files twice (count, then pick; only picked lines are decoded); returns (lines written, lines in
    the corpus)."""
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
    picked = iter(_sample_positions(total, limit, seed).tolist()) if total > limit else None
    wanted = next(picked) if picked else 0
    written, index = 0, 0
    try:
        with open(path, "w", encoding="utf-8") as f:
            for source in sources:
                text = False
                for number, raw in enumerate(raw_lines(source), 1):  # only a picked line is decoded
                    if picked is None or index == wanted:
                        line = decoded_line(raw, source, number)
                        f.write(line + "\n")
                        written, text = written + 1, text or bool(line)
                        wanted = next(picked, -1) if picked else 0
                    index += 1
                if picked is None and not text:
                    raise empty_file(source)
    except OSError as e:  # reading errors are DataErrors (mt.data): this is the sample's write
        raise write_failure(path, e) from None
    return written, total


def _sample_positions(total: int, limit: int, seed: int) -> Tensor:
    """`limit` distinct positions of range(total), sorted: a seeded uniform sample, drawn without a
    permutation of all `total` (90M lines would take 720 MB)."""
    draws = torch.Generator().manual_seed(seed)
    chosen = torch.zeros(0, dtype=torch.long)
    while len(chosen) < limit:  # each round draws what is missing; repeats are dropped
        chosen = torch.cat([chosen, torch.randint(total, (limit - len(chosen),), generator=draws)]).unique()
    return chosen


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


# ---- the cache ---------------------------------------------------------------------------------------


def _problem(folder: Path, identity: list) -> str:
    """Why `folder` cannot be used ("" = it can): missing, stale (other corpus files) or damaged."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return "not built yet" if not folder.exists() else "meta.json missing or unreadable"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("identity") != identity:
        return "the corpus files changed since it was built"
    try:
        for name in FILES:
            if _damaged(folder / name, meta["files"][name]):
                return f"{name} is damaged (size or sha256 differ from meta.json)"
        if {meta["ids_dtype"], meta["len_dtype"]} - {str(t) for t in TYPECODE} or meta["order_dtype"] not in (
            "torch.int32",
            "torch.int64",
        ):
            return "meta.json names an unknown id type"
        counts = [meta["pairs"], meta["dropped"], *meta["removed"].values()]
        if not all(type(n) is int and n >= 0 for n in counts):
            return "meta.json's counts are damaged"
    except (KeyError, TypeError, AttributeError):
        return "meta.json is damaged"
    return ""


def _damaged(path: Path, expected: dict) -> bool:
    """Whether `path` is not the file meta.json describes: its size differs, or it was written since
    (another modification time) and its sha256 differs. An untouched file is not read again: at 45M
    pairs that is 7 GB, seconds of every start."""
    if not path.is_file():
        return True
    stat = path.stat()
    if stat.st_size != expected["bytes"]:
        return True
    return stat.st_mtime_ns != expected.get("mtime_ns") and file_sha256(path) != expected["sha256"]


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
    # seeds trained side by side share this folder: one builds it, the others wait and then read it
    # (a second build would rename the first away under its readers)
    waiting = functools.partial(log.info, "waiting for another process binarizing %s", folder)
    with one_at_a_time(folder.with_name(f"{folder.name}.lock"), waiting):
        problem = _problem(folder, identity)
        if not problem:
            meta = json.loads((folder / "meta.json").read_text())
            log.info("binarized corpus %s", folder)
            log_kept(meta["pairs"], meta["pairs"] + meta["dropped"], meta["removed"])
            return folder
        log.info("binarizing the training pairs into %s (%s)", folder, problem)
        dropout = (cfg.bpe_dropout, view) if view else None
        _build(
            folder,
            identity,
            lambda building: binarize(sources, tokenizer, cfg, building, total, dropout),
        )
    return folder


def _build(folder: Path, identity: list, binarized) -> None:
    """Make `folder` in a temporary folder renamed into place when complete: `binarized(building)`
    writes the pairs (returning meta.json's counts), then their LengthIndex and meta.json."""
    building = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    try:
        building.mkdir(parents=True)
        counts = binarized(building)
        counts["order_dtype"] = _write_length_index(building, counts)
        files = {name: _described(building / name) for name in FILES}
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


def _described(path: Path) -> dict:
    stat = path.stat()
    return {"bytes": stat.st_size, "sha256": file_sha256(path), "mtime_ns": stat.st_mtime_ns}


def _write_length_index(folder: Path, counts: dict) -> str:
    """The binarized pairs' LengthIndex into folder/length.{order,groups}, the order written straight
    into its memory-mapped file; returns the order's dtype."""
    pairs = Pairs.of(*(_mapped(folder, name, counts, dtype) for name, dtype in _SIDE_DTYPES))
    dtype = torch.int32 if counts["pairs"] < 2**31 else torch.int64
    with open(folder / "length.order", "wb") as f:
        f.truncate(counts["pairs"] * dtype.itemsize)
    order = torch.from_file(str(folder / "length.order"), shared=True, size=counts["pairs"], dtype=dtype)
    index = length_index(pairs.src_len, pairs.tgt_len, order)
    groups = torch.cat([index.lengths, index.starts.diff()[:, None]], 1)  # (G, 3)
    groups.numpy().tofile(folder / "length.groups")
    return str(dtype)


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


_SIDE_DTYPES = (
    ("src.ids", "ids_dtype"),
    ("tgt.ids", "ids_dtype"),
    ("src.len", "len_dtype"),
    ("tgt.len", "len_dtype"),
)


def _mapped(folder: Path, name: str, meta: dict, dtype_key: str) -> Tensor:
    """folder/name memory-mapped as meta[dtype_key] (pages shared with every process mapping it)."""
    dtype = getattr(torch, meta[dtype_key].removeprefix("torch."))
    size = (folder / name).stat().st_size // dtype.itemsize
    return torch.from_file(str(folder / name), shared=False, size=size, dtype=dtype)


def load(folder: Path) -> Pairs:
    """Memory-map the pairs of a folder that `prepare` made (checked there), with their LengthIndex."""
    meta = json.loads((folder / "meta.json").read_text())
    groups = torch.from_file(
        str(folder / "length.groups"), size=meta["files"]["length.groups"]["bytes"] // 8, dtype=torch.int64
    ).view(-1, 3)
    index = LengthIndex(
        _mapped(folder, "length.order", meta, "order_dtype"),
        groups[:, :2].clone(),
        torch.cat([torch.zeros(1, dtype=torch.long), groups[:, 2].cumsum(0)]),
    )
    return Pairs.of(*(_mapped(folder, name, meta, dtype) for name, dtype in _SIDE_DTYPES), by_length=index)
