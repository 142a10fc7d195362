"""Checkpoints and run directories.

A checkpoint holds only plain tensors, numbers, strings and lists/dicts of them, so it loads with
`torch.load(weights_only=True)`. It is written to a temporary file in the same folder, fsynced, then
moved into place with `os.replace`, so a crash never leaves a half-written `last.pt` or `best.pt`.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from mt.config import ConfigError, RunConfig, apply_overrides, config_from_dict
from mt.model import Seq2Seq
from mt.tokenizer import Tokenizer, load_tokenizer


def atomic_save(obj: dict, path: str | Path) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no checkpoint; train first with `mt train CONFIG --run-dir {path.parent}`")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the file is unusable
        raise ConfigError(f"{path}: not a loadable mt checkpoint ({type(e).__name__}); "
                          f"delete it or train again") from None


def load_run(run_dir: str | Path, which: str = "best", overrides: list[str] = ()
             ) -> tuple[RunConfig, Tokenizer, Seq2Seq]:
    """Config, tokenizer and model (in eval mode, on CPU) from a run directory's `which`.pt.

    `overrides` (`key.path=value`) change the loaded config, e.g. decode.beam=5; they are validated.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: run directory not found")
    ckpt = load_checkpoint(run_dir / f"{which}.pt")
    cfg = config_from_dict(apply_overrides(ckpt["config"], list(overrides)))
    tokenizer = load_tokenizer(run_dir / "spm.model")
    if tokenizer.vocab_size != ckpt["vocab_size"]:
        raise ConfigError(f"{run_dir}/spm.model has {tokenizer.vocab_size} pieces but the checkpoint "
                          f"expects {ckpt['vocab_size']}; the run directory is inconsistent")
    model = Seq2Seq(cfg.model, ckpt["vocab_size"])
    model.load_state_dict(ckpt["model"])
    return cfg, tokenizer, model.eval()
