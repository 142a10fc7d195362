"""Writing files safely: the one way mt replaces a file that something else may be reading or resuming
from, and the one message for a write the OS refuses.

`atomic_write` writes to a temporary file in the same folder, fsyncs it, renames it over the target and
fsyncs the folder, so a crash at any point leaves either the old file or the new one, never a mix. A
write the OS refuses (a full disk, a read-only file system, no permission, a folder that has gone)
leaves the old file and no temporary one, and raises `write_failure`'s one-line WriteError.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import os
import sys
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from mt.plumbing.errors import WriteError


def write_failure(path: str | Path, e: OSError) -> WriteError:
    """The one message for a write the OS refused: the file, the OS's reason, and what to do."""
    path = Path(path)
    folder = next((p for p in [path.parent, *path.parent.parents] if p.is_dir()), Path("/"))
    mount = next((p for p in [folder, *folder.parents] if os.path.ismount(p)), Path("/"))
    fix = {
        errno.ENOSPC: f"free space on {mount}, then run the same command again",
        errno.EDQUOT: f"free space within your quota on {mount}, then run the same command again",
        errno.EFBIG: "the file is larger than this process may write (ulimit -f); raise the limit",
        errno.EROFS: f"{mount} is mounted read-only; write to another folder",
        errno.EACCES: f"you may not write in {folder}; change its permissions or write to another folder",
        errno.EPERM: f"you may not write in {folder}; change its permissions or write to another folder",
        errno.ENOENT: f"{path.parent} no longer exists; create it again or write to another folder",
    }.get(e.errno, "write to another folder")
    return WriteError(f"{path}: cannot write ({e.strerror or e}); {fix}")


@contextlib.contextmanager
def atomic_write(path: str | Path) -> Iterator[BinaryIO]:
    """Yield a binary file; when the block ends without an error, it replaces `path` durably.

    The temporary file is `.NAME.tmp` beside `path`; an error inside the block removes it and leaves
    `path` as it was; an OSError of the OS's (ENOSPC, EROFS, ...) becomes `write_failure`'s WriteError.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise write_failure(path, e) from None
        raise
    try:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)  # make the rename itself durable
        finally:
            os.close(folder)
    except OSError as e:
        raise write_failure(path, e) from None


@contextlib.contextmanager
def one_at_a_time(lock: Path, waiting: Callable[[], None]) -> Iterator[None]:
    """Hold `lock` (the kernel's flock) for the block: processes that would build the same files take
    turns, the later ones calling `waiting()` once and blocking until the holder is done. The lock ends
    with its process however that ends: a crash leaves none behind."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise write_failure(lock, e) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_write(path) as f:
        f.write(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_stdout(text: str) -> None:
    """Standard output, checked: Python's buffered writer reports a full disk late or never (a short
    write leaves the rest in its buffer), so a file or pipe gets every byte by os.write, and a refused
    write is a WriteError naming where stdout goes."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): Python's own writer
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    data = text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError as e:
        if e.errno == errno.EPIPE:  # the reader has gone (`| head`): nothing is left to tell
            return
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = "standard output"
        raise write_failure(path, e) from None


def write_figure(fig, path: str | Path, dpi: int = 110) -> None:
    """A matplotlib figure, drawn in memory and written with the atomic writer (its format: the suffix)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi)
    write_bytes(path, buffer.getvalue())


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in blocks (a binarized corpus may be gigabytes)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()
