"""The records a run directory holds, each described once, and the one check every reader makes
before it reads a field.

    card.json        CARD            what a run was and scored (mt.card); results.KEY is a RESULT
    eval-KEY.json    RESULT          one evaluation (mt.evaluate): the card's results.KEY
    metrics.jsonl    METRICS_ROWS    one JSON object a line: a log window, a validation or a skipped update
    *.pt             CHECKPOINT      a checkpoint's metadata (mt.checkpoint); its counters are a `Progress`
    config.yaml      mt.config's dataclasses, checked by its loader (`read_saved_config`): no schema here

A `Record` maps each key to a `Field`: the JSON kind of its value, whether every mt that writes the file
writes the key (`required`), and whether it may be null. `problem` says, naming the key, how a record
departs from its schema; a reader calls it (or `require`) first, then reads required keys directly
and optional ones with `.get`. Keys a record does not list are let through (a newer mt may write
more), except in a `closed` record, whose keys become a dataclass's arguments.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mt.errors import RunDirError

KINDS = {  # kind -> (test, how a message names it); bool is an int in Python but not in JSON
    "integer": (lambda v: type(v) is int, "an integer"),
    "number": (lambda v: type(v) in (int, float), "a number"),
    "string": (lambda v: isinstance(v, str), "a string"),
    "boolean": (lambda v: type(v) is bool, "true or false"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, (list, tuple)), "a list"),
    "tensors": (
        lambda v: isinstance(v, dict) and all(isinstance(t, torch.Tensor) for t in v.values()),
        "a mapping of names to tensors",
    ),
}


@dataclass(frozen=True)
class Field:
    kind: str  # a key of KINDS
    required: bool = True  # every mt that writes the file writes this key
    null: bool = False  # null is a valid value (the writer knew nothing to put there)
    minimum: float | None = None  # for integer and number
    record: Record | None = None  # kind object: the object's own fields
    each: Record | None = None  # kind object: every value is such a record (the card's results)


@dataclass(frozen=True)
class Record:
    fields: dict[str, Field]
    closed: bool = False  # keys it does not list are an error


def optional(kind: str, **more) -> Field:
    return Field(kind, required=False, **more)


def _describe(value) -> str:
    """How a message names a value's JSON kind: 'null', 'a string', ..."""
    if value is None:
        return "null"
    for name in ("boolean", "integer", "number", "string", "list", "object"):
        test, words = KINDS[name]
        if test(value):
            return words
    return type(value).__name__


def problem(record, schema: Record, where: str = "") -> str:
    """How `record` departs from `schema`, naming the first key that does ("" = it does not):
    "results.test.beam is missing", "training.steps is a string, not an integer"."""
    if not isinstance(record, dict):
        return f"{where or 'the file'} is {_describe(record)}, not an object"
    name = lambda key: f"{where}.{key}" if where else str(key)  # noqa: E731
    if schema.closed:
        unknown = [k for k in record if k not in schema.fields]
        if unknown:
            return f"{name(unknown[0])} is not a key mt writes"
    for key, f in schema.fields.items():
        if key not in record:
            if f.required:
                return f"{name(key)} is missing"
            continue
        found = _value_problem(record[key], f, name(key))
        if found:
            return found
    return ""


def _value_problem(value, f: Field, where: str) -> str:
    if value is None:
        return "" if f.null else f"{where} is null"
    test, words = KINDS[f.kind]
    if not test(value):
        return f"{where} is {_describe(value)}, not {words}"
    if f.minimum is not None and (math.isnan(value) or value < f.minimum):
        return f"{where} is {value}, below {f.minimum:g}"
    if f.record is not None:
        return problem(value, f.record, where)
    for key, item in value.items() if f.each is not None else ():
        found = problem(item, f.each, f"{where}.{key}")
        if found:
            return found
    return ""


def require(record, schema: Record, path: str | Path, fix: str) -> dict:
    """`record` if it fits `schema`; else a one-line DataError naming the file, the key and `fix`."""
    found = problem(record, schema, "")
    if found:
        raise RunDirError(f"{path}: damaged ({found}); {fix}")
    return record


# ---- eval-KEY.json and the card ----------------------------------------------------------------------------

RESULT = Record(
    {
        "split": optional("string"),
        "checkpoint": optional("string"),
        "beam": Field("integer", minimum=1),
        "length_penalty": Field("number", minimum=0),
        "bleu": Field("number"),
        "chrf": Field("number"),
        "bleu_lc": optional("number"),
        "bleu_signature": Field("string"),
        "chrf_signature": Field("string"),
        "bleu_lc_signature": optional("string"),
        "sentences": Field("integer", minimum=0),
        "length_ratio": optional("number"),
        "refs_sha256": Field("string"),
        "hyp_file": Field("string"),  # names of files in the run directory
        "ref_file": Field("string"),
    }
)

