"""Training: `train`, whose loop reads top to bottom: batch -> step -> log -> validate -> save -> stop
(the update itself is mt.training.step's `train_step`; setting up and finishing a run, mt.training.session's).

`train(cfg, run_dir)` writes everything a run needs into `run_dir` (see mt.run.folder for the files). It
checks every input first (config, corpus, tokenizer, the checkpoint to resume) and writes nothing
until all of it has passed. Resume is exact: re-running the same command continues from last.pt with
the same parameters, batches and random numbers as an uninterrupted run. Ctrl-C and SIGTERM finish
the update and checkpoint first; a second Ctrl-C stops at once.

Under torchrun every rank runs `train`; rank 0 alone writes files and validates (the others wait),
each rank trains on its share of every update's batches, and DDP averages the gradients.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mt.config import RunConfig, TrainConfig
from mt.plumbing.memory import release_freed_memory
from mt.plumbing.metrics import HEADLINE, PRIMARY
from mt.run import checkpoint
from mt.run.card import read_card
from mt.run.progress import Progress, Window
from mt.run.resume import Resumed, resume_checkpoint
from mt.training import distributed
from mt.training.finish import finish, stop_reason, summary, time_capped, warn_time_capped
from mt.training.session import Session, best_so_far, save, setup, write_metrics
from mt.training.step import StepStats, dropout_on, learning_rate, train_step
from mt.training.tuning import tune_unless_tuned
from mt.training.validation import validate

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss keeps diverging); the last good checkpoint is kept."""


def count_update(s: Session, stats: StepStats, seconds: float) -> None:
    """Add an update to the counters; a skipped one is logged, and too many in a row end training."""
    p, t = s.progress, s.cfg.train
    p.window.seconds += seconds
    p.train_seconds += seconds
    if stats.stepped:
        p.step, p.nonfinite_streak, p.tokens = p.step + 1, 0, p.tokens + stats.tokens
        w = p.window
        w.loss, w.nll = w.loss + stats.loss, w.nll + stats.nll
        w.tgt, w.tokens = w.tgt + stats.target_tokens, w.tokens + stats.tokens
        return
    if stats.overflow:  # fp16: no step, no lr or token count, and no error
        p.scaler_skips += 1
        return
    p.nonfinite_total += 1
    p.nonfinite_streak += 1
    log.warning(
        "non-finite loss or gradient (loss %s) after step %d: update skipped (%d so far, %d in a row)",
        stats.loss,
        p.step,
        p.nonfinite_total,
        p.nonfinite_streak,
    )
    write_metrics(s, {"step": p.step, "skipped_update": "non-finite", "nonfinite_total": p.nonfinite_total})
    if p.nonfinite_streak >= t.max_nonfinite:
        kept = (
            f"{s.run_dir}/last.pt is untouched" if (s.run_dir / "last.pt").exists() else "no checkpoint yet"
        )
        raise TrainingError(
            f"the loss was not finite in {p.nonfinite_streak} updates in a row after step "
            f"{p.step} (train.max_nonfinite); {kept}; lower train.lr or check the data"
        )


def log_train(s: Session, bar: tqdm) -> None:
    """The train line: metrics.jsonl, the log, and the progress bar; then a new window, and the heap's
    free pages handed back."""
    p, w = s.progress, s.progress.window
    loss, nll = w.loss / w.tgt, w.nll / w.tgt
    lr = s.optimizer.param_groups[0]["lr"]
    tok_s = w.tokens / max(w.seconds, 1e-9)
    write_metrics(
        s,
        {
            "step": p.step,
            "epoch": p.epoch,
            "loss": round(loss, 4),
            "nll": round(nll, 4),
            "lr": lr,
            "tokens_per_s": round(tok_s, 1),
            "elapsed_s": round(p.elapsed_s, 1),
        },
    )
    t = s.cfg.train
    eta = p.elapsed_s / p.step * (t.max_steps - p.step)  # at this pace, validations included
    eta = min(eta, 60 * t.max_minutes - p.elapsed_s) if t.max_minutes else eta
    log.info(
        "step %d/%d | epoch %d | loss %.3f | nll %.3f | ppl %.1f | lr %.2e | tok/s %.0f | elapsed %.0fs | "
        "eta %s",
        p.step,
        t.max_steps,
        p.epoch,
        loss,
        nll,
        math.exp(min(nll, 50.0)),
        lr,
        tok_s,
        p.elapsed_s,
        clock(eta),
    )
    bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s:.0f}", eta=clock(eta))
    p.window = Window()
    release_freed_memory()  # a CPU's bf16 leaves freed blocks in the heap: mt.plumbing.memory


