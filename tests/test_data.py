"""mt/data.py: reading corpus files (gzip or plain, normalised, split on newlines only), the Multi30k
download and its checks, and every damaged or misaligned corpus refused in one line before anything
is written."""

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import needs_multi30k, run_main, sets

from mt.config import DataConfig
from mt.data import load_split, multi30k_dir, normalize, read_lines, read_parallel, text_lines
from mt.plumbing.errors import DataError


def gz(path: Path, text: bytes) -> Path:
    path.write_bytes(gzip.compress(text))
    return path


def test_normalize_whitespace():
    assert normalize("Ein\tMann  mit\u00a05 Hunden .  ") == "Ein Mann mit 5 Hunden ."


def test_read_lines_gzip_and_plain(tmp_path):
    assert read_lines(gz(tmp_path / "a.gz", "x\u00a0y \nz\n".encode())) == ["x y", "z"]
    (tmp_path / "b.txt").write_text("a\n\nb\n")
    assert read_lines(tmp_path / "b.txt") == ["a", "", "b"]


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = gz(tmp_path / "bad.de.gz", b"gut\nauch gut\nschlecht \xff\n")
    with pytest.raises(DataError) as e:
        read_lines(path)
    assert str(e.value) == f"{path}: line 3 is not valid UTF-8; re-encode the file as UTF-8"


def test_line_count_mismatch_names_both_files(tmp_path):
    src, tgt = gz(tmp_path / "t.de.gz", b"a\nb\nc\n"), gz(tmp_path / "t.en.gz", b"a\nb\n")
    with pytest.raises(DataError) as e:
        read_parallel(src, tgt)
    assert str(e.value) == f"{src} has 3 lines but {tgt} has 2; the two sides must be line-aligned"


def test_control_characters_become_spaces():
    assert normalize("a\x00b\x1b[31mc\x7f d\x85e\r") == "a b [31mc d e"


def test_split_lines_only_on_newline():
    # U+2028, U+0085 and form feeds are not line breaks for wc -l, so they must not be for us either
    assert text_lines("a\u2028b\x0cc\x85d\r\ne\n\nf") == ["a\u2028b\x0cc\x85d", "e", "", "f"]
    assert text_lines("x\n") == ["x"] and text_lines("") == [] and text_lines("\n") == [""]


def test_read_lines_crlf_and_unicode_separators(tmp_path):
    (tmp_path / "c.txt").write_bytes("eins\r\nzwei\u2028drei\r\n".encode())
    assert read_lines(tmp_path / "c.txt") == ["eins", "zwei drei"]


def test_empty_file_is_refused(tmp_path):
    src, tgt = tmp_path / "t.de", tmp_path / "t.en"
    src.write_text("")
    tgt.write_text("a\n")
    with pytest.raises(DataError) as e:
        read_parallel(src, tgt)
    assert str(e.value) == f"{src}: file is empty"


def test_unreadable_file(tmp_path):
    (tmp_path / "dir.de").mkdir()
    with pytest.raises(DataError) as e:
        read_lines(tmp_path / "dir.de")
    assert (
        str(e.value)
        == f"{tmp_path / 'dir.de'}: cannot read (Is a directory); check the path and its permissions"
    )


def test_files_corpus_reads_plain_and_gz(tmp_path):
    (tmp_path / "train.de").write_text("Hallo Welt\n")
    gz(tmp_path / "train.en.gz", b"Hello world\n")
    cfg = DataConfig(corpus="files", dir=str(tmp_path))
    assert load_split(cfg, "train") == (["Hallo Welt"], ["Hello world"])
    with pytest.raises(DataError, match="val.de: file not found"):
        load_split(cfg, "val")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="nope.gz: file not found"):
        read_lines(tmp_path / "nope.gz")


def fake_release(folder: Path) -> dict:
    """A tiny stand-in corpus and its manifest, to test download and verification offline."""
    folder.mkdir()
    files = {}
    for stem, remote in [("train", "train"), ("val", "val"), ("test2016", "test_2016_flickr")]:
        for lang in ("de", "en"):
            data = gzip.compress(f"{stem} {lang}\n".encode())
            (folder / f"{remote}.{lang}.gz").write_bytes(data)
            files[f"{stem}.{lang}.gz"] = {
                "remote": f"{remote}.{lang}.gz",
                "lines": 1,
                "sha256": hashlib.sha256(data).hexdigest(),
            }
    return {"base_url": folder.as_uri() + "/", "files": files}


