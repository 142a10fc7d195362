"""Training: the warmup schedule, one optimizer update (`train_step`), validation, and `train`, whose
loop reads top to bottom: batch -> step -> log -> validate -> save -> stop.

`train(cfg, run_dir)` writes everything a run needs into `run_dir` (see mt.rundir for the files). It
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
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mt import checkpoint, corpus, distributed, rundir
from mt.card import code_version, config_section, hardware, update_card
from mt.config import ConfigError, RunConfig, TrainConfig
from mt.corpus import BatchStream, Corpus
from mt.data import Batch, load_split
from mt.loss import autocast, batch_loss
from mt.model import Seq2Seq, count_parameters
from mt.records import EMPTY_WINDOW, Progress
from mt.rundir import MetricsLog
from mt.tokenizer import Tokenizer
from mt.validation import Validation, make_validation, validate

log = logging.getLogger(__name__)


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak` at step `warmup`, then peak * sqrt(warmup / step). Steps count from 1."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def learning_rate(t: TrainConfig, step: int, elapsed_s: float) -> float:
    """train.schedule at update `step` (from 1): inverse_sqrt, or linear: the same warmup, then straight down
    to 0 where the budget ends (train.max_steps or max_minutes, whichever comes first)."""
    if t.schedule == "inverse_sqrt":
        return inverse_sqrt_lr(step, t.lr, t.warmup_steps)
    spent = max(step / t.max_steps, elapsed_s / (60 * t.max_minutes) if t.max_minutes else 0.0)
    return t.lr * max(0.0, min(step / t.warmup_steps, 1.0 - spent))


@dataclass
class StepStats:
    """What one update saw, summed over every rank's micro-batches."""
    loss: float          # label-smoothed loss, summed over target tokens
    nll: float           # negative log-likelihood, summed over target tokens
    target_tokens: int
    tokens: int          # source + target non-pad tokens
    stepped: bool        # the parameters were updated; else a non-finite loss or gradient, or an overflow
    overflow: bool       # fp16: the grad scaler skipped the update and lowered its scale (not an error)
    stop: bool           # some rank was asked to stop (Ctrl-C, SIGTERM)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: list[Batch], cfg: TrainConfig,
               lr: float, *, scaler: torch.amp.GradScaler | None = None, device: torch.device = torch.device("cpu"),
               ranks: distributed.Ranks = distributed.Ranks(), stop_requested: bool = False) -> StepStats:
    """One optimizer update at learning rate `lr` from the micro-batches `batches`, the loss normalised
    by their total target tokens; `model` may be wrapped in DistributedDataParallel. The losses are
    summed on the device and read once, with the gradient norm: one host sync per update (fp16: three).

    Under torchrun each rank backpropagates its share (every world-th batch) and DDP sums the shares'
    gradients once, on the last micro-batch, dividing by the number of ranks, which the loss weight
    undoes. A rank without a share (an epoch's last update) joins the gradient sync with weight zero.
    """
    scaler = scaler or torch.amp.GradScaler(device.type, enabled=False)
    for group in optimizer.param_groups:
        group["lr"] = lr
    mine, weight = batches[ranks.rank::ranks.world], ranks.world / sum(b.ntokens for b in batches)
    if not mine:
        mine, weight = batches[:1], 0.0
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss, nll
    counts = [0.0, 0.0, float(stop_requested)]                   # target tokens, tokens (from host copies), stop
    for i, batch in enumerate(mine):
        if weight:
            counts[0], counts[1] = counts[0] + batch.ntokens, counts[1] + batch.ntokens + int(batch.src_mask.sum())
        batch = batch.to(device)
        accumulate_only = i < len(mine) - 1 and isinstance(model, DistributedDataParallel)
        with model.no_sync() if accumulate_only else contextlib.nullcontext():
            with autocast(device, cfg.precision):
                loss, nll = batch_loss(model, batch, cfg.label_smoothing)
            scaler.scale(loss * weight).backward()
        if weight:
            sums += torch.stack([loss.detach(), nll.detach()]).double()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm or math.inf)
    counts_t = torch.tensor(counts, dtype=torch.float64)
    counts_t = counts_t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else counts_t
    totals = distributed.all_sum(torch.cat([sums, counts_t]), ranks)  # (5,) on the device
    loss_sum, nll_sum, target_tokens, tokens, stops, norm = torch.cat(
        [totals, norm.detach().double().view(1)]).tolist()  # the update's host sync
    # with fp16 the grad scaler itself skips steps whose gradients overflow, and lowers its scale
    stepped = math.isfinite(loss_sum) and (scaler.is_enabled() or math.isfinite(norm))
    scale = scaler.get_scale() if scaler.is_enabled() else 0.0
    if stepped:
        scaler.step(optimizer)
    scaler.update()
    overflow = stepped and scaler.is_enabled() and scaler.get_scale() < scale
    optimizer.zero_grad(set_to_none=True)
    return StepStats(loss_sum, nll_sum, int(target_tokens), int(tokens), stepped and not overflow, overflow,
                     stops > 0)


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss keeps diverging); the last good checkpoint is kept."""


@dataclass
class Session:
    """What the loop works with; `setup` builds it, `train` runs it."""
    cfg: RunConfig
    run_dir: Path
    ranks: distributed.Ranks
    device: torch.device
    tokenizer: Tokenizer
    model: Seq2Seq                  # the plain module: validation and checkpoints
    ddp: torch.nn.Module            # what train_step runs: the model, or its DDP wrapper under torchrun
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    progress: Progress
    stream: BatchStream
    val: Validation | None          # rank 0 only
    metrics: MetricsLog | None      # rank 0 only


def start_device(cfg: RunConfig, ranks: distributed.Ranks) -> torch.device:
    """Seed, threads, and this rank's device (joining the process group under torchrun)."""
    random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    if cfg.train.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda requested but no GPU is visible; use auto or cpu")
    device = distributed.start(ranks, cfg.train.device, cfg.train.dist_backend)
    if cfg.train.precision in ("fp16", "tf32") and device.type != "cuda":
        raise ConfigError(f"train.precision: {cfg.train.precision} needs a CUDA device; use bf16 or fp32 on CPU")
    distributed.set_precision(device, cfg.train.precision)
    return device


