"""An mt model written as a CTranslate2 model directory, and what checks that one matches it.

mt's Transformer is CTranslate2's standard TransformerSpec, one to one:
    src_embed, tgt_embed, out_proj    the one tied matrix (CTranslate2 stores equal arrays once)
    x * sqrt(D) + positions           scale_embeddings, with mt's own sinusoid table (CTranslate2's
                                      built-in one lays sin and cos out differently)
    qkv_proj; q_proj, kv_proj         self-attention's fused Q, K, V linear; cross-attention's query,
                                      then its fused K/V, in mt's order (K then V)
    ffn.0, ffn.3, res_*.norm          FeedForwardSpec linear_0 and linear_1, each block's LayerNorm
                                      (pre-norm: and the stack's final norm; post-norm has none)
    </s> after every source           add_source_eos; decoding starts from <s>
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import torch

from mt.config import BOS, PAD, ModelConfig
from mt.model import Seq2Seq
from mt.plumbing.engine_fields import ByMt, Carried, Unsupported, carried, first_unmapped
from mt.plumbing.errors import ConfigError, RunDirError
from mt.plumbing.files import write_failure
from mt.tokenizer import Tokenizer

NOTE = "mt_export.json"  # beside CTranslate2's files: the source checkpoint's sha256, mt's config

# How CTranslate2 follows each option, one entry a field of ModelConfig (MODEL_FIELDS) or DecodeConfig
# (engine.DECODE_FIELDS), of mt.plumbing.engine_fields' kinds: the argument of CTranslate2's that carries
# it (the export builds its spec, the engine its calls, from these entries), what mt does around
# CTranslate2 for it, or its refusal. A field left out, or refused, is refused in one line when set
# (`unmapped`): never silently ignored.


MODEL_FIELDS = {
    "d_model": ByMt("the weights' shapes"),
    "n_heads": Carried("num_heads", lambda cfg: cfg.n_heads, "spec"),
    "layers": Carried("num_layers", lambda cfg: cfg.depth, "spec"),
    "encoder_layers": Carried("num_layers", lambda cfg: cfg.depth, "spec"),
    "decoder_layers": Carried("num_layers", lambda cfg: cfg.depth, "spec"),
    "d_ff": ByMt("the feed-forward weights' shapes"),
    "dropout": ByMt("training only"),
    "attention_dropout": ByMt("training only"),
    "activation_dropout": ByMt("training only"),
    "norm": Carried("pre_norm", lambda cfg: cfg.norm == "pre", "spec"),  # and the stacks' final norms
    "tie_embeddings": ByMt("each matrix written (CTranslate2 stores equal arrays once)"),
    "max_positions": ByMt("the position table's rows"),
    "output_pieces": ByMt("target: the target vocabulary, decoder embeddings and projection: their rows"),
}


def unmapped(config, table: dict, section: str) -> None:
    """A one-line ConfigError for the first field of dataclass `config` that differs from its default
    and that `table` refuses or does not name: CTranslate2 would not do what it asks."""
    if found := first_unmapped(config, table):
        name, value, entry = found
        if isinstance(entry, Unsupported):
            reason = f"is refused by the ctranslate2 engine ({entry.why}); decode with the torch engine"
        else:
            reason = (
                "is not mapped to CTranslate2 (mt/ct2/), which would ignore it; decode with the torch "
                f"engine, or map it in mt.ct2's {section} table"
            )
        raise ConfigError(f"{section}.{name}: {value!r} {reason}", name)


def ctranslate2():
    """The ctranslate2 package, or a one-line ConfigError saying how to install it."""
    try:
        import ctranslate2 as ct2
    except ImportError:
        raise ConfigError(
            "the ctranslate2 engine needs the CTranslate2 package: pip install -e '.[ctranslate2]'", "engine"
        ) from None
    return ct2


def model_spec(model: Seq2Seq, tokenizer: Tokenizer):
    """`model`'s weights as a CTranslate2 TransformerSpec (float32, before any quantization)."""
    from ctranslate2.specs import TransformerSpec

    cfg = model.cfg
    spec = TransformerSpec.from_config(**carried(cfg, MODEL_FIELDS, "spec"))
    spec.config.layer_norm_epsilon = model.encoder[0].res_attn.norm.eps
    rows = slice(None) if model.output is None else model.output.ids  # the target side's pieces
    for side, embed, kept in (
        (spec.encoder, model.src_embed, slice(None)),
        (spec.decoder, model.tgt_embed, rows),
    ):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = _array(embed.weight[kept])
        side.scale_embeddings = True  # by sqrt(D), as mt does
        side.position_encodings.encodings = _array(model.positions)  # (P, D): position 0 first
    spec.decoder.projection.weight = _array(model.out_proj.weight[rows])
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder):
        _attention(layer_spec.self_attention, layer.self_attn, layer.res_attn.norm, self_attention=True)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder):
        _attention(layer_spec.self_attention, layer.self_attn, layer.res_self.norm, self_attention=True)
        _attention(layer_spec.attention, layer.cross_attn, layer.res_cross.norm, self_attention=False)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
    if cfg.norm == "pre":
        _norm(spec.encoder.layer_norm, model.enc_norm)
        _norm(spec.decoder.layer_norm, model.dec_norm)
    pieces = vocabulary(tokenizer)
    spec.register_source_vocabulary(pieces)
    # the decoder reads and writes only its target pieces; the engine maps them back by name
    spec.register_target_vocabulary(pieces if model.output is None else [pieces[i] for i in rows.tolist()])
    spec.config.add_source_eos = True
    spec.config.decoder_start_token = pieces[BOS]
    return spec


