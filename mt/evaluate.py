"""Text in, text out, and scores: translate lines with a model, score with sacreBLEU.

Translation sorts lines by length into token-budget batches and restores the input order, so the
output has exactly one line per input line (empty input -> empty output).
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor

from mt.card import code_version, config_section, hardware, read_card, result_key, update_card
from mt.checkpoint import load_run
from mt.config import DecodeConfig, RunConfig
from mt.data import load_split, normalize, source_batch, token_batches
from mt.decode import Hypothesis, beam_search, greedy_decode
from mt.model import Seq2Seq, count_parameters, resolve_device
from mt.tokenizer import BOS, Tokenizer

log = logging.getLogger(__name__)


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
    return Hypothesis([t for h in hyps for t in h.tokens], sum(h.score for h in hyps), sum(h.logprob for h in hyps))


@torch.inference_mode()
def search_lines(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], cfg: DecodeConfig,
                 device: torch.device | str = "cpu", use_cache: bool = True,
                 max_source_pieces: int | None = None) -> list[list[Hypothesis]]:
    """Decode raw lines with greedy (cfg.beam == 1) or beam search: cfg.n_best hypotheses per line.

    Lines are sorted by length into batches of about cfg.batch_tokens source tokens (divided by the
    beam), and the results put back in input order; an empty line gets one empty hypothesis. A line
    longer than `max_source_pieces` (and the model's positions) is translated in parts, with a
    warning; its parts' 1-best translations are joined into its one hypothesis.
    """
    was_training = model.training
    model.eval()
    limit = min(max_source_pieces or model.cfg.max_positions, model.cfg.max_positions - 1)  # room for eos
    owner: list[int] = []        # input line of each part
    parts: list[list[int]] = []
    for i, ids in enumerate(tokenizer.encode([normalize(line) for line in lines])):
        pieces = split_pieces(ids, limit, tokenizer.starts_word) if ids else []
        if len(pieces) > 1:
            log.warning("line %d: %d pieces, more than the %d this model takes; translated in %d parts",
                        i + 1, len(ids), limit, len(pieces))
        owner += [i] * len(pieces)
        parts += pieces
    lengths = [len(p) + 1 for p in parts]
    found: list[list[Hypothesis]] = [[] for _ in parts]
    for group in token_batches(lengths, lengths, max(cfg.batch_tokens // cfg.beam, 1)):
        src, src_mask = (t.to(device) for t in source_batch([parts[g] for g in group]))
        if cfg.beam == 1:
            hyps = [[h] for h in greedy_decode(model, src, src_mask, cfg.max_len_a, cfg.max_len_b, use_cache)]
        else:
            hyps = beam_search(model, src, src_mask, cfg.beam, cfg.max_len_a, cfg.max_len_b,
                               cfg.length_penalty, cfg.n_best, use_cache)
        for g, h in zip(group, hyps):
            found[g] = h
    model.train(was_training)
    by_line: list[list[list[Hypothesis]]] = [[] for _ in lines]
    for i, hyps in zip(owner, found):
        by_line[i].append(hyps)
    return [line[0] if len(line) == 1 else [_join([h[0] for h in line]) if line else Hypothesis([], 0.0, 0.0)]
            for line in by_line]


def translate_lines(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], cfg: DecodeConfig,
                    device: torch.device | str = "cpu", max_source_pieces: int | None = None) -> list[str]:
    """Translate raw lines; returns exactly len(lines) lines (the 1-best) in input order."""
    found = search_lines(model, tokenizer, lines, cfg, device, max_source_pieces=max_source_pieces)
    return tokenizer.decode([hyps[0].tokens for hyps in found])


def translate_nbest(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], cfg: DecodeConfig,
                    device: torch.device | str = "cpu", max_source_pieces: int | None = None
                    ) -> list[list[tuple[str, float]]]:
    """Up to cfg.n_best (text, score) pairs per input line, best first."""
    found = search_lines(model, tokenizer, lines, cfg, device, max_source_pieces=max_source_pieces)
    return [list(zip(tokenizer.decode([h.tokens for h in hyps]), (h.score for h in hyps))) for hyps in found]


def score(hypotheses: list[str], *references: list[str]) -> dict:
    """Cased, detokenized corpus BLEU (13a) and chrF on the 0-100 scale, with signatures.

    Each of `references` is one reference stream, line-aligned with `hypotheses`.
    """
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hypotheses, list(references))
    c = chrf.corpus_score(hypotheses, list(references))
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "sentences": len(hypotheses),
            "length_ratio": b.sys_len / max(b.ref_len, 1)}


def lines_sha256(lines: list[str]) -> str:
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


def evaluate_run(run_dir: str | Path, split: str = "test", device: str = "auto",
                 overrides: list[str] = ()) -> dict:
    """Translate `split` with the best checkpoint and score it; write DIR/eval-<key>.json, the
    translations (hyp-<key>.txt), the references (ref-<split>.txt, for `mt report`), and the card's
    results. <key> names the decoding setting: test, test-beam5, test-beam5-lp0.6.

    `overrides` are `key.path=value` strings applied to the run's config (e.g. decode.beam=5).
    """
    run_dir = Path(run_dir)
    cfg, tokenizer, model = load_run(run_dir, overrides=overrides)
    dev = resolve_device(device)
    src, ref = load_split(cfg.data, split)
    hyps = translate_lines(model.to(dev), tokenizer, src, cfg.decode, dev, max_source_pieces=cfg.data.max_len)
    key = result_key(split, cfg.decode.beam, cfg.decode.length_penalty)
    result = {"split": split, "beam": cfg.decode.beam, "length_penalty": cfg.decode.length_penalty,
              **score(hyps, ref), "refs_sha256": lines_sha256(ref), "hyp_file": f"hyp-{key}.txt",
              "ref_file": f"ref-{split}.txt"}
    (run_dir / result["hyp_file"]).write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (run_dir / result["ref_file"]).write_text("".join(r + "\n" for r in ref), encoding="utf-8")
    (run_dir / f"eval-{key}.json").write_text(json.dumps(result, indent=2) + "\n")
    card = read_card(run_dir)
    sections = {} if "training" in card else describe_untracked_run(run_dir, cfg, model)
    update_card(run_dir, **sections, results={**card.get("results", {}), key: result})
    return result


def describe_untracked_run(run_dir: Path, cfg: RunConfig, model: Seq2Seq) -> dict:
    """Card sections for a run trained before cards existed, rebuilt from its metrics.jsonl; tokens/s
    is the mean of the logged windows, and code/hardware are those of this evaluation."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    logs, vals = [r for r in rows if "loss" in r], [r for r in rows if "val_bleu" in r]
    best = max(vals, key=lambda r: r["val_bleu"], default={})
    training = {"steps": max(r["step"] for r in rows), "epochs": max((r["epoch"] for r in logs), default=0),
                "wall_s": max(r["elapsed_s"] for r in rows), "train_s": None,
                "tokens_per_s": round(sum(r["tokens_per_s"] for r in logs) / max(len(logs), 1), 1),
                "best_step": best.get("step"), "best_val_bleu": best.get("val_bleu"),
                "best_val_chrf": best.get("val_chrf"), "stopped": "", "rebuilt_from_metrics": True}
    return {"config": config_section(cfg), "parameters": count_parameters(model),
            "precision": cfg.train.precision, "code": {**code_version(), "recorded_by": "evaluate"},
            "hardware": hardware(resolve_device("auto")), "training": training}


class AttentionMap(NamedTuple):
    translation: str
    source: list[str]     # source pieces + "</s>"
    target: list[str]     # pieces of the translation + "</s>"
    layers: list[Tensor]  # per decoder layer: (H, T, S) cross-attention probabilities


@torch.inference_mode()
def attention_for(model: Seq2Seq, tokenizer: Tokenizer, line: str, cfg: DecodeConfig,
                  device: torch.device | str = "cpu") -> AttentionMap:
    """Greedy-translate one line and return its cross-attention in every decoder layer."""
    model.eval()
    ids = tokenizer.encode([normalize(line)])[0][: model.cfg.max_positions - 1]
    src, src_mask = (t.to(device) for t in source_batch([ids]))
    hyp = greedy_decode(model, src, src_mask, cfg.max_len_a, cfg.max_len_b)[0].tokens
    tgt_in = torch.tensor([[BOS] + hyp], device=device)                    # (1, T)
    weights = model.cross_attention(src, src_mask, tgt_in, torch.ones_like(tgt_in, dtype=torch.bool))
    pieces = lambda seq: [tokenizer.sp.id_to_piece(i) for i in seq] + ["</s>"]  # noqa: E731
    return AttentionMap(tokenizer.decode([hyp])[0], pieces(ids), pieces(hyp), [w[0].cpu() for w in weights])
