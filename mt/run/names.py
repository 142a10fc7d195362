"""How a run's evaluations are named: from the split, the DecodeConfig that decoded it, the checkpoint
and the ensemble, a name that eval files (eval-NAME.json, hyp-NAME.txt) and the card's results use, and
that differs wherever two evaluations may differ (tests/test_decode_config.py draws every option)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from mt.decode_config import DecodeConfig


def sampling_name(decode: DecodeConfig) -> str:
    """How a sampled evaluation is told apart: topk20-t0.7-seed3 ("" when searching)."""
    if not decode.sample:
        return ""
    temperature = f"-t{decode.temperature:g}" if decode.temperature != 1.0 else ""
    return f"{decode.sample.replace(':', '')}{temperature}-seed{decode.seed}"


def mbr_name(decode: DecodeConfig) -> str:
    """How an MBR evaluation is told apart: mbrchrf, mbrbleu-s16-t0.5-seed3 ("" without MBR)."""
    if not decode.mbr:
        return ""
    if not decode.mbr_samples:
        return f"mbr{decode.mbr}"
    temperature = f"-t{decode.mbr_temperature:g}" if decode.mbr_temperature != 1.0 else ""
    seed = f"-seed{decode.seed}" if decode.seed else ""
    return f"mbr{decode.mbr}-s{decode.mbr_samples}{temperature}{seed}"


def reverse_runs(rerank: str) -> list[str]:
    """decode.rerank's runs: "runs/a,runs/b" -> ["runs/a", "runs/b"]."""
    return [run.strip() for run in rerank.split(",") if run.strip()]


def rerank_name(decode: DecodeConfig) -> str:
    """How a reranked evaluation is told apart: rerank-m30k-en-de-w0.5, by the reverse runs' folders."""
    if not decode.rerank:
        return ""
    runs = "+".join(Path(run).name for run in reverse_runs(decode.rerank))
    return f"rerank-{runs}-w{decode.rerank_weight:g}"


def engine_name(decode: DecodeConfig) -> str:
    """ "" for torch; ct2, or ct2-int8 where a compute type was chosen."""
    if decode.engine == "torch":
        return ""
    return "ct2" if decode.compute_type == "default" else f"ct2-{decode.compute_type}"


# How an evaluation's name spells the options that differ from DecodeConfig's defaults, in this order
# (an ensemble's -ensN stands between the search's options and sampling's, where it always has); a part
# is left out where its options change nothing (a length penalty without a beam, a temperature without
# sampling). A field no part spells is named `field=value`, so a new option can never let two
# evaluations that may differ share a name. UNNAMED: options that cannot change the 1-best translations
# an evaluation scores (n_best: beam search's best is the same, and draw 0 is what n_best 1 draws).
Part = tuple[tuple[str, ...], Callable[[DecodeConfig], str]]
SEARCH_PARTS: list[Part] = [
    (("beam",), lambda d: f"beam{d.beam}"),
    (("length_penalty",), lambda d: f"lp{d.length_penalty:g}" if d.beam > 1 else ""),
    (("max_len_a", "max_len_b"), lambda d: f"len{d.max_len_a:g}x+{d.max_len_b}"),
    (("no_repeat_ngram",), lambda d: f"norepeat{d.no_repeat_ngram}"),
    (("min_len",), lambda d: f"min{d.min_len}"),
    (("batch_tokens",), lambda d: f"bt{d.batch_tokens}"),  # padding may move a last-digit tie
    (("engine", "compute_type"), engine_name),
    (("split_sentences",), lambda d: "split"),
    (("mbr", "mbr_samples", "mbr_temperature", "seed"), lambda d: mbr_name(d)),
    (("rerank", "rerank_weight"), lambda d: rerank_name(d)),
]
SAMPLING_PART: Part = (("sample", "temperature", "seed"), sampling_name)
UNNAMED = ("n_best",)


def evaluation_name(split: str, decode: DecodeConfig, checkpoint: str = "best", ensemble: int = 1) -> str:
    """How an evaluation is named in cards and eval files: the split, then each option that differs
    from the defaults (test-beam5, test-beam5-lp0.6, -ct2-int8, -topk20-t0.7-seed3, ...), -ensN for an
    ensemble of N runs, and -last (or another checkpoint's name) when it did not use best.pt."""
    default = DecodeConfig()
    differs = [
        f.name
        for f in dataclasses.fields(DecodeConfig)
        if getattr(decode, f.name) != getattr(default, f.name)
    ]

    def spelled(parts):
        return [spell(decode) for fields, spell in parts if set(differs) & set(fields)]

    named = {f for fields, _ in [*SEARCH_PARTS, SAMPLING_PART] for f in fields} | set(UNNAMED)
    parts = [
        split,
        *spelled(SEARCH_PARTS),
        f"ens{ensemble}" if ensemble > 1 else "",
        *spelled([SAMPLING_PART]),
    ]
    parts += [f"{key}={getattr(decode, key)}" for key in differs if key not in named]
    parts += [checkpoint] if checkpoint != "best" else []
    return "-".join(part for part in parts if part)


def chooser_text(setting: dict, run_dir: str | Path | None = None) -> str:
    """How a card or a report says what chose the translation after the search, given a decode config's
    fields: ", MBR by sentence chrf over the beam and 16 samples", ", reranked by runs/en-de at weight
    0.5", or "" for the search's own best. A reverse run that is `run_dir` itself (a both-directions
    run reranking its own beam) is "itself"."""
    if setting.get("mbr"):
        return f", MBR by sentence {setting['mbr']} over the beam and {setting.get('mbr_samples', 0)} samples"
    if setting.get("rerank"):
        itself = Path(run_dir).resolve() if run_dir is not None else None
        runs = ["itself" if Path(run).resolve() == itself else run for run in reverse_runs(setting["rerank"])]
        return f", reranked by {','.join(runs)} at weight {setting.get('rerank_weight', 1.0):g}"
    return ""
