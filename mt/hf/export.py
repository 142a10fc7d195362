"""`mt export --format hf`: a run as a Hugging Face Transformers model directory, which
`AutoModelForSeq2SeqLM` and `AutoTokenizer` open without mt, and `generate` translates with
(Transformers 5 has no `pipeline("translation")`).

mt's Transformer is one of Transformers' own encoder-decoders, weight for weight:
    norm: pre                      PegasusForConditionalGeneration (pre-norm, a final LayerNorm a stack)
    norm: post                     MarianMTModel (post-norm, no final LayerNorm)
    x * sqrt(D) + positions        scale_embedding, and their sinusoid: sin in the first half of the
                                   dimensions, cos in the second, where mt interleaves them. The model's
                                   dimensions are permuted (`permuted`: mt's dimension 2i is Transformers'
                                   i, 2i + 1 is D/2 + i) in every matrix and norm that reads or writes
                                   them: attention and layer norms do not see an order, so it is exact
    qkv_proj; q_proj, kv_proj      split into q_proj, k_proj, v_proj
    ffn.0, ffn.3, res_*.norm       fc1, fc2, the blocks' LayerNorms
    output_pieces: target          final_logits_bias: the lowest float on the pieces the layer lacks,
                                   so a softmax over all pieces gives mt's softmax over its own
    </s> after every source, <s>   the tokenizer's eos; decoder_start_token_id
The tokenizer is MarianTokenizer over the run's spm.model (as source and target) and a vocab.json of
its pieces in id order, so its ids are sentencepiece's, as mt's are.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import torch

from mt.config import BOS, EOS, PAD, UNK, DataConfig, ModelConfig, RunConfig, save_config
from mt.data import load_split
from mt.decode_config import DecodeConfig
from mt.hf.card import generated_scores, write_card
from mt.hf.generation import caveats, generation_config, matched_length_penalty, transformers_modules
from mt.model import Seq2Seq
from mt.plumbing.engine_fields import ByMt, Unsupported, first_unmapped
from mt.plumbing.errors import ConfigError, DataError, RunDirError
from mt.plumbing.files import write_text
from mt.tokenizer import Tokenizer
from mt.translate import SearchRequest

log = logging.getLogger(__name__)

# How Transformers follows each ModelConfig field (`refuse_unmapped` refuses the others in one line)
MODEL_FIELDS = {
    "d_model": ByMt("d_model"),
    "n_heads": ByMt("encoder_attention_heads, decoder_attention_heads"),
    "layers": ByMt("encoder_layers, decoder_layers"),
    "encoder_layers": ByMt("encoder_layers"),
    "decoder_layers": ByMt("decoder_layers"),
    "d_ff": ByMt("encoder_ffn_dim, decoder_ffn_dim"),
    "dropout": ByMt("training only"),
    "attention_dropout": ByMt("training only"),
    "activation_dropout": ByMt("training only"),
    "norm": ByMt("pre: Pegasus; post: Marian"),
    "tie_embeddings": Unsupported("Pegasus and Marian share one embedding matrix here; train with it true"),
    "max_positions": ByMt("max_position_embeddings"),
    "output_pieces": ByMt("target: final_logits_bias, the lowest float on the pieces outside the layer"),
}


def refuse_unmapped(cfg: ModelConfig) -> None:
    """A one-line ConfigError for a model option Transformers' models here cannot represent."""
    if found := first_unmapped(cfg, MODEL_FIELDS):
        name, value, entry = found
        why = entry.why if isinstance(entry, Unsupported) else "not mapped in mt/hf/export.py's MODEL_FIELDS"
        raise ConfigError(f"model.{name}: {value!r} cannot be exported with --format hf ({why})", name)


