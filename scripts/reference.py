"""mt's model rebuilt on `torch.nn.Transformer`, as a yardstick: scripts/bench_train.py times its
training step beside mt's on the same batches, and tests/test_reference.py checks that the two compute
the same logits and gradients from the same weights (`copy_weights`).

The same sizes, embedding scale, sinusoidal positions, tied output projection, pre- or post-norm; only
the layers are torch's (fused q/k/v projection, `nn.MultiheadAttention`, `nn.Dropout`). Post-norm mt
stacks end without a final LayerNorm, so the reference drops nn.Transformer's there.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn

from mt.config import ModelConfig
from mt.model import Seq2Seq, sinusoidal_positions


class ReferenceSeq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        encoder_layers, decoder_layers = cfg.depth
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.register_buffer(
            "positions", sinusoidal_positions(cfg.max_positions, cfg.d_model), persistent=False
        )
        self.drop = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": turned off below
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(
                d_model=cfg.d_model,
                nhead=cfg.n_heads,
                num_encoder_layers=encoder_layers,
                num_decoder_layers=decoder_layers,
                dim_feedforward=cfg.d_ff,
                dropout=cfg.dropout,
                batch_first=True,
                norm_first=cfg.norm == "pre",
            )
        self.transformer.encoder.enable_nested_tensor = False  # mt computes pad positions too
        if cfg.norm == "post":
            self.transformer.encoder.norm = self.transformer.decoder.norm = None
        self.out_proj = nn.Linear(cfg.d_model, vocab_size, bias=False)
        self.out_proj.weight = self.embed.weight

    def _embed(self, ids: Tensor) -> Tensor:
        L = ids.size(1)
        return self.drop(self.embed(ids) * math.sqrt(self.cfg.d_model) + self.positions[:L])  # (B, L, D)

    def output_ids(self, ids: Tensor) -> Tensor:
        """As Seq2Seq.output_ids: its output layer scores every piece, at the piece's own id."""
        return ids

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """mt's convention in (masks True = real token), torch's inside (True = masked) -> (B, T, V)."""
        T = tgt_in.size(1)
        future = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).triu(1)  # (T, T) True = hidden
        out = self.transformer(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=future,
            src_key_padding_mask=~src_mask,
            tgt_key_padding_mask=~tgt_mask,
            memory_key_padding_mask=~src_mask,
            tgt_is_causal=True,
        )  # (B, T, D)
        return self.out_proj(out)


def mt_to_reference(model: Seq2Seq, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """`state` (mt's parameter names: its state_dict, or its gradients) under the reference's names (one
    tensor for q, k and v: torch's in_proj)."""
    mapped = {"embed.weight": state["src_embed.weight"]}
    layers = [("encoder", i, layer) for i, layer in enumerate(model.encoder)]
    layers += [("decoder", i, layer) for i, layer in enumerate(model.decoder)]
    for stack, i, layer in layers:
        ours, theirs = f"{stack}.{i}.", f"transformer.{stack}.layers.{i}."
        attentions = [("self_attn", "self_attn")] + (
            [("cross_attn", "multihead_attn")] if stack == "decoder" else []
        )
        norms = ["res_attn", "res_ffn"] if stack == "encoder" else ["res_self", "res_cross", "res_ffn"]
        for mine, torchs in attentions:
            for kind in ("weight", "bias"):
                mapped[f"{theirs}{torchs}.in_proj_{kind}"] = in_projection(state, f"{ours}{mine}", kind)
                mapped[f"{theirs}{torchs}.out_proj.{kind}"] = state[f"{ours}{mine}.out_proj.{kind}"]
        for kind in ("weight", "bias"):
            mapped[f"{theirs}linear1.{kind}"] = state[f"{ours}ffn.0.{kind}"]
            mapped[f"{theirs}linear2.{kind}"] = state[f"{ours}ffn.3.{kind}"]
            for n, name in enumerate(norms, 1):
                mapped[f"{theirs}norm{n}.{kind}"] = state[f"{ours}{name}.norm.{kind}"]
    if model.cfg.norm == "pre":
        for stack, norm in (("encoder", "enc_norm"), ("decoder", "dec_norm")):
            for kind in ("weight", "bias"):
                mapped[f"transformer.{stack}.norm.{kind}"] = state[f"{norm}.{kind}"]
    return mapped


def in_projection(state: dict[str, Tensor], attention: str, kind: str) -> Tensor:
    """An mt attention's q, k and v projection as one (3D, D) weight or (3D,) bias, in torch's order."""
    if f"{attention}.qkv_proj.{kind}" in state:
        return state[f"{attention}.qkv_proj.{kind}"]
    return torch.cat([state[f"{attention}.q_proj.{kind}"], state[f"{attention}.kv_proj.{kind}"]])


def copy_weights(model: Seq2Seq, reference: ReferenceSeq2Seq) -> None:
    """Give `reference` mt's weights; every reference parameter must receive one."""
    state = mt_to_reference(model, model.state_dict())
    state["out_proj.weight"] = state["embed.weight"]  # tied, as in mt
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
