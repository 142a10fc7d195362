"""Validation: the held-out split's teacher-forced loss and the BLEU/chrF of its translations, decoded
one fixed way (`validation_decoding`), which is what "best" in best.pt means.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from mt.batching import Batch, make_batch, token_batches
from mt.config import RunConfig
from mt.decode_config import DecodeConfig
from mt.devices import autocast
from mt.model import Seq2Seq
from mt.output_pieces import written_pieces
from mt.plumbing.metrics import HEADLINE, corpus_scores
from mt.tokenizer import Tokenizer
from mt.training.step import batch_loss
from mt.translate import SearchRequest, translate_lines

log = logging.getLogger(__name__)


@dataclass
class Validation:
    """Held-out data: raw lines to translate, and batches for the teacher-forced loss."""

    src_lines: list[str]
    ref_lines: list[str]
    batches: list[Batch]


def make_validation(
    src: list[str], ref: list[str], tokenizer: Tokenizer, model: Seq2Seq, max_tokens: int
) -> Validation:
    """The references are cut into the pieces `model` writes (`Tokenizer.writing`): English it can
    spell is no `<unk>` to the val loss where a joint piece is German's alone."""
    src_ids = tokenizer.encode(src)
    tgt_ids = tokenizer.writing(written_pieces([model])).encode_target(ref)
    groups = token_batches([len(s) + 1 for s in src_ids], [len(t) + 1 for t in tgt_ids], max_tokens)
    return Validation(
        src, ref, [make_batch([src_ids[i] for i in g], [tgt_ids[i] for i in g]) for g in groups]
    )


def validation_decoding(cfg: RunConfig) -> DecodeConfig:
    """How validation translates: beam train.valid_beam, otherwise mt's default search (length penalty
    1, at most 1.5 x source + 10 tokens), whatever decode.* says, so that best.pt means one thing."""
    return DecodeConfig(beam=cfg.train.valid_beam, batch_tokens=cfg.decode.batch_tokens)


@torch.no_grad()
def validate(
    model: Seq2Seq, val: Validation, tokenizer: Tokenizer, cfg: RunConfig, device: torch.device
) -> dict:
    """Teacher-forced loss/perplexity and the headline metrics (mt.plumbing.metrics: BLEU, chrF) of the
    translations on the validation set."""
    model.eval()
    loss_sum = nll_sum = 0.0
    ntokens = 0
    for batch in val.batches:
        with autocast(device, cfg.train.precision):
            loss, nll = batch_loss(model, batch.to(device), cfg.train.label_smoothing)
        loss_sum, nll_sum, ntokens = loss_sum + loss.item(), nll_sum + nll.item(), ntokens + batch.ntokens
    request = SearchRequest(model, tokenizer, val.src_lines)  # on the model's device
    hyps = translate_lines(request, validation_decoding(cfg))
    scores = corpus_scores(
        hyps, val.ref_lines, sources=val.src_lines, metrics=HEADLINE, tokenize=cfg.bleu_tokenize
    )
    model.train()
    for i in range(3):
        log.info(
            "example %d | source: %s | reference: %s | hypothesis: %s",
            i,
            val.src_lines[i],
            val.ref_lines[i],
            hyps[i],
        )
    return {
        "val_loss": loss_sum / ntokens,
        "val_nll": nll_sum / ntokens,
        "val_ppl": math.exp(min(nll_sum / ntokens, 50.0)),
        **{f"val_{metric.key}": scores[metric.key] for metric in HEADLINE},
        "valid_beam": cfg.train.valid_beam,
        "bleu_signature": scores["bleu_signature"],
    }
