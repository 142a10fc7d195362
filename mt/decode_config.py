"""Decoding options: `DecodeConfig`, every option of a search in one frozen dataclass, and what is
derived from it: the one path from a user's options (command-line flags, an HTTP request's fields, a
config file's decode section, the Python API's keywords) to a checked DecodeConfig, whose errors speak
the user's spelling of each option (mt.plumbing.spelling).

A new decoding option is one field here (with its `help`): the flags (mt.arguments), the HTTP fields
(mt.serving.app), the API's keywords (mt.translator) and the evaluation names (mt.run.names) follow
from it.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Any

from mt.plumbing.errors import ConfigError
from mt.plumbing.schema import Mismatch, check_value, choice, fields_of, within
from mt.plumbing.spelling import CONFIG_FILE, Spelling

# CTranslate2's types of weights and arithmetic (decode.compute_type); default: the type exported
COMPUTE_TYPES = (
    "default",
    "float32",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "float16",
    "bfloat16",
)

# the options `mt tune` chooses and the card's tuning holds (mt.run.folder.run_decoding applies them)
TUNED = ("beam", "length_penalty", "mbr", "mbr_samples", "mbr_temperature", "rerank", "rerank_weight")


@dataclass(frozen=True)
class DecodeConfig:
    beam: int = within(1, 1, help="beam size; 1 = greedy")
    n_best: int = within(
        1, 1, help="hypotheses per line, Moses format (<= beam; with --sample: draws per line)"
    )
    length_penalty: float = within(
        1.0,
        0.0,
        10.0,
        help="GNMT alpha: rank by logprob / ((5 + length) / 6) ** alpha; 0 = raw log-probability",
    )
    max_len_a: float = within(1.5, 0.0, help="output length limit = a * source length + b: a")
    max_len_b: int = within(10, 1, help="output length limit = a * source length + b: b")
    no_repeat_ngram: int = within(
        0, 0, help="no n-gram of this many pieces twice in a translation (CTranslate2's too); 0 = off"
    )
    min_len: int = within(
        0, 0, help="pieces a translation has at least: no eos before them (CTranslate2's too); 0 = off"
    )
    batch_tokens: int = within(6000, 16, help="source tokens (padding included) per decoding batch")
    engine: str = choice(
        "torch", "torch", "ctranslate2", help="ctranslate2: the run's `mt export` (DIR/ct2, mt.ct2)"
    )
    compute_type: str = choice(
        "default", *COMPUTE_TYPES, help="ctranslate2's weights and arithmetic, chosen as it loads, e.g. int8"
    )
    sample: str = dataclasses.field(
        default="",
        metadata={"help": "draw each token instead of searching (beam 1)", "metavar": "topk:K|topp:P"},
    )
    temperature: float = within(
        1.0, 0.0, 100.0, lo_open=True, help="sampling temperature (> 0): divides the logits"
    )
    seed: int = dataclasses.field(
        default=0, metadata={"help": "sampling seed: a line's draws depend on it and the line only"}
    )
    mbr: str = choice(
        "",
        "",
        "chrf",
        "bleu",
        help="minimum Bayes risk (mt.rescoring.rerank): of the beam's hypotheses (and --mbr-samples), the "
        "one with the highest mean sentence chrF or BLEU against all of them; off by default",
    )
    mbr_samples: int = within(
        0,
        0,
        1024,
        help="translations drawn per line (seeded by --seed) that join MBR's pool beside the beam's",
    )
    mbr_temperature: float = within(
        1.0, 0.0, 100.0, lo_open=True, help="the temperature MBR's samples are drawn at (> 0)"
    )
    rerank: str = dataclasses.field(
        default="",
        metadata={
            "help": "rerank the beam's hypotheses by log p(y|x) / length penalty + weight * log p(x|y) per "
            "piece of x, p(x|y) from a run trained the other way (several: their mean, comma-separated)",
            "metavar": "RUN[,RUN]",
        },
    )
    rerank_weight: float = within(1.0, 0.0, 100.0, help="the reverse model's weight in --rerank's score")
    split_sentences: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "translate each sentence of a line on its own (mt.sentences) and join the "
            "translations with a space: still one line out per line in"
        },
    )


def decoding(decode: DecodeConfig, options: dict[str, Any], spelling: Spelling = CONFIG_FILE) -> DecodeConfig:
    """`decode` with the user's decoding `options` (None: keep decode's), each checked as a config
    value, with what they imply for the options left to `decode` (`implied`), and n_best <= beam: the one
    path from CLI flags, an HTTP request, a config file or the API's keywords to a checked DecodeConfig.
    A ConfigError's `key` is the option to blame."""
    given = checked_options(options, spelling)
    decode = dataclasses.replace(decode, **implied(given), **given)
    if decode.compute_type != "default" and decode.engine != "ctranslate2":
        raise ConfigError(
            f"{spelling.given('compute_type', decode.compute_type)} is CTranslate2's: "
            f"{spelling.fix('engine', 'ctranslate2')}",
            "compute_type",
        )
    if decode.sample:
        _check_sampling(decode, spelling)
    if decode.mbr or decode.rerank or decode.mbr_samples:
        _check_choosing(decode, spelling)
    if decode.split_sentences and decode.n_best > 1:
        split = spelling.name("split_sentences")
        raise ConfigError(
            f"{spelling.given('n_best', decode.n_best)}: {split} joins the best translation of each "
            f"sentence, so it gives no n-best lists; {spelling.fix('n_best', 1)}, or leave {split} out",
            "n_best",
        )
    if decode.n_best > decode.beam and not decode.sample:  # sampling: n_best draws per line
        pair = spelling.pair.format(name=spelling.name("beam"), value=decode.beam)
        beam = pair if "beam" in given else f"the run's beam ({decode.beam})"
        raise ConfigError(
            f"{spelling.given('n_best', decode.n_best)} is more than {beam}: beam search keeps only that "
            f"many hypotheses; {spelling.fix('beam', decode.n_best)} or more",
            "n_best",
        )
    return decode


