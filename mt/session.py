"""Setting up a training run and finishing it: the `Session` the loop in mt.train works with (device,
tokenizer, corpus, model, optimizer, counters, files), built by `setup` with every input checked
before the first write to the run directory, from scratch or from the checkpoint `resume_checkpoint`
found; and `finish`, which writes the card."""

from __future__ import annotations

import contextlib
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch.nn.parallel import DistributedDataParallel

from mt import corpus, distributed
from mt.batching import BatchStream, Pairs
from mt.config import RunConfig, TrainConfig, check_precision, config_differences, config_to_dict
from mt.data import load_split
from mt.errors import ConfigError, RunDirError, WriteError
from mt.model import Seq2Seq, count_parameters
from mt.run import checkpoint, folder
from mt.run.card import read_card, update_card
from mt.run.checkpoint import RESUMABLE_KEYS, load_checkpoint, set_rng_state, stored_config
from mt.run.folder import MetricsLog, read_metrics, run_tokenizer
from mt.run.parent import Parent, parent_of, shared_tokenizer, teacher_of
from mt.run.provenance import code_version, config_section, hardware
from mt.run.records import RESUME_KEYS, Progress, progress_of
from mt.tokenizer import Tokenizer
from mt.validation import Validation, make_validation

log = logging.getLogger(__name__)


@dataclass
class Session:
    """What the loop works with; `setup` builds it, `train` runs it."""

    cfg: RunConfig
    run_dir: Path
    ranks: distributed.Ranks
    device: torch.device
    tokenizer: Tokenizer
    model: Seq2Seq  # the plain module: validation and checkpoints
    ddp: torch.nn.Module  # what train_step runs: the model, or its DDP wrapper under torchrun
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    progress: Progress
    stream: BatchStream
    val: Validation | None  # rank 0 only
    metrics: MetricsLog | None  # rank 0 only
    cleaning: dict | None  # rank 0 only: what binarizing kept and removed (corpus.cleaning_report)


def start_device(cfg: RunConfig, ranks: distributed.Ranks) -> torch.device:
    """Seed, threads, and this rank's device (joining the process group under torchrun)."""
    random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    if cfg.train.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda requested but no GPU is visible; use auto or cpu")
    device = distributed.start(ranks, cfg.train.device, cfg.train.dist_backend)
    check_precision(cfg.train.precision, device.type)
    distributed.set_precision(device, cfg.train.precision)
    return device


def new_tokenizer(
    cfg: RunConfig, run_dir: Path, parent: Parent | None, ranks: distributed.Ranks
) -> tuple[Tokenizer, int | None, dict]:
    """A new run's tokenizer, the pair count if BPE read the corpus, and its lineage for the card: the
    parent's (train.init_from), another run's (tokenizer.from_run), or joint BPE learned here."""
    if parent:
        return parent.tokenizer, None, {"parent": parent.record()}
    if cfg.tokenizer.from_run:
        tokenizer, source = shared_tokenizer(cfg, run_dir)
        return tokenizer, None, {"tokenizer_from": source}
    return *joint_bpe(cfg, ranks), {}


def joint_bpe(cfg: RunConfig, ranks: distributed.Ranks) -> tuple[Tokenizer, int | None]:
    """Learned once, on rank 0, so that every rank has the very same pieces; and the pair count."""
    tokenizer, pairs = corpus.learn_tokenizer(cfg) if ranks.main else (None, None)
    return Tokenizer(distributed.from_main(tokenizer.proto if tokenizer else None, ranks)), pairs


def training_corpus(
    cfg: RunConfig, tokenizer: Tokenizer, pairs: int | None, ranks: distributed.Ranks
) -> tuple[list[Pairs], list[Path]]:
    """Binarized (or checked) on rank 0, then memory-mapped by every rank: one copy in the page cache.
    One view, or with data.bpe_dropout data.bpe_views sampled ones (epoch e trains on view e mod n);
    and their folders (the views keep the same pairs)."""
    views = range(1, cfg.data.bpe_views + 1) if cfg.data.bpe_dropout else [0]
    folders = [str(corpus.prepare(cfg.data, tokenizer, pairs, v)) for v in views] if ranks.main else None
    folders = [Path(folder) for folder in distributed.from_main(folders, ranks)]
    return [corpus.load(folder) for folder in folders], folders


