"""Parallel text: finding (or downloading and verifying) Multi30k, a config's corpus and its splits
(Multi30k, the generated toy corpus, or the user's `files`), and reading lines: gzip, UTF-8,
normalised, checked to be line-aligned and non-empty, every problem a one-line DataError naming the
file. Batches are mt.batching's; the binarized training corpus, mt.training.corpus's.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import urllib.request
import zlib
from pathlib import Path
from typing import Iterator, Union

from mt.config import DataConfig
from mt.generated.synthetic import generated_corpus
from mt.generated.toy import toy_corpus
from mt.plumbing.errors import DataError
from mt.plumbing.files import file_sha256, write_bytes, write_failure

log = logging.getLogger(__name__)

MANIFEST = Path(__file__).with_name("multi30k.json")  # package data: an installed mt has it too


def downloads_dir() -> Path:
    """Where a download lands: data/ of a source checkout, else $XDG_CACHE_HOME/mt (~/.cache/mt)."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "data").is_dir():
        return checkout / "data"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mt"


SPLIT_FILES = {"train": "train", "val": "val", "test": "test2016"}
TextSource = Union[Path, list]  # one side of a split: a file to stream, or a generated corpus's lines


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def normalize(line: str) -> str:
    """Control characters become spaces; every whitespace run (tabs, U+00A0, ...) becomes one space.
    A printable line holds no control character: the search for them is skipped."""
    return " ".join((line if line.isprintable() else _CONTROL.sub(" ", line)).split())


def text_lines(text: str) -> list[str]:
    """Split on "\n" only, as `wc -l` and paste do; str.splitlines would also split on U+2028, U+0085,
    form feeds... and break line alignment. A final newline does not start another line; a CR before
    the newline (CRLF files) is dropped."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_failure(path: Path, e: Exception) -> DataError:
    """The one-line error for a file that cannot be read to its end: damaged compressed data, or the
    file system's reason."""
    if isinstance(e, (EOFError, zlib.error, gzip.BadGzipFile)):
        return DataError(f"{path}: damaged compressed file ({e}); download or copy it again")
    if isinstance(e, FileNotFoundError):
        return DataError(f"{path}: file not found")
    return DataError(
        f"{path}: cannot read ({getattr(e, 'strerror', None) or e}); check the path and its permissions"
    )


def _open(path: Path):
    try:
        return (gzip.open if path.suffix == ".gz" else open)(path, "rb")
    except OSError as e:
        raise read_failure(path, e) from None


def gunzip(data: bytes, path: str | Path) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise read_failure(Path(path), e) from None


def iter_lines(path: str | Path) -> Iterator[str]:
    """Stream a (possibly gzipped) UTF-8 text file as normalised lines, split as `text_lines` does."""
    path = Path(path)
    for number, raw in enumerate(raw_lines(path), 1):
        yield decoded_line(raw, path, number)


def raw_lines(source: TextSource) -> Iterator[bytes | str]:
    """A source's lines as stored: a file's bytes, each ending at b"\n" only (`decoded_line` makes
    them text), a generated corpus's strings."""
    if not isinstance(source, Path):
        yield from source
        return
    with _open(source) as f:
        try:
            yield from f
        except (OSError, EOFError, zlib.error) as e:
            raise read_failure(source, e) from None


def decoded_line(raw: bytes | str, path: TextSource, number: int) -> str:
    """Line `number` of `path` as `raw_lines` gave it, as normalised text (a string is already)."""
    if isinstance(raw, str):
        return raw
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path}: line {number} is not valid UTF-8; re-encode the file as UTF-8") from None
    line = line[:-1] if line.endswith("\n") else line
    return normalize(line[:-1] if line.endswith("\r") else line)


def read_lines(path: str | Path) -> list[str]:
    """Read a (possibly gzipped) UTF-8 text file into normalised lines."""
    return list(iter_lines(path))


def count_lines(source: TextSource) -> int:
    """Lines of a file (as `iter_lines` splits them), without decoding it; or of a list."""
    if not isinstance(source, Path):
        return len(source)
    n, last = 0, b"\n"
    with _open(source) as f:
        try:
            while block := f.read(1 << 22):
                n, last = n + block.count(b"\n"), block[-1:]
        except (OSError, EOFError, zlib.error) as e:
            raise read_failure(source, e) from None
    return n + (last != b"\n")


def empty_file(path: TextSource) -> DataError:
    return DataError(f"{path}: file is empty")


