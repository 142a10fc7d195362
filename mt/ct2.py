"""CTranslate2, the C++ inference engine, as a second way to decode an mt model.

`export_model` writes a model as a CTranslate2 model directory; `Ct2Model` loads one and searches with
it, answering as `decode.search` does (mt's `Hypothesis` lists, scored by mt's GNMT penalty), so that
`translate.search_lines` serves translate, evaluate and serve with either engine. CTranslate2 is an
optional extra (`pip install 'mt[ctranslate2]'`); without it only this engine is refused.

mt's Transformer is CTranslate2's standard TransformerSpec, one to one:
    src_embed, tgt_embed, out_proj    the one tied matrix (CTranslate2 stores equal arrays once)
    x * sqrt(D) + positions           scale_embeddings, with mt's own sinusoid table (CTranslate2's
                                      built-in one lays sin and cos out differently)
    qkv_proj; q_proj, kv_proj         self-attention's fused Q, K, V linear; cross-attention's query,
                                      then its fused K/V, in mt's order (K then V)
    ffn.0, ffn.3, res_*.norm          FeedForwardSpec linear_0 and linear_1, each block's LayerNorm
                                      (pre-norm: and the stack's final norm; post-norm has none)
    </s> after every source           add_source_eos; decoding starts from <s>

Scores: CTranslate2 ranks finished hypotheses by logprob / length^alpha. `Ct2Model` asks it for the
raw log-probability (RAW_SCORES below) of all `beam` finished hypotheses and ranks them by mt's
logprob / ((5 + length) / 6)^alpha, eos counted, so 1-best and n-best lists are mt's rankings. Both
searches take eos only from the K best of 2K candidates and stop a sentence at K finished, so they
agree hypothesis for hypothesis; they can still differ by float rounding (int8 most) and where a
batch's length limit (CTranslate2 takes one per batch) is longer than a line's own (cut and rescored).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import torch

from mt.config import ModelConfig
from mt.decode import Hypothesis
from mt.decode_config import DecodeConfig
from mt.errors import ConfigError, RunDirError
from mt.files import write_failure
from mt.model import Seq2Seq
from mt.tokenizer import BOS, EOS, PAD, Tokenizer

NOTE = "mt_export.json"  # beside CTranslate2's files: the source checkpoint's sha256, mt's config
# CTranslate2's length penalty when mt ranks: any nonzero one makes its beam stop a sentence once `beam`
# hypotheses are finished, as mt's does (at 0 it goes on until the top beam ends too), and
# length ** 1e-30 == 1.0 in float, so the scores it returns stay raw log-probabilities
RAW_SCORES = 1e-30


# How CTranslate2 follows each option, one entry a field. `unmapped` refuses any field left out of these
# tables that is not at its default, so a new ModelConfig or DecodeConfig field is mapped here or
# refused in one line, never silently ignored by this engine.
MODEL_FIELDS = {
    "d_model": "the spec's weight shapes",
    "n_heads": "TransformerSpec.from_config",
    "layers": "TransformerSpec.from_config (through ModelConfig.depth)",
    "encoder_layers": "TransformerSpec.from_config (through ModelConfig.depth)",
    "decoder_layers": "TransformerSpec.from_config (through ModelConfig.depth)",
    "d_ff": "the feed-forward weights' shapes",
    "dropout": "training only",
    "attention_dropout": "training only",
    "activation_dropout": "training only",
    "norm": "pre_norm, and the stacks' final norms",
    "tie_embeddings": "each matrix written (CTranslate2 stores equal arrays once)",
    "max_positions": "the position table's rows",
}
DECODE_FIELDS = {
    "beam": "beam_size",
    "n_best": "num_hypotheses, ranked by mt (Ct2Model._ranked)",
    "length_penalty": "mt's GNMT ranking of raw log-probabilities (RAW_SCORES)",
    "max_len_a": "max_decoding_length, each line's limit cut by mt",
    "max_len_b": "max_decoding_length, each line's limit cut by mt",
    "no_repeat_ngram": "no_repeat_ngram_size",
    "batch_tokens": "mt's batches (translate.search_lines)",
    "engine": "this engine",
    "compute_type": "compute_type, as the model loads",
    "sample": "refused for this engine by decode_config (one random stream a process)",
    "temperature": "with sample only",
    "seed": "with sample only",
    "split_sentences": "mt.sentences, before and after the search",
}


def unmapped(config, mapped: dict[str, str], section: str) -> None:
    """A one-line ConfigError for the first field of dataclass `config` that `mapped` does not name
    and that differs from its default: CTranslate2 would ignore it."""
    default = type(config)()
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name not in mapped and value != getattr(default, f.name):
            raise ConfigError(
                f"{section}.{f.name}: {value!r} is not mapped to CTranslate2 (mt/ct2.py), which would "
                f"ignore it; decode with the torch engine, or map it in mt.ct2's {section} table",
                f.name,
            )


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
    spec = TransformerSpec.from_config(cfg.depth, cfg.n_heads, pre_norm=cfg.norm == "pre")
    spec.config.layer_norm_epsilon = model.encoder[0].res_attn.norm.eps
    for side, embed in ((spec.encoder, model.src_embed), (spec.decoder, model.tgt_embed)):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = _array(embed.weight)
        side.scale_embeddings = True  # by sqrt(D), as mt does
        side.position_encodings.encodings = _array(model.positions)  # (P, D): position 0 first
    spec.decoder.projection.weight = _array(model.out_proj.weight)
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
    spec.register_target_vocabulary(pieces)
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


class Ct2Model:
    """A CTranslate2 export loaded for search. `translate.search_lines` uses it as it uses a Seq2Seq:
    `cfg` is the exported model's ModelConfig, `search` answers as `decode.search` does, and `eval`
    and `train` keep the torch model's calls working."""

    training = False

    def __init__(
        self,
        folder: Path,
        model: Seq2Seq,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device,
        threads: tuple[int, int] = (1, 0),
    ):
        """`threads`: (translators, threads each); 0 threads = CTranslate2's default. Several
        one-thread translators decode the batches of a file side by side (`search_groups`)."""
        ct2, note = ctranslate2(), read_note(folder)
        unmapped(model.cfg, MODEL_FIELDS, "model")
        unmapped(decode, DECODE_FIELDS, "decode")
        if note["weights_sha256"] != weights_sha256(model):
            raise RunDirError(
                f"{folder}: exported from other weights than the checkpoint asked for; export it again "
                f"with `mt export --run {folder.parent} --checkpoint ...`"
            )
        try:
            self.translator = ct2.Translator(
                str(folder),
                torch.device(device).type,
                compute_type=decode.compute_type,
                inter_threads=threads[0],
                intra_threads=threads[1],
            )
        except (RuntimeError, ValueError) as e:  # a damaged model.bin, or a type this device lacks
            reason = (str(e).splitlines() or [""])[0][:120]
            raise RunDirError(f"{folder}: CTranslate2 cannot load it ({reason})") from None
        self.cfg, self.folder, self.threads = model.cfg, folder, threads
        self.pieces = vocabulary(tokenizer)
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}

    def eval(self) -> Ct2Model:
        return self

    def train(self, mode: bool = True) -> Ct2Model:
        return self

    def search_groups(
        self, batches: list[tuple[list[list[int]], list[list[int]]]], cfg: DecodeConfig
    ) -> list[list[list[Hypothesis]]]:
        """`search` of each batch of (sources, forced prefixes), all submitted at once: translators
        decode them side by side."""
        unmapped(cfg, DECODE_FIELDS, "decode")
        pending = [self._submit(parts, prefixes, cfg) for parts, prefixes in batches]
        return [self._collect(*submitted, cfg) for submitted in pending]

    def search(
        self, parts: list[list[int]], cfg: DecodeConfig, prefixes: list[list[int]] | None = None
    ) -> list[list[Hypothesis]]:
        """cfg.n_best hypotheses for each source (piece ids without eos), ranked by mt's GNMT score,
        each starting with its forced prefix where one is given (CTranslate2's target_prefix).
        CTranslate2 takes one length limit per batch: an output longer than its own a * S + b limit
        is cut there, as mt's search stops it, and its cut pieces are scored again."""
        return self.search_groups([(parts, prefixes or [[] for _ in parts])], cfg)[0]

    def _submit(self, parts: list[list[int]], prefixes: list[list[int]], cfg: DecodeConfig) -> tuple:
        cap = self.cfg.max_positions - 1
        limits = [  # mt's: a * S + b, or room for the prefix and b more (decode.prefix_limits)
            min(max(int(cfg.max_len_a * (len(ids) + 1) + cfg.max_len_b), len(p) + cfg.max_len_b), cap)
            for ids, p in zip(parts, prefixes)
        ]
        sources = [[self.pieces[i] for i in ids] for ids in parts]
        forced = [[self.pieces[i] for i in p] or None for p in prefixes] if any(prefixes) else None
        pending = self.translator.translate_batch(
            sources,
            forced,
            asynchronous=True,
            beam_size=cfg.beam,
            num_hypotheses=cfg.beam,  # every finished hypothesis, to rank by mt's penalty
            length_penalty=RAW_SCORES,
            return_scores=True,
            return_end_token=True,
            max_input_length=0,
            min_decoding_length=0,
            max_decoding_length=max(limits),
            no_repeat_ngram_size=cfg.no_repeat_ngram,
        )
        return sources, forced, limits, pending

    def _collect(
        self, sources: list, forced: list | None, limits: list[int], pending: list, cfg: DecodeConfig
    ) -> list[list[Hypothesis]]:
        found = [
            [self._cut(tokens, logprob, limit) for tokens, logprob in zip(r.hypotheses, r.scores)]
            for r, limit in zip((p.result() for p in pending), limits)
        ]
        led = [i for i, prefix in enumerate(forced or []) if prefix]
        if led:  # CTranslate2 scores what follows a forced prefix: add the prefix's own log-probability
            for i, r in zip(
                led, self.translator.score_batch([sources[i] for i in led], [forced[i] for i in led])
            ):
                lead = sum(r.log_probs[:-1])
                found[i] = [(ids, ended, None if lp is None else lp + lead) for ids, ended, lp in found[i]]
        cut = [(i, j) for i, hyps in enumerate(found) for j, (_, _, lp) in enumerate(hyps) if lp is None]
        if cut:  # the cut pieces' log-probability: scored without the eos that score_batch adds
            targets = [[self.pieces[t] for t in found[i][j][0]] for i, j in cut]
            for (i, j), r in zip(cut, self.translator.score_batch([sources[i] for i, _ in cut], targets)):
                found[i][j] = (found[i][j][0], False, sum(r.log_probs[:-1]))
        return [self._ranked(hyps, cfg) for hyps in found]

    def _cut(self, tokens: list[str], logprob: float, limit: int) -> tuple[list[int], bool, float | None]:
        """(ids without eos, whether eos ended them, their log-probability; None: cut, to score again)."""
        ids = [self.ids[piece] for piece in tokens]
        if len(ids) <= limit:
            ended = bool(ids) and ids[-1] == EOS
            return (ids[:-1] if ended else ids), ended, logprob
        return ids[:limit], False, None

    def _ranked(self, found: list[tuple[list[int], bool, float]], cfg: DecodeConfig) -> list[Hypothesis]:
        hyps = []
        for ids, ended, logprob in found:  # greedy's score is its log-probability, beam's GNMT's, as mt's
            penalty = ((5 + len(ids) + ended) / 6) ** cfg.length_penalty if cfg.beam > 1 else 1.0
            hyps.append(Hypothesis(ids, logprob / penalty, logprob))
        return sorted(hyps, key=lambda h: -h.score)[: cfg.n_best]


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The pieces by id, as CTranslate2 names them (its padding token is <blank>)."""
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    return ["<blank>" if i == PAD else piece for i, piece in enumerate(pieces)]
