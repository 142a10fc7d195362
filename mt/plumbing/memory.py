"""The memory a process holds. glibc's heap keeps the blocks a process frees for its next requests, and
bf16 training on a CPU frees many of sizes it will not ask for again (each new batch shape's oneDNN
buffers), so the training loop hands the heap's free pages back every log window
(`release_freed_memory`): 1,000 bf16 updates of the default peaked at 1,490 MB with it against 1,846 MB
without, at the same tokens/s, on a 2-core Zen 4 (docs/cpu-speed, issue 94)."""

from __future__ import annotations

import ctypes
import functools
import sys


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (it has malloc_trim), else None: macOS, Windows, musl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the system (glibc's malloc_trim); elsewhere, nothing. Returns
    whether there was a heap to trim."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
