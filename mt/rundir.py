"""The run directory: what a checkpoint holds, where a run resumes from, and the files a run writes.

    DIR/config.yaml     the resolved config (also inside every checkpoint)
    DIR/spm.model       the joint BPE model
    DIR/train.log       the log of every start of the run
    DIR/metrics.jsonl   one JSON line per log window, validation and skipped update
    DIR/last.pt         the latest checkpoint: model, Adam, grad scaler, counters (`Progress`), RNG states
    DIR/best.pt         the checkpoint of the best validation BLEU
    DIR/replaced-*/     an earlier run's files, moved aside by `mt train --force-new`

A checkpoint holds only tensors, numbers, strings and lists/dicts of them, so it loads with
`torch.load(weights_only=True)`, and it is replaced atomically (mt.files), so a crash never leaves a
half-written one. Reading a run (`load_run`, `resume_checkpoint`) checks everything and writes nothing.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import logging.handlers
import math
import pickle
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from mt.config import (ConfigError, RunConfig, apply_overrides, config_differences, config_from_dict, config_to_dict,
                       save_config)
from mt.files import atomic_write, write_text
from mt.model import Seq2Seq
from mt.tokenizer import Tokenizer, load_tokenizer

log = logging.getLogger(__name__)

LOG_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
EMPTY_WINDOW = {"loss": 0.0, "nll": 0.0, "tgt": 0, "tokens": 0, "seconds": 0.0}

# Keys a resumed run may change: they decide when to stop, log, save or validate, or how `mt translate`
# decodes, never what is learned nor what best.pt means (train.valid_beam is not among them).
RESUMABLE_KEYS = ("name", "base", "train.max_steps", "train.max_minutes", "train.patience", "train.valid_every",
                  "train.keep_last", "train.average_last",
                  "train.save_every", "train.log_every", "train.max_nonfinite", "train.threads",
                  "train.device", "train.dist_backend", "decode")
ARCHIVED = ("last.pt", "best.pt", "averaged.pt", "ckpt-*.pt", "spm.model", "config.yaml", "metrics.jsonl",
            "card.json", "train.log",
            "eval-*.json", "hyp-*.txt", "ref-*.txt")


@dataclass
class Progress:
    """Counters of the running training loop: all of it goes into every checkpoint."""
    step: int = 0                # optimizer updates done
    epoch: int = 0               # current epoch, from 1
    batch_index: int = 0         # batches of the current epoch consumed so far
    best_bleu: float = -1.0
    best_chrf: float = -1.0      # chrF at the best-BLEU validation
    best_step: int = 0
    best_loss: float = math.inf  # val loss at the best validation (by train.best_metric)
    bad_validations: int = 0     # validations in a row without a best_metric gain (train.patience)
    validated_step: int = -1     # step of the latest validation
    nonfinite_total: int = 0     # updates skipped for a non-finite loss or gradient
    nonfinite_streak: int = 0
    scaler_skips: int = 0        # fp16 updates the grad scaler skipped (overflow), not counted as steps
    window: dict = field(default_factory=lambda: dict(EMPTY_WINDOW))  # sums since the last log line
    tokens: int = 0              # source + target non-pad tokens trained on
    train_seconds: float = 0.0   # inside optimizer updates only (for tokens/s)
    elapsed_s: float = 0.0       # wall clock of the loop, validation included, summed over restarts


    def record(self, result: dict, metric: str) -> bool:
        """Whether a validation `result` is the best so far by `metric` (bleu: higher val_bleu; loss:
        lower val_loss); keeps its scores if so, else counts a bad validation."""
        better = result["val_bleu"] > self.best_bleu if metric == "bleu" else result["val_loss"] < self.best_loss
        if better:
            self.best_bleu, self.best_chrf, self.best_loss = result["val_bleu"], result["val_chrf"], result["val_loss"]
            self.best_step, self.bad_validations = self.step, 0
        else:
            self.bad_validations += 1
        return better


def rng_state(device: torch.device) -> dict:
    """This process's random state: Python's, torch's CPU generator, and its own GPU's (not every
    visible GPU's, so that a run resumes on a host with fewer GPUs)."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and isinstance(state.get("cuda"), torch.Tensor):  # absent when trained on CPU
        torch.cuda.set_rng_state(state["cuda"], device)


def save_checkpoint(path: Path, cfg: RunConfig, model: Seq2Seq, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler, progress: Progress, rng_states: list[dict]) -> None:
    """Write a checkpoint atomically; `rng_states` holds one state per process, in rank order."""
    ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
            "config": config_to_dict(cfg), "vocab_size": model.vocab_size,
            "progress": dataclasses.asdict(progress), "rng": rng_states}
    with atomic_write(path) as f:
        torch.save(ckpt, f)


REQUIRED_KEYS = ("model", "config", "vocab_size")


