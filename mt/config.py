"""Run configuration: YAML -> frozen, typed dataclasses, validated at load time.

Every section is a dataclass; every field has a type, a default, and (where it matters) the allowed
choices or range in its metadata. Unknown keys, wrong types and out-of-range values raise
`ConfigError` with the full key path, which the CLI prints as one line (exit code 2).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mt.decode_config import DecodeConfig, decoding
from mt.plumbing.config_yaml import ALIASES, apply_overrides, read_with_bases, read_yaml
from mt.plumbing.errors import ConfigError
from mt.plumbing.files import write_text
from mt.plumbing.metrics import BEST_METRICS, PRIMARY
from mt.plumbing.schema import Mismatch, build, choice, within
from mt.plumbing.script import BLEU_TOKENIZERS, bleu_tokenizer


@dataclass(frozen=True)
class CleanConfig:
    """Rules for the training pairs, applied while binarizing (mt.training.corpus). Pairs with an empty
    side or more than data.max_len pieces are always dropped; these rules come on top."""

    apply: str = choice("auto", "auto", "always", "never")  # auto: `files` corpora (Multi30k is clean)
    # longer side / shorter side, in pieces, above which a pair goes (Multi30k: 26 of 29,000); 0 = off
    max_ratio: float = within(2.0, 0.0)
    duplicates: bool = True  # a pair seen earlier in the corpus (same text on both sides)
    copies: bool = True  # source equal to target
    # a side in the other side's language, told by the val files' words (mt.training.clean)
    languages: bool = True
    leaks: bool = True  # a source or target that is a line of the val or test files


# A key a resumed run may change (field metadata): it decides when to stop, log, save or validate, or
# how `mt translate` decodes, never what is learned nor what best.pt means (train.valid_beam is not one).
RESUMABLE = {"resumable": True}


# the languages of the corpora mt names (toy: mt.generated.toy's German, English and Chinese sides)
CORPUS_LANGUAGES = {"multi30k": ("de", "en"), "toy": ("de", "en", "zh"), "synthetic": ("de", "en")}


@dataclass(frozen=True)
class DataConfig:
    # toy and synthetic (mt.generated: the latter WMT-shaped, for GPU-sized benchmarks) are generated;
    corpus: str = choice("multi30k", "multi30k", "toy", "files", "synthetic")
    # multi30k: folder holding multi30k/ ("" = $MT_DATA_DIR, else download into data/);
    # files: folder holding {train,val,test}.{src_lang,tgt_lang}, plain or .gz
    dir: str = ""
    src_lang: str = "de"  # multi30k, toy, synthetic: CORPUS_LANGUAGES; files: the files' suffix
    tgt_lang: str = "en"
    synthetic_pairs: int = within(300_000, 1)  # synthetic: training pairs generated (mt.generated.synthetic)
    max_len: int = within(100, 1)  # training pairs with more pieces on either side are dropped
    # training only (subword regularisation): each BPE merge skipped with this probability; the pairs are
    # binarized bpe_views times so sampled, and epoch e trains on view e mod bpe_views. 0 = off
    bpe_dropout: float = within(0.0, 0.0, 0.9)
    bpe_views: int = within(8, 1)
    # training only: each pair also reversed, target to source (BiT, Ding et al. 2021), so the model
    # learns both directions; a later run starts from it with train.init_from and trains forward only
    both_directions: bool = False
    clean: CleanConfig = CleanConfig()


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int = within(8000, 16)
    # 0 = auto: 0.9995 for a rich character set (> 1,000 distinct Han/kana/Hangul in the BPE sample),
    # sentencepiece's advice for Chinese and Japanese; else 1.0 (mt.plumbing.script.tokenizer_settings)
    character_coverage: float = within(0.0, 0.0, 1.0, resumable=True)  # a resumed run keeps its spm.model
    sample_sentences: int = within(2_000_000, 1000)  # lines (both sides) BPE learns from: a seeded sample
    from_run: str = ""  # a run directory whose spm.model this run uses (no BPE is learned); "" = learn one


# The vocabulary's fixed ids, the contract between the tokenizer (which trains sentencepiece to them) and
# the model, its loss and its search: here, in the config every side reads, so the model's layer knows
# them without knowing the text's.
PAD, UNK, BOS, EOS = 0, 1, 2, 3


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = within(256, 8)
    n_heads: int = within(4, 1)
    layers: int = within(3, 1)  # encoder and decoder layers, unless these two say otherwise
    encoder_layers: int = within(0, 0)  # 0 = layers (a deep encoder costs once a sentence)
    decoder_layers: int = within(0, 0)  # 0 = layers (a shallow decoder: it runs once an output token)
    d_ff: int = within(1024, 8)
    dropout: float = within(0.1, 0.0, 0.99)  # embeddings and residual branches
    attention_dropout: float = within(0.0, 0.0, 0.99)  # on attention weights (forces SDPA's slow path)
    activation_dropout: float = within(0.0, 0.0, 0.99)  # inside the feed-forward block
    norm: str = choice("pre", "pre", "post")
    tie_embeddings: bool = True
    max_positions: int = within(512, 8)
    # target: the output layer, softmax and loss score only the pieces of the training corpus's target
    # side (and the specials), fixed when training starts and kept in the weights; the vocabulary, the
    # embeddings and the tokenizer stay joint. all: every piece of the joint vocabulary
    output_pieces: str = choice("all", "all", "target")

    @property
    def depth(self) -> tuple[int, int]:
        """(encoder layers, decoder layers)."""
        return self.encoder_layers or self.layers, self.decoder_layers or self.layers


@dataclass(frozen=True)
class TrainConfig:
    lr: float = within(1e-3, 0.0, lo_open=True)  # peak learning rate, reached after warmup
    warmup_steps: int = within(400, 1)
    # after warmup; linear: to 0 at the budget's end
    schedule: str = choice("inverse_sqrt", "inverse_sqrt", "linear")
    max_tokens: int = within(4096, 16)  # per batch: sentences x longest side, padding included
    # a training batch's sides padded up to a multiple of this (never past model.max_positions): the same
    # batches in fewer shapes (a CPU's bf16 kernels are made per shape: time, memory), at the padding's cost
    pad_multiple: int = within(1, 1)
    max_steps: int = within(100_000, 1, resumable=True)
    max_minutes: float = within(0.0, 0.0, resumable=True)  # wall-clock budget for the loop; 0 = none
    label_smoothing: float = within(0.1, 0.0, 0.99)
    # the share of max_steps trained with every dropout of the model off (model.dropout, attention_dropout,
    # activation_dropout), each at its rate after: a short budget learns fastest without it early and
    # needs it late (docs/multi30k-recipe, issue 103); 0 = on from the first update
    dropout_start: float = within(0.0, 0.0, 0.99)
    # tf32: fp32 with TF32 matmuls (CUDA); auto: bf16 where the device has it natively, else fp32
    precision: str = choice("fp32", "fp32", "tf32", "bf16", "fp16", "auto")
    device: str = choice("auto", "auto", "cpu", "cuda", resumable=True)
    # under torchrun; auto: nccl on GPUs, else gloo
    dist_backend: str = choice("auto", "auto", "nccl", "gloo", resumable=True)
    clip_norm: float = within(1.0, 0.0)  # 0 = no clipping
    accumulate: int = within(1, 1)  # batches per optimizer step
    # validations without a best_metric gain before stopping; 0 = off
    patience: int = within(0, 0, resumable=True)
    # what best.pt and patience follow: a headline metric of mt.plumbing.metrics in its direction, or val
    # loss down
    best_metric: str = choice(PRIMARY.key, *BEST_METRICS)
    # keep the model of the last N validations as ckpt-STEP.pt (for averaging)
    keep_last: int = within(0, 0, resumable=True)
    # at the end, write averaged.pt: the mean of the last N kept models
    average_last: int = within(0, 0, resumable=True)
    valid_every: int = within(500, 1, resumable=True)
    valid_beam: int = within(1, 1)  # beam of validation decoding, which best.pt is best at; fixed for a run
    # when training ends, choose decode.beam and length_penalty on val (`mt tune`)
    tune: bool = field(default=True, metadata=RESUMABLE)
    # also write last.pt every N steps; 0 = at validations only
    save_every: int = within(0, 0, resumable=True)
    log_every: int = within(50, 1, resumable=True)
    # also write metrics.jsonl's rows as TensorBoard scalars (extra: mt[tensorboard])
    tensorboard: bool = False
    # updates in a row with a non-finite loss before training stops
    max_nonfinite: int = within(5, 1, resumable=True)
    seed: int = 1
    threads: int = within(0, 0, resumable=True)  # torch CPU threads; 0 = torch's default
    # RUN[@best|last|averaged|FILE]: start from that run's weights and tokenizer, with a fresh optimizer,
    # step counter and schedule (fine-tuning); "" = random weights
    init_from: str = ""
    freeze: list[str] = field(default_factory=list)  # parts that keep the weights they start with: FREEZABLE


FREEZABLE = ("embeddings", "encoder", "decoder")  # train.freeze's parts (Seq2Seq.freeze)


@dataclass(frozen=True)
class EvalConfig:
    # BLEU's tokenizer; auto: sacreBLEU's choice for data.tgt_lang (zh: zh, ja: ja-mecab, ko: ko-mecab,
    # others 13a); where mecab is not installed char for ja, 13a for ko (mt.plumbing.script.bleu_tokenizer)
    bleu_tokenize: str = choice("auto", "auto", *BLEU_TOKENIZERS)


@dataclass(frozen=True)
class RunConfig:
    name: str = field(default="run", metadata=RESUMABLE)
    # the config file this one extends (YAML key `base:`, relative to the file); "" = none
    base: str = field(default="", metadata=RESUMABLE)
    data: DataConfig = DataConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = field(default=DecodeConfig(), metadata=RESUMABLE)  # how `mt translate` decodes
    eval: EvalConfig = EvalConfig()  # how translations are scored: validation, evaluate, tune

    @property
    def bleu_tokenize(self) -> str:
        """BLEU's tokenizer for this run's target language: eval.bleu_tokenize, auto resolved."""
        return bleu_tokenizer(self.eval.bleu_tokenize, self.data.tgt_lang)


def _typed(raw: Any) -> RunConfig:
    """A RunConfig from a mapping, every key and value checked (mt.plumbing.schema); a ConfigError
    names the key."""
    try:
        return build(RunConfig, raw, "", ALIASES)
    except Mismatch as e:
        raise ConfigError(str(e)) from None


def check_config(cfg: RunConfig) -> RunConfig:
    """Cross-field checks that no single field can make."""
    m = cfg.model
    if m.d_model % m.n_heads:
        raise ConfigError(f"model.d_model ({m.d_model}) must be divisible by model.n_heads ({m.n_heads})")
    if m.d_model % 2:
        raise ConfigError(f"model.d_model ({m.d_model}) must be even for sinusoidal positions")
    if cfg.data.corpus == "files" and not cfg.data.dir:
        raise ConfigError(
            "data.dir: data.corpus 'files' needs data.dir, a folder holding "
            "{train,val,test}.{src_lang,tgt_lang}"
        )
    for key in ("src_lang", "tgt_lang"):
        lang = getattr(cfg.data, key)
        known = CORPUS_LANGUAGES.get(cfg.data.corpus)
        if known and lang not in known:
            raise ConfigError(
                f"data.{key}: {lang!r} is not one of {', '.join(known)} (the {cfg.data.corpus} languages)"
            )
        if not lang.isidentifier():
            raise ConfigError(f"data.{key}: {lang!r} is not a file suffix like 'de'")
    if cfg.data.src_lang == cfg.data.tgt_lang:
        raise ConfigError(f"data.src_lang and data.tgt_lang are both {cfg.data.src_lang!r}")
    if cfg.train.device == "cpu":  # auto is checked once the device is known (mt.training.session)
        check_precision(cfg.train.precision, "cpu")
    decoding(DecodeConfig(), dataclasses.asdict(cfg.decode))  # n_best <= beam, in the config's terms
    _check_lineage(cfg.train, cfg.tokenizer)
    if cfg.train.dropout_start and not (m.dropout or m.attention_dropout or m.activation_dropout):
        raise ConfigError(
            f"train.dropout_start: {cfg.train.dropout_start} starts no dropout (model.dropout, "
            "attention_dropout and activation_dropout are 0); set one of them, or leave it 0"
        )
    if cfg.data.max_len + 2 > m.max_positions:
        raise ConfigError(
            f"data.max_len ({cfg.data.max_len}) + 2 exceeds model.max_positions ({m.max_positions})"
        )
    return cfg


def check_precision(precision: str, device_type: str) -> None:
    """fp16 and tf32 are CUDA's."""
    if precision in ("fp16", "tf32") and device_type != "cuda":
        raise ConfigError(f"train.precision: {precision} needs a CUDA device; use bf16 or fp32 on CPU")


