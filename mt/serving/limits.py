"""What one `mt serve` request may ask, and how its decoding thread batches: `ServeLimits`, whose
fields are `mt serve`'s --max-... flags (mt.arguments builds them from the fields and their help).
Imports no torch and no web framework, so `mt --help` stays quick."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mt.plumbing.errors import ServeError


def limit(default: float, help: str):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServeLimits:
    max_request_bytes: int = limit(1 << 20, "request body size")
    max_lines: int = limit(256, "lines per request")
    max_line_chars: int = limit(4000, "characters per line")
    max_beam: int = limit(16, "largest beam a request may ask for")
    max_queue: int = limit(256, "requests waiting for the decoding thread")
    max_batch_lines: int = limit(2048, "lines the decoding thread merges into one call")
    max_wait_ms: float = limit(
        5.0, "how long it waits for another request once the queue is empty (10x at most in all)"
    )


def check_run_fits(beam: int, limits: ServeLimits) -> None:
    """Refuses, before serving, a run whose own decoding (its config's or `mt tune`'s beam, the one a
    request that names none gets) is over the limits: every such request would be refused."""
    if beam > limits.max_beam:
        raise ServeError(
            f"the run translates with beam {beam}, more than --max-beam {limits.max_beam}, so every request "
            f"that names no beam would be refused; give --max-beam {beam} or more, or --beam "
            f"{limits.max_beam} to serve a smaller beam"
        )