def misaligned(src: TextSource, src_lines: int, tgt: TextSource, tgt_lines: int) -> DataError:
    """The one message for two sides of a parallel corpus with different line counts."""
    return DataError(
        f"{src} has {src_lines} lines but {tgt} has {tgt_lines}; the two sides must be line-aligned"
    )


def read_parallel(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    for path, lines in [(src_path, src), (tgt_path, tgt)]:
        if not any(lines):
            raise empty_file(path)
    if len(src) != len(tgt):
        raise misaligned(src_path, len(src), tgt_path, len(tgt))
    return src, tgt


def _sha256(path: Path) -> str:
    try:
        return file_sha256(path)
    except OSError as e:
        raise read_failure(path, e) from None


def _download(manifest: dict, dest: Path) -> None:
    """Fetch the files `dest` lacks; the folder is made only once a download succeeded (no debris)."""
    for name, entry in manifest["files"].items():
        target = dest / name
        if target.exists() and _sha256(target) == entry["sha256"]:
            continue
        url = manifest["base_url"] + entry["remote"]
        log.info("downloading %s", url)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                payload = response.read()
        except OSError as e:
            raise DataError(
                f"cannot download {url} ({e}); set MT_DATA_DIR to a folder holding "
                f"multi30k/{{train,val,test2016}}.{{de,en}}.gz"
            ) from None
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise write_failure(dest, e) from None
        write_bytes(target, payload)


def read_manifest(path: Path) -> dict:
    """The corpus manifest (package data): base_url, and per file its remote name and sha256."""
    try:
        manifest = json.loads(path.read_bytes())
        fields = [manifest["base_url"]] + [
            entry[k] for entry in manifest["files"].values() for k in ("remote", "sha256")
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        fields = [None]
    if not all(isinstance(field, str) for field in fields):
        raise DataError(f"{path}: damaged (it lists the corpus files and their sha256); reinstall mt")
    return manifest


def multi30k_dir(data_dir: str = "", manifest_path: Path = MANIFEST) -> Path:
    """The verified multi30k/ folder: from `data_dir`, else $MT_DATA_DIR, else downloaded into data/."""
    manifest = read_manifest(manifest_path)
    root = data_dir or os.environ.get("MT_DATA_DIR", "")
    folder = Path(root) / "multi30k" if root else downloads_dir() / "multi30k"
    if not root:
        _download(manifest, folder)
    for name, entry in manifest["files"].items():
        path = folder / name
        if not path.exists():
            raise DataError(
                f"{path}: file not found; MT_DATA_DIR must name a folder holding "
                f"multi30k/{{train,val,test2016}}.{{de,en}}.gz"
            )
        if _sha256(path) != entry["sha256"]:
            raise DataError(
                f"{path}: sha256 does not match {manifest_path.name}; the file is damaged "
                f"or not the Multi30k release; replace it"
            )
    return folder


def corpus_file(folder: Path, split: str, lang: str) -> Path:
    """`folder/split.lang`, or its .gz if only that exists (data.corpus: files)."""
    plain = folder / f"{split}.{lang}"
    gz = plain.with_name(plain.name + ".gz")
    return gz if gz.exists() and not plain.exists() else plain


def split_sources(cfg: DataConfig, split: str) -> tuple[TextSource, TextSource]:
    """Where the source and target sides of `split` (train|val|test) are: files, or generated lists."""
    if cfg.corpus == "toy":
        return toy_corpus(languages=(cfg.src_lang, cfg.tgt_lang))[split]
    if cfg.corpus == "synthetic":
        de, en = generated_corpus(cfg.synthetic_pairs)[split]
        by_lang = {"de": de, "en": en}
        return by_lang[cfg.src_lang], by_lang[cfg.tgt_lang]
    if cfg.corpus == "files":
        folder = Path(cfg.dir)
        return corpus_file(folder, split, cfg.src_lang), corpus_file(folder, split, cfg.tgt_lang)
    folder, stem = multi30k_dir(cfg.dir), SPLIT_FILES[split]
    return folder / f"{stem}.{cfg.src_lang}.gz", folder / f"{stem}.{cfg.tgt_lang}.gz"


def training_sources(cfg: DataConfig) -> tuple[TextSource, TextSource]:
    return split_sources(cfg, "train")


def load_split(cfg: DataConfig, split: str) -> tuple[list[str], list[str]]:
    """(source lines, target lines) of `split` in train|val|test, normalised and line-aligned."""
    src, tgt = split_sources(cfg, split)
    return (src, tgt) if isinstance(src, list) else read_parallel(src, tgt)