def _check_lineage(t: TrainConfig, tokenizer: TokenizerConfig) -> None:
    """train.freeze names parts of a model that starts from another run's (mt.run.parent)."""
    for part in t.freeze:
        if part not in FREEZABLE:
            raise ConfigError(f"train.freeze: {part!r} is not one of {', '.join(FREEZABLE)}")
    if t.freeze and not t.init_from:
        raise ConfigError("train.freeze: frozen parts of a new model stay random; set train.init_from")
    if set(t.freeze) == set(FREEZABLE):
        whole = ", ".join(FREEZABLE)
        raise ConfigError(f"train.freeze: {whole} is the whole model; leave one part to train")
    if t.init_from and tokenizer.from_run:
        raise ConfigError(
            "tokenizer.from_run: train.init_from already brings its run's tokenizer; "
            "remove tokenizer.from_run"
        )


def config_from_dict(raw: dict) -> RunConfig:
    return check_config(_typed(raw))


def load_config(path: str | Path, overrides: list[str] = ()) -> RunConfig:
    """Read a YAML config (merged over its `base:` chain), apply `--set` overrides, validate.

    The name defaults to the file's stem. An error names where the bad value came from: the file, or
    the `--set` that brought it."""
    path = Path(path)
    raw = read_with_bases(path)
    raw.setdefault("name", path.stem)
    try:
        _typed(raw)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    for item in overrides:  # each on its own, so that a bad key or value is blamed on the flag
        try:
            _typed(apply_overrides(copy.deepcopy(raw), [item]))
        except ConfigError as e:
            raise ConfigError(f"--set {item}: {e}") from None
    try:
        return config_from_dict(apply_overrides(raw, list(overrides)))
    except ConfigError as e:  # a cross-field check
        where = f"{path} with --set {' '.join(overrides)}" if overrides else str(path)
        raise ConfigError(f"{where}: {e}") from None


def read_saved_config(path: str | Path) -> RunConfig:
    """A run's DIR/config.yaml, the resolved config `save_config` wrote: its `base:` only records where
    the config came from, so it is not followed."""
    raw = read_yaml(Path(path))
    try:
        return config_from_dict(raw)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def config_to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)


def save_config(cfg: RunConfig, path: str | Path) -> None:
    write_text(path, yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
