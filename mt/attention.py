"""Attention of translations, all three kinds (encoder self-, decoder self- and cross-attention): taken
in a teacher-forced pass over the 1-best translations, as JSON (`mt serve`'s /attention and its page)
and as heatmaps (`mt attention`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from mt.batching import make_batch, source_batch
from mt.config import PAD
from mt.data import normalize
from mt.decode import Sources, search
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq, decoder_self_mask
from mt.plumbing.files import write_figure
from mt.plumbing.script import starts_word
from mt.tokenizer import Tokenizer


class AttentionMap(NamedTuple):
    """One sentence's attention in a teacher-forced pass over its batch (padded to the batch's longest)."""

    translation: str
    source: list[str]  # source positions (S): pieces, "</s>", then "<pad>"s
    target: list[str]  # decoder input positions (T): "<s>", pieces of the translation, then "<pad>"s
    predicted: list[str]  # what each decoder position predicts (T): pieces, "</s>", then "<pad>"s
    source_mask: list[bool]  # (S,) True = real token, as the model's masks
    target_mask: list[bool]  # (T,)
    encoder: list[Tensor]  # per encoder layer: (H, S, S) self-attention probabilities
    decoder: list[Tensor]  # per decoder layer: (H, T, T) self-attention (causal and padding masks)
    cross: list[Tensor]  # per decoder layer: (H, T, S) cross-attention


@torch.inference_mode()
def attention_maps(
    model: Seq2Seq,
    tokenizer: Tokenizer,
    lines: list[str],
    cfg: DecodeConfig,
    device: torch.device | str = "cpu",
) -> list[AttentionMap]:
    """Translate lines as one batch (the 1-best of cfg's search; sources cut to the model's positions)
    and return each one's attention of every kind and layer, padding included."""
    model.eval()
    limit = model.cfg.max_positions - 1
    ids = [x[:limit] for x in tokenizer.encode([normalize(line) for line in lines])]
    src, src_mask = (t.to(device) for t in source_batch(ids))
    hyps = [h[0].tokens for h in search(model, Sources(src, src_mask), dataclasses.replace(cfg, n_best=1))]
    hyps = [hyp if source else [] for source, hyp in zip(ids, hyps)]  # as translate: empty in, empty out
    batch = make_batch(ids, hyps)
    found = model.attention(src, src_mask, batch.tgt_in.to(device), batch.tgt_mask.to(device))

    def piece(seq: Tensor) -> list[str]:
        return [tokenizer.sp.id_to_piece(i) if i != PAD else "<pad>" for i in seq.tolist()]

    texts = tokenizer.decode(hyps)
    return [
        AttentionMap(
            texts[b],
            piece(src[b]),
            piece(batch.tgt_in[b]),
            piece(batch.tgt_out[b]),
            src_mask[b].tolist(),
            batch.tgt_mask[b].tolist(),
            *([w[b].cpu() for w in found[kind]] for kind in ("encoder", "decoder", "cross")),
        )
        for b in range(len(lines))
    ]


def word_starts(pieces: list[str]) -> list[int]:
    """Each piece's word: a piece that starts with ▁ starts a word (the first always does), and so does
    a piece that begins or follows a character of a script without spaces (mt.plumbing.script): in Chinese or
    Japanese text the tokenizer's pieces are the words."""
    words, out = -1, []
    for i, piece in enumerate(pieces):
        words += words < 0 or starts_word(piece, pieces[i - 1] if i else "")
        out.append(words)
    return out


@torch.inference_mode()
def word_alignments(
    model: Seq2Seq, tokenizer: Tokenizer, src_ids: list[list[int]], tgt_ids: list[list[int]], batch_size=64
) -> list[list[tuple[int, int]]]:
    """(source word, target word) pairs of each translation, Pharaoh's i-j: every target piece is
    aligned to the source piece its last decoder layer's cross-attention (mean of heads, eos left out)
    weighs most, in a teacher-forced pass; pieces map to words (`word_starts`)."""
    model.eval()
    device = next(model.parameters()).device
    pairs: list[list[tuple[int, int]]] = []
    for at in range(0, len(src_ids), batch_size):
        src, tgt = src_ids[at : at + batch_size], tgt_ids[at : at + batch_size]
        batch = make_batch(src, tgt)
        tensors = (t.to(device) for t in (batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask))
        (cross,) = model.attention(*tensors, last_cross=True)["cross"]
        weights = cross.mean(1)  # (B, T, S): a target position's weights over the source pieces
        for b, (s, t) in enumerate(zip(src, tgt)):
            if not s or not t:
                pairs.append([])
                continue
            best = weights[b, : len(t), : len(s)].argmax(-1).tolist()  # (T,) eos rows and column left out
            s_word = word_starts([tokenizer.sp.id_to_piece(i) for i in s])
            t_word = word_starts([tokenizer.sp.id_to_piece(i) for i in t])
            pairs.append(sorted({(s_word[best[j]], t_word[j]) for j in range(len(t))}))
    return pairs


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in pairs)


