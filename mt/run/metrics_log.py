"""metrics.jsonl, a run's numbers as it trains: one JSON object a line (a log window, a validation, a
skipped update: mt.run.records's METRICS_ROWS), written and flushed as the loop goes (`MetricsLog`,
with TensorBoard's copy where train.tensorboard), cut back to the step a run resumes from, and read by
the report, the resume and the end of training.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from mt.config import TrainConfig
from mt.plumbing.errors import ConfigError, RunDirError
from mt.plumbing.files import write_failure, write_text
from mt.run.records import metrics_row_problem

log = logging.getLogger(__name__)


def read_metrics(path: Path) -> list[dict]:
    """DIR/metrics.jsonl's rows ([] without the file); reads only. A last line cut short (no newline
    after it: a crash while writing) is left out with a warning; any other line that is not what mt
    writes is a DataError naming its number."""
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return []
    except OSError as e:
        raise RunDirError(f"{path}: cannot read ({e.strerror or e}); check its permissions") from None
    rows = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            row = None
        problem = metrics_row_problem(row) if row is not None else "not JSON"
        if problem and number == len(lines):
            log.warning("%s: line %d is incomplete (cut short while being written?); left out", path, number)
        elif problem:
            raise RunDirError(
                f"{path}: line {number}: {problem}; fix or delete that line (mt writes one JSON "
                f"object a line)"
            )
        else:
            rows.append(row)
    return rows


def keep_metrics_until(path: Path, step: int) -> None:
    """Drop metrics written after the checkpoint we resume from (and a half-written last line)."""
    write_text(path, "".join(json.dumps(row) + "\n" for row in read_metrics(path) if row["step"] <= step))


class MetricsLog:
    """DIR/metrics.jsonl, one JSON object a line, flushed as written; `report` and resume read it. A
    line the OS refuses is a WriteError that stops the run, never a row silently lost (resume drops
    a half-written last line). `board`: a TensorBoard SummaryWriter that gets every number of every
    row as the scalar of the same name, at the row's step. `val_losses`: (step, val loss) of every
    validation of the run, a resumed run's earlier ones too, read from the file once, at opening."""

    def __init__(self, path: Path, append: bool, board: Any = None):
        self.path, self.board = path, board
        rows = read_metrics(path) if append else []
        self.val_losses = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
        try:
            self.file = open(path, "a" if append else "w", encoding="utf-8")
        except OSError as e:
            raise write_failure(path, e) from None

    def write(self, record: dict) -> None:
        try:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        except OSError as e:
            raise write_failure(self.path, e) from None
        if record.get("val_loss") is not None:
            self.val_losses.append((record["step"], record["val_loss"]))
        for key, value in record.items() if self.board else ():
            if key != "step" and type(value) in (int, float):
                self.board.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if self.board:
            self.board.close()
        with contextlib.suppress(OSError):  # after a refused write: the error is already on its way
            self.file.close()


def tensorboard_writer(train: TrainConfig) -> type | None:
    """torch's SummaryWriter where train.tensorboard asks for one (checked before a run's first write),
    else None."""
    if not train.tensorboard:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            "train.tensorboard: needs the tensorboard package; pip install 'mt[tensorboard]' (or "
            "tensorboard), or set train.tensorboard: false"
        ) from None
    return SummaryWriter