def joint_bpe(cfg: RunConfig, ranks: distributed.Ranks) -> tuple[Tokenizer, int | None]:
    """Learned once, on rank 0, so that every rank has the very same pieces; and the pair count."""
    tokenizer, pairs = corpus.learn_tokenizer(cfg) if ranks.main else (None, None)
    return Tokenizer(distributed.from_main(tokenizer.proto if tokenizer else None, ranks)), pairs


def training_corpus(cfg: RunConfig, tokenizer: Tokenizer, pairs: int | None, ranks: distributed.Ranks) -> Corpus:
    """Binarized (or checked) on rank 0, then memory-mapped by every rank: one copy in the page cache."""
    folder = corpus.prepare(cfg.data, tokenizer, pairs) if ranks.main else None
    return Corpus.load(Path(distributed.from_main(str(folder) if folder else None, ranks)))


def best_so_far(p: Progress) -> str:
    return f"best val BLEU {p.best_bleu:.2f} at step {p.best_step}" if p.validated_step >= 0 else "no validation yet"


def setup(cfg: RunConfig, run_dir: Path, force_new: bool, resumed: tuple | None, ranks: distributed.Ranks,
          cleanup: contextlib.ExitStack) -> Session:
    """Build everything the loop needs, starting fresh or from `resumed` (rundir.resume_checkpoint).
    Every check on user input runs before the first write to run_dir (rundir.open_run_dir); `cleanup`
    closes the files."""
    start_log = cleanup.enter_context(rundir.run_log(logging.getLogger("mt"), ranks.main))
    log.info("run directory %s", run_dir)
    device = start_device(cfg, ranks)
    val_lines = load_split(cfg.data, "val") if ranks.main else None
    tokenizer, pairs = (resumed[1], None) if resumed else joint_bpe(cfg, ranks)
    train_pairs = training_corpus(cfg, tokenizer, pairs, ranks)
    val = make_validation(*val_lines, tokenizer, cfg.train.max_tokens) if ranks.main else None
    model = Seq2Seq(cfg.model, tokenizer.vocab_size).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.train.precision == "fp16")
    if resumed:
        progress = rundir.restore(resumed[0], model, optimizer, scaler, ranks.rank, device)
    else:
        progress = Progress()
        if ranks.enabled:
            torch.manual_seed(cfg.train.seed + 1000 * ranks.rank)  # different dropout masks per rank
    metrics = None
    if ranks.main:  # the first write: the lock, then the run's files
        cleanup.enter_context(rundir.locked(run_dir))
        metrics = rundir.open_run_dir(run_dir, cfg, tokenizer, progress.step if resumed else None, force_new, start_log)
        cleanup.callback(metrics.close)
    if resumed:
        log.info("resuming %s/last.pt: step %d, epoch %d (batch %d), %s", run_dir, progress.step, progress.epoch,
                 progress.batch_index, best_so_far(progress))
    # DDP wraps the model for training steps only; validation and saving use the plain module
    ddp = DistributedDataParallel(model, broadcast_buffers=False) if ranks.enabled else model
    log.info("model: %d parameters; device %s; precision %s; threads %d; processes %d", count_parameters(model),
             device, cfg.train.precision, torch.get_num_threads(), ranks.world)
    return Session(cfg, run_dir, ranks, device, tokenizer, model, ddp, optimizer, scaler, progress,
                   BatchStream(train_pairs, cfg.train.max_tokens, cfg.train.seed, pin_memory=device.type == "cuda"),
                   val, metrics)


