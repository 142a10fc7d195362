"""Checkpoints and run directories.

A checkpoint holds only plain tensors, numbers, strings and lists/dicts of them, so it loads with
`torch.load(weights_only=True)`. It is written to a temporary file in the same folder, fsynced, then
moved into place with `os.replace`, so a crash never leaves a half-written `last.pt` or `best.pt`.
"""
from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path

import torch

from mt.config import ConfigError, RunConfig, apply_overrides, config_from_dict
from mt.model import Seq2Seq
from mt.tokenizer import Tokenizer, load_tokenizer


def atomic_save(obj: dict, path: str | Path) -> None:
    """torch.save to a temporary file beside `path`, fsync, rename over `path`, fsync the folder: a
    crash at any point leaves either the old file or the new one, never a mix."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # make the rename itself durable
    finally:
        os.close(folder)


REQUIRED_KEYS = ("model", "config", "vocab_size")


def load_checkpoint(path: str | Path) -> dict:
    """Load with weights_only=True: a pickle that names any code (a crafted file) is refused unrun."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no checkpoint; train first with `mt train CONFIG --run-dir {path.parent}`")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ConfigError(f"{path}: refused: it holds objects other than tensors and plain data, which could "
                          f"run code; only load checkpoints written by mt") from None
    except Exception:  # noqa: BLE001 - truncated, damaged or not a torch file at all
        raise ConfigError(f"{path}: damaged or not a checkpoint; delete it or train again") from None
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in REQUIRED_KEYS):
        raise ConfigError(f"{path}: not an mt checkpoint (it lacks {', '.join(REQUIRED_KEYS)}); delete it "
                          f"or train again")
    return ckpt


def build_model(ckpt: dict, cfg: RunConfig, path: str | Path) -> Seq2Seq:
    """The checkpoint's weights in a model built from `cfg`; a mismatch is a one-line ConfigError."""
    model = Seq2Seq(cfg.model, ckpt["vocab_size"])
    expected, found = model.state_dict(), ckpt["model"]
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    reshaped = [k for k in expected if k in found and found[k].shape != expected[k].shape]
    problems = ([f"{len(missing)} missing, e.g. {missing[0]}"] if missing else []) + \
               ([f"{len(extra)} unexpected, e.g. {extra[0]}"] if extra else []) + \
               ([f"{len(reshaped)} of another shape, e.g. {reshaped[0]} {tuple(found[reshaped[0]].shape)} "
                 f"instead of {tuple(expected[reshaped[0]].shape)}"] if reshaped else [])
    if problems:
        raise ConfigError(f"{path}: weights do not fit the model its config describes ({'; '.join(problems)}); "
                          f"the checkpoint comes from an incompatible config")
    model.load_state_dict(found)
    return model


def load_run(run_dir: str | Path, which: str = "best", overrides: list[str] = ()
             ) -> tuple[RunConfig, Tokenizer, Seq2Seq]:
    """Config, tokenizer and model (in eval mode, on CPU) from a run directory's `which`.pt.

    `overrides` (`key.path=value`) change the loaded config, e.g. decode.beam=5; they are validated.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: run directory not found")
    ckpt = load_checkpoint(run_dir / f"{which}.pt")
    try:
        config_from_dict(copy.deepcopy(ckpt["config"]))
    except ConfigError as e:  # written by another version of mt, or edited
        raise ConfigError(f"{run_dir / f'{which}.pt'}: stored config is invalid: {e}") from None
    cfg = config_from_dict(apply_overrides(ckpt["config"], list(overrides)))
    if not (run_dir / "spm.model").is_file():
        raise ConfigError(f"{run_dir}/spm.model: not found; the run directory is incomplete")
    tokenizer = load_tokenizer(run_dir / "spm.model")
    if tokenizer.vocab_size != ckpt["vocab_size"]:
        raise ConfigError(f"{run_dir}/spm.model has {tokenizer.vocab_size} pieces but the checkpoint "
                          f"expects {ckpt['vocab_size']}; the run directory is inconsistent")
    return cfg, tokenizer, build_model(ckpt, cfg, run_dir / f"{which}.pt").eval()
