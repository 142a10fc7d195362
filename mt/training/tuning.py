"""Tuning: the beam and length penalty a run decodes with, chosen on its validation split (`mt tune`,
and `mt.training.train.train` at its end where train.tune, for `mt train` and the Python API alike).

A beam search ranks finished hypotheses by log-probability / length_penalty(length, alpha), and the
alpha that makes its translations as long as the references depends on the model: mt's default, 1.0,
left an earlier default's beam 5 about 4% short on test2016, and BLEU's brevity penalty takes as
much. So a trained run translates a small grid of settings (`GRID`) on val, keeps the one with the
highest val BLEU (the faster one on a tie: a smaller beam, then the lower alpha), and writes it
into the run's card, its one home: `tuning`, keyed by the checkpoint file's sha256, with every
setting tried, its BLEU, chrF and length ratio. Every command and the Python API open the run with
it over config.yaml's decode section (mt.run.folder.run_decoding), for that checkpoint only; an
explicit flag or keyword still wins. The test split is never looked at. `mt tune --mbr --rerank RUN`
adds MBR and reranking (mt.rescoring.rerank) to what is chosen among, each row with the options it
sets (`TUNED`) and its seconds. What is tried is one table, `Grid`, that `mt tune`'s flags fill.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

from mt.config import RunConfig
from mt.data import load_split
from mt.decode_config import TUNED, DecodeConfig, decoding
from mt.devices import resolve_device
from mt.model import Seq2Seq
from mt.plumbing.errors import ConfigError
from mt.plumbing.files import file_sha256
from mt.plumbing.metrics import HEADLINE, PRIMARY, best_of, corpus_scores
from mt.rescoring.rerank import (
    Reverse,
    beam_pool,
    channel_scores,
    choose,
    ranked,
    reverse_logprobs,
    sample_pool,
)
from mt.run.card import card_tuning, update_card
from mt.run.folder import checkpoint_path, load_run, open_reverse, stored_runs
from mt.run.names import evaluation_name
from mt.run.records import Tried, Tuning
from mt.tokenizer import Tokenizer
from mt.translate import SearchRequest, translate_lines

log = logging.getLogger(__name__)

# a run tunes on mt's own search, whatever engine it serves with, and plain search where the grid does
# not try MBR or reranking
PLAIN = {"engine": "torch", "compute_type": "default", "mbr": "", "mbr_samples": 0, "rerank": ""}


@dataclass(frozen=True)
class Grid:
    """What `mt tune` chooses among on val (its flags fill it; each field's default is the default grid).

    Plain search: beam 1 (greedy) once, as the penalty does not change its translations, and each beam
    above 1 with each length penalty (`searches`). With `mbr`: MBR by each utility over the largest
    beam's pool (`pool_beams`' first), alone and with the first k of max(samples) draws for each k. With
    `rerank` (decode.rerank's runs): reranking over that pool and over twice its beam (beam 10's pool
    cost about 2x beam 5's time and scores twice the pairs), at each weight with each length penalty.
    A pool is searched once, at the length penalty that did best with its beam alone."""

    beams: tuple[int, ...] = (1, 3, 5)
    length_penalties: tuple[float, ...] = (0.6, 1.0, 1.5, 2.0, 2.5)
    mbr: bool = False
    rerank: str = ""
    samples: tuple[int, ...] = (0, 8, 16)
    utilities: tuple[str, ...] = ("chrf", "bleu")
    weights: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)

    def __post_init__(self):
        if (self.mbr or self.rerank) and max(self.beams) < 2:
            raise ConfigError(
                "tune: MBR and reranking choose among the largest beam's hypotheses, and the grid's beams "
                f"are {list(self.beams)}; add a beam above 1 (--beams 1 5)"
            )

    def searches(self) -> list[tuple[int, float]]:
        """The (beam, length penalty) pairs of plain search."""
        above_1 = sorted(set(b for b in self.beams if b > 1))
        return [(1, 1.0)] * (1 in self.beams) + [
            (b, float(a)) for b in above_1 for a in self.length_penalties
        ]

    def pool_beams(self) -> tuple[int, ...]:
        """The beams whose hypotheses MBR (the first) and reranking (each) choose among."""
        return (max(self.beams), 2 * max(self.beams)) if self.rerank else (max(self.beams),)


@dataclass
class Val:
    """The run being tuned, on its device, and its val split: what each setting translates and is scored
    against (cfg.decode: the run's, with plain search)."""

    cfg: RunConfig
    tokenizer: Tokenizer
    model: Seq2Seq
    src: list[str]
    ref: list[str]
    tokenize: str  # cfg.bleu_tokenize, read (a named one that is not installed: refused) before decoding

    def lines(self) -> SearchRequest:
        """Val's sources as every setting searches them."""
        return SearchRequest(self.model, self.tokenizer, self.src, self.cfg.data.max_len)


def try_settings(val: Val, grid: Grid) -> list[Tried]:
    """Each (beam, length penalty) of the grid's plain searches translating val (1-best, by the torch
    engine on the model's device), scored."""
    tried = []
    for beam, alpha in grid.searches():
        start = time.perf_counter()
        decode = decoding(val.cfg.decode, {**PLAIN, "beam": beam, "length_penalty": alpha, "n_best": 1})
        hyps = translate_lines(val.lines(), decode)
        tried.append(tried_row(val, decode, hyps, time.perf_counter() - start))
    return tried


def tried_row(val: Val, decode: DecodeConfig, hyps: list[str], seconds: float) -> Tried:
    """A setting's row in the card's `tuning`: its tuned options (`TUNED`), val scores and seconds
    (logged with its sentences per second)."""
    scores = corpus_scores(hyps, val.ref, sources=val.src, tokenize=val.tokenize)
    row = Tried(
        **{key: getattr(decode, key) for key in TUNED},
        **{m.key: round(scores[m.key], 2) for m in HEADLINE},
        length_ratio=round(scores["length_ratio"], 4),
        seconds=round(seconds, 1),
    )
    scored = ", ".join(f"{m.label} {getattr(row, m.key):.2f}" for m in HEADLINE)
    log.info(
        "tune: %s: val %s, length ratio %.3f, %.1f sentences/s",
        *(setting_name(row), scored, row.length_ratio, len(val.src) / max(seconds, 1e-9)),
    )
    return row


def setting_name(row: Tried) -> str:
    """A tuned setting as evaluations name it: beam5-lp1.5, beam5-lp1.5-mbrchrf-s16, beam1."""
    return evaluation_name("", DecodeConfig(**{key: getattr(row, key) for key in TUNED})) or "beam1"


def primary(row: Tried) -> float:
    return getattr(row, PRIMARY.key)


def best_setting(tried: list[Tried]) -> Tried:
    """The best PRIMARY score (mt.plumbing.metrics: BLEU); on a tie the cheaper: plain search before MBR or
    reranking, fewer samples, the smaller beam, then the lower length penalty (rounded scores)."""

    def cost(t: Tried) -> tuple:
        return (bool(t.mbr or t.rerank), t.mbr_samples or 0, t.beam, t.length_penalty)

    return min(best_of(tried, primary), key=cost)


def tune(
    run: str | Path,
    checkpoint: str = "best",
    device: str = "auto",
    grid: Grid = Grid(),
) -> dict:
    """Choose the run's decoding on val among the grid's settings (see the module's docstring); returns
    the card's `tuning` record. A run whose decode section samples (decode.sample) is refused: it does
    not search. The grid's reverse runs are opened before any decoding, so that a mistake in one costs
    no grid."""
    run = Path(run)
    path = checkpoint_path(run, checkpoint)  # once: "best" may warn that it falls back to last.pt
    cfg, tokenizer, model = load_run(run, str(path))
    if cfg.decode.sample:
        raise ConfigError(
            f"{run / 'config.yaml'}: decode.sample is {cfg.decode.sample!r}: the run samples instead of "
            f'searching, so there is no beam to tune; set decode.sample to "" first'
        )
    device = resolve_device(device)
    reverse = open_reverse(grid.rerank, cfg, device) if grid.rerank else []
    plain = dataclasses.replace(cfg, decode=decoding(cfg.decode, PLAIN))
    val = Val(plain, tokenizer, model.to(device), *load_split(cfg.data, "val"), cfg.bleu_tokenize)
    tried = try_settings(val, grid)
    for decode, hyps, seconds in chooser_settings(val, tried, grid, reverse, stored_runs(grid.rerank, run)):
        tried.append(tried_row(val, decode, hyps, seconds))
    chosen = best_setting(tried)
    tuning = dataclasses.asdict(
        Tuning(
            split="val", checkpoint=path.name, checkpoint_sha256=file_sha256(path), chosen=chosen, tried=tried
        )
    )
    update_card(run, tuning=tuning)
    log.info(
        "tune: chose %s (val %s %.2f, length ratio %.3f); wrote %s",
        *(
            setting_name(chosen),
            PRIMARY.label,
            primary(chosen),
            chosen.length_ratio,
            run / "card.json",
        ),
    )
    return tuning


def tune_unless_tuned(run: Path, device: str = "auto") -> dict | None:
    """What `mt train` does at its end (train.tune): tune best.pt, unless the card holds a choice for
    this very file. Returns the new tuning, or None where none was needed."""
    if card_tuning(run, checkpoint_path(run)) is None:
        return tune(run, device=device)
    return None


Found = list[tuple[DecodeConfig, list[str], float]]  # (a setting, val's 1-best under it, its seconds)


def chooser_settings(val: Val, tried: list[Tried], grid: Grid, reverse: Reverse, stored: str) -> Found:
    """The grid's MBR and reranking settings (`Grid`), each with val's translations and seconds: each
    pool searched once, at the length penalty that did best in `tried` with the first pool's beam.
    `stored`: the reverse runs as the card stores them, relative to the run (`stored_runs`), so the
    tuned run opens from any folder."""
    if not (grid.mbr or grid.rerank):
        return []
    first = grid.pool_beams()[0]
    rows = [t for t in tried if t.beam == first]
    alpha = best_of(rows, primary)[0].length_penalty if rows else val.cfg.decode.length_penalty
    found = []
    for beam in grid.pool_beams():
        base = replace(val.cfg.decode, beam=beam, length_penalty=alpha, n_best=1)
        start = time.perf_counter()
        beamed = beam_pool(val.lines(), base)
        searched = (beamed, time.perf_counter() - start)
        if grid.mbr and beam == first:
            found += mbr_settings(val, base, searched, grid)
        if grid.rerank:
            found += rerank_settings(val, replace(base, rerank=stored), reverse, searched, grid)
    return found


def mbr_settings(val: Val, base: DecodeConfig, searched: tuple, grid: Grid) -> Found:
    """MBR over the beam's pool (`searched`: it and its seconds) with the first k of max(grid.samples)
    draws added, for each k of grid.samples and each utility."""
    beamed, beam_s = searched
    draws = max(grid.samples)
    start = time.perf_counter()
    draw = replace(base, mbr_samples=draws)
    drawn = sample_pool(val.lines(), draw) if draws else beamed
    draw_s = time.perf_counter() - start
    found = []
    for samples in grid.samples:
        pool = [b + d[:samples] for b, d in zip(beamed, drawn)]
        for utility in grid.utilities:
            decode = replace(base, mbr=utility, mbr_samples=samples)
            start = time.perf_counter()
            hyps = [n[0][0] for n in choose(pool, val.src, decode, [], val.tokenize)]
            found.append(
                (decode, hyps, beam_s + draw_s * samples / max(draws, 1) + time.perf_counter() - start)
            )
    return found


def rerank_settings(val: Val, base: DecodeConfig, reverse: Reverse, searched: tuple, grid: Grid) -> Found:
    """Reranking of the beam's pool by the `reverse` runs (base.rerank: as the card stores them), at each
    weight and length penalty of the grid: the reverse runs score the pool once."""
    beamed, beam_s = searched
    start = time.perf_counter()
    backward = reverse_logprobs(reverse, beamed, val.src, base)
    seconds = beam_s + time.perf_counter() - start
    found = []
    for weight in grid.weights:
        for alpha in grid.length_penalties:
            decode = replace(base, rerank_weight=weight, length_penalty=alpha)
            hyps = [n[0][0] for n in ranked(beamed, channel_scores(beamed, backward, weight, alpha), 1)]
            found.append((decode, hyps, seconds))
    return found
