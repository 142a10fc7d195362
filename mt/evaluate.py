"""Evaluating a run: translate a split (or a pair of files) with an opened run (mt.translator), score
it (mt.plumbing.metrics), and record the result: eval files and the run card."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from mt.config import RunConfig
from mt.data import load_split, read_parallel
from mt.devices import resolve_device
from mt.model import Seq2Seq, count_parameters
from mt.plumbing.files import write_text
from mt.plumbing.metrics import corpus_scores
from mt.run.card import read_card, training_record, update_card
from mt.run.checkpoint import load_checkpoint
from mt.run.names import evaluation_name
from mt.run.progress import progress_of
from mt.run.provenance import code_version, config_section, hardware
from mt.translator import Translator


def lines_sha256(lines: list[str]) -> str:
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


def evaluate_run(translator: Translator, split: str = "test", files: tuple[str, str] | None = None) -> dict:
    """Translate a corpus split (or `files`: a source and a reference file) with an opened run and
    score it; write DIR/eval-<key>.json, the translations (hyp-<key>.txt), the references
    (ref-<name>.txt, for `mt report`), and the card's results. <key> names the data and every
    decoding option that can change the translations (`mt.run.names.evaluation_name`): test,
    test-beam5, test-beam5-lp0.6, test-beam5-ens2 (an ensemble), test-last (another checkpoint than
    best), news.de (files). The result records the whole decode config, and lists the files written
    under "written"."""
    run_dir, cfg, decode = translator.run, translator.config, translator.decode
    card = read_card(run_dir)  # damage in the card or metrics is reported before anything is written
    tokenize = cfg.bleu_tokenize  # a named tokenizer that is not installed is refused before decoding
    name, (src, ref) = evaluation_data(cfg, split, files)
    hyps = translator.translate(src)
    ensemble = [str(run_dir), *translator.ensemble] if translator.ensemble else []
    key = evaluation_name(name, decode, translator.checkpoint.stem, max(len(ensemble), 1))
    result = {
        "split": name,
        "checkpoint": str(translator.checkpoint),
        "beam": decode.beam,
        "length_penalty": decode.length_penalty,
        **(
            {"engine": decode.engine, "compute_type": decode.compute_type} if decode.engine != "torch" else {}
        ),
        **({"ensemble": ensemble} if ensemble else {}),
        **corpus_scores(hyps, ref, sources=src, tokenize=tokenize),
        "refs_sha256": lines_sha256(ref),
        "hyp_file": f"hyp-{key}.txt",
        "ref_file": f"ref-{name}.txt",
        "decode": dataclasses.asdict(decode),
    }
    sections = {} if "training" in card else rebuilt_card(run_dir, cfg, translator.model)
    written = write_result(run_dir, key, result, hyps, ref, sections)
    return {**result, "key": key, "written": [str(p) for p in written]}


def write_result(
    run_dir: Path, key: str, result: dict, hyps: list[str], ref: list[str], sections: dict
) -> list[Path]:
    """The evaluation's files (translations, references, eval-<key>.json) and the card's result under
    `key`, once (SPLIT-tuned names it where it is the run's own decoding: mt.run.folder.result_name),
    with the card's other `sections`."""
    written = [run_dir / result["hyp_file"], run_dir / result["ref_file"], run_dir / f"eval-{key}.json"]
    write_text(written[0], "".join(h + "\n" for h in hyps))
    write_text(written[1], "".join(r + "\n" for r in ref))
    write_text(written[2], json.dumps(result, indent=2) + "\n")
    results = {**read_card(run_dir).get("results", {}), key: result}
    update_card(run_dir, **sections, results=results)
    return written + [run_dir / "card.json"]


def evaluation_data(cfg: RunConfig, split: str, files: tuple[str, str] | None) -> tuple[str, tuple]:
    """(name, (sources, references)): the run's split, or `files` named by the source file's name."""
    if files:
        return Path(files[0]).name, read_parallel(*map(Path, files))
    return split, load_split(cfg.data, split)


def rebuilt_card(run_dir: Path, cfg: RunConfig, model: Seq2Seq) -> dict:
    """The sections of a card.json that is gone (deleted, damaged, or a run trained before cards):
    the run's config and size; the training record as the end of training writes it
    (`training_record`), from last.pt's counters, with why it stopped unknown; the code and hardware
    of this evaluation, marked so. A run without last.pt gets no training record."""
    sections = {
        "config": config_section(cfg),
        "parameters": count_parameters(model),
        "precision": cfg.train.precision,
        "code": {**code_version(), "recorded_by": "evaluate"},
        "hardware": hardware(resolve_device("auto")),
    }
    if (run_dir / "last.pt").exists():
        progress = progress_of(load_checkpoint(run_dir / "last.pt"))
        stopped = "unknown: card.json rebuilt from last.pt"
        sections["training"] = {**training_record(cfg.train, progress, stopped), "rebuilt_from": "last.pt"}
    return sections
