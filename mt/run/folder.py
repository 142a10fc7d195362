"""The run directory: reading a trained run (its checkpoint, tokenizer and metrics) and the files a
training writes there.

    DIR/config.yaml     the resolved config (also inside every checkpoint)
    DIR/spm.model       the joint BPE model
    DIR/train.log       the log of every start of the run
    DIR/metrics.jsonl   one JSON line per log window, validation and skipped update
    DIR/last.pt         the latest checkpoint: model, Adam, grad scaler, counters (`Progress`), RNG states
    DIR/best.pt         the checkpoint of the best validation score (train.best_metric)
    DIR/ckpt-STEP.pt    the model at a validation (train.keep_last); averaged.pt their mean (`mt average`)
    DIR/card.json       what the run was and what it scored (mt.run.card)
    DIR/eval-KEY.json   an evaluation (mt.evaluate), with hyp-KEY.txt and ref-SPLIT.txt beside it
    DIR/ct2/            the CTranslate2 export (`mt export`, mt.ct2)
    DIR/replaced-*/     an earlier run's files, moved aside by `mt train --force-new`

    DIR/train.lock      held (flock) while a training writes DIR

Checkpoints are mt.run.checkpoint's, the card mt.run.card's, metrics.jsonl mt.run.metrics_log's;
resuming is mt.training.session's. Reading a run (`load_run`, `run_decoding`, `result_name`, and
decode.rerank's runs: `open_reverse`) checks everything and writes nothing; a damaged file is a one-line
RunDirError. Writing: `open_run_dir` makes a run's first writes once every input has been checked,
`locked` keeps a second training out, `run_log` is train.log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import logging
import logging.handlers
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from mt.config import RunConfig, read_saved_config, save_config
from mt.decode_config import TUNED, DecodeConfig
from mt.model import Seq2Seq
from mt.output_pieces import written_pieces
from mt.plumbing.errors import RunDirError, WriteError
from mt.plumbing.files import write_failure
from mt.run.card import card_tuning
from mt.run.checkpoint import build_model, load_checkpoint, stored_config
from mt.run.metrics_log import MetricsLog, keep_metrics_until
from mt.run.names import evaluation_name, reverse_runs
from mt.tokenizer import Tokenizer

log = logging.getLogger(__name__)

LOG_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
ARCHIVED = (
    "last.pt",
    "best.pt",
    "averaged.pt",
    "ckpt-*.pt",
    "spm.model",
    "config.yaml",
    "metrics.jsonl",
    "card.json",
    "train.log",
    "eval-*.json",
    "hyp-*.txt",
    "ref-*.txt",
)


def run_tokenizer(run_dir: Path, ckpt: dict, ckpt_name: str, fix: str) -> Tokenizer:
    """DIR/spm.model, checked against the checkpoint's vocabulary size; `fix` says what to do if absent."""
    path = run_dir / "spm.model"
    if not path.is_file():
        raise RunDirError(f"{path}: not found, so {run_dir / ckpt_name} cannot be used; {fix}")
    try:
        proto = path.read_bytes()
    except OSError as e:
        raise RunDirError(f"{path}: cannot read ({e.strerror or e}); check its permissions") from None
    if ckpt["tokenizer_sha256"] != hashlib.sha256(proto).hexdigest():
        raise RunDirError(
            f"{path}: not the tokenizer {ckpt_name} was trained with (its sha256 differs: damaged "
            f"or replaced); restore the run's spm.model"
        )
    tokenizer = Tokenizer(proto, str(path))
    if tokenizer.vocab_size != ckpt["vocab_size"]:
        raise RunDirError(
            f"{path} has {tokenizer.vocab_size} pieces but {ckpt_name} expects "
            f"{ckpt['vocab_size']}; the run directory is inconsistent"
        )
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


