"""The records a run directory holds, each a dataclass checked by mt.plumbing.schema (config's validator)
before a reader reads a field.

    card.json        Card             what a run was and scored (mt.run.card); results.KEY is a Result
    eval-KEY.json    Result           one evaluation (mt.evaluate): the card's results.KEY
    metrics.jsonl    METRICS_ROWS     one JSON object a line: a log window, a validation or a skipped update
    *.pt             Checkpoint       a checkpoint's metadata (run.checkpoint); its counters are a `Progress`
    config.yaml      mt.config's RunConfig, read by its loader (`read_saved_config`)

The JSON records are `open_keys` (a newer mt may write more) and read, once checked, as the mappings
they are: `update_card` merges a card key by key, keeping keys it does not know. A field with a default
of None may be missing; a reader reads it with `.get`. `Progress` is built from a checkpoint, every
field required.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from mt.decode_config import DecodeConfig
from mt.metrics import BEST_METRICS, METRICS, improves
from mt.plumbing.errors import RunDirError
from mt.plumbing.schema import Mismatch, build, within


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
    """KEY (a float) and KEY_signature (a str) for each metric in mt.metrics: required for the ones
    every result has had (Metric.always); a result written before a later metric may lack it."""
    fields = []
    for m in METRICS:
        may_lack = {} if m.always else {"default": None}
        fields += [(m.key, float, field(**may_lack)), (f"{m.key}_signature", str, field(**may_lack))]
    return fields


# one evaluation: eval-KEY.json, the card's results.KEY; a new metric's score is checked with no change here
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
class Training:
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
    best_val_bleu: float | None = None
    best_val_chrf: float | None = None
    best_val_loss: float | None = None
    valid_beam: int = None
    nonfinite_skipped: int = None
    fp16_overflows: int = None
    stopped: str = None
    rebuilt_from: str = None


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
class Tried:
    """One decoding setting `mt tune` tried on val (mt.training.tuning)."""

    open_keys: ClassVar[bool] = True
    beam: int = within(lo=1)
    length_penalty: float = within(lo=0)
    bleu: float
    chrf: float
    length_ratio: float
    seconds: float = None


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
class ValidationRow:
    open_keys: ClassVar[bool] = True
    step: int = within(lo=0)
    val_bleu: float
    elapsed_s: float
    val_loss: float = None
    val_nll: float = None
    val_ppl: float = None
    val_chrf: float = None
    valid_beam: int = None


@dataclass(frozen=True, kw_only=True)
class SkippedRow:
    open_keys: ClassVar[bool] = True
    step: int = within(lo=0)
    skipped_update: str
    nonfinite_total: int = None


METRICS_ROWS = {"loss": LogRow, "val_bleu": ValidationRow, "skipped_update": SkippedRow}  # marking key -> row


def metrics_row_problem(row) -> str:
    """How a metrics.jsonl row departs from the rows mt writes ("" = it does not)."""
    kinds = [key for key in METRICS_ROWS if isinstance(row, dict) and key in row]
    if not isinstance(row, dict) or not kinds:
        what = "an object" if isinstance(row, dict) else f"a JSON {type(row).__name__}"
        return f"{what} with none of {', '.join(METRICS_ROWS)}"
    return next((found for found in (problem(METRICS_ROWS[k], row) for k in kinds) if found), "")


# ---- checkpoints -------------------------------------------------------------------------------------------


@dataclass
class Window:
    """Sums over the updates since the last log line."""

    all_required: ClassVar[bool] = True
    loss: float = within(0.0, lo=0)  # label-smoothed loss summed over target tokens
    nll: float = within(0.0, lo=0)
    tgt: int = within(0, lo=0)  # target tokens
    tokens: int = within(0, lo=0)  # source + target tokens
    seconds: float = within(0.0, lo=0)


@dataclass
class Progress:
    """Counters of the running training loop: all of it goes into every checkpoint."""

    all_required: ClassVar[bool] = True

    step: int = 0  # optimizer updates done
    epoch: int = 0  # current epoch, from 1
    batch_index: int = 0  # batches of the current epoch consumed so far
    # the best validation's (by train.best_metric) val loss and headline scores: {"bleu": ..., "loss": ...}
    best: dict[str, float] = field(default_factory=dict)
    best_step: int = 0
    bad_validations: int = 0  # validations in a row without a best_metric gain (train.patience)
    validated_step: int = -1  # step of the latest validation
    nonfinite_total: int = 0  # updates skipped for a non-finite loss or gradient
    nonfinite_streak: int = 0
    scaler_skips: int = 0  # fp16 updates the grad scaler skipped (overflow), not counted as steps
    window: Window = field(default_factory=Window)
    tokens: int = 0  # source + target non-pad tokens trained on
    train_seconds: float = 0.0  # inside optimizer updates only (for tokens/s)
    elapsed_s: float = 0.0  # wall clock of the loop, validation included, summed over restarts
    # what the updates ran in: train.precision as the device ran it ("bf16"), or each part's after a resume
    # that decided auto otherwise ("fp32 to step 1500, then bf16"); "" in checkpoints before issue 83
    precision: str = ""

    def record(self, result: dict, metric: str) -> bool:
        """Whether a validation `result` is the best so far by `metric` (a headline metric's key or
        loss, each in its direction); keeps its scores if so, else counts a bad validation."""
        better = improves(metric, result[f"val_{metric}"], self.best.get(metric))
        if better:
            self.best = {key: result[f"val_{key}"] for key in BEST_METRICS}
            self.best_step, self.bad_validations = self.step, 0
        else:
            self.bad_validations += 1
        return better


def current_progress(saved: dict) -> dict:
    """A checkpoint's progress as mt writes it now: before `best`, it held best_bleu, best_chrf and
    best_loss (-1 and inf before the first validation); before `precision`, nothing said what ran."""
    if not isinstance(saved, dict):
        return saved
    saved = {"precision": "", **saved}
    if "best_bleu" not in saved or "best" in saved:
        return saved
    old = {key: saved.get(f"best_{key}") for key in ("bleu", "chrf", "loss")}
    best = old if saved.get("validated_step", -1) >= 0 else {}
    rest = {k: v for k, v in saved.items() if k not in ("best_bleu", "best_chrf", "best_loss")}
    return {**rest, "best": best}


def progress_of(ckpt: dict) -> Progress:
    """The counters in a checkpoint `load_checkpoint` has checked, window and all."""
    return build(Progress, ckpt["progress"])


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    open_keys: ClassVar[bool] = True
    model: dict[str, torch.Tensor]
    config: dict  # a RunConfig's dict: mt.config checks it (checkpoint.stored_config)
    vocab_size: int = within(lo=1)
    tokenizer_sha256: str  # of the spm.model it was trained with
    progress: Progress = None  # last.pt, best.pt, ckpt-*.pt
    optimizer: dict = None  # last.pt, best.pt: torch's state dicts, checked as they load
    scaler: dict = None
    rng: list = None  # one random state per process
    averaged: list = None  # averaged.pt: the files it is the mean of


RESUME_KEYS = ("progress", "optimizer", "scaler", "rng")  # what last.pt holds beyond a kept model (resume)
