"""What one `mt serve` request may ask, and how its decoding thread batches: `ServeLimits`, whose
fields are `mt serve`'s --max-... flags (mt.arguments builds them from the fields and their help).
Imports no torch and no web framework, so `mt --help` stays quick."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


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
