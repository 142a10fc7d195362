"""How a user writes a decoding option on each surface, so that an error speaks their language: the
command line (--n-best 3), an HTTP request (n_best: 3), a config file (decode.n_best: 3), a keyword of
the Python API (n_best=3). mt.decode_config's checks word every message through one of these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Spelling:
    """How a user writes decoding options, so that an error speaks their language: on the command line
    (--n-best 3), in an HTTP request (n_best: 3), in a config file (decode.n_best: 3), as a keyword of
    the Python API (n_best=3)."""

    name: Callable[[str], str]  # the option's name, from DecodeConfig's field name
    lead: str  # how a message opens on an option's value: "{name} {value}"
    verb: str  # what the user does to fix it: "add", "send", "set"
    pair: str = "{name} {value}"  # an option and the value to give it, inside a message

    def given(self, key: str, value: Any) -> str:
        """How a message opens on the option `key` given `value`: "--n-best 3", "n_best: 3"."""
        return self.lead.format(name=self.name(key), value=value)

    def fix(self, key: str, value: Any) -> str:
        """What the user does about it: "add --beam 3", "send beam 3", "pass beam=3"."""
        return f"{self.verb} {self.pair.format(name=self.name(key), value=value)}"


COMMAND_LINE = Spelling(lambda key: "--" + key.replace("_", "-"), "{name} {value}", "add")
REQUEST = Spelling(str, "{name}: {value}", "send")
CONFIG_FILE = Spelling(lambda key: f"decode.{key}", "{name}: {value}", "set")
KEYWORD = Spelling(str, "{name}={value}", "pass", "{name}={value}")  # the Python API (mt.translator)
