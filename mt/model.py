"""The Transformer encoder-decoder (Vaswani et al. 2017), written out in one file.

Dimensions: B batch, S source length, T target length, D d_model, H heads, Dh = D / H, V vocab.
Masks are boolean with True = real token / may attend, the convention of
`F.scaled_dot_product_attention`; the model builds (B, 1, 1, S) masks for encoder self-attention and
cross-attention, and (B, 1, T, T) = target padding AND causal for decoder self-attention.

`encode` and `decode` are separate calls so decoding never re-encodes. `decode` takes and returns a
caller-owned `KVCache` (mt.kv_cache); with a cache, `tgt_in` holds only the new positions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mt.config import ModelConfig
from mt.devices import Dropout, attend, causal_flag, in_autocast_dtype
from mt.kv_cache import KVCache
from mt.output_pieces import OutputPieces


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """(n_positions, D) table: sin on even, cos on odd dimensions."""
    position = torch.arange(n_positions).unsqueeze(1)  # (P, 1)
    freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))  # (D/2,)
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)
    return table


def decoder_self_mask(T: int, tgt_mask: Tensor | None, device: torch.device | str = "cpu") -> Tensor:
    """Position i may attend to j iff j <= i and j is a real token: (1, 1, T, T), or (B, 1, T, T) with
    tgt_mask (B, T)."""
    mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None, None]  # (1, 1, T, T)
    if tgt_mask is not None:
        mask = mask & tgt_mask[:, None, None, :]  # (B, 1, T, T)
    return mask


class Attention(nn.Module):
    """Multi-head attention on `F.scaled_dot_product_attention`.

    Self-attention projects queries, keys and values in one matmul (`qkv_proj`): one kernel, and under
    autocast one cast of its input. Cross-attention projects the queries (`q_proj`) apart from the
    memory's keys and values (`kv_proj`), which decoding computes once a sentence.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, cross: bool = False):
        super().__init__()
        self.n_heads, self.dropout, self.cross, self.on = n_heads, dropout, cross, True
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _heads(self, x: Tensor) -> Tensor:
        B, L, D = x.shape
        return x.view(B, L, self.n_heads, D // self.n_heads).transpose(1, 2)  # (B, H, L, Dh)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: x (B, L, D) -> queries, keys, values (B, H, L, Dh) each."""
        return tuple(self._heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))

    def project_q(self, x: Tensor) -> Tensor:
        """Cross-attention: x (B, T, D) -> queries (B, H, T, Dh)."""
        return self._heads(self.q_proj(x))

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention: memory (B, S, D) -> keys, values (B, H, S, Dh) each."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)  # (B, S, D) each
        return self._heads(k), self._heads(v)

    @staticmethod
    def weights(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """The attention probabilities forward() uses (without dropout), q (B, H, T, Dh): (B, H, T, L)."""
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))  # (B, H, T, L)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-1)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool = False) -> Tensor:
        """q (N, H, T, Dh) attends to k, v (B, H, L, Dh) where mask (B, 1, T|1, L) is True (or, with `causal`
        and no mask, to positions up to its own) -> (N, T, D).

        N = G * B: each run of G consecutive rows of q (the beams of one sentence) attends to one row of
        k, v: its G queries are folded into one (B, H, G * T, Dh) call instead of copying k, v G times.
        """
        N, H, T, Dh = q.shape
        B = k.size(0)
        if N != B:
            q = q.view(B, N // B, H, T, Dh).transpose(1, 2).reshape(B, H, N // B * T, Dh)  # (B, H, G*T, Dh)
        p = self.dropout if self.training and self.on else 0.0
        out = attend(q, k, v, mask, p, causal)  # (B, H, G*T, Dh)
        out = out.view(B, H, N // B, T, Dh).permute(0, 2, 3, 1, 4)  # (B, G, T, H, Dh)
        return self.out_proj(out.reshape(N, T, H * Dh))  # (N, T, D)


class FeedForward(nn.Sequential):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), Dropout(dropout), nn.Linear(d_ff, d_model))


