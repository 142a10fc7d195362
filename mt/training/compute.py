"""Training compute, counted the same on every machine: the multiply-adds of the model's matmuls over
the pairs a run trained on, from their shapes (the card's `training.multiply_adds`, mt report's
`compute`).

A forward pass over a pair of S source positions (its pieces and eos) and T target positions (bos and
its pieces) costs, per encoder layer, S (4 D^2 + 2 D F) for the projections and the feed-forward block
and 2 S^2 D for attention's QK^T and AV; per decoder layer T (6 D^2 + 2 D F) + 2 S D^2 (cross-attention's
keys and values) + 2 T^2 D + 2 T S D; and T D V for the output layer over its V pieces. Causal attention
is counted whole, as its kernels compute it; padding is not counted, so the figure is the model's, not
the batching's. A backward pass is twice its forward (the gradients of inputs and of weights), so an
update costs 3x. torch's FlopCounterMode counts the same (tests/test_compute.py).
"""

from __future__ import annotations

from torch import Tensor

from mt.config import ModelConfig
from mt.training.epochs import BatchStream


def forward_multiply_adds(
    cfg: ModelConfig, output_size: int, src_len: Tensor, tgt_len: Tensor, count: Tensor | None = None
) -> float:
    """Multiply-adds of one forward pass over pairs of these lengths (pieces without eos/bos, (P,)),
    `count[i]` pairs of lengths i where given."""
    D, F, V = cfg.d_model, cfg.d_ff, output_size  # V: the pieces the output layer scores
    encoder_layers, decoder_layers = cfg.depth
    s, t = src_len.double() + 1, tgt_len.double() + 1  # (P,) with eos / bos
    encoder = s * (4 * D * D + 2 * D * F) + 2 * s * s * D
    decoder = t * (6 * D * D + 2 * D * F) + s * 2 * D * D + 2 * t * t * D + 2 * t * s * D
    each = encoder_layers * encoder + decoder_layers * decoder + t * D * V  # (P,)
    return float((each if count is None else each * count.double()).sum())


def training_multiply_adds(
    cfg: ModelConfig, output_size: int, stream: BatchStream, epoch: int, batch_index: int
) -> float:
    """Forward and backward multiply-adds of every batch a training consumed up to its stream position
    (epoch, batches of it taken): updates a non-finite loss skipped count, they were computed."""
    return 3 * sum(
        forward_multiply_adds(cfg, output_size, src_len, tgt_len, count)
        for src_len, tgt_len, count in stream.consumed(epoch, batch_index)
    )


def search_multiply_adds(
    cfg: ModelConfig, output_size: int, src_len: Tensor, out_len: Tensor, beam: int
) -> float:
    """Multiply-adds of mt's search with a KV cache (lengths without eos, (P,)): the encoder and the
    cross-attention's keys and values once a sentence, then one row at the first step and `beam` at
    each later one up to the kept output's length with eos, the self-attention reading the steps so
    far. A search that ran on past its kept hypothesis (other beams, a batch's longer lines) did more:
    this is the output's cost, counted from its shape. Greedy, one line: what FlopCounterMode counts."""
    D, F, V = cfg.d_model, cfg.d_ff, output_size
    encoder_layers, decoder_layers = cfg.depth
    s, t = src_len.double() + 1, out_len.double() + 1  # (P,) with eos
    once = encoder_layers * (s * (4 * D * D + 2 * D * F) + 2 * s * s * D) + decoder_layers * 2 * D * D * s
    per_row = decoder_layers * (6 * D * D + 2 * D * F + 2 * s * D) + D * V  # a step's row, attention aside
    steps = t * per_row + decoder_layers * D * t * (t + 1)  # self-attention: 2 j D at step j
    first = per_row + decoder_layers * 2 * D
    return float((once + beam * steps - (beam - 1) * first).sum())


def pipeline_multiply_adds(own: float | None, inherited: list[float | None]) -> float | None:
    """A run's training plus what it was built on (a parent's pipeline, a teacher's pipeline and its
    translating); None where a part was never counted."""
    parts = [own, *inherited]
    return None if None in parts else sum(parts)


def card_pipeline(card: dict) -> float | None:
    """A run's pipeline multiply-adds from its card: None where it was never counted."""
    training = card.get("training", {})
    return training.get("pipeline_multiply_adds", training.get("multiply_adds"))