def keep_model(run_dir: Path, cfg: RunConfig, model: Seq2Seq, progress: Progress, keep: int) -> None:
    """DIR/ckpt-STEP.pt: the model (weights, config, progress; no optimizer) at this validation; only
    the `keep` newest stay (train.keep_last)."""
    with atomic_write(run_dir / f"ckpt-{progress.step:07d}.pt") as f:
        torch.save({"model": model.state_dict(), "config": config_to_dict(cfg), "vocab_size": model.vocab_size,
                    "progress": dataclasses.asdict(progress)}, f)
    for old in kept_models(run_dir)[:-keep]:
        old.unlink()


def kept_models(run_dir: Path) -> list[Path]:
    """DIR/ckpt-*.pt, oldest first."""
    return sorted(run_dir.glob("ckpt-*.pt"))


def average_models(paths: list[Path]) -> dict:
    """A checkpoint whose weights are the fp32 mean of `paths`' weights, with the first's config;
    checkpoints of different configs (beyond RESUMABLE_KEYS) are refused with a one-line error."""
    ckpts = [load_checkpoint(p) for p in paths]
    first = ckpts[0]
    for path, ckpt in zip(paths[1:], ckpts[1:]):
        diff = config_differences(first["config"], ckpt["config"], ignore=RESUMABLE_KEYS)
        if diff or ckpt["vocab_size"] != first["vocab_size"] or ckpt["model"].keys() != first["model"].keys():
            what = ", ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in diff.items()) or "other weights"
            raise ConfigError(f"{path}: another config than {paths[0]} ({what}); average checkpoints of one run")
    mean = {k: torch.stack([c["model"][k].float() for c in ckpts]).mean(0).to(v.dtype)
            for k, v in first["model"].items()}
    return {"model": mean, "config": first["config"], "vocab_size": first["vocab_size"],
            "averaged": [str(p) for p in paths]}


def write_average(run_dir: Path, last: int) -> Path:
    """DIR/averaged.pt from the `last` newest DIR/ckpt-*.pt (`mt average`, train.average_last)."""
    kept = kept_models(run_dir)
    if len(kept) < last:
        raise ConfigError(f"{run_dir}: {len(kept)} kept checkpoints (ckpt-*.pt), fewer than the {last} to average; "
                          f"set train.keep_last >= {last} and validate more often or train longer")
    with atomic_write(run_dir / "averaged.pt") as f:
        torch.save(average_models(kept[-last:]), f)
    log.info("wrote %s: the mean of %s", run_dir / "averaged.pt", ", ".join(p.name for p in kept[-last:]))
    return run_dir / "averaged.pt"


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


def stored_config(ckpt: dict, path: Path, overrides: list[str] = ()) -> RunConfig:
    """The checkpoint's config (keys newer than the checkpoint take their defaults), with `overrides`."""
    try:
        config_from_dict(copy.deepcopy(ckpt["config"]))
    except ConfigError as e:  # written by another version of mt, or edited
        raise ConfigError(f"{path}: stored config is invalid: {e}") from None
    return config_from_dict(apply_overrides(copy.deepcopy(ckpt["config"]), list(overrides)))


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


def run_tokenizer(run_dir: Path, ckpt: dict, ckpt_name: str, fix: str) -> Tokenizer:
    """DIR/spm.model, checked against the checkpoint's vocabulary size; `fix` says what to do if absent."""
    path = run_dir / "spm.model"
    if not path.is_file():
        raise ConfigError(f"{path}: not found, so {run_dir / ckpt_name} cannot be used; {fix}")
    tokenizer = load_tokenizer(path)
    if tokenizer.vocab_size != ckpt["vocab_size"]:
        raise ConfigError(f"{path} has {tokenizer.vocab_size} pieces but {ckpt_name} expects "
                          f"{ckpt['vocab_size']}; the run directory is inconsistent")
    return tokenizer


def checkpoint_path(run_dir: Path, checkpoint: str = "best") -> Path:
    """The file `--checkpoint` names: best (DIR/best.pt; DIR/last.pt, with a warning, while there is
    no best.pt yet), last (DIR/last.pt), averaged (DIR/averaged.pt, `mt average`), or a path to any
    checkpoint of this run."""
    if checkpoint not in ("best", "last", "averaged"):
        return Path(checkpoint)
    path = run_dir / f"{checkpoint}.pt"
    if checkpoint == "best" and not path.exists() and (run_dir / "last.pt").exists():
        log.warning("%s: not written yet (no validation so far); using %s", path, run_dir / "last.pt")
        return run_dir / "last.pt"
    return path