def save(s: Session, name: str) -> None:
    """Every rank calls this (its RNG state goes in); rank 0 writes."""
    rng = distributed.gather(checkpoint.rng_state(s.device), s.ranks)  # one per rank
    if s.ranks.main:
        checkpoint.save_checkpoint(s.run_dir / name, s.cfg, s.model, s.tokenizer, s.optimizer, s.scaler, s.progress, rng)


def write_metrics(s: Session, record: dict) -> None:
    if s.metrics is not None:
        s.metrics.write(record)


def count_update(s: Session, stats: StepStats, seconds: float) -> None:
    """Add an update to the counters; a skipped one is logged, and too many in a row end training."""
    p, t = s.progress, s.cfg.train
    p.window["seconds"] += seconds
    p.train_seconds += seconds
    if stats.stepped:
        p.step, p.nonfinite_streak, p.tokens = p.step + 1, 0, p.tokens + stats.tokens
        for key, value in [("loss", stats.loss), ("nll", stats.nll), ("tgt", stats.target_tokens),
                           ("tokens", stats.tokens)]:
            p.window[key] += value
        return
    if stats.overflow:  # fp16: no step, no lr or token count, and no error
        p.scaler_skips += 1
        return
    p.nonfinite_total += 1
    p.nonfinite_streak += 1
    log.warning("non-finite loss or gradient (loss %s) after step %d: update skipped (%d so far, %d in a row)",
                stats.loss, p.step, p.nonfinite_total, p.nonfinite_streak)
    write_metrics(s, {"step": p.step, "skipped_update": "non-finite", "nonfinite_total": p.nonfinite_total})
    if p.nonfinite_streak >= t.max_nonfinite:
        kept = f"{s.run_dir}/last.pt is untouched" if (s.run_dir / "last.pt").exists() else "no checkpoint yet"
        raise TrainingError(f"the loss was not finite in {p.nonfinite_streak} updates in a row after step "
                            f"{p.step} (train.max_nonfinite); {kept}; lower train.lr or check the data")


