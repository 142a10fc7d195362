"""Resuming a run: DIR/last.pt and DIR/spm.model found and checked before anything is written (the same
config up to RESUMABLE_KEYS, a tokenizer that fits, as many processes as wrote it), and its states
restored into the new run's objects, random generators included, for an exact resume."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mt.config import RunConfig, config_to_dict
from mt.model import Seq2Seq
from mt.plumbing.config_yaml import config_differences
from mt.plumbing.errors import RunDirError
from mt.run.card import read_card
from mt.run.checkpoint import RESUMABLE_KEYS, fuse_adam_state, load_checkpoint, set_rng_state, stored_config
from mt.run.folder import run_tokenizer
from mt.run.metrics_log import read_metrics
from mt.run.progress import RESUME_KEYS, Progress, progress_of
from mt.tokenizer import Tokenizer


@dataclass(frozen=True)
class Resumed:
    """What a run resumes from: last.pt, loaded and checked, and the run's tokenizer."""

    ckpt: dict
    tokenizer: Tokenizer

    @property
    def progress(self) -> Progress:
        return progress_of(self.ckpt)


def resume_checkpoint(cfg: RunConfig, run_dir: Path, world: int) -> Resumed | None:
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
    return Resumed(ckpt, run_tokenizer(run_dir, ckpt, path.name, "restore it or use --force-new"))


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
            fuse_adam_state(ckpt["optimizer"], model) if ckpt.get("separate_qkv") else ckpt["optimizer"]
        )
        scaler.load_state_dict(ckpt["scaler"])
        set_rng_state(ckpt["rng"][rank], device)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:  # a damaged but loadable last.pt
        detail = (str(e).splitlines() or [""])[0][:80]
        raise RunDirError(
            f"last.pt: damaged training state ({type(e).__name__}: {detail}); restore it, or use --force-new"
        ) from None
    return progress_of(ckpt)