class Residual(nn.Module):
    """x + dropout(f(norm(x))) when pre-norm; norm(x + dropout(f(x))) when post-norm."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.drop, self.pre_norm = nn.LayerNorm(d_model), Dropout(dropout), pre_norm

    def forward(self, x: Tensor, f) -> Tensor:
        if self.pre_norm:
            return x + self.drop(f(self.norm(x)))
        return self.norm(x + self.drop(f(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = Attention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout)
        self.res_attn, self.res_ffn = (Residual(cfg.d_model, cfg.dropout, pre) for _ in range(2))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, S, D), mask (B, 1, 1, S) -> (B, S, D)."""
        x = self.res_attn(x, lambda h: self.self_attn(*self.self_attn.project_qkv(h), mask))
        return self.res_ffn(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = Attention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = Attention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, cross=True)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout)
        self.res_self, self.res_cross, self.res_ffn = (
            Residual(cfg.d_model, cfg.dropout, pre) for _ in range(3)
        )

    def _self_attend(
        self, h: Tensor, mask: Tensor | None, cache: KVCache | None, i: int, causal: bool
    ) -> Tensor:
        q, k, v = self.self_attn.project_qkv(h)  # (B, H, T_new, Dh) each
        if cache is not None:
            k, v = cache.append(i, k, v)  # (B, H, t + T_new, Dh)
        return self.self_attn(q, k, v, mask, causal)

    def _cross_attend(self, h: Tensor, memory: Tensor, mask: Tensor, cache: KVCache | None, i: int) -> Tensor:
        if cache is not None and cache.cross_kv[i] is not None:
            k, v = cache.cross_kv[i]
        else:
            k, v = self.cross_attn.project_kv(memory)  # (B, H, S, Dh)
            if cache is not None:
                cache.cross_kv[i] = (k, v)
        return self.cross_attn(self.cross_attn.project_q(h), k, v, mask)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        self_mask: Tensor | None,
        cache: KVCache | None,
        i: int,
        causal: bool = False,
    ) -> Tensor:
        """x (B, T, D), memory (B, S, D), src_mask (B, 1, 1, S), self_mask (B, 1, T, T) or None with
        `causal` (SDPA's own causal flag) -> (B, T, D)."""
        x = self.res_self(x, lambda h: self._self_attend(h, self_mask, cache, i, causal))
        x = self.res_cross(x, lambda h: self._cross_attend(h, memory, src_mask, cache, i))
        return self.res_ffn(x, self.ffn)


