"""The run card, DIR/card.json: what a run was and what it scored, in one file for `mt report`.

Training writes the config, code, hardware and training sections when it stops; `mt evaluate` adds
its scores. Each writer updates only its own sections, and the file is replaced atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

from mt.config import DecodeConfig, RunConfig, base_config, config_differences, config_to_dict
from mt.errors import RunDirError
from mt.files import write_text
from mt.records import Card, require

SOURCE_ROOT = Path(__file__).resolve().parents[1]
NOT_TRAINING = ("name", "base")  # keys that do not change what is trained or how it is scored


def config_hash(cfg: RunConfig) -> str:
    """12 hex digits of sha256 over the config's values, without its name and base."""
    values = {k: v for k, v in config_to_dict(cfg).items() if k not in NOT_TRAINING}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


def config_section(cfg: RunConfig) -> dict:
    """Name, hash, and the keys that differ from the config's base (its `base:` file, else defaults)."""
    try:
        base, base_name = base_config(cfg), cfg.base or "defaults"
    except ValueError:  # the base file moved or broke since training: say so rather than fail
        base, base_name = RunConfig(), f"defaults ({cfg.base} unreadable)"
    diff = config_differences(config_to_dict(base), config_to_dict(cfg), ignore=NOT_TRAINING)
    return {
        "name": cfg.name,
        "hash": config_hash(cfg),
        "base": base_name,
        "differences": {k: list(v) for k, v in diff.items()},
    }


def code_version() -> dict:
    """The git commit of mt's source tree, and whether it had uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        return {
            "git_commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--", "mt")),
        }
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": "unknown", "dirty": None}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(device: torch.device, processes: int = 1) -> dict:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "device": device.type,
        "gpu": gpu,
        "processes": processes,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def read_card(run_dir: str | Path) -> dict:
    """DIR/card.json ({} if there is none), checked against records.Card; a damaged one is a one-line
    DataError (and is never overwritten)."""
    path = Path(run_dir) / "card.json"
    fix = f"restore it, or delete it and run `mt evaluate --run {path.parent}` to write a new one"
    try:
        card = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise RunDirError(f"{path}: cannot read ({e.strerror or e}); check its permissions") from None
    except (ValueError, RecursionError):  # not UTF-8 or not JSON
        raise RunDirError(f"{path}: damaged (not JSON); {fix}") from None
    return require(card, Card, path, fix)


def card_summary(run_dir: str | Path) -> dict:
    """What `mt serve` shows of a run: its training in brief and the BLEU/chrF of each evaluation."""
    card = read_card(run_dir)
    training = card.get("training", {})
    return {
        "steps": training.get("steps"),
        "best_val_bleu": training.get("best_val_bleu"),
        "stopped": training.get("stopped"),
        "parameters": card.get("parameters"),
        "results": {
            k: {"bleu": r.get("bleu"), "chrf": r.get("chrf")} for k, r in card.get("results", {}).items()
        },
    }


def update_card(run_dir: str | Path, **sections) -> dict:
    """Replace the given top-level sections of DIR/card.json (created if missing), atomically."""
    path = Path(run_dir) / "card.json"
    card = {**read_card(run_dir), **sections}
    write_text(path, json.dumps(card, indent=2) + "\n")
    return card


def result_key(
    split: str,
    beam: int,
    length_penalty: float,
    checkpoint: str = "best",
    engine: str = "",
    sampling: str = "",
    ensemble: int = 1,
) -> str:
    """How an evaluation is named in cards and eval files: test, test-beam5, test-beam5-lp0.6, then
    the engine when it is not torch (-ct2, -ct2-int8: `engine_name`), -ensN for an ensemble of N runs,
    sampling (`sampling_name`), and
    -last (or another checkpoint's name) when it did not use best.pt."""
    name = split if beam == 1 else f"{split}-beam{beam}"
    name = name if beam == 1 or length_penalty == 1.0 else f"{name}-lp{length_penalty:g}"
    name = f"{name}-{engine}" if engine else name
    name = f"{name}-ens{ensemble}" if ensemble > 1 else name
    name = f"{name}-{sampling}" if sampling else name
    return name if checkpoint == "best" else f"{name}-{checkpoint}"


def sampling_name(decode: DecodeConfig) -> str:
    """How a sampled evaluation is told apart: topk20-t0.7-seed3 ("" when searching)."""
    if not decode.sample:
        return ""
    temperature = f"-t{decode.temperature:g}" if decode.temperature != 1.0 else ""
    return f"{decode.sample.replace(':', '')}{temperature}-seed{decode.seed}"


def engine_name(engine: str, compute_type: str) -> str:
    """ "" for torch; ct2, or ct2-int8 where a compute type was chosen."""
    if engine == "torch":
        return ""
    return "ct2" if compute_type == "default" else f"ct2-{compute_type}"