def log_train(s: Session, bar: tqdm) -> None:
    """The train line: metrics.jsonl, the log, and the progress bar; then a new window."""
    p, w = s.progress, s.progress.window
    loss, nll = w["loss"] / w["tgt"], w["nll"] / w["tgt"]
    lr = s.optimizer.param_groups[0]["lr"]
    tok_s = w["tokens"] / max(w["seconds"], 1e-9)
    write_metrics(s, {"step": p.step, "epoch": p.epoch, "loss": round(loss, 4), "nll": round(nll, 4), "lr": lr,
                      "tokens_per_s": round(tok_s, 1), "elapsed_s": round(p.elapsed_s, 1)})
    t = s.cfg.train
    eta = p.elapsed_s / p.step * (t.max_steps - p.step)  # at this pace, validations included
    eta = min(eta, 60 * t.max_minutes - p.elapsed_s) if t.max_minutes else eta
    log.info("step %d/%d | epoch %d | loss %.3f | nll %.3f | ppl %.1f | lr %.2e | tok/s %.0f | elapsed %.0fs | "
             "eta %s", p.step, t.max_steps, p.epoch, loss, nll, math.exp(min(nll, 50.0)), lr, tok_s, p.elapsed_s,
             clock(eta))
    bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s:.0f}", eta=clock(eta))
    p.window = dict(EMPTY_WINDOW)


