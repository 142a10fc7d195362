"""A run's parent: the run whose weights (`train.init_from`, fine-tuning) or tokenizer
(`tokenizer.from_run`) it starts from, each checked before the run writes anything, and the lineage its
card records. (Runs that decode together, an ensemble, are opened by mt.translator.) A run trained on a
distilled corpus (mt.distill) records its teacher, from the corpus folder's teacher.json.

A child of `train.init_from: RUN[@best|last|averaged|FILE]` starts from that checkpoint's weights with
a fresh optimizer, step counter and schedule, and tokenizes with RUN's spm.model unchanged. Its model
section must describe the same network (only the dropout keys may differ) and its tokenizer section
must equal RUN's: a mismatch is refused in one line naming every differing key. A child resumes as any
run does (a re-run continues the child); `--force-new` starts it from its parent again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from mt.config import RunConfig, read_saved_config
from mt.plumbing.errors import ConfigError, DataError, RunDirError
from mt.plumbing.files import file_sha256
from mt.run.checkpoint import load_checkpoint, stored_config
from mt.run.folder import checkpoint_path, run_tokenizer
from mt.run.records import Teacher, TeacherFile, problem
from mt.tokenizer import Tokenizer

TRAINING_ONLY = ("dropout", "attention_dropout", "activation_dropout")  # model keys a child may change
# tokenizer keys a run that uses another's spm.model need not repeat: how that BPE was chosen (auto, 0,
# resolves from the text; a run from before auto existed says 1.0), not what it is
HOW_BPE_CHOSE = ("from_run", "character_coverage")
TEACHER = "teacher.json"  # in a distilled corpus folder: what made it (mt.distill)


@dataclass
class Parent:
    """The checkpoint a child starts from, loaded and checked."""

    run: Path
    checkpoint: Path
    ckpt: dict
    tokenizer: Tokenizer
    sha256: str  # of the checkpoint file: which model, exactly, the child came from

    def record(self) -> dict:
        """The card's `parent`."""
        return {"run": str(self.run), "checkpoint": self.checkpoint.name, "sha256": self.sha256}


def parse_init_from(spec: str) -> tuple[Path, str]:
    """RUN[@CHECKPOINT] -> (RUN, CHECKPOINT); best when none is named."""
    run, at, which = spec.rpartition("@")
    return (Path(run), which) if at and run and which else (Path(spec), "best")


def parent_of(cfg: RunConfig, run_dir: Path) -> Parent | None:
    """train.init_from's checkpoint and tokenizer, checked against this run's config; None without one."""
    if not cfg.train.init_from:
        return None
    run, which = parse_init_from(cfg.train.init_from)
    source = other_run(run, run_dir, "train.init_from")
    path = checkpoint_path(source, which)
    try:
        ckpt = load_checkpoint(path)
        theirs = stored_config(ckpt, path)
        tokenizer = run_tokenizer(source, ckpt, path.name, "restore it, or start from another run")
        sha256 = file_sha256(path)
    except (RunDirError, OSError) as e:
        raise RunDirError(f"train.init_from: {e}") from None
    differences = mismatches(theirs, cfg, "model", source, ignore=TRAINING_ONLY)
    differences += mismatches(theirs, cfg, "tokenizer", source, ignore=HOW_BPE_CHOSE)
    if differences:
        raise ConfigError(
            f"train.init_from: {'; '.join(differences)}: a child describes its parent's network and "
            f"tokenizer (only model dropouts may differ)"
        )
    return Parent(source, path, ckpt, tokenizer, sha256)


def shared_tokenizer(cfg: RunConfig, run_dir: Path) -> tuple[Tokenizer, dict]:
    """tokenizer.from_run's spm.model, and the card's `tokenizer_from`: (run, sha256)."""
    source = other_run(Path(cfg.tokenizer.from_run), run_dir, "tokenizer.from_run")
    path = source / "spm.model"
    try:
        theirs = read_saved_config(source / "config.yaml")
        proto = path.read_bytes()
        tokenizer = Tokenizer(proto, str(path))
    except (ConfigError, RunDirError, OSError, RuntimeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        raise RunDirError(f"tokenizer.from_run: {path}: cannot use it ({reason})") from None
    differences = mismatches(theirs, cfg, "tokenizer", source, ignore=HOW_BPE_CHOSE)
    if differences:
        raise ConfigError(f"tokenizer.from_run: {'; '.join(differences)}: set them as that run has them")
    return tokenizer, {"run": str(source), "sha256": hashlib.sha256(proto).hexdigest()}


def other_run(run: Path, run_dir: Path, key: str) -> Path:
    """`run` (named by config `key`), a run directory that exists and is not this run's own."""
    if not run.is_dir():
        raise RunDirError(f"{key}: {run}: run directory not found")
    if run.resolve() == run_dir.resolve():
        raise ConfigError(
            f"{key}: {run} is this run's own directory; name another run, or train in another --run-dir"
        )
    return run


def mismatches(theirs: RunConfig, ours: RunConfig, section: str, source: Path, ignore=()) -> list[str]:
    """'model.d_model: 256 in RUN, 128 here' for each key of `section` that differs."""
    a, b = (dataclasses.asdict(getattr(cfg, section)) for cfg in (theirs, ours))
    return [
        f"{section}.{k}: {a[k]!r} in {source}, {b[k]!r} here" for k in a if k not in ignore and a[k] != b[k]
    ]


def read_teacher(folder: Path) -> dict:
    """FOLDER/teacher.json, checked against records.TeacherFile: the one reader of what made a
    distilled corpus (mt.distill checks a reused folder with it; a student's card records it). A
    missing, unreadable or damaged file is a one-line DataError."""
    path = folder / TEACHER
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    found = problem(TeacherFile, record) if record is not None else "unreadable"
    if found:
        raise DataError(f"{path}: damaged ({found}); run mt distill again to rewrite the distilled corpus")
    return record


def teacher_of(cfg: RunConfig) -> dict:
    """The card's `teacher` of a run trained on a distilled corpus (records.Teacher, from its folder's
    teacher.json: the teacher run, checkpoint sha256, decoding, time spent, whether the references
    follow); else {}."""
    folder = Path(cfg.data.dir)
    if cfg.data.corpus != "files" or not (folder / TEACHER).exists():
        return {}
    record = read_teacher(folder)
    keys = [f.name for f in dataclasses.fields(Teacher)]
    return {
        "teacher": {key: record[key] for key in keys if key in record}
        | {"references": bool(record.get("references"))}
    }
