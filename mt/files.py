"""Replacing a file safely: the one way mt writes a file that something else may be reading or resuming from.

`atomic_write` writes to a temporary file in the same folder, fsyncs it, renames it over the target and
fsyncs the folder, so a crash at any point leaves either the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def atomic_write(path: str | Path) -> Iterator[BinaryIO]:
    """Yield a binary file; when the block ends without an error, it replaces `path` durably.

    The temporary file is `.NAME.tmp` beside `path`; an error inside the block removes it and leaves
    `path` as it was.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # make the rename itself durable
    finally:
        os.close(folder)


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_write(path) as f:
        f.write(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
