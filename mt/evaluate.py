"""Evaluating a run: translate a split with its checkpoint, score it, and record the result (eval
files and the run card)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


from mt.card import (
    code_version,
    config_section,
    engine_name,
    hardware,
    read_card,
    result_key,
    sampling_name,
    update_card,
)
from mt.config import RunConfig
from mt.data import load_split, read_parallel
from mt.distributed import resolve_device
from mt.files import write_text
from mt.model import Seq2Seq, count_parameters
from mt.lineage import ensemble_of
from mt.rundir import checkpoint_path, decoding_model, load_run, read_metrics
from mt.translate import score, translate_lines


def lines_sha256(lines: list[str]) -> str:
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


def evaluate_run(
    run_dir: str | Path,
    split: str = "test",
    device: str = "auto",
    overrides: list[str] = (),
    checkpoint: str = "best",
    files: tuple[str, str] | None = None,
    ensemble: list[str] = (),
) -> dict:
    """Translate a corpus split (or `files`: a source and a reference file) with a checkpoint and score
    it; write DIR/eval-<key>.json, the translations (hyp-<key>.txt), the references (ref-<name>.txt, for
    `mt report`), and the card's results. <key> names the data and the decoding setting: test,
    test-beam5, test-beam5-lp0.6, test-beam5-ens2 (with `ensemble`'s runs), test-last (another
    checkpoint than best), news.de (files).

    `overrides` are `key.path=value` strings applied to the run's config (e.g. decode.beam=5). The
    result lists the files written under "written".
    """
    run_dir = Path(run_dir)
    card = read_card(run_dir)  # damage in the card or metrics is reported before anything is written
    rows = read_metrics(run_dir / "metrics.jsonl") if "training" not in card else []
    path = checkpoint_path(run_dir, checkpoint)
    cfg, tokenizer, model = load_run(run_dir, str(path), overrides)
    name, (src, ref) = evaluation_data(cfg, split, files)
    dev, decode = resolve_device(device), cfg.decode
    searcher = decoding_model(
        run_dir, decode, tokenizer, ensemble_of(run_dir, ensemble, checkpoint, tokenizer, model, decode), dev
    )
    hyps = translate_lines(searcher, tokenizer, src, cfg.decode, dev, max_source_pieces=cfg.data.max_len)
    engine = engine_name(decode.engine, decode.compute_type)
    key = result_key(
        name, decode.beam, decode.length_penalty, path.stem, engine, sampling_name(decode), 1 + len(ensemble)
    )
    result = {
        "split": name,
        "checkpoint": str(path),
        "beam": cfg.decode.beam,
        "length_penalty": cfg.decode.length_penalty,
        **({"engine": decode.engine, "compute_type": decode.compute_type} if engine else {}),
        **({"ensemble": [str(run_dir), *ensemble]} if ensemble else {}),
        **score(hyps, ref),
        "refs_sha256": lines_sha256(ref),
        "hyp_file": f"hyp-{key}.txt",
        "ref_file": f"ref-{name}.txt",
    }
    sections = {} if "training" in card else describe_untracked_run(rows, cfg, model)
    written = write_result(run_dir, key, result, hyps, ref, card, sections)
    return {**result, "key": key, "written": [str(p) for p in written]}


def write_result(
    run_dir: Path, key: str, result: dict, hyps: list[str], ref: list[str], card: dict, sections: dict
) -> list[Path]:
    """The evaluation's files (translations, references, eval-<key>.json) and the card's result."""
    written = [run_dir / result["hyp_file"], run_dir / result["ref_file"], run_dir / f"eval-{key}.json"]
    write_text(written[0], "".join(h + "\n" for h in hyps))
    write_text(written[1], "".join(r + "\n" for r in ref))
    write_text(written[2], json.dumps(result, indent=2) + "\n")
    update_card(run_dir, **sections, results={**card.get("results", {}), key: result})
    return written + [run_dir / "card.json"]


def evaluation_data(cfg: RunConfig, split: str, files: tuple[str, str] | None) -> tuple[str, tuple]:
    """(name, (sources, references)): the run's split, or `files` named by the source file's name."""
    if files:
        return Path(files[0]).name, read_parallel(*map(Path, files))
    return split, load_split(cfg.data, split)


def describe_untracked_run(rows: list[dict], cfg: RunConfig, model: Seq2Seq) -> dict:
    """Card sections for a run trained before cards existed, rebuilt from its metrics.jsonl `rows`;
    tokens/s is the mean of the logged windows, and code/hardware are those of this evaluation."""
    logs, vals = [r for r in rows if "loss" in r], [r for r in rows if "val_bleu" in r]
    best = max(vals, key=lambda r: r["val_bleu"], default={})
    training = {
        "steps": max((r["step"] for r in rows), default=0),
        "epochs": max((r.get("epoch", 0) for r in logs), default=0),
        "wall_s": max((r["elapsed_s"] for r in rows if "elapsed_s" in r), default=None),
        "train_s": None,
        "tokens_per_s": round(sum(r["tokens_per_s"] for r in logs) / max(len(logs), 1), 1),
        "best_step": best.get("step"),
        "best_val_bleu": best.get("val_bleu"),
        "best_val_chrf": best.get("val_chrf"),
        "stopped": "",
        "rebuilt_from_metrics": True,
    }
    return {
        "config": config_section(cfg),
        "parameters": count_parameters(model),
        "precision": cfg.train.precision,
        "code": {**code_version(), "recorded_by": "evaluate"},
        "hardware": hardware(resolve_device("auto")),
        "training": training,
    }
