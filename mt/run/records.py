"""The records a run directory holds, each a dataclass checked by mt.plumbing.schema (config's validator)
before a reader reads a field.

    card.json        Card             what a run was and scored (mt.run.card); results.KEY is a Result
    eval-KEY.json    Result           one evaluation (mt.evaluate): the card's results.KEY
    metrics.jsonl    METRICS_ROWS     one JSON object a line: a log window, a validation or a skipped update
    *.pt             Checkpoint       mt.run.progress's: a checkpoint's keys and its counters, `Progress`
    config.yaml      mt.config's RunConfig, read by its loader (`read_saved_config`)

The JSON records are `open_keys` (a newer mt may write more) and read, once checked, as the mappings
they are: `update_card` merges a card key by key, keeping keys it does not know. A field with a default
of None may be missing; a reader reads it with `.get`. The records that hold scores take their fields
from mt.plumbing.metrics's table (`headline_fields`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, ClassVar

from mt.decode_config import TUNED, DecodeConfig
from mt.plumbing.errors import RunDirError
from mt.plumbing.metrics import HEADLINE, METRICS, PRIMARY
from mt.plumbing.schema import Mismatch, build, fields_of, within


def problem(cls: type, record: Any) -> str:
    """How `record` departs from dataclass `cls`, naming the first key that does ("" = it does not):
    "results.test.beam is missing", "training.steps: expected int, got str '3'"."""
    try:
        build(cls, record)
    except Mismatch as e:
        return str(e)
    return ""


def require(record: Any, cls: type, path: str | Path, fix: str) -> dict:
    """`record` if it fits `cls`; else a one-line RunDirError naming the file, the key and `fix`."""
    found = problem(cls, record)
    if found:
        raise RunDirError(f"{path}: damaged ({found}); {fix}")
    return record


# ---- eval-KEY.json and the card ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """A Result's fields but its scores."""

    open_keys: ClassVar[bool] = True
    beam: int = within(lo=1)
    length_penalty: float = within(lo=0)
    sentences: int = within(lo=0)
    refs_sha256: str
    hyp_file: str  # names of files in the run directory
    ref_file: str
    split: str = None
    checkpoint: str = None
    length_ratio: float = None
    engine: str = None  # where not torch: ctranslate2, and its compute_type
    compute_type: str = None
    ensemble: list[str] = None  # the runs of an ensemble, this one first
    decode: DecodeConfig = None  # every decoding option it was made with (absent in the oldest results)


def score_fields() -> list[tuple[str, type, Any]]:
    """KEY (a float) and KEY_signature (a str) for each metric in mt.plumbing.metrics: required for the ones
    every result has had (Metric.always); a result written before a later metric may lack it."""
    fields = []
    for m in METRICS:
        may_lack = {} if m.always else {"default": None}
        fields += [(m.key, float, field(**may_lack)), (f"{m.key}_signature", str, field(**may_lack))]
    return fields


def headline_fields(pattern: str, required: tuple[str, ...] = ()) -> list[tuple[str, type, Any]]:
    """A float field PATTERN.format(KEY) for each headline metric of mt.plumbing.metrics (val_bleu,
    best_val_chrf): required for the keys in `required`, else None or absent (a record written before a
    later metric)."""
    return [
        (pattern.format(m.key), float, field())
        if m.key in required
        else (pattern.format(m.key), float | None, None)
        for m in HEADLINE
    ]


# The records that hold scores take their score fields from the metric table, so that a new metric is
# checked everywhere it is written with no change here: one evaluation (eval-KEY.json, the card's
# results.KEY), a setting `mt tune` tried, a validation row, the training's best.
Result = make_dataclass("Result", score_fields(), bases=(Evaluation,), frozen=True, kw_only=True)


@dataclass(frozen=True, kw_only=True)
class CardConfig:
    open_keys: ClassVar[bool] = True
    name: str
    hash: str
    base: str
    differences: dict = None


@dataclass(frozen=True, kw_only=True)
class Code:
    open_keys: ClassVar[bool] = True
    git_commit: str = None
    dirty: bool | None = None
    recorded_by: str = None


@dataclass(frozen=True, kw_only=True)
class Hardware:
    open_keys: ClassVar[bool] = True
    device: str = None
    gpu: str | None = None
    processes: int = None
    cpu: str = None
    cpu_count: int | None = None
    threads: int = None
    torch: str = None


@dataclass(frozen=True, kw_only=True)
class _Training:
    """As card.training_record writes it; rebuilt_from: last.pt, where `mt evaluate` rebuilt the card."""

    open_keys: ClassVar[bool] = True
    steps: int = within(None, lo=0)
    epochs: int = within(None, lo=0)
    wall_s: float | None = None
    train_s: float | None = None
    tokens_per_s: float = None
    multiply_adds: float | None = None  # the training's matmuls, forward and backward (mt.training.compute)
    pipeline_multiply_adds: float | None = None  # and a distilled corpus's teacher's (mt.training.compute)
    best_step: int | None = None
    best_metric: str = None
    best_val_loss: float | None = None  # and best_val_KEY of each headline metric (headline_fields)
    valid_beam: int = None
    nonfinite_skipped: int = None
    fp16_overflows: int = None
    stopped: str = None
    rebuilt_from: str = None


Training = make_dataclass(
    "Training", headline_fields("best_val_{}"), bases=(_Training,), frozen=True, kw_only=True
)


@dataclass(frozen=True, kw_only=True)
class Origin:
    """Where a run's weights (card `parent`) or tokenizer (`tokenizer_from`) came from: mt.run.parent."""

    open_keys: ClassVar[bool] = True
    run: str
    checkpoint: str = None  # parent only: the file in `run`
    sha256: str  # of that checkpoint, or of the spm.model