def line_alignments(
    model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], translations: list[str]
) -> list[str]:
    """Each raw line's Pharaoh alignment to its translation (`word_alignments`): what `mt translate
    --alignments` writes and the API's `alignment`. Any engine's translations: the torch model scores them."""
    return [
        pharaoh(pairs)
        for pairs in word_alignments(model, tokenizer, *_pieces(model, tokenizer, lines, translations))
    ]


def alignment_json(model: Seq2Seq, tokenizer: Tokenizer, line: str, translation: str) -> dict:
    """One line's word alignment for the page: the words of both sides and the (source, target) pairs."""
    (src,), (tgt,) = _pieces(model, tokenizer, [line], [translation])
    words = lambda ids: words_of([tokenizer.sp.id_to_piece(i) for i in ids])  # noqa: E731
    pairs = word_alignments(model, tokenizer, [src], [tgt])[0]
    return {"source": words(src), "target": words(tgt), "pairs": [list(pair) for pair in pairs]}


def _pieces(model: Seq2Seq, tokenizer: Tokenizer, lines: list[str], translations: list[str]):
    """Raw lines and their translations as piece ids, cut to the model's positions as decoding cuts them."""
    limit = model.cfg.max_positions - 1
    src = [ids[:limit] for ids in tokenizer.encode([normalize(line) for line in lines])]
    return src, [ids[:limit] for ids in tokenizer.encode_target(translations)]


def words_of(pieces: list[str]) -> list[str]:
    """The words that `word_starts` numbers, as text: pieces joined, the ▁ marker dropped."""
    words: list[str] = []
    for piece, word in zip(pieces, word_starts(pieces)):
        text = piece.removeprefix("\u2581")
        if word == len(words):
            words.append(text)
        else:
            words[-1] += text
    return words


def attention_json(found, heads: int) -> dict:
    """An AttentionMap as JSON: tokens, masks (True = may attend, the model's own), and the
    probabilities per kind as [layer][head][query][key], to 4 decimals."""
    T, S = len(found.target), len(found.source)
    src_mask, tgt_mask = torch.tensor(found.source_mask), torch.tensor(found.target_mask)
    # (S, S), (T, S), (T, T)
    masks = {
        "encoder": src_mask.expand(S, S),
        "cross": src_mask.expand(T, S),
        "decoder": decoder_self_mask(T, tgt_mask[None])[0, 0],
    }
    rounded = lambda layers: [(w.double() * 1e4).round().div(1e4).tolist() for w in layers]  # noqa: E731
    return {
        "translation": found.translation,
        "source": found.source,
        "target": found.target,
        "predicted": found.predicted,
        "source_mask": found.source_mask,
        "target_mask": found.target_mask,
        "heads": heads,
        "masks": {k: m.tolist() for k, m in masks.items()},
        "encoder": rounded(found.encoder),
        "decoder": rounded(found.decoder),
        "cross": rounded(found.cross),
    }


def piece_labels(pieces: list[str]) -> list[str]:
    """Axis labels for sentencepiece pieces: the word-start marker U+2581 (drawn as a stray "_" under
    rotated labels) dropped; a piece that continues a word gets a leading "-"."""
    return [p[1:] or p if p.startswith("\u2581") else p if p in ("</s>", "<s>") else "-" + p for p in pieces]


def plot_attention(src: list[str], tgt: list[str], layers: list, path: Path, per_head: bool = False):
    """Heatmaps of cross-attention (target pieces x source pieces): one panel per decoder layer,
    averaged over heads, or layers x heads with `per_head`. `layers`: (H, T, S) tensors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = layers[0].shape[0] if per_head else 1
    panels = [[(w[h] if per_head else w.mean(0)) for h in range(heads)] for w in layers]
    size = (max(3.0, 0.32 * len(src) + 1.5), max(2.5, 0.3 * len(tgt) + 1.2))
    fig, axes = plt.subplots(
        len(layers), heads, figsize=(size[0] * heads, size[1] * len(layers)), squeeze=False
    )
    for i, row in enumerate(panels):
        for h, weights in enumerate(row):
            ax = axes[i][h]
            image = ax.imshow(weights.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
            fig.colorbar(image, ax=ax, fraction=0.05, label="attention weight")
            ax.set_xticks(range(len(src)), piece_labels(src), rotation=90, fontsize=8)
            ax.set_yticks(range(len(tgt)), piece_labels(tgt), fontsize=8)
            ax.set_title(
                f"layer {i + 1}" + (f", head {h + 1}" if per_head else ", mean of heads"), fontsize=9
            )
    fig.tight_layout()
    write_figure(fig, path)
    plt.close(fig)
    return fig  # closed, but its axes can still be read
