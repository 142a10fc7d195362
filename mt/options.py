"""Decoding options: `DecodeConfig`, and the one path from a user's options (command-line flags, an
HTTP request's fields, a config file's decode section) to a checked DecodeConfig, whose errors speak
the user's spelling of each option.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable

from mt.errors import ConfigError
from mt.schema import Mismatch, check_value, choice, fields_of, within

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


@dataclass(frozen=True)
class DecodeConfig:
    beam: int = within(1, 1)  # 1 = greedy
    n_best: int = within(1, 1)  # hypotheses per sentence written by translate (<= beam; sampling: draws)
    length_penalty: float = within(1.0, 0.0)  # GNMT alpha: rank by logprob / ((5 + length) / 6) ** alpha
    max_len_a: float = within(1.5, 0.0)  # output length limit = a * source length + b
    max_len_b: int = within(10, 1)
    batch_tokens: int = within(6000, 16)  # source tokens (padding included) per decoding batch
    engine: str = choice("torch", "torch", "ctranslate2")  # ctranslate2: the run's `mt export` (mt.engine)
    compute_type: str = choice("default", *COMPUTE_TYPES)  # ctranslate2's, chosen as it loads
    sample: str = ""  # "" = search; topk:K or topp:P = draw each token (mt.decode.Sampler), beam 1
    temperature: float = within(1.0, 0.0, lo_open=True)  # divides the logits before sampling
    seed: int = 0  # sampling's: with the line's number, seeds that line's draws


@dataclass(frozen=True)
class Spelling:
    """How a user writes decoding options, so that an error speaks their language: on the command line
    (--n-best 3), in an HTTP request (n_best: 3), in a config file (decode.n_best: 3)."""

    name: Callable[[str], str]  # the option's name, from DecodeConfig's field name
    lead: str  # how a message opens on an option's value: "{name} {value}"
    verb: str  # what the user does to fix it: "add", "send", "set"


COMMAND_LINE = Spelling(lambda key: "--" + key.replace("_", "-"), "{name} {value}", "add")
REQUEST = Spelling(str, "{name}: {value}", "send")
CONFIG_FILE = Spelling(lambda key: f"decode.{key}", "{name}: {value}", "set")


def decoding(decode: DecodeConfig, options: dict[str, Any], spelling: Spelling = CONFIG_FILE) -> DecodeConfig:
    """`decode` with the user's decoding `options` (None: keep decode's), each checked as a config
    value, and n_best <= beam: the one path from CLI flags, an HTTP request or a config file to a
    checked DecodeConfig. A ConfigError's `key` is the option to blame."""
    fields = fields_of(DecodeConfig)
    given = {}
    for key, value in options.items():
        if value is not None:
            try:
                given[key] = check_value(spelling.name(key), *fields[key], value)
            except Mismatch as e:
                raise ConfigError(str(e), key) from None
    decode = dataclasses.replace(decode, **given)
    if decode.compute_type != "default" and decode.engine != "ctranslate2":
        name = spelling.name
        raise ConfigError(
            f"{spelling.lead.format(name=name('compute_type'), value=decode.compute_type)} is CTranslate2's: "
            f"{spelling.verb} {name('engine')} ctranslate2",
            "compute_type",
        )
    if decode.sample:
        _check_sampling(decode, spelling)
    if decode.n_best > decode.beam and not decode.sample:  # sampling: n_best draws per line
        name = spelling.name
        beam = f"{name('beam')} {decode.beam}" if "beam" in given else f"the run's beam ({decode.beam})"
        raise ConfigError(
            f"{spelling.lead.format(name=name('n_best'), value=decode.n_best)} is more than {beam}: beam "
            f"search keeps only that many hypotheses; {spelling.verb} {name('beam')} {decode.n_best} or more",
            "n_best",
        )
    return decode


SAMPLE = re.compile(r"topk:[1-9][0-9]*|topp:(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)")


def _check_sampling(decode: DecodeConfig, spelling: Spelling) -> None:
    """decode.sample: topk:K or topp:P, greedy, torch (CTranslate2 draws from one stream a process)."""
    name, lead = spelling.name, spelling.lead.format(name=spelling.name("sample"), value=decode.sample)
    if not SAMPLE.fullmatch(decode.sample):
        raise ConfigError(f"{lead}: expected topk:K (K >= 1) or topp:P (0 < P <= 1)", "sample")
    if decode.beam > 1:
        raise ConfigError(f"{lead} draws one token at a time: {spelling.verb} {name('beam')} 1", "sample")
    if decode.engine != "torch":
        raise ConfigError(
            f"{lead} runs on the torch engine: CTranslate2 draws from one random stream per process, so "
            f"a line's sample would depend on its batch; {spelling.verb} {name('engine')} torch",
            "sample",
        )
