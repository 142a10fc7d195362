"""What a run was made with, as its card records it: the config (a hash, and the keys that differ
from its base), the code (git commit, uncommitted changes) and the hardware."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

from mt.config import RunConfig, config_to_dict, load_config
from mt.plumbing.config_yaml import config_differences

SOURCE_ROOT = Path(__file__).resolve().parents[1]
NOT_TRAINING = ("name", "base")  # keys that do not change what is trained or how it is scored


def config_hash(cfg: RunConfig) -> str:
    """12 hex digits of sha256 over the config's values, without its name and base."""
    values = {k: v for k, v in config_to_dict(cfg).items() if k not in NOT_TRAINING}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


def base_config(cfg: RunConfig) -> RunConfig:
    """What `cfg` departs from: its `base:` config, else mt's defaults."""
    return load_config(cfg.base) if cfg.base else RunConfig()


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


def differing_keys(configs: list[dict]) -> dict[str, list]:
    """Keys (key.path -> one value per config) whose values differ between flattened configs
    (`config_yaml.flatten`), NOT_TRAINING's left out: what `mt report` shows beside its runs."""
    keys = [k for k in dict.fromkeys(k for c in configs for k in c) if k not in NOT_TRAINING]
    return {
        k: [c.get(k) for c in configs] for k in keys if any(c.get(k) != configs[0].get(k) for c in configs)
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