def permuted(d_model: int) -> torch.Tensor:
    """Transformers' dimension k holds mt's dimension permuted(D)[k]: sines first, then cosines."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def hf_config(cfg: ModelConfig, vocab_size: int):
    """The Transformers config of `cfg`: Pegasus for pre-norm, Marian for post-norm."""
    t = transformers_modules()
    encoder_layers, decoder_layers = cfg.depth
    common = dict(
        vocab_size=vocab_size,
        d_model=cfg.d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        activation_function="relu",
        max_position_embeddings=cfg.max_positions,
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=None,
        tie_word_embeddings=True,
    )
    if cfg.norm == "pre":
        return t.PegasusConfig(**common)
    return t.MarianConfig(**common, decoder_vocab_size=vocab_size, share_encoder_decoder_embeddings=True)


class Weights(dict):
    """Transformers' state dict being filled, with the permutation of the model's dimensions (`permuted`)
    applied to what reads or writes them."""

    def __init__(self, d_model: int):
        super().__init__()
        self.order = permuted(d_model)

    def linear(self, name: str, weight: torch.Tensor, bias: torch.Tensor, reads: bool) -> None:
        """A Linear reading the model's dimensions (its columns permuted) or writing them (its rows)."""
        if reads:
            self[f"{name}.weight"], self[f"{name}.bias"] = weight[:, self.order], bias
        else:
            self[f"{name}.weight"], self[f"{name}.bias"] = weight[self.order], bias[self.order]

    def norm(self, name: str, module: torch.nn.LayerNorm) -> None:
        self[f"{name}.weight"], self[f"{name}.bias"] = module.weight[self.order], module.bias[self.order]

    def attention(self, name: str, attn) -> None:
        """mt's fused projections split into q_proj, k_proj and v_proj (K before V, as mt fuses them)."""
        D = attn.out_proj.weight.size(0)
        if attn.cross:
            q, qb = attn.q_proj.weight, attn.q_proj.bias
            (k, v), (kb, vb) = attn.kv_proj.weight.split(D), attn.kv_proj.bias.split(D)
        else:
            (q, k, v), (qb, kb, vb) = attn.qkv_proj.weight.split(D), attn.qkv_proj.bias.split(D)
        for part, w, b in (("q", q, qb), ("k", k, kb), ("v", v, vb)):
            self.linear(f"{name}.{part}_proj", w, b, reads=True)
        self.linear(f"{name}.out_proj", attn.out_proj.weight, attn.out_proj.bias, reads=False)

    def ffn(self, prefix: str, ffn) -> None:
        self.linear(f"{prefix}.fc1", ffn[0].weight, ffn[0].bias, reads=True)
        self.linear(f"{prefix}.fc2", ffn[3].weight, ffn[3].bias, reads=False)


def hf_weights(model: Seq2Seq) -> dict[str, torch.Tensor]:
    """mt's weights under Transformers' names and layout (the module's docstring)."""
    out = Weights(model.cfg.d_model)
    embed = model.src_embed.weight[:, out.order]  # (V, D), tied: the decoder's and the output's too
    out["model.shared.weight"] = out["lm_head.weight"] = embed
    for stack in ("encoder", "decoder"):
        out[f"model.{stack}.embed_tokens.weight"] = embed
        out[f"model.{stack}.embed_positions.weight"] = model.positions[:, out.order]
    for i, layer in enumerate(model.encoder):
        p = f"model.encoder.layers.{i}"
        out.attention(f"{p}.self_attn", layer.self_attn)
        out.norm(f"{p}.self_attn_layer_norm", layer.res_attn.norm)
        out.ffn(p, layer.ffn)
        out.norm(f"{p}.final_layer_norm", layer.res_ffn.norm)
    for i, layer in enumerate(model.decoder):
        p = f"model.decoder.layers.{i}"
        out.attention(f"{p}.self_attn", layer.self_attn)
        out.norm(f"{p}.self_attn_layer_norm", layer.res_self.norm)
        out.attention(f"{p}.encoder_attn", layer.cross_attn)
        out.norm(f"{p}.encoder_attn_layer_norm", layer.res_cross.norm)
        out.ffn(p, layer.ffn)
        out.norm(f"{p}.final_layer_norm", layer.res_ffn.norm)
    if model.cfg.norm == "pre":  # Pegasus's final norm of each stack
        out.norm("model.encoder.layer_norm", model.enc_norm)
        out.norm("model.decoder.layer_norm", model.dec_norm)
    bias = torch.zeros(1, model.vocab_size)
    if model.output is not None:  # the pieces the layer lacks: never written, as in mt
        bias.fill_(torch.finfo(torch.float32).min).index_fill_(1, model.output.ids, 0.0)
    out["final_logits_bias"] = bias
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def hf_model(model: Seq2Seq):
    """`model` as a Transformers model in eval mode, every weight loaded (strict)."""
    t = transformers_modules()
    refuse_unmapped(model.cfg)
    config = hf_config(model.cfg, model.vocab_size)
    kind = t.PegasusForConditionalGeneration if model.cfg.norm == "pre" else t.MarianMTModel
    hf = kind(config).eval()
    source = copy.deepcopy(model).float().cpu()  # `model` stays on its device and dtype
    hf.load_state_dict(hf_weights(source), strict=True)
    return hf