@dataclass(frozen=True, kw_only=True)
class TokenizerSettings:
    """What joint BPE was learned with for the text's script, and why
    (mt.plumbing.script.tokenizer_settings)."""

    open_keys: ClassVar[bool] = True
    character_coverage: float = within(lo=0.0, hi=1.0)
    normalization: str = None
    chosen_by: str


@dataclass(frozen=True, kw_only=True)
class Cleaning:
    """What binarizing the training pairs kept, and removed by each rule (mt.training.corpus.Cleaner)."""

    open_keys: ClassVar[bool] = True
    pairs_read: int = within(lo=0)
    kept: int = within(lo=0)
    removed: dict[str, int]
    lines: str  # the file in the run listing each removed pair's line number and rule


@dataclass(frozen=True, kw_only=True)
class _Tried:
    """One decoding setting `mt tune` tried on val (mt.training.tuning), with its headline scores and
    the options it sets (`tuned_fields`)."""

    open_keys: ClassVar[bool] = True
    length_ratio: float
    seconds: float = None


def tuned_fields() -> list[tuple[str, type, Any]]:
    """The options a tried setting holds (decode_config.TUNED), each typed and ranged as DecodeConfig's
    field: beam and length penalty always, MBR's and reranking's where `mt tune` tried them (a card
    tuned before them has none)."""
    found = []
    for key in TUNED:
        f, kind = fields_of(DecodeConfig)[key]
        default = dataclasses.MISSING if key in ("beam", "length_penalty") else None
        found.append((key, kind, field(default=default, metadata=f.metadata)))
    return found


ALWAYS_SCORED = tuple(m.key for m in HEADLINE if m.always)
Tried = make_dataclass(
    "Tried",
    tuned_fields() + headline_fields("{}", ALWAYS_SCORED),
    bases=(_Tried,),
    frozen=True,
    kw_only=True,
)


@dataclass(frozen=True, kw_only=True)
class Tuning:
    """`mt tune`'s choice of the run's decoding: the settings tried and the best (mt.training.tuning)."""

    open_keys: ClassVar[bool] = True
    split: str
    checkpoint: str
    checkpoint_sha256: str
    chosen: Tried
    tried: list[Tried]


@dataclass(frozen=True, kw_only=True)
class Teacher:
    """Who translated a distilled corpus: the card's `teacher` of a student trained on it."""

    run: str
    checkpoint: str  # its file name in the run (best.pt)
    sha256: list[str]  # of that checkpoint, then of each ensemble member's
    ensemble: list[str]
    name: str  # the decoding, as an evaluation is named (train-beam5)
    translate_s: float = None
    references: bool = False  # the original pairs follow the teacher's (absent before --with-references)
    # mt.training.compute: the teacher's runs' pipelines (their cards'), and its translating of the sources
    pipeline_multiply_adds: float | None = None
    translate_multiply_adds: float | None = None


@dataclass(frozen=True, kw_only=True)
class TeacherFile(Teacher):
    """teacher.json, written last in a distilled corpus folder (mt.distill): the teacher, its decoding
    settings, and each file's sha256, checked when the folder is reused."""

    decode: DecodeConfig
    lines: int = within(lo=0)
    files: dict[str, str]  # file name -> sha256
    resumed_at: int = within(0, lo=0)  # the lines a killed distillation had already written


@dataclass(frozen=True, kw_only=True)
class Card:
    open_keys: ClassVar[bool] = True
    config: CardConfig
    parameters: int = within(lo=0)
    precision: str = None
    code: Code = None
    hardware: Hardware = None
    training: Training = None
    results: dict[str, Result] = None
    parent: Origin = None
    tokenizer_from: Origin = None
    tokenizer: TokenizerSettings = None  # a tokenizer learned here: its settings for the script
    cleaning: Cleaning = None
    teacher: Teacher = None  # a student's: what translated its distilled corpus (mt.run.parent.teacher_of)
    tuning: Tuning = None


# ---- metrics.jsonl -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LogRow:
    open_keys: ClassVar[bool] = True
    step: int = within(lo=0)
    epoch: int
    loss: float
    nll: float
    lr: float
    tokens_per_s: float
    elapsed_s: float


@dataclass(frozen=True, kw_only=True)
class _ValidationRow:
    open_keys: ClassVar[bool] = True
    step: int = within(lo=0)
    elapsed_s: float
    val_loss: float = None
    val_nll: float = None
    val_ppl: float = None
    valid_beam: int = None


# a validation row is marked by the primary metric's score, which every one holds
ValidationRow = make_dataclass(
    "ValidationRow",
    headline_fields("val_{}", (PRIMARY.key,)),
    bases=(_ValidationRow,),
    frozen=True,
    kw_only=True,
)


@dataclass(frozen=True, kw_only=True)
class SkippedRow:
    open_keys: ClassVar[bool] = True
    step: int = within(lo=0)
    skipped_update: str
    nonfinite_total: int = None


# marking key -> row
METRICS_ROWS = {"loss": LogRow, f"val_{PRIMARY.key}": ValidationRow, "skipped_update": SkippedRow}


def metrics_row_problem(row) -> str:
    """How a metrics.jsonl row departs from the rows mt writes ("" = it does not)."""
    kinds = [key for key in METRICS_ROWS if isinstance(row, dict) and key in row]
    if not isinstance(row, dict) or not kinds:
        what = "an object" if isinstance(row, dict) else f"a JSON {type(row).__name__}"
        return f"{what} with none of {', '.join(METRICS_ROWS)}"
    return next((found for found in (problem(METRICS_ROWS[k], row) for k in kinds) if found), "")
