"""What a checkpoint holds, as the one validator checks it (mt.plumbing.schema): the training loop's
counters (`Progress`, with the sums of its log window), saved in every checkpoint so that a resumed run
goes on exactly where it stopped, and the checkpoint's own keys. The run folder's other records (the
card, metrics.jsonl's rows, teacher.json) are mt.run.records'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mt.plumbing.metrics import BEST_METRICS, improves
from mt.plumbing.schema import build, within


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