def load_run(
    run_dir: str | Path, checkpoint: str = "best", overrides: list[str] = ()
) -> tuple[RunConfig, Tokenizer, Seq2Seq]:
    """Config, tokenizer and model (in eval mode, on CPU) from a run directory and one of its
    checkpoints (see `checkpoint_path`); the tokenizer cuts target-side text into the pieces the
    model writes (`Tokenizer.writing`); the config's decode section is the run's own (`run_decoding`:
    config.yaml's, with the tuned beam and length penalty of this checkpoint).

    `overrides` (`key.path=value`) change the loaded config, e.g. decode.beam=5; they are validated.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: run directory not found")
    path = checkpoint_path(run_dir, checkpoint)
    ckpt = load_checkpoint(path)
    cfg = stored_config(ckpt, path, overrides, run_decoding(run_dir, path, ckpt["config"].get("decode", {})))
    tokenizer = run_tokenizer(run_dir, ckpt, path.name, "the run directory is incomplete")
    model = build_model(ckpt, cfg, path).eval()
    return cfg, tokenizer.writing(written_pieces([model])), model


def run_decoding(run_dir: Path, checkpoint: Path, stored: dict) -> dict:
    """How the run translates `checkpoint` unless told otherwise: the decode section of DIR/config.yaml
    (training writes its config's; the checkpoint's `stored` one where the file is missing), with the
    options that `mt tune` chose for this very checkpoint file over it (`TUNED`: beam and length penalty,
    and MBR or reranking where it tried them). The card's
    `tuning` is the one home of a tuned decoding: nothing else writes it, and every command and the
    Python API open a run through here (their own options still win)."""
    path = run_dir / "config.yaml"
    decode = dataclasses.asdict(read_saved_config(path).decode) if path.exists() else dict(stored)
    tuning = card_tuning(run_dir, checkpoint)
    if tuning and not decode.get("sample"):  # a sampling run does not search: tune refuses it
        decode |= tuned_options(run_dir, tuning)
        decode["n_best"] = min(decode.get("n_best", 1), decode["beam"])
    return decode


def tuned_options(run_dir: Path, tuning: dict) -> dict:
    """The options `mt tune` chose (`TUNED`), as a command applies them: reverse runs named from the
    working directory (`runs_from`)."""
    chosen = {key: value for key, value in tuning["chosen"].items() if key in TUNED}
    if chosen.get("rerank"):
        chosen["rerank"] = runs_from(chosen["rerank"], Path(run_dir))
    return chosen


def stored_runs(rerank: str, run_dir: str | Path) -> str:
    """decode.rerank's runs (as given: from the working directory) as the card of `run_dir` stores
    them, relative to the run: the tuned run then opens from any folder, and moves with them."""
    run_dir = Path(run_dir).resolve()
    return ",".join(os.path.relpath(Path(run).resolve(), run_dir) for run in reverse_runs(rerank))


def runs_from(stored: str, run_dir: Path) -> str:
    """The runs a card's decode.rerank names (`stored_runs`: from the run's resolved folder, so a run
    folder that is a link finds them where the run really is), from the working directory (absolute
    where `run_dir` is); a card tuned before runs were stored that way names them from the folder it
    was tuned in, where no run lies at the stored path from the run."""
    found = []
    for run in reverse_runs(stored):
        beside = os.path.normpath(run_dir.resolve() / run)
        beside = beside if run_dir.is_absolute() else os.path.relpath(beside)
        found.append(run if not Path(beside).is_dir() and Path(run).is_dir() else beside)
    return ",".join(found)


def open_reverse(rerank: str, cfg: RunConfig, device: torch.device) -> list[tuple[Tokenizer, Seq2Seq]]:
    """decode.rerank's runs opened at best.pt: each must translate cfg's target language into its
    source, or learn both directions (data.both_directions: `make bit`'s first stage reranks its own
    child at no extra training)."""
    reverse = []
    for run in reverse_runs(rerank):
        if not Path(run).is_dir():
            raise RunDirError(
                f'rerank {run}: run directory not found; give the reverse run\'s folder, or rerank "" '
                f"(--rerank '') to translate without reranking"
            )
        theirs, tokenizer, model = load_run(run)
        wanted = (cfg.data.tgt_lang, cfg.data.src_lang)
        languages = (theirs.data.src_lang, theirs.data.tgt_lang)
        if languages != wanted and not (theirs.data.both_directions and languages == wanted[::-1]):
            arrow = "<->" if theirs.data.both_directions else "->"
            raise RunDirError(
                f"rerank {run}: it translates {arrow.join(languages)}; reranking needs a run that "
                f"translates {'->'.join(wanted)} (or both ways: data.both_directions)"
            )
        reverse.append((tokenizer, model.to(device)))
    return reverse


def result_name(run_dir: Path, setting: str) -> str:
    """The card's key of an evaluation as `mt report` and its RUN@SETTING spell it. SPLIT-tuned is the
    run's own decoding on SPLIT: what a plain `mt evaluate --run DIR --split SPLIT` files, under the name
    of best.pt's decoding as `run_decoding` layers `mt tune`'s choice over the config's
    (test-beam10-lp1.5-rerank-...); each result is stored once, under that name. Any other setting is
    the key itself."""
    if not setting.endswith("-tuned"):
        return setting
    path = checkpoint_path(run_dir)
    decode = DecodeConfig(**run_decoding(run_dir, path, {}))
    return evaluation_name(setting.removesuffix("-tuned"), decode, path.stem)


def archive_previous(run_dir: Path) -> None:
    """--force-new: move the previous run's files into DIR/replaced-<time>/ rather than delete them
    (where it has any: a last.pt)."""
    if not (run_dir / "last.pt").exists():
        return
    dest = run_dir / time.strftime("replaced-%Y%m%d-%H%M%S")
    try:
        dest.mkdir()
        for pattern in ARCHIVED:
            for path in run_dir.glob(pattern):
                path.rename(dest / path.name)
    except OSError as e:
        raise write_failure(dest, e) from None
    log.info("--force-new: moved the previous run's files to %s", dest)


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold DIR/train.lock while a training writes DIR: a second `mt train` on it is refused. The lock
    is the kernel's (flock), so it ends with the process however it ends: a crash leaves none behind."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / "train.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise write_failure(run_dir / "train.lock", e) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise RunDirError(
                f"{run_dir} is being trained by {holder}; wait for it to finish or stop it (Ctrl-C "
                f"saves and exits), or use another --run-dir"
            ) from None
        holder = f"mt train (pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode(), 0)
        except OSError as e:
            raise write_failure(run_dir / "train.lock", e) from None
        yield
    finally:
        os.close(fd)


class RunLogHandler(logging.FileHandler):
    """DIR/train.log: a record the OS refuses to write stops the run with a WriteError, as a refused
    checkpoint does (logging's default prints a traceback and goes on)."""

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            raise write_failure(self.baseFilename, error) from None
        super().handleError(record)


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
        try:
            handler = RunLogHandler(path, encoding="utf-8")
        except OSError as e:
            raise write_failure(path, e) from None
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
            with contextlib.suppress(OSError, WriteError):  # a refused write is already on its way
                handler.close()


def open_run_dir(
    run_dir: Path,
    cfg: RunConfig,
    tokenizer: Tokenizer,
    resume_step: int | None,
    start_log: Callable[[Path], None],
    board: type | None = None,
) -> MetricsLog:
    """The run's first writes, made once every check on user input has passed and the previous run is
    archived where --force-new asked (`archive_previous`): train.log, config.yaml, spm.model (fresh
    runs) and metrics.jsonl (cut back to the resumed step), and with `board` (`tensorboard_writer`) a
    TensorBoard event file in DIR whose events after the resumed step are hidden, as those rows are cut."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_failure(run_dir, e) from None
    start_log(run_dir / "train.log")
    save_config(cfg, run_dir / "config.yaml")
    metrics = run_dir / "metrics.jsonl"
    if resume_step is None:
        tokenizer.save(run_dir / "spm.model")
    else:
        keep_metrics_until(metrics, resume_step)
    purge = None if resume_step is None else resume_step + 1
    writer = board(str(run_dir), purge_step=purge, flush_secs=30) if board else None
    return MetricsLog(metrics, append=resume_step is not None, board=writer)