def checked_options(options: dict[str, Any], spelling: Spelling) -> dict[str, Any]:
    """The options given (None: not given), each checked as its DecodeConfig field; an unknown one (a
    keyword of the Python API: flags and requests are parsed against the fields) names the closest."""
    fields = fields_of(DecodeConfig)
    given = {}
    for key, value in options.items():
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = (
                f"did you mean {spelling.name(close[0])}?"
                if close
                else f"the options are {', '.join(fields)}"
            )
            raise ConfigError(f"{spelling.name(key)}: not a decoding option; {hint}", key)
        if value is not None:
            try:
                given[key] = check_value(spelling.name(key), *fields[key], value)
            except Mismatch as e:
                raise ConfigError(str(e), key) from None
    return given


# what chooses a line's translation among its candidates, each off
NO_CHOOSER = {"mbr": "", "mbr_samples": 0, "rerank": ""}


def implied(given: dict[str, Any]) -> dict[str, Any]:
    """What the options a user gives imply for those they leave to `decode` (a run's tuned beam, a
    server's defaults): sampling draws one token at a time (beam 1), and a beam searches (no sampling);
    one candidate a line (beam 1, a sample) or another engine's search chooses among none (no MBR, no
    reranking); MBR and reranking each replace the other. So a given option wins over a default
    together with what it needs; two given options that clash are still refused."""
    found: dict[str, Any] = {}
    if given.get("sample") and "beam" not in given:
        found["beam"] = 1
    if given.get("beam", 1) > 1 and "sample" not in given:
        found["sample"] = ""
    one_way = given.get("sample") or given.get("beam") == 1 or given.get("engine", "torch") != "torch"
    if one_way and not NO_CHOOSER.keys() & given.keys():
        found |= NO_CHOOSER
    if given.get("rerank"):  # reranking replaces MBR
        found |= {key: NO_CHOOSER[key] for key in ("mbr", "mbr_samples") if key not in given}
    if (given.get("mbr") or given.get("mbr_samples")) and "rerank" not in given:  # MBR replaces reranking
        found["rerank"] = ""
    return found


SAMPLE = re.compile(r"topk:[1-9][0-9]*|topp:(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)")


def _check_sampling(decode: DecodeConfig, spelling: Spelling) -> None:
    """decode.sample: topk:K or topp:P, greedy, torch (CTranslate2 draws from one stream a process)."""
    lead = spelling.given("sample", decode.sample)
    if not SAMPLE.fullmatch(decode.sample):
        raise ConfigError(f"{lead}: expected topk:K (K >= 1) or topp:P (0 < P <= 1)", "sample")
    if decode.beam > 1:
        raise ConfigError(f"{lead} draws one token at a time: {spelling.fix('beam', 1)}", "sample")
    if decode.engine != "torch":
        raise ConfigError(
            f"{lead} runs on the torch engine: CTranslate2 draws from one random stream per process, so "
            f"a line's sample would depend on its batch; {spelling.fix('engine', 'torch')}",
            "sample",
        )


def _check_choosing(decode: DecodeConfig, spelling: Spelling) -> None:
    """decode.mbr and decode.rerank: one of them, choosing among more than one of mt's own candidates."""
    chooser = "mbr" if decode.mbr else "rerank"
    lead = spelling.given(chooser, getattr(decode, chooser))
    if decode.mbr_samples and not decode.mbr:
        given = spelling.given("mbr_samples", decode.mbr_samples)
        raise ConfigError(
            f"{given} draws samples for MBR's pool: {spelling.fix('mbr', 'chrf')}", "mbr_samples"
        )
    if decode.mbr and decode.rerank:
        raise ConfigError(
            f"{lead} and {spelling.name('rerank')} each choose the translation; give one of them", chooser
        )
    if decode.sample:
        raise ConfigError(
            f"{lead} chooses among the beam's hypotheses, {spelling.name('sample')} draws one translation; "
            f"leave {spelling.name('sample')} out (MBR draws its own: {spelling.name('mbr_samples')})",
            chooser,
        )
    if decode.engine != "torch":
        raise ConfigError(
            f"{lead} chooses among mt's own search's candidates: {spelling.fix('engine', 'torch')}", chooser
        )
    if decode.beam == 1 and not decode.mbr_samples:
        more = (
            f" or {spelling.pair.format(name=spelling.name('mbr_samples'), value=16)}" if decode.mbr else ""
        )
        raise ConfigError(
            f"{lead} has one candidate a line with beam 1: {spelling.fix('beam', 5)}{more}", chooser
        )
