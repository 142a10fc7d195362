"""What the scripts that measure a trained run share: its decoding flags, opening it, timing a decode,
scoring it. A helper of scripts/, not a script, and nothing mt needs.

The decoding flags are DecodeConfig's own, added by mt.arguments as every `mt` command has them
(--beam, --length-penalty, --engine, ...: typed, bounded and explained by the field), so a new decoding
option reaches these scripts with no change here. A run opens as `mt translate` opens it: the flags
given, a mistake named in the flags' terms (`--n-best 3 is more than --beam 1 ...`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from mt.arguments import decoding_options
from mt.data import load_split
from mt.decode_config import DecodeConfig
from mt.plumbing.metrics import corpus_scores
from mt.plumbing.spelling import COMMAND_LINE

if TYPE_CHECKING:
    import torch

    from mt.translator import Translator

T = TypeVar("T")


def decoding_flags(
    parser: argparse.ArgumentParser, skip: tuple[str, ...] = ("n_best",), **defaults: Any
) -> None:
    """DecodeConfig's flags on `parser`, but those in `skip` (options the script fixes itself, or that
    it would ignore). A flag's dest is its field and its default None keeps the run's value;
    `defaults` are the script's own where it does not start from the run's (bench_decode: beam=1)."""
    decoding_options(parser, None, skip)
    parser.set_defaults(**defaults)
    for action in parser._actions:
        if action.dest in defaults:
            action.help += f" (here: {defaults[action.dest]} unless given, not the run's)"


def decoding_given(args: argparse.Namespace) -> dict[str, Any]:
    """The decoding options given as flags (or defaulted by the script): {field: value}."""
    given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(DecodeConfig)}
    return {key: value for key, value in given.items() if value is not None}


def as_flags(options: dict[str, Any]) -> list[str]:
    """Decoding options as `mt translate` and `mt serve` take them: {"beam": 5} -> ["--beam", "5"]."""
    flags: list[str] = []
    for key, value in options.items():
        flag = COMMAND_LINE.name(key)
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        else:
            flags += [flag, str(value)]
    return flags


def open_run(run: str | Path, args: argparse.Namespace | None = None, **options: Any) -> Translator:
    """`run` opened at best.pt as `mt translate --run RUN` opens it: the decoding flags given in `args`,
    then `options` over them (what the script fixes: device="cpu", engine="torch", ...)."""
    from mt.translator import Translator

    given = decoding_given(args) if args is not None else {}
    return Translator.from_run(run, spelling=COMMAND_LINE, **{**given, **options})


def split_of(translator: Translator, split: str) -> tuple[list[str], list[str]]:
    """The run's own `split` (test or val): (source lines, reference lines)."""
    return load_split(translator.config.data, split)


def timed(decode: Callable[[], T], device: torch.device | None = None) -> tuple[float, T]:
    """(wall seconds, result) of decode(); on a GPU, once the work it queued is done."""
    start = time.perf_counter()
    result = decode()
    if device is not None and device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
    return time.perf_counter() - start, result


def scores(hypotheses: list[str], references: list[str], translator: Translator) -> dict[str, float]:
    """Corpus BLEU and chrF (sacreBLEU, 0-100) with BLEU's tokenizer for the run's target language,
    rounded to 2 places as the scripts print them."""
    found = corpus_scores(hypotheses, references, tokenize=translator.config.bleu_tokenize)
    return {"bleu": round(found["bleu"], 2), "chrf": round(found["chrf"], 2)}
