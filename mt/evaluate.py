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
from mt.decode import greedy_decode
from mt.model import Seq2Seq, resolve_device
from mt.tokenizer import Tokenizer


@torch.no_grad()
def translate_lines(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], cfg: DecodeConfig,
                    device: torch.device | str = "cpu") -> list[str]:
    """Translate raw lines; returns exactly len(lines) lines in input order."""
    was_training = model.training
    model.eval()
    max_src = model.cfg.max_positions - 1  # room for eos
    ids = [s[:max_src] for s in tokenizer.encode([normalize(line) for line in lines])]
    todo = [i for i, s in enumerate(ids) if s]
    lengths = [len(ids[i]) + 1 for i in todo]
    outputs = [""] * len(lines)
    for group in token_batches(lengths, lengths, cfg.batch_tokens):
        rows = [todo[g] for g in group]
        src, src_mask = source_batch([ids[r] for r in rows])
        hyps = greedy_decode(model, src.to(device), src_mask.to(device), cfg.max_len_a, cfg.max_len_b)
        for r, text in zip(rows, tokenizer.decode(hyps)):
            outputs[r] = text
    model.train(was_training)
    return outputs


def score(hypotheses: list[str], *references: list[str]) -> dict:
    """Cased, detokenized corpus BLEU (13a) and chrF on the 0-100 scale, with signatures.

    Each of `references` is one reference stream, line-aligned with `hypotheses`.
    """
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hypotheses, list(references))
    c = chrf.corpus_score(hypotheses, list(references))
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "sentences": len(hypotheses)}


def evaluate_run(run_dir: str | Path, split: str = "test", device: str = "auto") -> dict:
    """Translate `split` with the run's best checkpoint, score it, write DIR/eval-<split>.json."""
    run_dir = Path(run_dir)
    cfg, tokenizer, model = load_run(run_dir)
    dev = resolve_device(device)
    src, ref = load_split(cfg.data, split)
    hyps = translate_lines(model.to(dev), tokenizer, src, cfg.decode, dev)
    result = {"split": split, **score(hyps, ref)}
    (run_dir / f"hyp-{split}.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (run_dir / f"eval-{split}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