def clock(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def progress_bar(t: TrainConfig, p: Progress, ranks: distributed.Ranks) -> tqdm:
    """Steps done of train.max_steps, on rank 0's terminal (80 columns where it reports no width)."""
    try:
        width = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        width = 0
    return tqdm(
        total=t.max_steps,
        initial=p.step,
        desc="train",
        unit="step",
        dynamic_ncols=width > 0,
        ncols=None if width > 0 else 80,
        disable=None if ranks.main else True,
    )


def validate_and_save(s: Session) -> None:
    """Rank 0 validates (the others wait for its verdict); every rank saves last.pt, and best.pt if better."""
    p, improved = s.progress, False
    if s.ranks.main:
        result = validate(s.model, s.val, s.tokenizer, s.cfg, s.device)
        write_metrics(
            s,
            {
                "step": p.step,
                **{k: v for k, v in result.items() if k != "bleu_signature"},
                "elapsed_s": round(p.elapsed_s, 1),
            },
        )
        improved = p.record(result, s.cfg.train.best_metric)
        scored = " | ".join(f"{m.label} {result['val_' + m.key]:.2f}" for m in HEADLINE)
        log.info(
            "validation step %d | loss %.3f | ppl %.2f | %s | best %.2f at %d | beam %d | %s",
            p.step,
            result["val_loss"],
            result["val_ppl"],
            scored,
            p.best[PRIMARY.key],
            p.best_step,
            s.cfg.train.valid_beam,
            result["bleu_signature"],
        )
        warn_if_val_loss_rises(s)
    improved, p.best, p.best_step, p.bad_validations = distributed.from_main(
        (improved, p.best, p.best_step, p.bad_validations), s.ranks
    )
    p.validated_step = p.step
    save(s, "last.pt")
    if improved:
        save(s, "best.pt")
    if s.ranks.main and s.cfg.train.keep_last:
        checkpoint.keep_model(s.run_dir, s.cfg, s.model, s.tokenizer, p, s.cfg.train.keep_last)


# validations in a row whose loss stays above the lowest so far before the log calls it overfitting
RISING_VALIDATIONS = 3


def warn_if_val_loss_rises(s: Session) -> None:
    """Say so once val loss has stayed above its lowest for RISING_VALIDATIONS validations: once a stretch,
    not at every validation after (rank 0; the metrics log holds every validation of the run, resumed ones
    too)."""
    lowest_step, lowest = min(s.metrics.val_losses, key=lambda row: row[1])
    above = sum(step > lowest_step for step, _ in s.metrics.val_losses)
    if above == RISING_VALIDATIONS:
        last_step, last = s.metrics.val_losses[-1]
        log.warning(
            "val loss %.3f has stayed above its lowest, %.3f at step %d, for %d validations (%d updates): "
            "the model is overfitting the training pairs; more regularisation (model.dropout) or a "
            "smaller budget (train.max_steps) would do better",
            last,
            lowest,
            lowest_step,
            above,
            last_step - lowest_step,
        )


def last_save(s: Session, requests: list[str], interrupted: str) -> str:
    """After the loop: last.pt where a stop was asked, in the loop or during its last update; else the
    final validation where the last step had none. Returns the stop asked, a stop asked during that
    validation too ("" = none)."""
    interrupted = interrupted or asked_to_stop(s, requests)
    if interrupted:
        save(s, "last.pt")
    elif s.progress.validated_step != s.progress.step:
        validate_and_save(s)
        interrupted = asked_to_stop(s, requests)
    return interrupted


def asked_to_stop(s: Session, requests: list[str]) -> str:
    """The stop asked for on any rank since the loop last read it ("" = none): the last update and
    the final validation do not read it, and a stop asked then still ends the run as one (exit 143 or
    130, no tuning; the same command finishes it)."""
    asked = distributed.all_sum(torch.tensor([float(bool(requests))], device=s.device), s.ranks).item() > 0
    return (requests[0] if requests else "SIGTERM") if asked else ""


def elapsed(s: Session, clock_start: float) -> float:
    """The loop's wall clock; under torchrun with max_minutes, rank 0's: all ranks stop at one step."""
    seconds = time.perf_counter() - clock_start
    return distributed.from_main(seconds, s.ranks) if s.cfg.train.max_minutes and s.ranks.enabled else seconds


def already_finished(run_dir: Path, t: TrainConfig, resumed: Resumed | None) -> dict | None:
    """A resumed run already at its stop, said before loading any data: its summary; None for a run to
    train, and for one whose card does not record that stop (stopped between its last save and its
    card, or by a signal during its last update or final validation), which goes through setup to
    `finish` (validating first where its last step was not) with no update to take."""
    stop = stop_reason(t, resumed.progress) if resumed else ""
    if not stop or read_card(run_dir).get("training", {}).get("stopped") != stop:
        return None
    p = resumed.progress
    log.info(
        "%s: already finished at step %d (%s); %s; raise train.max_steps (or max_minutes, patience) "
        "with --set to train further",
        run_dir,
        p.step,
        stop,
        best_so_far(p),
    )
    return summary(p, stop)


def tuned_at_the_end(cfg: RunConfig, run_dir: Path, ranks: distributed.Ranks, result: dict) -> dict:
    """train.tune: a run that stopped (not interrupted) ends by tuning best.pt on val, on rank 0, unless
    its card holds a tuning of that very file (mt.training.tuning), so that `mt train` and the Python
    API end alike. The summary's `tuning`: the new one, or None."""
    tuning = None
    if cfg.train.tune and result["stopped"] and not result["interrupted"] and ranks.main:
        tuning = tune_unless_tuned(run_dir, cfg.train.device)
    return {**result, "tuning": tuning}


def train(cfg: RunConfig, run_dir: str | Path, force_new: bool = False) -> dict:
    """Train (or resume) a run in `run_dir`; under torchrun every rank calls this (and the caller ends
    the process group, once the DDP wrapper is gone). Returns a summary (`interrupted`: the signal
    that stopped it, `stopped`: the stop condition)."""
    ranks, t, run_dir = distributed.ranks_from_env(), cfg.train, Path(run_dir)
    resumed = None if force_new else resume_checkpoint(cfg, run_dir, ranks.world)
    if finished := already_finished(run_dir, t, resumed):
        return tuned_at_the_end(cfg, run_dir, ranks, finished)
    with contextlib.ExitStack() as cleanup:
        s = setup(cfg, run_dir, force_new, resumed, ranks, cleanup)
        p = s.progress
        stop, interrupted = stop_reason(t, p), ""
        clock_start = time.perf_counter() - p.elapsed_s  # the clock runs on across restarts
        s.ddp.train()
        with (
            distributed.stop_requests() as requests,
            logging_redirect_tqdm(),
            progress_bar(t, p, ranks) as bar,
        ):
            while not stop and not interrupted:
                batches, p.epoch, p.batch_index = s.stream.take(
                    p.epoch, p.batch_index, t.accumulate * ranks.world
                )
                lr = learning_rate(t, p.step + 1)
                s.model.use_dropout(dropout_on(t, p.step + 1))
                start = time.perf_counter()
                with distributed.peers_lost():
                    stats = train_step(
                        s.ddp,
                        s.optimizer,
                        batches,
                        t,
                        lr,
                        scaler=s.scaler,
                        device=s.device,
                        ranks=ranks,
                        stop_requested=bool(requests),
                    )
                count_update(s, stats, time.perf_counter() - start)
                if stats.stepped:
                    p.elapsed_s = elapsed(s, clock_start)
                    bar.update(1)
                    if p.step % t.log_every == 0:
                        log_train(s, bar)
                    if p.step % t.valid_every == 0:
                        validate_and_save(s)
                        p.elapsed_s = time.perf_counter() - clock_start
                    elif t.save_every and p.step % t.save_every == 0:
                        save(s, "last.pt")
                if stats.stop:  # asked here or on another rank: every rank stops at this step
                    interrupted = requests[0] if requests else "SIGTERM"
                stop = stop_reason(t, p)
            interrupted = last_save(s, requests, interrupted)
            if not interrupted and time_capped(t, p) and ranks.main:
                warn_time_capped(t, p)
        p.elapsed_s = time.perf_counter() - clock_start
        return tuned_at_the_end(cfg, run_dir, ranks, finish(s, stop, interrupted))
