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
adds MBR and reranking to what is chosen among (`more`: mt.rerank.choices), each row with the
options it sets (`TUNED`) and its seconds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Callable

from mt.config import RunConfig
from mt.data import load_split
from mt.decode_config import TUNE_BEAMS, TUNE_LENGTH_PENALTIES, TUNED, DecodeConfig, decoding
from mt.devices import resolve_device
from mt.metrics import HEADLINE, PRIMARY, best_of, corpus_scores
from mt.model import Seq2Seq
from mt.plumbing.errors import ConfigError
from mt.plumbing.files import file_sha256
from mt.run.card import card_tuning, update_card
from mt.run.folder import checkpoint_path, load_run
from mt.run.names import evaluation_name
from mt.tokenizer import Tokenizer
from mt.translate import translate_lines

log = logging.getLogger(__name__)

# a run tunes on mt's own search, whatever engine it serves with, and plain search unless `more` tries
# MBR or reranking (mt.rerank.choices)
PLAIN = {"engine": "torch", "compute_type": "default", "mbr": "", "mbr_samples": 0, "rerank": ""}

Grid = list[tuple[int, float]]  # (beam, length penalty) pairs


def make_grid(
    beams: tuple[int, ...] = TUNE_BEAMS, length_penalties: tuple[float, ...] = TUNE_LENGTH_PENALTIES
) -> Grid:
    """Each beam above 1 with each penalty; beam 1 (greedy) once, as the penalty does not change its
    translations."""
    greedy = [(1, 1.0)] if 1 in beams else []
    return greedy + [(b, float(a)) for b in sorted(set(beams)) if b > 1 for a in length_penalties]


GRID = make_grid()


def try_settings(
    model: Seq2Seq, tokenizer: Tokenizer, cfg: RunConfig, src: list[str], ref: list[str], grid: Grid = GRID
) -> list[dict]:
    """Each (beam, length penalty) of `grid` translating `src` (1-best, searched, by the torch engine on
    the model's device), scored against `ref`."""
    tokenize = cfg.bleu_tokenize  # a named one that is not installed: refused before decoding
    tried = []
    for beam, alpha in grid:
        start = time.perf_counter()
        decode = decoding(cfg.decode, {**PLAIN, "beam": beam, "length_penalty": alpha, "n_best": 1})
        hyps = translate_lines(model, tokenizer, src, decode, cfg.data.max_len)
        tried.append(tried_row(decode, hyps, ref, src, tokenize, time.perf_counter() - start))
    return tried


def tried_row(
    decode: DecodeConfig, hyps: list[str], ref: list[str], src: list[str], tokenize: str, seconds: float
):
    """A setting's row in the card's `tuning`: its tuned options (`TUNED`), val scores and seconds
    (logged with its sentences per second)."""
    scores = corpus_scores(hyps, ref, sources=src, tokenize=tokenize)
    row = {
        **{key: getattr(decode, key) for key in TUNED},
        **{m.key: round(scores[m.key], 2) for m in HEADLINE},
        "length_ratio": round(scores["length_ratio"], 4),
        "seconds": round(seconds, 1),
    }
    scored = ", ".join(f"{m.label} {row[m.key]:.2f}" for m in HEADLINE)
    log.info(
        "tune: %s: val %s, length ratio %.3f, %.1f sentences/s",
        *(setting_name(row), scored, row["length_ratio"], len(src) / max(seconds, 1e-9)),
    )
    return row


def setting_name(row: dict) -> str:
    """A tuned setting as evaluations name it: beam5-lp1.5, beam5-lp1.5-mbrchrf-s16, beam1."""
    return evaluation_name("", DecodeConfig(**{key: row[key] for key in TUNED if key in row})) or "beam1"


def best_setting(tried: list[dict]) -> dict:
    """The best PRIMARY score (mt.metrics: BLEU); on a tie the cheaper: plain search before MBR or
    reranking, fewer samples, the smaller beam, then the lower length penalty (rounded scores)."""

    def cost(t: dict) -> tuple:
        return (
            bool(t.get("mbr") or t.get("rerank")),
            t.get("mbr_samples", 0),
            t["beam"],
            t["length_penalty"],
        )

    return min(best_of(tried), key=cost)


def tune(
    run: str | Path,
    checkpoint: str = "best",
    device: str = "auto",
    grid: Grid = GRID,
    more: Callable | None = None,
) -> dict:
    """Choose the run's beam and length penalty on val (see the module's docstring); returns the
    card's `tuning` record. A run whose decode section samples (decode.sample) is refused: it does not
    search. more(model, tokenizer, cfg, src, tried): other settings with their translations of val and
    seconds, to choose among too (mt.rerank.choices: MBR and reranking), given the grid's rows."""
    run = Path(run)
    path = checkpoint_path(run, checkpoint)  # once: "best" may warn that it falls back to last.pt
    cfg, tokenizer, model = load_run(run, str(path))
    if cfg.decode.sample:
        raise ConfigError(
            f"{run / 'config.yaml'}: decode.sample is {cfg.decode.sample!r}: the run samples instead of "
            f'searching, so there is no beam to tune; set decode.sample to "" first'
        )
    src, ref = load_split(cfg.data, "val")
    cfg = dataclasses.replace(cfg, decode=decoding(cfg.decode, PLAIN))
    model = model.to(resolve_device(device))
    tried = try_settings(model, tokenizer, cfg, src, ref, grid)
    for decode, hyps, seconds in more(model, tokenizer, cfg, src, tried) if more else []:
        tried.append(tried_row(decode, hyps, ref, src, cfg.bleu_tokenize, seconds))
    chosen = best_setting(tried)
    tuning = {
        "split": "val",
        "checkpoint": path.name,
        "checkpoint_sha256": file_sha256(path),
        "chosen": chosen,
        "tried": tried,
    }
    update_card(run, tuning=tuning)
    log.info(
        "tune: chose %s (val %s %.2f, length ratio %.3f); wrote %s",
        *(
            setting_name(chosen),
            PRIMARY.label,
            chosen[PRIMARY.key],
            chosen["length_ratio"],
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