def _array(t: torch.Tensor):
    """A copy: CTranslate2 quantizes the arrays of a spec in place, and must not quantize the model."""
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _attention(spec, attn, norm: torch.nn.LayerNorm, self_attention: bool) -> None:
    """mt's attention projections as CTranslate2's fused linears (the same layout: Q, K, V rows)."""
    if self_attention:  # one (3D, D) linear: Q, K, V
        _linear(spec.linear[0], attn.qkv_proj.weight, attn.qkv_proj.bias)
    else:  # the query from the decoder, the fused K/V from the encoder's output
        _linear(spec.linear[0], attn.q_proj.weight, attn.q_proj.bias)
        _linear(spec.linear[1], attn.kv_proj.weight, attn.kv_proj.bias)
    _linear(spec.linear[-1], attn.out_proj.weight, attn.out_proj.bias)
    _norm(spec.layer_norm, norm)


def _ffn(spec, ffn: torch.nn.Sequential, norm: torch.nn.LayerNorm) -> None:
    first, second = (m for m in ffn if isinstance(m, torch.nn.Linear))  # linear, ReLU, dropout, linear
    _linear(spec.linear_0, first.weight, first.bias)
    _linear(spec.linear_1, second.weight, second.bias)
    _norm(spec.layer_norm, norm)


def weights_sha256(model: Seq2Seq) -> str:
    """A fingerprint of the model's weights (names, shapes, float32 bytes): what an export is of."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().float().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def export_model(model: Seq2Seq, tokenizer: Tokenizer, out: Path, quantization: str, note: dict) -> None:
    """Write the CTranslate2 model directory `out`, with the run's spm.model and NOTE (`note` and the
    weights' fingerprint) beside its files: built in a temporary folder next to it, then renamed into
    place, so `out` is whole or as it was."""
    ctranslate2()
    unmapped(model.cfg, MODEL_FIELDS, "model")
    spec = model_spec(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=None if quantization == "none" else quantization)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as e:
        raise write_failure(out, e) from None
    old = out.with_name(f".{out.name}.old")
    try:
        spec.save(str(building))
        note = {**note, "quantization": quantization, "weights_sha256": weights_sha256(model)}
        (building / NOTE).write_text(json.dumps(note, indent=2) + "\n")
        (building / "spm.model").write_bytes(tokenizer.proto)  # the directory alone can tokenize
        if out.exists():
            out.rename(old)
        try:
            building.rename(out)
        except OSError:
            if old.exists():  # the previous export back in its place
                old.rename(out)
            raise
    except OSError as e:
        raise write_failure(out, e) from None
    finally:
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def read_note(folder: Path) -> dict:
    """DIR/ct2's NOTE, checked; a missing or damaged export is a one-line RunDirError."""
    again = f"export it with `mt export --run {folder.parent}`"
    if not (folder / "model.bin").exists() or not (folder / NOTE).exists():
        raise RunDirError(f"{folder}: no CTranslate2 export (model.bin and {NOTE}); {again}")
    try:
        note = json.loads((folder / NOTE).read_text())
        ModelConfig(**note["config"]["model"])
        str(note["weights_sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        raise RunDirError(f"{folder}/{NOTE}: damaged; {again}") from None
    return note


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The pieces by id, as CTranslate2 names them (its padding token is <blank>)."""
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    return ["<blank>" if i == PAD else piece for i, piece in enumerate(pieces)]
