"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher run translates its training
sources once, and a student trains on those translations (`mt distill`, then a config whose data is
the distilled folder). A student decoding greedily then comes near its teacher's beam search.

The distilled corpus is a `files` corpus folder: train.SRC (the sources, as read), train.TGT (the
teacher's translations), and the teacher's val and test files copied beside them (a student validates
and is tested on the real references). Its name is the teacher's checkpoint sha256 (and its
ensemble's) with the decoding settings, so the same teacher and settings find it again; teacher.json,
written last, says what made it, with the sha256 of each file, and checks it on reuse (the student's
card records it as `teacher`: mt.run.parent). Translation goes in chunks appended to train.TGT.partial,
each flushed to disk: a killed distillation resumes at the first line it lacks.

With `references`, the training files hold the teacher's pairs and then the original pairs (each source
twice): the student learns the teacher's choices and the references' variety, and on a corpus as small
as Multi30k overfits later (docs/results.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

import torch
from tqdm import tqdm

from mt.data import downloads_dir, load_split
from mt.ensemble import Ensemble
from mt.plumbing.errors import DataError
from mt.plumbing.files import file_sha256, write_failure, write_text
from mt.run.card import read_card
from mt.run.names import evaluation_name
from mt.run.parent import TEACHER, read_teacher
from mt.training.compute import card_pipeline, search_multiply_adds
from mt.translator import Translator

LINES_FLUSHED_AT_ONCE = 1000  # source lines a chunk: sorted into token-budget batches, appended, flushed


def distilled_root() -> Path:
    """Where distilled corpora go unless told: distilled/ beside the downloads (data/ of a checkout)."""
    return downloads_dir() / "distilled"


def teacher_record(t: Translator) -> dict:
    """Who translated: the run, its checkpoint's sha256 (and the ensemble's), the decoding settings."""
    runs = [t.run, *map(Path, t.ensemble)]
    return {
        "run": str(t.run),
        "checkpoint": t.checkpoint.name,
        "sha256": [file_sha256(run / t.checkpoint.name) for run in runs],
        "ensemble": [str(run) for run in runs[1:]],
        "decode": dataclasses.asdict(t.decode),
        "name": evaluation_name("train", t.decode, t.checkpoint.stem, len(runs)),
    }


def folder_for(record: dict, root: Path) -> Path:
    """Named by the teacher's run and settings, keyed by its checkpoints' sha256 and the decoding."""
    keyed, name = [record["sha256"], record["decode"]], record["name"]
    if record.get("references"):  # only then, so that the folders made before references stay found
        keyed, name = [*keyed, "references"], f"{name}-refs"
    key = hashlib.sha256(json.dumps(keyed).encode()).hexdigest()[:16]
    return root / f"{Path(record['run']).name}-{name}-{key}"


def distill(t: Translator, root: Path | None = None, references: bool = False) -> Path:
    """The distilled corpus of `t` (a teacher opened with its decoding settings): found, checked and
    reused; or made, resuming a killed run's partial file. `references`: the original pairs follow."""
    record = teacher_record(t) | ({"references": True} if references else {})
    folder = folder_for(record, root or distilled_root())
    if (folder / TEACHER).exists():
        check(folder, record)
        return folder
    data = t.config.data
    sources, targets = load_split(data, "train")
    names = {side: f"train.{lang}" for side, lang in (("src", data.src_lang), ("tgt", data.tgt_lang))}
    partial = folder / f"{names['tgt']}.partial"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        done, start = _resume(partial, len(sources)), time.perf_counter()
        _translate(t, sources, done, partial)
        record |= {"resumed_at": done, "translate_s": round(time.perf_counter() - start, 1)}
        record |= teacher_compute(t, sources, partial.read_text(encoding="utf-8").splitlines())
        _copy_held_out(t, folder)
        if references:  # the partial file stays until this is written whole: a kill here resumes
            write_text(folder / names["tgt"], partial.read_text(encoding="utf-8") + _text(targets))
            partial.unlink()
            sources = sources + sources
        else:
            os.replace(partial, folder / names["tgt"])
        write_text(folder / names["src"], _text(sources))
        files = sorted(p.name for p in folder.iterdir() if p.name != TEACHER)
        record |= {"lines": len(sources), "files": {name: file_sha256(folder / name) for name in files}}
        write_text(folder / TEACHER, json.dumps(record, indent=1) + "\n")
    except OSError as e:
        raise write_failure(folder, e) from None
    return folder


def teacher_compute(t: Translator, sources: list[str], translations: list[str]) -> dict:
    """teacher.json's compute (mt.training.compute): the pipelines of the teacher's runs, from their
    cards (None where one was never counted), and its translating of the sources, each of an
    ensemble's models counted over the same outputs."""
    pipelines = [card_pipeline(read_card(run)) for run in [t.run, *map(Path, t.ensemble)]]
    models = t.searcher.models if isinstance(t.searcher, Ensemble) else [t.model]
    src_len, out_len = (
        torch.tensor([len(ids) for ids in t.tokenizer.encode(lines)]) for lines in (sources, translations)
    )
    searching = [search_multiply_adds(m.cfg, m.output_size, src_len, out_len, t.decode.beam) for m in models]
    return {
        "pipeline_multiply_adds": None if None in pipelines else sum(pipelines),
        "translate_multiply_adds": sum(searching),
    }


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _resume(partial: Path, total: int) -> int:
    """The whole lines a killed distillation left in `partial` (a cut last line is dropped)."""
    if not partial.exists():
        return 0
    data = partial.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if len(whole) != len(data):
        partial.write_bytes(whole)
    lines = whole.count(b"\n")
    if lines > total:
        raise DataError(
            f"{partial}: {lines} lines, more than the {total} training sources; delete it to distill again"
        )
    return lines


def _translate(t: Translator, sources: list[str], done: int, partial: Path) -> None:
    """Translate sources[done:] in chunks, each appended to `partial` and flushed to disk."""
    with (
        open(partial, "a", encoding="utf-8") as out,
        tqdm(total=len(sources), initial=done, unit=" sent", desc="distill", disable=None) as bar,
    ):
        for start in range(done, len(sources), LINES_FLUSHED_AT_ONCE):
            chunk = sources[start : start + LINES_FLUSHED_AT_ONCE]
            out.write(_text(t.translate(chunk)))
            out.flush()
            os.fsync(out.fileno())
            bar.update(len(chunk))


def _copy_held_out(t: Translator, folder: Path) -> None:
    """The teacher's val and test files beside the distilled training pairs."""
    data = t.config.data
    for split in ("val", "test"):
        for lang, lines in zip((data.src_lang, data.tgt_lang), load_split(data, split)):
            write_text(folder / f"{split}.{lang}", _text(lines))


def check(folder: Path, record: dict) -> dict:
    """teacher.json of a distilled folder, checked: the same teacher and settings, every file as
    written; else a one-line DataError saying what to do."""
    stored = read_teacher(folder)
    damaged = [name for name, sha in stored["files"].items() if _sha256(folder / name) != sha]
    if damaged:
        raise DataError(
            f"{folder}: damaged distilled corpus ({', '.join(damaged)} not as {TEACHER} recorded); "
            f"delete the folder and run mt distill again"
        )
    if any(stored.get(key) != record.get(key) for key in ("sha256", "decode", "references")):
        raise DataError(
            f"{folder / TEACHER}: made by another teacher or other decoding settings; use another --out"
        )
    return stored


def _sha256(path: Path) -> str | None:
    """The file's sha256, None where it cannot be read (a deleted file of a distilled folder)."""
    try:
        return file_sha256(path)
    except OSError:
        return None
