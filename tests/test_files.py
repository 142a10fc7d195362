"""mt/files.py: a file is replaced whole or not at all: the new bytes go to `.NAME.tmp` beside it,
are fsynced, renamed over it, and the folder is fsynced; an error inside the block leaves the old file."""

import os
import stat

import pytest

from mt.files import atomic_write, write_text


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