class Seq2Seq(nn.Module):
    """Encoder-decoder Transformer; source/target embeddings and output projection optionally tied."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, target_pieces: Tensor | None = None):
        super().__init__()
        self.cfg, self.vocab_size = cfg, vocab_size
        D = cfg.d_model
        self.src_embed = nn.Embedding(vocab_size, D)
        self.tgt_embed = self.src_embed if cfg.tie_embeddings else nn.Embedding(vocab_size, D)
        self.out_proj = nn.Linear(D, vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.out_proj.weight = self.src_embed.weight
        self.register_buffer("positions", sinusoidal_positions(cfg.max_positions, D), persistent=False)
        self.drop = Dropout(cfg.dropout)
        encoder_layers, decoder_layers = cfg.depth
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(decoder_layers))
        pre = cfg.norm == "pre"  # pre-norm stacks end in a norm; post-norm layers already end in one
        self.enc_norm = nn.LayerNorm(D) if pre else nn.Identity()
        self.dec_norm = nn.LayerNorm(D) if pre else nn.Identity()
        self._init_weights()
        assert (target_pieces is not None) == (cfg.output_pieces == "target"), "model.output_pieces"
        self.output = None if target_pieces is None else OutputPieces(vocab_size, target_pieces)

    @property
    def output_size(self) -> int:
        """V': the pieces the output layer scores (cfg.output_pieces)."""
        return self.vocab_size if self.output is None else len(self.output.ids)

    def output_ids(self, ids: Tensor) -> Tensor:
        """Piece ids (any shape) -> their positions in the output layer (the same ids over all pieces)."""
        return ids if self.output is None else self.output.positions(ids)

    def to_pieces(self, logits: Tensor) -> Tensor:
        """Output-layer logits (..., V') -> (..., V) by piece id (`OutputPieces.to_pieces`)."""
        return logits if self.output is None else self.output.to_pieces(logits, self.vocab_size)

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if "embed" in name:
                nn.init.normal_(p, mean=0.0, std=self.cfg.d_model**-0.5)
            elif p.dim() == 2:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias") and "norm" not in name:
                nn.init.zeros_(p)

    def new_cache(self) -> KVCache:
        """An empty KV cache for incremental decoding with this model."""
        return KVCache(len(self.decoder))

    def freeze(self, parts: list[str]) -> None:
        """Keep `parts` (train.freeze) as they are: embeddings (source, target and the output projection,
        one matrix when tied), encoder or decoder (its layers and its final norm)."""
        modules = {
            "embeddings": [self.src_embed, self.tgt_embed, self.out_proj],
            "encoder": [self.encoder, self.enc_norm],
            "decoder": [self.decoder, self.dec_norm],
        }
        for part in parts:
            for module in modules[part]:
                module.requires_grad_(False)

    def use_dropout(self, on: bool) -> None:
        """Every dropout of the model (model.dropout, attention_dropout, activation_dropout) at its rate, or
        none: train.dropout_start switches them on part-way through a run (mt.training.step.dropout_on)."""
        for module in self.modules():
            if isinstance(module, (Dropout, Attention)):
                module.on = on

    def _embed(self, embed: nn.Embedding, ids: Tensor, offset: int) -> Tensor:
        """ids (B, L) -> (B, L, D): scaled token embedding + sinusoidal position from `offset`."""
        L = ids.size(1)
        assert offset + L <= self.cfg.max_positions, (
            f"length {offset + L} > max_positions {self.cfg.max_positions}"
        )
        x = embed(ids) * math.sqrt(self.cfg.d_model) + self.positions[offset : offset + L]
        return self.drop(x)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src (B, S) ids, src_mask (B, S) bool -> memory (B, S, D)."""
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self._embed(self.src_embed, src, 0)  # (B, S, D)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.enc_norm(x)

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: KVCache | None = None,
        tgt_mask: Tensor | None = None,
    ) -> tuple[Tensor, KVCache | None]:
        """Next-token logits.

        Args:
            tgt_in: (B, T) target ids; with a cache, only the positions after those already cached.
            memory: (B, S, D) encoder output.  src_mask: (B, S) bool.  tgt_in may have G * B rows: the
                G beams of each sentence, consecutive, share its memory.
            cache: caller-owned KVCache, updated in place and returned; None = full recomputation.
            tgt_mask: (B, T) bool, real target positions (without a cache); None = all real.
        Returns:
            logits (B, T, V') over the output layer's pieces (`to_pieces` gives (B, T, V)) and the cache.
        """
        offset = cache.length if cache is not None else 0
        T = tgt_in.size(1)
        assert offset == 0 or T == 1, f"a warm cache takes one new position at a time, got {T}"
        # cached positions are all earlier than a new one, so only a cold start needs the causal mask;
        # with `causal_flag` SDPA's is_causal replaces it (flash attention on GPUs): padding sits right of
        # every real position, so real positions see the same keys and only pad positions' outputs change
        full = offset == 0 and T > 1
        causal = full and causal_flag(tgt_in)
        self_mask = decoder_self_mask(T, tgt_mask, tgt_in.device) if full and not causal else None
        cross_mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self._embed(self.tgt_embed, tgt_in, offset)  # (B, T, D)
        memory = in_autocast_dtype(memory)
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, cross_mask, self_mask, cache, i, causal)
        if cache is not None:
            cache.length += T
        weight = self.out_proj.weight if self.output is None else self.output.rows(self.out_proj.weight)
        return F.linear(self.dec_norm(x), weight), cache  # (B, T, V')

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V') over the output layer's pieces."""
        return self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask=tgt_mask)[0]

    @torch.no_grad()
    def attention(
        self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor, last_cross: bool = False
    ) -> dict[str, list[Tensor]]:
        """Teacher-forced attention probabilities of every layer, by kind: "encoder" self-attention
        (B, H, S, S), "decoder" self-attention (B, H, T, T) and "cross"-attention (B, H, T, S) each.
        Masked positions get exactly 0. `last_cross`: only the last decoder layer's cross-attention
        (what word alignments read), the other kinds' lists left empty."""
        found: dict[str, list[Tensor]] = {"encoder": [], "decoder": [], "cross": []}

        def keeper(kind: str):
            def keep(module: Attention, args: tuple, output: Tensor) -> None:
                q, k, _, mask, *causal = args
                if causal and causal[0]:  # SDPA's own causal flag (CUDA): the mask it stands for
                    mask = decoder_self_mask(q.size(2), None, q.device)
                found[kind].append(module.weights(q, k, mask))

            return keep

        modules = [(layer.self_attn, "encoder") for layer in self.encoder] + [
            (m, kind)
            for layer in self.decoder
            for m, kind in ((layer.self_attn, "decoder"), (layer.cross_attn, "cross"))
        ]
        modules = modules[-1:] if last_cross else modules
        hooks = [module.register_forward_hook(keeper(kind)) for module, kind in modules]
        try:
            self.forward(src, src_mask, tgt_in, tgt_mask)
        finally:
            for hook in hooks:
                hook.remove()
        return found


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
