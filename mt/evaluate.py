"""Text in, text out, and scores: translate lines with a model, score with sacreBLEU.

Translation sorts lines by length into token-budget batches and restores the input order, so the
output has exactly one line per input line (empty input -> empty output).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU, CHRF

from mt.checkpoint import load_run
from mt.config import DecodeConfig
from mt.data import load_split, normalize, source_batch, token_batches
from mt.decode import Hypothesis, beam_search, greedy_decode
from mt.model import Seq2Seq, resolve_device
from mt.tokenizer import Tokenizer


@torch.inference_mode()
def search_lines(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], cfg: DecodeConfig,
                 device: torch.device | str = "cpu", use_cache: bool = True) -> list[list[Hypothesis]]:
    """Decode raw lines with greedy (cfg.beam == 1) or beam search: cfg.n_best hypotheses per line.

    Lines are sorted by length into batches of about cfg.batch_tokens source tokens (divided by the
    beam), and the results put back in input order; an empty line gets one empty hypothesis.
    """
    was_training = model.training
    model.eval()
    max_src = model.cfg.max_positions - 1  # room for eos
    ids = [s[:max_src] for s in tokenizer.encode([normalize(line) for line in lines])]
    todo = [i for i, s in enumerate(ids) if s]
    lengths = [len(ids[i]) + 1 for i in todo]
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] for _ in lines]
    for group in token_batches(lengths, lengths, max(cfg.batch_tokens // cfg.beam, 1)):
        rows = [todo[g] for g in group]
        src, src_mask = (t.to(device) for t in source_batch([ids[r] for r in rows]))
        if cfg.beam == 1:
            found = [[h] for h in greedy_decode(model, src, src_mask, cfg.max_len_a, cfg.max_len_b, use_cache)]
        else:
            found = beam_search(model, src, src_mask, cfg.beam, cfg.max_len_a, cfg.max_len_b,
                                cfg.length_penalty, cfg.n_best, use_cache)
        for r, hyps in zip(rows, found):
            results[r] = hyps
    model.train(was_training)
    return results


def translate_lines(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], cfg: DecodeConfig,
                    device: torch.device | str = "cpu") -> list[str]:
    """Translate raw lines; returns exactly len(lines) lines (the 1-best) in input order."""
    return tokenizer.decode([hyps[0].tokens for hyps in search_lines(model, tokenizer, lines, cfg, device)])


def translate_nbest(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], cfg: DecodeConfig,
                    device: torch.device | str = "cpu") -> list[list[tuple[str, float]]]:
    """Up to cfg.n_best (text, score) pairs per input line, best first."""
    found = search_lines(model, tokenizer, lines, cfg, device)
    return [list(zip(tokenizer.decode([h.tokens for h in hyps]), (h.score for h in hyps))) for hyps in found]


def score(hypotheses: list[str], *references: list[str]) -> dict:
    """Cased, detokenized corpus BLEU (13a) and chrF on the 0-100 scale, with signatures.

    Each of `references` is one reference stream, line-aligned with `hypotheses`.
    """
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hypotheses, list(references))
    c = chrf.corpus_score(hypotheses, list(references))
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "sentences": len(hypotheses)}


def evaluate_run(run_dir: str | Path, split: str = "test", device: str = "auto",
                 overrides: list[str] = ()) -> dict:
    """Translate `split` with the best checkpoint, score it, write DIR/eval-<split>[-beamK].json.

    `overrides` are `key.path=value` strings applied to the run's config (e.g. decode.beam=5).
    """
    run_dir = Path(run_dir)
    cfg, tokenizer, model = load_run(run_dir, overrides=overrides)
    dev = resolve_device(device)
    src, ref = load_split(cfg.data, split)
    hyps = translate_lines(model.to(dev), tokenizer, src, cfg.decode, dev)
    result = {"split": split, "beam": cfg.decode.beam, "length_penalty": cfg.decode.length_penalty,
              **score(hyps, ref)}
    name = split if cfg.decode.beam == 1 else f"{split}-beam{cfg.decode.beam}"
    (run_dir / f"hyp-{name}.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (run_dir / f"eval-{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
