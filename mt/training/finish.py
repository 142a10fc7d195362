"""Finishing a training run: why it stops (the budget, the wall-clock cap, patience), the outcome
logged, the card's training record with its compute written, the last models averaged
(train.average_last), and the summary `train` returns."""

from __future__ import annotations

import logging
from pathlib import Path

from mt.config import TrainConfig
from mt.model import count_parameters
from mt.plumbing.errors import RunDirError
from mt.plumbing.metrics import PRIMARY, label
from mt.run import checkpoint
from mt.run.card import read_card, training_record, update_card
from mt.run.parent import parse_init_from, teacher_of
from mt.run.progress import Progress
from mt.run.provenance import code_version, config_section, hardware
from mt.training.compute import card_pipeline, pipeline_multiply_adds, training_multiply_adds
from mt.training.session import Session, best_so_far

log = logging.getLogger(__name__)


def time_capped(t: TrainConfig, p: Progress) -> bool:
    """Whether train.max_minutes, the wall-clock cap, has run out before the budget, train.max_steps."""
    return bool(t.max_minutes) and p.elapsed_s >= 60 * t.max_minutes and p.step < t.max_steps


def stop_reason(t: TrainConfig, p: Progress) -> str:
    """Why training stops now ("" = it goes on)."""
    if p.step >= t.max_steps:
        return f"reached train.max_steps={t.max_steps}"
    if time_capped(t, p):
        return f"reached train.max_minutes={t.max_minutes}"
    if t.patience and p.bad_validations >= t.patience:
        return f"no val {label(t.best_metric)} gain in {t.patience} validations (train.patience)"
    return ""


def warn_time_capped(t: TrainConfig, p: Progress) -> None:
    """A run the time cap stopped is not the model its config names: say so, and how to finish it."""
    log.warning(
        "train.max_minutes=%g stopped training at step %d of its budget, train.max_steps=%d (%.0f%%): "
        "this is not the model the config names (the schedule is set for the whole budget); run the same "
        "command with --set train.max_minutes=0 to resume and finish it",
        t.max_minutes,
        p.step,
        t.max_steps,
        100 * p.step / t.max_steps,
    )


def finish(s: Session, stop: str, interrupted: str) -> dict:
    """Log the outcome, write the card (rank 0); returns the run's summary."""
    p = s.progress
    if interrupted:
        log.info(
            "%s at step %d: saved %s/last.pt; run the same command again to resume",
            interrupted,
            p.step,
            s.run_dir,
        )
    else:
        log.info(
            "stopped at step %d (epoch %d): %s; %s; %.0fs wall, %.0fs in updates",
            p.step,
            p.epoch,
            stop,
            best_so_far(p),
            p.elapsed_s,
            p.train_seconds,
        )
    if s.ranks.main:
        update_card(
            s.run_dir,
            config=config_section(s.cfg),
            parameters=count_parameters(s.model),
            precision=s.progress.precision,
            code=code_version(),
            hardware=hardware(s.device, s.ranks.world),
            training=training_record(s.cfg.train, p, interrupted or stop, *compute(s)),
            cleaning=s.cleaning,
        )
    if s.ranks.main and s.cfg.train.average_last and not interrupted:
        average_at_the_end(s.run_dir, s.cfg.train.average_last)
    return summary(p, stop, interrupted)


def average_at_the_end(run_dir: Path, last: int) -> None:
    """train.average_last after a finished training: too few kept models is a warning, not an error,
    since the training itself succeeded (`mt average` averages what there is, with --last)."""
    try:
        checkpoint.write_average(run_dir, last)
    except RunDirError as e:
        log.warning("%s; no averaged.pt written", e)


def compute(s: Session) -> tuple[float, float | None]:
    """The training's multiply-adds, and its pipeline's: with those of train.init_from's run and of a
    distilled corpus's teacher, its translating and its own pipeline (once, where the teacher is the
    parent: self-distillation); mt.training.compute."""
    p = s.progress
    own = training_multiply_adds(s.cfg.model, s.model.output_size, s.stream, p.epoch, p.batch_index)
    teacher = teacher_of(s.cfg).get("teacher", {})
    inherited = [teacher.get("translate_multiply_adds")] if teacher else []
    parent = parse_init_from(s.cfg.train.init_from)[0] if s.cfg.train.init_from else None
    if parent:
        inherited.append(card_pipeline(read_card(parent)))
    if teacher and not (parent and parent.resolve() == Path(teacher["run"]).resolve()):  # counted once
        inherited.append(teacher.get("pipeline_multiply_adds"))
    return own, pipeline_multiply_adds(own, inherited)


def summary(p: Progress, stop: str, interrupted: str = "") -> dict:
    """What `train` returns: the counters a caller reports, and why it stopped."""
    return {
        "step": p.step,
        "epoch": p.epoch,
        f"best_{PRIMARY.key}": p.best.get(PRIMARY.key),
        "best_step": p.best_step,
        "train_seconds": p.train_seconds,
        "elapsed_s": p.elapsed_s,
        "interrupted": interrupted,
        "stopped": stop,
    }
