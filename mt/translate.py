"""Text in, text out: translate raw lines with a model (lines -> pieces -> search -> text).

Translation sorts lines by length into token-budget batches and restores the input order, so the
output has exactly one line per input line (empty input -> empty output). Validation translates with
these functions and the Python API (mt.translator) does for every command; none of them reads or
writes files. Either engine searches: the torch model (mt.decode) or an `Engine` that takes every
batch at once (CTranslate2, mt.ct2); mt.translator chooses which.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Protocol

import torch

from mt.batching import source_batch, token_batches
from mt.config import PAD
from mt.data import normalize
from mt.decode import Ensemble, Hypothesis, Sources, search
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.plumbing.seeds import derived_seed
from mt.tokenizer import Tokenizer

log = logging.getLogger(__name__)


class Engine(Protocol):
    """A searcher other than the torch model (mt.ct2.Ct2Model): it answers as `decode.search` does,
    for all of a call's batches at once, and keeps the model's `cfg`, `training`, `eval` and `train`."""

    def search_groups(
        self, batches: list[tuple[list[list[int]], list[list[int]]]], cfg: DecodeConfig, scores: bool = True
    ) -> list[list[list[Hypothesis]]]: ...


@dataclass
class SearchRequest:
    """Lines to translate, and by what: mt's model or another engine (`Engine`) with its tokenizer; each
    line's forced target prefix ("" for none; None: no line has one) and `max_len`, the source's piece
    limit, the run's data.max_len (None: the model's positions), past which a line is translated in
    parts (`source_parts`). Every search over lines takes one: `search_lines`, `translate_lines`,
    `translate_nbest`, and the pools that MBR and reranking choose among (mt.rescoring.rerank)."""

    searcher: Seq2Seq | Engine
    tokenizer: Tokenizer
    lines: list[str]
    max_len: int | None = None
    prefixes: list[str] | None = None


def split_pieces(ids: list[int], limit: int, starts_word: Callable[[int], bool]) -> list[list[int]]:
    """Cut a too-long piece sequence into parts of at most `limit` pieces, each cut before a word
    start where one lies in the second half of the part (else mid-word)."""
    parts = []
    while len(ids) > limit:
        cut = next((j for j in range(limit, limit // 2, -1) if starts_word(ids[j])), limit)
        parts.append(ids[:cut])
        ids = ids[cut:]
    return parts + [ids]


def _join(hyps: list[Hypothesis]) -> Hypothesis:
    return Hypothesis(
        [t for h in hyps for t in h.tokens],
        sum(h.score for h in hyps),
        sum(h.logprob for h in hyps),
        hyps[-1].ended,
    )


@torch.inference_mode()
def source_parts(request: SearchRequest) -> tuple[list[int], list[list[int]]]:
    """The request's lines' normalised pieces, a line longer than its max_len pieces (and the model's
    positions, less eos's) split into parts, with a warning: (the input line of each part, the parts);
    an empty line has none."""
    tokenizer, positions = request.tokenizer, request.searcher.cfg.max_positions
    limit = min(request.max_len or positions, positions - 1)
    owner: list[int] = []
    parts: list[list[int]] = []
    for i, ids in enumerate(tokenizer.encode([normalize(line) for line in request.lines])):
        pieces = split_pieces(ids, limit, tokenizer.starts_word) if ids else []
        if len(pieces) > 1:
            log.warning(
                "line %d: %d pieces, more than the %d this model takes; translated in %d parts",
                i + 1,
                len(ids),
                limit,
                len(pieces),
            )
        owner += [i] * len(pieces)
        parts += pieces
    return owner, parts


def search_lines(
    request: SearchRequest, cfg: DecodeConfig, use_cache: bool = True, draw: int = 0
) -> list[list[Hypothesis]]:
    """Decode the request's raw lines with greedy (cfg.beam == 1) or beam search: cfg.n_best hypotheses
    per line, on the device the model is on.

    Lines are sorted by length into batches of about cfg.batch_tokens source tokens (divided by the
    beam), and the results put back in input order; an empty line gets one empty hypothesis. A line
    longer than the request's max_len (and the model's positions) is translated in parts, with a
    warning; its parts' 1-best translations are joined into its one hypothesis. Its prefixes (one per
    line, "" for none): each line's translation starts with that text's pieces (its first part's).
    Sampling with cfg.n_best N draws N translations of each line (`_draws`). A model from `text_only`
    may leave the scores out (NaN; CTranslate2's greedy search).
    """
    if cfg.sample and cfg.n_best > 1:
        return _draws(request, cfg, use_cache)
    model, tokenizer, lines, prefixes = request.searcher, request.tokenizer, request.lines, request.prefixes
    was_training = model.training
    model.eval()
    owner, parts = source_parts(request)
    forced = tokenizer.encode_target(prefixes) if prefixes else [[] for _ in lines]
    lengths = [len(p) + 1 for p in parts]
    found: list[list[Hypothesis]] = [[] for _ in parts]
    groups = list(token_batches(lengths, lengths, max(cfg.batch_tokens // cfg.beam, 1)))
    part_no: list[int] = []  # 0, 1, ... within each line
    for j, i in enumerate(owner):
        part_no.append(part_no[-1] + 1 if j and owner[j - 1] == i else 0)
    seeds = _sampling_seeds(cfg.seed, owner, part_no, draw)
    part_prefix = [forced[i] if n == 0 else [] for i, n in zip(owner, part_no)]  # a line's first part
    batches = [
        ([parts[g] for g in gr], [part_prefix[g] for g in gr], [seeds[g] for g in gr]) for gr in groups
    ]
    for group, hyps in zip(groups, _search_groups(model, batches, cfg, use_cache)):
        for g, h in zip(group, hyps):
            found[g] = h
    model.train(was_training)
    return _by_line(found, owner, len(lines))


def _by_line(found: list[list[Hypothesis]], owner: list[int], lines: int) -> list[list[Hypothesis]]:
    """Each line's hypotheses from its parts' (`owner`: each part's line): a line of parts gets its
    parts' 1-best joined, an empty line one empty hypothesis."""
    by_line: list[list[list[Hypothesis]]] = [[] for _ in range(lines)]
    for i, hyps in zip(owner, found):
        by_line[i].append(hyps)
    return [
        line[0] if len(line) == 1 else [_join([h[0] for h in line]) if line else Hypothesis([], 0.0, 0.0)]
        for line in by_line
    ]


def _sampling_seeds(seed: int, owner: list[int], part_no: list[int], draw: int) -> list[int]:
    """Each part's sampling seed: by line, part and draw, never by batch (draw 0 is what n_best 1
    draws)."""
    return [derived_seed(seed, i, n, draw) for i, n in zip(owner, part_no)]


def _draws(request: SearchRequest, cfg: DecodeConfig, use_cache: bool) -> list[list[Hypothesis]]:
    """cfg.n_best samples of each line, in the order drawn: draw k is seeded apart from the others,
    and draw 0 is the one sample that n_best 1 gives."""
    one = replace(cfg, n_best=1)
    drawn = [search_lines(request, one, use_cache, draw=k) for k in range(cfg.n_best)]
    return [[hyps[0] for hyps in line] for line in zip(*drawn)]


def _search_groups(
    model: Seq2Seq | Engine,
    batches: list[tuple[list[list[int]], list[list[int]], list[int]]],
    cfg: DecodeConfig,
    use_cache: bool,
) -> Iterator[list[list[Hypothesis]]]:
    """Batches of (sources, forced target prefixes, sampling seeds), piece ids, searched by either
    engine; CTranslate2 gets them all at once."""
    if hasattr(model, "search_groups"):  # an Engine
        yield from model.search_groups([(parts, prefixes) for parts, prefixes, _ in batches], cfg)
        return
    device = weights_device(model)
    for parts, prefixes, seeds in batches:
        src, src_mask = (t.to(device) for t in source_batch(parts))
        prefix = _pad(prefixes).to(device) if any(prefixes) else None
        yield search(model, Sources(src, src_mask, prefix), cfg, use_cache, seeds)


def weights_device(model: Seq2Seq | Ensemble) -> torch.device:
    """Where the model's weights are (an ensemble's first model's): where its batches go."""
    first = model.models[0] if isinstance(model, Ensemble) else model
    return next(first.parameters()).device


def _pad(rows: list[list[int]]) -> torch.Tensor:
    """Id lists -> (B, longest) long tensor, PAD after each row's end."""
    out = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def text_only(model: Seq2Seq | Engine) -> Seq2Seq | Engine:
    """The model for a caller that reads only the text (translate_lines, so evaluate, tune and
    validation): an engine that can leave the scores out does (`Ct2Model.text_only`)."""
    return model.text_only() if hasattr(model, "text_only") else model


def translate_lines(request: SearchRequest, cfg: DecodeConfig) -> list[str]:
    """Translate the request's raw lines; returns exactly one line (the 1-best) per line, in order."""
    found = search_lines(replace(request, searcher=text_only(request.searcher)), cfg)
    tokenizer = request.tokenizer
    return as_written(tokenizer.decode([hyps[0].tokens for hyps in found]), request.prefixes, tokenizer)


def translate_nbest(request: SearchRequest, cfg: DecodeConfig) -> list[list[tuple[str, float]]]:
    """Up to cfg.n_best (text, score) pairs per line of the request, best first."""
    found, tokenizer, prefixes = search_lines(request, cfg), request.tokenizer, request.prefixes
    texts = [tokenizer.decode([h.tokens for h in hyps]) for hyps in found]  # a line's n-best
    if prefixes:
        texts = [as_written(line, [prefix] * len(line), tokenizer) for line, prefix in zip(texts, prefixes)]
    return [list(zip(line, (h.score for h in hyps))) for line, hyps in zip(texts, found)]


def as_written(texts: list[str], prefixes: list[str] | None, tokenizer: Tokenizer) -> list[str]:
    """Translations that start with their prefix exactly as the user wrote it: a character the
    vocabulary lacks is a piece that decodes as ⁇ ("Ωmega" -> "⁇ mega"), so the prefix's decoded
    pieces are replaced by the prefix itself (its outer whitespace left out, as decoding leaves it)."""
    if not prefixes:
        return texts
    decoded = tokenizer.decode(tokenizer.encode_target(prefixes))
    return [
        prefix.strip() + text[len(seen) :] if prefix.strip() and text.startswith(seen) else text
        for text, prefix, seen in zip(texts, prefixes, decoded)
    ]
