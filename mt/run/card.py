"""The run card, DIR/card.json: what a run was and what it scored, in one file for `mt report`.

Training writes the config, code, hardware and training sections when it stops (mt.run.provenance says
what goes in them); `mt evaluate` adds its scores. Each writer updates only its own sections, the card
is checked against records.Card when read, and the file is replaced atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from mt.config import TrainConfig
from mt.plumbing.errors import RunDirError
from mt.plumbing.files import file_sha256, write_text
from mt.plumbing.metrics import BEST_METRICS, HEADLINE
from mt.run.progress import Progress
from mt.run.records import Card, require


def read_card(run_dir: str | Path) -> dict:
    """DIR/card.json ({} if there is none), checked against records.Card; a damaged or unreadable one is a
    one-line RunDirError (and is never overwritten)."""
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


def card_tuning(run_dir: str | Path, checkpoint: Path) -> dict | None:
    """The card's `tuning` where `mt tune` made it on this very checkpoint file (same sha256), else None."""
    tuning = read_card(run_dir).get("tuning")
    if not tuning or not checkpoint.exists() or tuning["checkpoint_sha256"] != file_sha256(checkpoint):
        return None
    return tuning


def card_summary(run_dir: str | Path) -> dict:
    """What `mt serve` shows of a run: its training in brief and the BLEU/chrF of each evaluation."""
    card = read_card(run_dir)
    training = card.get("training", {})
    return {
        "steps": training.get("steps"),
        **{f"best_val_{m.key}": training.get(f"best_val_{m.key}") for m in HEADLINE},
        "stopped": training.get("stopped"),
        "parameters": card.get("parameters"),
        "results": {k: {m.key: r.get(m.key) for m in HEADLINE} for k, r in card.get("results", {}).items()},
        # the page labels the scores from mt.plumbing.metrics
        "headline": [[m.key, m.label] for m in HEADLINE],
    }


def update_card(run_dir: str | Path, **sections) -> dict:
    """Replace the given top-level sections of DIR/card.json (created if missing), atomically."""
    path = Path(run_dir) / "card.json"
    card = {**read_card(run_dir), **sections}
    write_text(path, json.dumps(card, indent=2) + "\n")
    return card


def training_record(
    t: TrainConfig,
    p: Progress,
    stopped: str,
    multiply_adds: float | None = None,
    pipeline: float | None = None,
) -> dict:
    """The card's account of the training: its counters, speed, compute (its own and its pipeline's,
    mt.training.compute; None where it cannot be counted), best validation and why it stopped."""
    return {
        "steps": p.step,
        "epochs": p.epoch,
        "wall_s": round(p.elapsed_s, 1),
        "train_s": round(p.train_seconds, 1),
        "tokens_per_s": round(p.tokens / max(p.train_seconds, 1e-9), 1),
        "multiply_adds": multiply_adds,
        "pipeline_multiply_adds": pipeline,
        "best_step": p.best_step,
        "best_metric": t.best_metric,
        **{f"best_val_{key}": p.best.get(key) for key in BEST_METRICS},
        "valid_beam": t.valid_beam,
        "nonfinite_skipped": p.nonfinite_total,
        "fp16_overflows": p.scaler_skips,
        "stopped": stopped,
    }
