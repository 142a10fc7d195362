"""mt/plumbing/files.py: a file is replaced whole or not at all: the new bytes go to `.NAME.tmp` beside it,
are fsynced, renamed over it, and the folder is fsynced; an error inside the block leaves the old file;
a write the OS refuses is one WriteError naming the file, the OS's reason and what to do."""

import errno
import os
import stat

import pytest

from mt.plumbing.errors import WriteError
from mt.plumbing.files import atomic_write, write_failure, write_text


def test_write_text_writes_the_utf8_bytes_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "card.json"
    write_text(path, "Grüße\n")
    assert path.read_bytes() == "Grüße\n".encode("utf-8")
    write_text(path, "neu\n")  # replaces what was there
    assert path.read_bytes() == b"neu\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.json"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_error_inside_the_block_leaves_the_old_file_and_no_temporary(tmp_path, error):
    """Ctrl-C (a BaseException, not an Exception) too: the temporary file goes, the old bytes stay."""
    path = tmp_path / "last.pt"
    path.write_bytes(b"the previous checkpoint")
    with pytest.raises(error):
        with atomic_write(path) as f:
            f.write(b"half a checkpoint")
            f.flush()
            assert (tmp_path / ".last.pt.tmp").read_bytes() == b"half a checkpoint"
            assert path.read_bytes() == b"the previous checkpoint"  # untouched while writing
            raise error("stopped mid-write")
    assert path.read_bytes() == b"the previous checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_the_file_is_synced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append(f"rename {os.path.basename(src)} -> {os.path.basename(dst)}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_text(tmp_path / "metrics.jsonl", "{}\n")
    assert events == ["fsync file", "rename .metrics.jsonl.tmp -> metrics.jsonl", "fsync folder"]


def mount_of(path):
    path = path.resolve()
    return next(p for p in [path, *path.parents] if os.path.ismount(p))


@pytest.mark.parametrize(
    "code, fix",
    [
        (errno.ENOSPC, "free space on {mount}, then run the same command again"),
        (errno.EDQUOT, "free space within your quota on {mount}, then run the same command again"),
        (errno.EROFS, "{mount} is mounted read-only; write to another folder"),
        (errno.EACCES, "you may not write in {folder}; change its permissions or write to another folder"),
        (errno.EFBIG, "the file is larger than this process may write (ulimit -f); raise the limit"),
        (errno.EIO, "write to another folder"),
    ],
)
def test_a_refused_write_names_the_file_the_reason_and_what_to_do(tmp_path, code, fix):
    path = tmp_path / "last.pt"
    message = str(write_failure(path, OSError(code, os.strerror(code))))
    assert message == f"{path}: cannot write ({os.strerror(code)}); " + fix.format(
        mount=mount_of(tmp_path), folder=tmp_path
    )


def test_a_folder_that_has_gone_is_named(tmp_path):
    gone = tmp_path / "run"
    with pytest.raises(WriteError) as e:  # the kernel's own ENOENT
        write_text(gone / "card.json", "{}")
    assert str(e.value) == (
        f"{gone / 'card.json'}: cannot write (No such file or directory); {gone} no longer exists; "
        f"create it again or write to another folder"
    )


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, where):
    """ENOSPC from the write itself, from fsync (where delayed allocation reports it) or the rename."""
    path = tmp_path / "card.json"
    path.write_text("the previous card")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if where == "write":
        with pytest.raises(WriteError) as e:
            with atomic_write(path) as f:
                f.write(b"half")
                full()
    else:
        monkeypatch.setattr(os, where, full)
        with pytest.raises(WriteError) as e:
            write_text(path, "the new card")
    assert str(e.value).startswith(f"{path}: cannot write (No space left on device); free space on ")
    assert path.read_text() == "the previous card"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.json"]