def write_tokenizer(tokenizer: Tokenizer, folder: Path, max_positions: int) -> None:
    """MarianTokenizer's files: the run's spm.model as source.spm and target.spm, vocab.json of every
    piece by id, and tokenizer_config.json naming the class and the specials."""
    tokenizer.save(folder / "source.spm")
    tokenizer.save(folder / "target.spm")
    vocab = {tokenizer.sp.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    specials = {i: tokenizer.sp.id_to_piece(i) for i in (PAD, UNK, EOS)}
    settings = {
        "tokenizer_class": "MarianTokenizer",
        "pad_token": specials[PAD],
        "unk_token": specials[UNK],
        "eos_token": specials[EOS],
        "model_max_length": max_positions - 1,
        "separate_vocabs": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=1), encoding="utf-8")


def readable(folder: Path) -> None:
    """Each file of `folder` readable as the umask allows: safetensors writes its file owner-only
    (0600), which a model folder meant for sharing should not be."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def refuse_existing(folder: Path) -> None:
    """A one-line RunDirError where the export's `folder` exists: called before anything is decoded."""
    if folder.exists():
        raise RunDirError(f"{folder}: already exists; remove it or give another --out")


def readable_split(cfg: DataConfig, split: str, scoring: bool) -> tuple[list[str], list[str]] | None:
    """(sources, references) of the run's `split`, or None where they cannot be read here (the corpus
    is elsewhere): the export is still written, and where `scoring` its card says it holds no scores."""
    try:
        return load_split(cfg, split)
    except (DataError, ConfigError) as e:
        if scoring:
            log.warning("%s split not read (%s): the model card will hold no scores", split, e)
        return None


def export_run(
    run: Path, config: RunConfig, tokenizer: Tokenizer, model: Seq2Seq, folder: Path, score: bool = False
) -> Path:
    """`mt export --format hf` of an opened run into `folder`, refused in one line first where `folder`
    exists or the model cannot be exported: the run's decoding (config.decode, as `mt tune` chose it)
    in generation_config.json, with its card (mt.hf.card), mt_config.yaml and mt_export.json (what was
    decided, for scripts). With `score` (minutes on Multi30k), its length penalty matched in
    Transformers' formula on val by mt's beam, and the written folder scored by its own generate on
    test. Written to a sibling folder first and renamed, so that a failed export leaves nothing."""
    refuse_existing(folder)
    refuse_unmapped(model.cfg)
    val, test = (readable_split(config.data, split, score) for split in ("val", "test"))
    exported = decided(model, tokenizer, config, score, val)
    exported["example"] = next((line for split in (test, val) if split for line in split[0] if line), "")
    part = folder.with_name(folder.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    try:
        write_model(model, tokenizer, exported["generation"], part)
        if score and test:
            exported["scores"] = generated_scores(part, "test", *test, config.bleu_tokenize)
        if (run / "config.yaml").is_file():  # as trained: `mt tune` chose its decoding after
            shutil.copyfile(run / "config.yaml", part / "mt_config.yaml")
        else:
            save_config(config, part / "mt_config.yaml")
        write_card(part, run, config, exported)
        write_text(part / "mt_export.json", json.dumps(exported, indent=1) + "\n")
        readable(part)
        part.rename(folder)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    return folder


def decided(model: Seq2Seq, tokenizer: Tokenizer, config: RunConfig, score: bool, val: tuple | None) -> dict:
    """mt_export.json's record of what the export decides: the generation config of the run's decoding
    (with `score`, its length penalty matched on `val` by mt's beam where val was read: `matched`) and
    its caveats."""
    decode, exported = config.decode, {"scored": score, "matched": None, "scores": None}
    if score and val and decode.beam > 1:
        exported["matched"] = matched(SearchRequest(model, tokenizer, val[0], config.data.max_len), decode)
        decode = replace(decode, length_penalty=exported["matched"]["penalty"])
    exported["generation"] = generation_config(decode, model.cfg.max_positions)
    exported["caveats"] = caveats(config.decode, model.cfg.max_positions)
    return exported


def matched(request: SearchRequest, decode: DecodeConfig) -> dict:
    """mt_export.json's `matched`: the penalty of Transformers' formula that ranks mt's beam's
    hypotheses of the request's lines (val) as mt's `decode` does on the most lines (mt.hf.generation),
    mt's own, and on how many of how many lines it does."""
    penalty, agree = matched_length_penalty(request, decode)
    return {"penalty": penalty, "mt": decode.length_penalty, "lines": agree, "of": len(request.lines)}


def write_model(model: Seq2Seq, tokenizer: Tokenizer, generation: dict, part: Path) -> None:
    """The Transformers files into `part`: weights as safetensors, config, generation_config.json
    (`generation`: mt.hf.generation) and tokenizer files."""
    hf = hf_model(model)
    hf.generation_config = transformers_modules().GenerationConfig(**generation)
    hf.save_pretrained(part, safe_serialization=True)
    write_tokenizer(tokenizer, part, model.cfg.max_positions)