def resume_checkpoint(cfg: RunConfig, run_dir: Path, world: int) -> tuple[dict, Tokenizer] | None:
    """DIR/last.pt and DIR/spm.model to resume from (None: start fresh), once they are checked: the
    same config up to RESUMABLE_KEYS, a tokenizer that fits, and as many processes as wrote it."""
    path = run_dir / "last.pt"
    if not path.exists():
        return None
    ckpt = load_checkpoint(path)
    if any(k not in ckpt for k in RESUME_KEYS):
        raise RunDirError(
            f"{path}: not a checkpoint to resume from (it lacks the optimizer and training state, as "
            f"best.pt, averaged.pt and ckpt-*.pt do); restore last.pt, or use --force-new"
        )
    stored = config_to_dict(stored_config(ckpt, path))
    diff = config_differences(stored, config_to_dict(cfg), ignore=RESUMABLE_KEYS)
    if diff:
        changes = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
        raise RunDirError(
            f"{run_dir} holds a run with a different config ({changes}); resume with the same "
            f"config, use another --run-dir, or --force-new to start over"
        )
    if len(ckpt["rng"]) != world:
        raise RunDirError(
            f"{path} was written by {len(ckpt['rng'])} processes, not {world}; resume with the "
            f"same number for an exact resume"
        )
    read_metrics(run_dir / "metrics.jsonl")  # damage is reported now, before anything is written
    read_card(run_dir)
    return ckpt, run_tokenizer(run_dir, ckpt, path.name, "restore it or use --force-new")


def restore(
    ckpt: dict,
    model: Seq2Seq,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    rank: int,
    device: torch.device,
) -> Progress:
    """Load the checkpoint's states into the run's objects and this rank's RNGs; returns its counters."""
    try:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(
            checkpoint.fuse_adam_state(ckpt["optimizer"], model)
            if ckpt.get("separate_qkv")
            else ckpt["optimizer"]
        )
        scaler.load_state_dict(ckpt["scaler"])
        set_rng_state(ckpt["rng"][rank], device)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:  # a damaged but loadable last.pt
        detail = (str(e).splitlines() or [""])[0][:80]
        raise RunDirError(
            f"last.pt: damaged training state ({type(e).__name__}: {detail}); restore it, or use --force-new"
        ) from None
    return progress_of(ckpt)


def best_so_far(p: Progress) -> str:
    return (
        f"best val BLEU {p.best_bleu:.2f} at step {p.best_step}"
        if p.validated_step >= 0
        else "no validation yet"
    )


def setup(
    cfg: RunConfig,
    run_dir: Path,
    force_new: bool,
    resumed: tuple | None,
    ranks: distributed.Ranks,
    cleanup: contextlib.ExitStack,
) -> Session:
    """Build everything the loop needs, starting fresh or from `resumed` (`resume_checkpoint`).
    Every check on user input runs before the first write to run_dir (folder.open_run_dir); `cleanup`
    closes the files."""
    start_log = cleanup.enter_context(folder.run_log(logging.getLogger("mt"), ranks.main))
    log.info("run directory %s", run_dir)
    device = start_device(cfg, ranks)
    val_lines = load_split(cfg.data, "val") if ranks.main else None
    parent = None if resumed else parent_of(cfg, run_dir)
    tokenizer, pairs, origin = (
        (resumed[1], None, {}) if resumed else new_tokenizer(cfg, run_dir, parent, ranks)
    )
    origin |= {} if resumed else teacher_of(cfg)
    train_pairs, folders = training_corpus(cfg, tokenizer, pairs, ranks)
    val = make_validation(*val_lines, tokenizer, cfg.train.max_tokens) if ranks.main else None
    model, optimizer, scaler, progress = learner(cfg, tokenizer.vocab_size, device, resumed, parent, ranks)
    metrics = cleaning = None
    if ranks.main:  # the first write: the lock, then the run's files
        step, board = (progress.step if resumed else None), folder.tensorboard_writer(cfg.train)
        metrics, cleaning = first_writes(
            cfg, run_dir, tokenizer, step, force_new, board, start_log, cleanup, folders[0]
        )
        if origin:  # recorded at once: a run stopped by a crash still names what it came from
            update_card(run_dir, config=config_section(cfg), parameters=count_parameters(model), **origin)
    log_start(cfg, run_dir, progress if resumed else None, model, device, ranks, parent)
    # DDP wraps the model for training steps only; validation and saving use the plain module
    ddp = DistributedDataParallel(model, broadcast_buffers=False) if ranks.enabled else model
    return Session(
        cfg,
        run_dir,
        ranks,
        device,
        tokenizer,
        model,
        ddp,
        optimizer,
        scaler,
        progress,
        BatchStream(train_pairs, cfg.train.max_tokens, cfg.train.seed, pin_memory=device.type == "cuda"),
        val,
        metrics,
        cleaning,
    )


def first_writes(
    cfg: RunConfig,
    run_dir: Path,
    tokenizer: Tokenizer,
    resume_step: int | None,
    force_new: bool,
    board: type | None,
    start_log: Callable[[Path], None],
    cleanup: contextlib.ExitStack,
    corpus_folder: Path,
) -> tuple[MetricsLog, dict]:
    """Rank 0's writes once every check has passed: the lock, the run's files (folder.open_run_dir) and
    the list of the training pairs data.clean removed; the metrics log and the cleaning report."""
    cleanup.enter_context(folder.locked(run_dir))
    metrics = folder.open_run_dir(run_dir, cfg, tokenizer, resume_step, force_new, start_log, board)
    cleanup.callback(metrics.close)
    return metrics, corpus.cleaning_report(corpus_folder, run_dir / "removed-pairs.tsv")