def test_download_verifies_and_reads(tmp_path, monkeypatch):
    manifest = fake_release(tmp_path / "remote")
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    monkeypatch.delenv("MT_DATA_DIR", raising=False)
    monkeypatch.setattr("mt.data.downloads_dir", lambda: tmp_path / "local")
    folder = multi30k_dir("", tmp_path / "m.json")
    assert folder == tmp_path / "local" / "multi30k"
    assert read_lines(folder / "test2016.en.gz") == ["test2016 en"]


def test_damaged_file_is_refused(tmp_path):
    manifest = fake_release(tmp_path / "remote")
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    local = tmp_path / "copy" / "multi30k"
    local.mkdir(parents=True)
    for name, entry in manifest["files"].items():
        shutil.copy(tmp_path / "remote" / entry["remote"], local / name)
    assert multi30k_dir(str(tmp_path / "copy"), tmp_path / "m.json") == local
    gz(local / "val.de.gz", b"tampered\n")
    with pytest.raises(DataError, match=r"val.de.gz: sha256 does not match m.json"):
        multi30k_dir(str(tmp_path / "copy"), tmp_path / "m.json")


def test_no_copy_and_no_network_says_how_to_fix(tmp_path, monkeypatch):
    manifest = fake_release(tmp_path / "remote")
    manifest["base_url"] = (tmp_path / "missing").as_uri() + "/"
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    monkeypatch.delenv("MT_DATA_DIR", raising=False)
    monkeypatch.setattr("mt.data.downloads_dir", lambda: tmp_path / "local")
    with pytest.raises(DataError, match=r"cannot download .*; set MT_DATA_DIR to a folder holding multi30k/"):
        multi30k_dir("", tmp_path / "m.json")
    assert not (tmp_path / "local").exists()  # no empty download folder left behind


@needs_multi30k
def test_multi30k_splits_load_normalised():
    cfg = DataConfig()
    sizes = {"train": 29000, "val": 1014, "test": 1000}
    for split, n in sizes.items():
        src, tgt = load_split(cfg, split)
        assert len(src) == len(tgt) == n
    src, _ = load_split(cfg, "train")
    assert not any("\t" in s or "\u00a0" in s or s != s.strip() for s in src)
    assert src[7365].count("  ") == 0  # the line with a TAB in the raw file


def test_a_damaged_gzip_corpus_is_one_line(capsys, small_corpus, tiny, tmp_path):
    """Issue 16's first traceback: corrupted deflate data inside a .gz corpus file (zlib.error)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    packed = bytearray(gzip.compress((corpus / "train.de").read_bytes(), mtime=0))
    packed[len(packed) // 2] ^= 0xFF  # inside the deflate stream: the header and the size are intact
    (corpus / "train.de").unlink()
    (corpus / "train.de.gz").write_bytes(bytes(packed))
    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(tmp_path / "run"),
        *sets(tiny + [f"data.dir={corpus}"]),
    )
    last = err.splitlines()[-1]  # after the log's "run directory ..." line
    assert code == 2 and "Traceback" not in err and err.count("error:") == 1
    assert last.startswith(
        f"mt: error: {corpus}/train.de.gz: damaged compressed file (Error -3 while decompressing"
    )
    assert last.endswith("; download or copy it again")
    assert not (tmp_path / "run").exists()  # nothing was written


@pytest.fixture
def corpus(small_corpus, tmp_path):
    folder = tmp_path / "corpus"
    shutil.copytree(small_corpus, folder)
    return folder


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda d: (d / "train.en").unlink(), "{d}/train.en: file not found"),
        (
            lambda d: ((d / "train.en").unlink(), (d / "train.en").mkdir()),
            "{d}/train.en: cannot read (Is a directory); check the path and its permissions",
        ),
        (lambda d: (d / "train.en").write_text(""), "{d}/train.en: file is empty"),
        (
            lambda d: (d / "train.en").write_text("one\ntwo\n"),
            "{d}/train.de has 400 lines but {d}/train.en has 2; the two sides must be line-aligned",
        ),
        (
            lambda d: (d / "train.de").write_bytes(b"gut\nauch gut\nnicht \xc3\x28 gut\n"),
            "{d}/train.de: line 3 is not valid UTF-8; re-encode the file as UTF-8",
        ),
    ],
)
def test_bad_corpus(capsys, corpus, tmp_path, tiny, damage, message):
    damage(corpus)
    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(tmp_path / "run"),
        *sets(tiny + [f"data.dir={corpus}"]),
    )
    assert code == 2
    assert err.splitlines()[-1] == "mt: error: " + message.format(d=corpus) and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing written, not even train.log
