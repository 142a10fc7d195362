"""What a request to `mt serve` may ask, checked: its lines within the server's limits and its
decoding options named and bounded as DecodeConfig's fields (the pydantic models are derived from
them). Every refusal is a `Refused` that mt.serving.app answers as one line of JSON: 413 for a request
over a limit, 422 for a bad option."""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr, create_model

from mt.decode_config import DecodeConfig, decoding
from mt.inputs import one_per_line
from mt.plumbing.errors import ConfigError
from mt.plumbing.schema import fields_of
from mt.plumbing.spelling import REQUEST
from mt.serving.limits import ServeLimits
from mt.serving.worker import Worker

_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON's lone \ud800 escapes: no UTF-8 text holds them


class Refused(Exception):
    """A request the server will not run: 413 for one over a limit ("limit": the limit's name), 422 for
    a bad option ("option": the option's name)."""

    def __init__(self, status: int, name: str, message: str):
        super().__init__(message)
        self.status, self.name = status, name


SERVER_CHOSEN = ("engine", "compute_type", "batch_tokens")  # fixed when mt serve starts (its flags)


def request_field(name: str) -> tuple[Any, Any]:
    """A request's field for DecodeConfig's option `name`: its type (no coercion: "4" is not a beam),
    bounds and help, from the option itself; None keeps the server's value."""
    field, kind = fields_of(DecodeConfig)[name]
    meta = field.metadata
    bounds = {} if meta.get("lo") is None else {"gt" if meta.get("lo_open") else "ge": meta["lo"]}
    bounds |= {} if meta.get("hi") is None else {"le": meta["hi"]}
    bounds |= {"allow_inf_nan": False} if kind is float else {}
    strict = {int: StrictInt, str: StrictStr, float: float, bool: StrictBool}[kind]
    return strict | None, Field(None, description=meta["help"] + "; default: the server's", **bounds)


# A request's lines and decoding options, each option named as in DecodeConfig (`request_decoding`).
TranslateRequest = create_model(
    "TranslateRequest",
    __config__=ConfigDict(extra="forbid"),
    lines=(list[StrictStr], ...),
    **{name: request_field(name) for name in fields_of(DecodeConfig) if name not in SERVER_CHOSEN},
    prefixes=(list[StrictStr] | None, Field(None, description='a target prefix per line ("": none)')),
    alignments=(StrictBool, Field(False, description="add each 1-best's word alignment (Pharaoh i-j)")),
)


class AttentionRequest(TranslateRequest):
    index: StrictInt = Field(0, ge=0, description="which line's attention to return")


def checked_lines(lines: list[str], limits: ServeLimits, name: str = "lines") -> list[str]:
    """The request's lines (or `name`: its prefixes) within the limits; lone surrogates become U+FFFD,
    as invalid UTF-8 does in `mt translate`."""
    if len(lines) > limits.max_lines:
        raise Refused(
            413,
            "max_lines",
            f"the request has {len(lines)} {name}, more than max_lines="
            f"{limits.max_lines} (mt serve --max-lines); send them in several requests",
        )
    for i, line in enumerate(lines):
        if len(line) > limits.max_line_chars:
            raise Refused(
                413,
                "max_line_chars",
                f"{name}[{i}] has {len(line)} characters, more than max_line_chars="
                f"{limits.max_line_chars} (mt serve --max-line-chars); split the line",
            )
    return [_SURROGATE.sub("\ufffd", line) for line in lines]


def checked_prefixes(req: TranslateRequest, lines: list[str], limits: ServeLimits) -> list[str] | None:
    """The request's prefixes, one per line, within the limits (None when it gives none)."""
    if req.prefixes is None:
        return None
    try:
        one_per_line("prefixes", req.prefixes, lines, ' ("" for none)')
    except ConfigError as e:
        raise Refused(422, "prefixes", str(e)) from None
    return checked_lines(req.prefixes, limits, "prefixes")


def attention_index(req: AttentionRequest, lines: list[str]) -> int:
    """The line whose attention an /attention request asks for; it takes no prefixes."""
    if req.prefixes is not None:
        raise Refused(
            422, "prefixes", "prefixes: /attention shows the model's own translation; send them to /translate"
        )
    if req.index >= len(lines):
        raise Refused(422, "index", f"index: {req.index} is not a line of the request ({len(lines)} lines)")
    return req.index


def request_decoding(default: DecodeConfig, req: TranslateRequest, limits: ServeLimits) -> DecodeConfig:
    """The run's decode config with the request's options; a conflict is a 422 naming the option."""
    options = req.model_dump(include={f.name for f in dataclasses.fields(DecodeConfig)})  # not prefixes
    if req.rerank not in (None, "", default.rerank):  # the server opens reverse runs once, as it starts
        raise Refused(
            422,
            "rerank",
            f"rerank: {req.rerank!r} is not the server's reranking ({default.rerank!r}); a request may clear "
            f'it ("") or name the server\'s; rerank by another run with mt serve --rerank RUN',
        )
    try:
        decode = decoding(default, options, REQUEST)
    except ConfigError as e:
        raise Refused(422, e.key, str(e)) from None
    if decode.beam > limits.max_beam:  # the beam asked for, or the server's (1 where sampling implies it)
        raise Refused(
            422, "beam", f"beam: {decode.beam} is more than max_beam={limits.max_beam} (mt serve --max-beam)"
        )
    return decode


def check_alignable(worker: Worker, req: TranslateRequest, decode: DecodeConfig) -> None:
    if req.alignments:
        try:
            worker.translator.alignable(**dataclasses.asdict(decode))
        except ConfigError as e:
            raise Refused(422, "alignments", str(e)) from None


def validation_error(errors: list[dict], fields: list[str], content_type: str) -> tuple[str, str]:
    """The option pydantic's first error is about, and the errors as one line led by where it is."""
    e = errors[0]
    loc = [str(p) for p in e["loc"] if p != "body"] if e["type"] != "json_invalid" else []  # json: a position
    where = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "body"
    if e["type"] == "extra_forbidden":
        close = difflib.get_close_matches(where, fields, n=1)
        message = f"{where}: unknown option" + (
            f"; did you mean {close[0]}?" if close else f"; the options are {', '.join(fields)}"
        )
    elif e["type"] == "json_invalid":
        message = f"body: not valid JSON ({e.get('ctx', {}).get('error', e['msg'])})"
    elif where == "body" and "json" not in content_type:
        message = (
            f"body: send a JSON object with Content-Type: application/json (got {content_type or 'none'})"
        )
    else:
        message = (
            f"{where}: {e['msg']}"
            if where != "body"
            else 'body: send a JSON object, e.g. {"lines": ["Ein Hund."]}'
        )
    extra = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (loc[0] if loc else "body"), message + extra