def log_start(
    cfg: RunConfig,
    run_dir: Path,
    resumed: Progress | None,
    model: Seq2Seq,
    device: torch.device,
    ranks: distributed.Ranks,
    parent: Parent | None,
) -> None:
    """The run's opening lines: where it resumes or starts from, and what trains on what."""
    if resumed:
        log.info(
            "resuming %s/last.pt: step %d, epoch %d (batch %d), %s",
            run_dir,
            resumed.step,
            resumed.epoch,
            resumed.batch_index,
            best_so_far(resumed),
        )
    elif parent:
        log.info(
            "starting from %s: its weights and tokenizer, a new optimizer and schedule", parent.checkpoint
        )
    log.info(
        "model: %d parameters; device %s; precision %s; threads %d; processes %d",
        count_parameters(model),
        device,
        cfg.train.precision,
        torch.get_num_threads(),
        ranks.world,
    )


def learner(
    cfg: RunConfig,
    vocab_size: int,
    device: torch.device,
    resumed: tuple | None,
    parent: Parent | None,
    ranks: distributed.Ranks,
) -> tuple[Seq2Seq, torch.optim.Optimizer, torch.amp.GradScaler, Progress]:
    """The model, Adam, the fp16 grad scaler and the counters: new (random weights, or the parent's),
    or restored from `resumed`. Adam holds only the parameters train.freeze leaves to train."""
    model = Seq2Seq(cfg.model, vocab_size)
    if parent:
        model.load_state_dict(parent.ckpt["model"])
    model.freeze(cfg.train.freeze)
    model = model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.train.precision == "fp16")
    if resumed:
        return (
            model,
            optimizer,
            scaler,
            restore(resumed[0], model, optimizer, scaler, ranks.rank, device),
        )
    if ranks.enabled:
        torch.manual_seed(cfg.train.seed + 1000 * ranks.rank)  # different dropout masks per rank
    return model, optimizer, scaler, Progress()


def save(s: Session, name: str) -> None:
    """Every rank calls this (its RNG state goes in); rank 0 writes."""
    rng = distributed.gather(checkpoint.rng_state(s.device), s.ranks)  # one per rank
    if s.ranks.main:
        try:
            checkpoint.save_checkpoint(
                s.run_dir / name, s.cfg, s.model, s.tokenizer, s.optimizer, s.scaler, s.progress, rng
            )
        except WriteError as e:  # no way to resume from here on: stop, saying so once
            raise WriteError(
                f"training stopped at step {s.progress.step}, its checkpoints as they were: {e}"
            ) from None


def write_metrics(s: Session, record: dict) -> None:
    if s.metrics is not None:
        s.metrics.write(record)


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
    if s.ranks.main and s.cfg.train.average_last and not interrupted:
        checkpoint.write_average(s.run_dir, s.cfg.train.average_last)
    if s.ranks.main:
        update_card(
            s.run_dir,
            config=config_section(s.cfg),
            parameters=count_parameters(s.model),
            precision=s.cfg.train.precision,
            code=code_version(),
            hardware=hardware(s.device, s.ranks.world),
            training=training_section(s.cfg.train, p, interrupted or stop),
            cleaning=s.cleaning,
        )
    return summary(p, stop, interrupted)


def training_section(t: TrainConfig, p: Progress, stopped: str) -> dict:
    """The card's account of the training: its counters, speed, best validation and why it stopped."""
    return {
        "steps": p.step,
        "epochs": p.epoch,
        "wall_s": round(p.elapsed_s, 1),
        "train_s": round(p.train_seconds, 1),
        "tokens_per_s": round(p.tokens / max(p.train_seconds, 1e-9), 1),
        "best_step": p.best_step,
        "best_metric": t.best_metric,
        "best_val_bleu": p.best_bleu,
        "best_val_chrf": p.best_chrf,
        "best_val_loss": p.best_loss if p.validated_step >= 0 else None,
        "valid_beam": t.valid_beam,
        "nonfinite_skipped": p.nonfinite_total,
        "fp16_overflows": p.scaler_skips,
        "stopped": stopped,
    }


def summary(p: Progress, stop: str, interrupted: str = "") -> dict:
    """What `train` returns: the counters a caller reports, and why it stopped."""
    return {
        "step": p.step,
        "epoch": p.epoch,
        "best_bleu": p.best_bleu,
        "best_step": p.best_step,
        "train_seconds": p.train_seconds,
        "elapsed_s": p.elapsed_s,
        "interrupted": interrupted,
        "stopped": stop,
    }
