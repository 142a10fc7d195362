"""mt/plumbing/memory.py: `release_freed_memory` trims glibc's heap (malloc_trim), and answers False where
there is no glibc to trim."""

import ctypes

import pytest

from mt.plumbing import memory


class RecordingLibc:
    """A C library that records its malloc_trim calls."""

    def __init__(self):
        self.trims = []

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(pad)
        return 1


def test_the_heap_is_trimmed_to_nothing_kept_where_there_is_glibc(monkeypatch):
    libc = RecordingLibc()
    monkeypatch.setattr(memory, "_glibc", lambda: libc)
    assert memory.release_freed_memory() is True
    assert libc.trims == [0]  # no padding kept at the heap's top
    monkeypatch.setattr(memory, "_glibc", lambda: None)
    assert memory.release_freed_memory() is False


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(memory._glibc() is None, reason="glibc's heap only (Linux with glibc)")
def test_freed_heap_pages_go_back_to_the_system():
    """64 MB of small blocks, written and freed below one that stays: the heap cannot shrink from its top,
    so the pages come back only by the trim, which gives back the free pages inside the heap."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(4096) for _ in range(16384)]
    for block in blocks:
        ctypes.memset(block, 1, 4096)
    kept = libc.malloc(4096)  # above the freed blocks: the top of the heap stays in use
    for block in blocks:
        libc.free(block)
    before = resident_bytes()
    assert memory.release_freed_memory() is True
    given_back = before - resident_bytes()
    libc.free(kept)
    assert given_back > 32 * 2**20, f"{given_back / 2**20:.1f} MB given back"