CARD = Record(
    {
        "config": Field(
            "object",
            record=Record(
                {
                    "name": Field("string"),
                    "hash": Field("string"),
                    "base": Field("string"),
                    "differences": optional("object"),
                }
            ),
        ),
        "parameters": Field("integer", minimum=0),
        "precision": optional("string"),
        "code": optional(
            "object",
            record=Record(
                {
                    "git_commit": optional("string"),
                    "dirty": optional("boolean", null=True),
                    "recorded_by": optional("string"),
                }
            ),
        ),
        "hardware": optional(
            "object",
            record=Record(
                {
                    "device": optional("string"),
                    "gpu": optional("string", null=True),
                    "processes": optional("integer"),
                    "cpu": optional("string"),
                    "cpu_count": optional("integer", null=True),
                    "threads": optional("integer"),
                    "torch": optional("string"),
                }
            ),
        ),
        "training": optional(
            "object",
            record=Record(
                {  # null where a run rebuilt from metrics.jsonl lacks it
                    "steps": optional("integer", minimum=0),
                    "epochs": optional("integer", minimum=0),
                    "wall_s": optional("number", null=True),
                    "train_s": optional("number", null=True),
                    "tokens_per_s": optional("number"),
                    "best_step": optional("integer", null=True),
                    "best_metric": optional("string"),
                    "best_val_bleu": optional("number", null=True),
                    "best_val_chrf": optional("number", null=True),
                    "best_val_loss": optional("number", null=True),
                    "valid_beam": optional("integer"),
                    "nonfinite_skipped": optional("integer"),
                    "fp16_overflows": optional("integer"),
                    "stopped": optional("string"),
                    "rebuilt_from_metrics": optional("boolean"),
                }
            ),
        ),
        "results": optional("object", each=RESULT),
    }
)

# ---- metrics.jsonl -----------------------------------------------------------------------------------------

_STEP = Field("integer", minimum=0)
METRICS_ROWS = {  # the key that marks a row's kind -> the row's fields
    "loss": Record(
        {
            "step": _STEP,
            "epoch": Field("integer"),
            "loss": Field("number"),
            "nll": Field("number"),
            "lr": Field("number"),
            "tokens_per_s": Field("number"),
            "elapsed_s": Field("number"),
        }
    ),
    "val_bleu": Record(
        {
            "step": _STEP,
            "val_loss": optional("number"),
            "val_nll": optional("number"),
            "val_ppl": optional("number"),
            "val_bleu": Field("number"),
            "val_chrf": optional("number"),
            "valid_beam": optional("integer"),
            "elapsed_s": Field("number"),
        }
    ),
    "skipped_update": Record(
        {"step": _STEP, "skipped_update": Field("string"), "nonfinite_total": optional("integer")}
    ),
}


def metrics_row_problem(row) -> str:
    """How a metrics.jsonl row departs from the rows mt writes ("" = it does not)."""
    kinds = [key for key in METRICS_ROWS if isinstance(row, dict) and key in row]
    if not isinstance(row, dict) or not kinds:
        what = "an object" if isinstance(row, dict) else _describe(row)
        return f"{what} with none of {', '.join(METRICS_ROWS)}"
    return next((found for found in (problem(row, METRICS_ROWS[k]) for k in kinds) if found), "")


# ---- checkpoints -------------------------------------------------------------------------------------------

EMPTY_WINDOW = {"loss": 0.0, "nll": 0.0, "tgt": 0, "tokens": 0, "seconds": 0.0}


@dataclass
class Progress:
    """Counters of the running training loop: all of it goes into every checkpoint."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # current epoch, from 1
    batch_index: int = 0  # batches of the current epoch consumed so far
    best_bleu: float = -1.0
    best_chrf: float = -1.0  # chrF at the best-BLEU validation
    best_step: int = 0
    best_loss: float = math.inf  # val loss at the best validation (by train.best_metric)
    bad_validations: int = 0  # validations in a row without a best_metric gain (train.patience)
    validated_step: int = -1  # step of the latest validation
    nonfinite_total: int = 0  # updates skipped for a non-finite loss or gradient
    nonfinite_streak: int = 0
    scaler_skips: int = 0  # fp16 updates the grad scaler skipped (overflow), not counted as steps
    window: dict = field(default_factory=lambda: dict(EMPTY_WINDOW))  # sums since the last log line
    tokens: int = 0  # source + target non-pad tokens trained on
    train_seconds: float = 0.0  # inside optimizer updates only (for tokens/s)
    elapsed_s: float = 0.0  # wall clock of the loop, validation included, summed over restarts

    def record(self, result: dict, metric: str) -> bool:
        """Whether a validation `result` is the best so far by `metric` (bleu: higher val_bleu; loss:
        lower val_loss); keeps its scores if so, else counts a bad validation."""
        better = (
            result["val_bleu"] > self.best_bleu if metric == "bleu" else result["val_loss"] < self.best_loss
        )
        if better:
            self.best_bleu, self.best_chrf, self.best_loss = (
                result["val_bleu"],
                result["val_chrf"],
                result["val_loss"],
            )
            self.best_step, self.bad_validations = self.step, 0
        else:
            self.bad_validations += 1
        return better


_KIND_OF = {"int": "integer", "float": "number"}
WINDOW = Record(
    {k: Field(_KIND_OF[type(v).__name__], minimum=0) for k, v in EMPTY_WINDOW.items()}, closed=True
)
PROGRESS = Record(  # Progress's own fields, every one: they become its arguments
    {
        f.name: Field("object", record=WINDOW) if f.name == "window" else Field(_KIND_OF[f.type])
        for f in dataclasses.fields(Progress)
    },
    closed=True,
)

CHECKPOINT = Record(
    {
        "model": Field("tensors"),
        "config": Field("object"),  # a RunConfig's dict: mt.config checks it (checkpoint.stored_config)
        "vocab_size": Field("integer", minimum=1),
        "tokenizer_sha256": Field("string"),  # of the spm.model it was trained with
        "progress": optional("object", record=PROGRESS),  # last.pt, best.pt, ckpt-*.pt
        "optimizer": optional("object"),  # last.pt, best.pt: torch's state dicts, checked as they load
        "scaler": optional("object"),
        "rng": optional("list"),  # one random state per process
        "averaged": optional("list"),  # averaged.pt: the files it is the mean of
    }
)
RESUME_KEYS = ("progress", "optimizer", "scaler", "rng")  # what last.pt holds beyond a kept model (resume)