def load_run(run_dir: str | Path, checkpoint: str = "best", overrides: list[str] = ()
             ) -> tuple[RunConfig, Tokenizer, Seq2Seq]:
    """Config, tokenizer and model (in eval mode, on CPU) from a run directory and one of its
    checkpoints (see `checkpoint_path`).

    `overrides` (`key.path=value`) change the loaded config, e.g. decode.beam=5; they are validated.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: run directory not found")
    path = checkpoint_path(run_dir, checkpoint)
    ckpt = load_checkpoint(path)
    cfg = stored_config(ckpt, path, overrides)
    tokenizer = run_tokenizer(run_dir, ckpt, path.name, "the run directory is incomplete")
    return cfg, tokenizer, build_model(ckpt, cfg, path).eval()


def resume_checkpoint(cfg: RunConfig, run_dir: Path, world: int) -> tuple[dict, Tokenizer] | None:
    """DIR/last.pt and DIR/spm.model to resume from (None: start fresh), once they are checked: the
    same config up to RESUMABLE_KEYS, a tokenizer that fits, and as many processes as wrote it."""
    path = run_dir / "last.pt"
    if not path.exists():
        return None
    ckpt = load_checkpoint(path)
    if "progress" not in ckpt:
        raise ConfigError(f"{path}: written by an older mt without resume state; use another --run-dir "
                          f"or --force-new")
    stored = config_to_dict(stored_config(ckpt, path))
    diff = config_differences(stored, config_to_dict(cfg), ignore=RESUMABLE_KEYS)
    if diff:
        changes = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
        raise ConfigError(f"{run_dir} holds a run with a different config ({changes}); resume with the same "
                          f"config, use another --run-dir, or --force-new to start over")
    if len(ckpt["rng"]) != world:
        raise ConfigError(f"{path} was written by {len(ckpt['rng'])} processes, not {world}; resume with the "
                          f"same number for an exact resume")
    return ckpt, run_tokenizer(run_dir, ckpt, path.name, "restore it or use --force-new")


def restore(ckpt: dict, model: Seq2Seq, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
            rank: int, device: torch.device) -> Progress:
    """Load the checkpoint's states into the run's objects and this rank's RNGs; returns its counters."""
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scaler.load_state_dict(ckpt["scaler"])
    set_rng_state(ckpt["rng"][rank], device)
    return Progress(**ckpt["progress"])


def archive_previous(run_dir: Path) -> None:
    """--force-new: move the previous run's files into DIR/replaced-<time>/ rather than delete them."""
    dest = run_dir / time.strftime("replaced-%Y%m%d-%H%M%S")
    dest.mkdir()
    for pattern in ARCHIVED:
        for path in run_dir.glob(pattern):
            path.rename(dest / path.name)
    log.info("--force-new: moved the previous run's files to %s", dest)


def keep_metrics_until(path: Path, step: int) -> None:
    """Drop metrics written after the checkpoint we resume from (and a half-written last line)."""
    kept = []
    for line in path.read_text(encoding="utf-8").split("\n") if path.exists() else []:
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line + "\n")
        except (ValueError, KeyError, TypeError):
            continue
    write_text(path, "".join(kept))


class MetricsLog:
    """DIR/metrics.jsonl, one JSON object a line, flushed as written; `report` and resume read it."""

    def __init__(self, path: Path, append: bool):
        self.file = open(path, "a" if append else "w", encoding="utf-8")

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


@contextlib.contextmanager
def run_log(logger: logging.Logger, enabled: bool = True) -> Iterator[Callable[[Path], None]]:
    """Hold `logger`'s records in memory until the run directory may be written; the yielded function
    starts DIR/train.log with them, and every later record goes there too until the block ends.
    Not `enabled` (torchrun ranks other than 0): no log file, and the function does nothing."""
    if not enabled:
        yield lambda path: None
        return
    held = logging.handlers.MemoryHandler(capacity=10**6, flushLevel=logging.CRITICAL + 1, flushOnClose=False)
    logger.addHandler(held)
    handlers: list[logging.Handler] = []

    def start(path: Path) -> None:
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(LOG_FORMAT)
        held.setTarget(handler)
        held.flush()
        logger.removeHandler(held)
        logger.addHandler(handler)
        handlers.append(handler)

    try:
        yield start
    finally:
        for handler in [held, *handlers]:
            logger.removeHandler(handler)
            handler.close()


def open_run_dir(run_dir: Path, cfg: RunConfig, tokenizer: Tokenizer, resume_step: int | None,
                 force_new: bool, start_log: Callable[[Path], None]) -> MetricsLog:
    """The run's first writes, made once every check on user input has passed: archive the previous
    run (--force-new), then train.log, config.yaml, spm.model (fresh runs) and metrics.jsonl (cut back
    to the resumed step)."""
    if force_new and (run_dir / "last.pt").exists():
        archive_previous(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    start_log(run_dir / "train.log")
    save_config(cfg, run_dir / "config.yaml")
    metrics = run_dir / "metrics.jsonl"
    if resume_step is None:
        tokenizer.save(run_dir / "spm.model")
    else:
        keep_metrics_until(metrics, resume_step)
    return MetricsLog(metrics, append=resume_step is not None)
