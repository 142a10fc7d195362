"""`mt score`: the log-probability a model gives each translation of a source, teacher-forced: one per
target piece and eos, their sum, and the GNMT score that beam search ranks n-best lists by."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.batching import make_batch, token_batches
from mt.config import UNK
from mt.decode import length_penalty
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.plumbing.errors import DataError
from mt.tokenizer import Tokenizer


@dataclass
class Scored:
    """A translation's teacher-forced log-probability (`mt score`)."""

    token_logprobs: list[float]  # one per target piece, then eos
    logprob: float  # their sum
    score: float  # logprob / GNMT length penalty, eos counted: how beam search ranks n-best lists


@torch.inference_mode()
def score_pairs(
    model: Seq2Seq, src_ids: list[list[int]], tgt_ids: list[list[int]], cfg: DecodeConfig, device="cpu"
) -> list[Scored]:
    """Teacher-forced log-probabilities of the targets given the sources (piece ids, no bos/eos), in
    token-budget batches of about cfg.batch_tokens, in input order."""
    was_training = model.training
    model.eval()
    scored: list[Scored] = [None] * len(src_ids)
    src_lens, tgt_lens = [len(s) + 1 for s in src_ids], [len(t) + 1 for t in tgt_ids]
    for group in token_batches(src_lens, tgt_lens, cfg.batch_tokens):
        batch = make_batch([src_ids[g] for g in group], [tgt_ids[g] for g in group]).to(device)
        logits = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V')
        target = model.output_ids(batch.tgt_out)  # (B, T): positions in the output layer
        picked = torch.log_softmax(logits.float(), -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
        lacked = (target == UNK) & (batch.tgt_out != UNK)  # a piece the output layer does not score
        picked = picked.masked_fill(lacked, float("-inf"))  # (B, T)
        for g, row in zip(group, picked.tolist()):
            token_logprobs = row[: tgt_lens[g]]
            total = sum(token_logprobs)
            scored[g] = Scored(token_logprobs, total, total / length_penalty(tgt_lens[g], cfg.length_penalty))
    model.train(was_training)
    return scored


def score_lines(
    model: Seq2Seq, tokenizer: Tokenizer, src: list[str], tgt: list[str], cfg: DecodeConfig, device="cpu"
) -> list[Scored]:
    """`score_pairs` of raw line pairs; a pair longer than the model's positions is a DataError."""
    src_ids, tgt_ids = tokenizer.encode(src), tokenizer.encode_target(tgt)
    limit = model.cfg.max_positions - 1  # room for eos (source) and bos or eos (target)
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        if max(len(s), len(t)) > limit:
            raise DataError(
                f"line {i + 1}: {max(len(s), len(t))} pieces, more than the {limit} this model can score"
            )
    return score_pairs(model, src_ids, tgt_ids, cfg, device)