def clock(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def progress_bar(t: TrainConfig, p: Progress, ranks: distributed.Ranks) -> tqdm:
    """Steps done of train.max_steps, on rank 0's terminal (80 columns where it reports no width)."""
    try:
        width = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        width = 0
    return tqdm(total=t.max_steps, initial=p.step, desc="train", unit="step", dynamic_ncols=width > 0,
                ncols=None if width > 0 else 80, disable=None if ranks.main else True)


def validate_and_save(s: Session) -> None:
    """Rank 0 validates (the others wait for its verdict); every rank saves last.pt, and best.pt if better."""
    p, improved = s.progress, False
    if s.ranks.main:
        result = validate(s.model, s.val, s.tokenizer, s.cfg, s.device)
        write_metrics(s, {"step": p.step, **{k: v for k, v in result.items() if k != "bleu_signature"},
                          "elapsed_s": round(p.elapsed_s, 1)})
        improved = p.record(result, s.cfg.train.best_metric)
        log.info("validation step %d | loss %.3f | ppl %.2f | BLEU %.2f | chrF %.2f | best %.2f at %d | beam %d | %s",
                 p.step, result["val_loss"], result["val_ppl"], result["val_bleu"], result["val_chrf"],
                 p.best_bleu, p.best_step, s.cfg.train.valid_beam, result["bleu_signature"])
    improved, p.best_bleu, p.best_chrf, p.best_loss, p.best_step, p.bad_validations = distributed.from_main(
        (improved, p.best_bleu, p.best_chrf, p.best_loss, p.best_step, p.bad_validations), s.ranks)
    p.validated_step = p.step
    save(s, "last.pt")
    if improved:
        save(s, "best.pt")
    if s.ranks.main and s.cfg.train.keep_last:
        checkpoint.keep_model(s.run_dir, s.cfg, s.model, s.tokenizer, p, s.cfg.train.keep_last)


def stop_reason(t: TrainConfig, p: Progress) -> str:
    """Why training stops now ("" = it goes on)."""
    if p.step >= t.max_steps:
        return f"reached train.max_steps={t.max_steps}"
    if t.max_minutes and p.elapsed_s >= 60 * t.max_minutes:
        return f"reached train.max_minutes={t.max_minutes}"
    if t.patience and p.bad_validations >= t.patience:
        metric = "BLEU" if t.best_metric == "bleu" else "loss"
        return f"no val {metric} gain in {t.patience} validations (train.patience)"
    return ""


def elapsed(s: Session, clock_start: float) -> float:
    """The loop's wall clock; under torchrun with max_minutes, rank 0's: all ranks stop at one step."""
    seconds = time.perf_counter() - clock_start
    return distributed.from_main(seconds, s.ranks) if s.cfg.train.max_minutes and s.ranks.enabled else seconds


def finish(s: Session, stop: str, interrupted: str) -> dict:
    """Log the outcome, write the card (rank 0); returns the run's summary."""
    p = s.progress
    if interrupted:
        log.info("%s at step %d: saved %s/last.pt; run the same command again to resume",
                 interrupted, p.step, s.run_dir)
    else:
        log.info("stopped at step %d (epoch %d): %s; %s; %.0fs wall, %.0fs in updates", p.step, p.epoch, stop,
                 best_so_far(p), p.elapsed_s, p.train_seconds)
    if s.ranks.main and s.cfg.train.average_last and not interrupted:
        checkpoint.write_average(s.run_dir, s.cfg.train.average_last)
    if s.ranks.main:
        t, speed = s.cfg.train, round(p.tokens / max(p.train_seconds, 1e-9), 1)
        training = {"steps": p.step, "epochs": p.epoch, "wall_s": round(p.elapsed_s, 1),
                    "train_s": round(p.train_seconds, 1), "tokens_per_s": speed, "best_step": p.best_step,
                    "best_metric": t.best_metric, "best_val_bleu": p.best_bleu, "best_val_chrf": p.best_chrf,
                    "best_val_loss": p.best_loss if p.validated_step >= 0 else None, "valid_beam": t.valid_beam,
                    "nonfinite_skipped": p.nonfinite_total, "fp16_overflows": p.scaler_skips,
                    "stopped": interrupted or stop}
        update_card(s.run_dir, config=config_section(s.cfg), parameters=count_parameters(s.model),
                    precision=s.cfg.train.precision, code=code_version(),
                    hardware=hardware(s.device, s.ranks.world), training=training)
    return summary(p, stop, interrupted)


def summary(p: Progress, stop: str, interrupted: str = "") -> dict:
    """What `train` returns: the counters a caller reports, and why it stopped."""
    return {"step": p.step, "epoch": p.epoch, "best_bleu": p.best_bleu, "best_step": p.best_step,
            "train_seconds": p.train_seconds, "elapsed_s": p.elapsed_s, "interrupted": interrupted, "stopped": stop}


def already_finished(run_dir: Path, t: TrainConfig, p: Progress) -> dict:
    log.info("%s: already finished at step %d (%s); %s; raise train.max_steps (or max_minutes, patience) "
             "with --set to train further", run_dir, p.step, stop_reason(t, p), best_so_far(p))
    return summary(p, stop_reason(t, p))


def train(cfg: RunConfig, run_dir: str | Path, force_new: bool = False) -> dict:
    """Train (or resume) a run in `run_dir`; under torchrun every rank calls this (and the caller ends
    the process group, once the DDP wrapper is gone). Returns a summary (`interrupted`: the signal
    that stopped it, `stopped`: the stop condition)."""
    ranks, t, run_dir = distributed.ranks_from_env(), cfg.train, Path(run_dir)
    resumed = None if force_new else rundir.resume_checkpoint(cfg, run_dir, ranks.world)
    if resumed and stop_reason(t, Progress(**resumed[0]["progress"])):  # say so before loading any data
        return already_finished(run_dir, t, Progress(**resumed[0]["progress"]))
    with contextlib.ExitStack() as cleanup:
        s = setup(cfg, run_dir, force_new, resumed, ranks, cleanup)
        p = s.progress
        stop, interrupted = stop_reason(t, p), ""
        clock_start = time.perf_counter() - p.elapsed_s  # the clock runs on across restarts
        s.ddp.train()
        with distributed.stop_requests() as requests, logging_redirect_tqdm(), progress_bar(t, p, ranks) as bar:
            while not stop and not interrupted:
                batches, p.epoch, p.batch_index = s.stream.take(p.epoch, p.batch_index, t.accumulate * ranks.world)
                lr = learning_rate(t, p.step + 1, p.elapsed_s)
                start = time.perf_counter()
                with distributed.peers_lost():
                    stats = train_step(s.ddp, s.optimizer, batches, t, lr, scaler=s.scaler, device=s.device,
                                       ranks=ranks, stop_requested=bool(requests))
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
            if interrupted:
                save(s, "last.pt")
            elif p.validated_step != p.step:
                validate_and_save(s)
        p.elapsed_s = time.perf_counter() - clock_start
        return finish(s, stop, interrupted)
