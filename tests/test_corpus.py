"""mt/training/corpus.py: the binarized training corpus: ids round-trip to text, the drop rule for empty and
long pairs and data.clean's rules (mt.training.clean), a damaged or stale cache is rebuilt, the tokenizer's
sample is seeded."""

import dataclasses
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from mt import batching
from mt.config import CleanConfig, DataConfig
from mt.data import load_split
from mt.generated.toy import toy_corpus
from mt.plumbing.errors import DataError
from mt.training import binarize, clean, corpus
from mt.training.corpus import tokenizer_sample


@pytest.fixture
def files(small_corpus, tmp_path):
    """A private copy of the small corpus (tests here change its files)."""
    for path in small_corpus.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    return DataConfig(corpus="files", dir=str(tmp_path), max_len=12)


def test_binarized_ids_round_trip_to_the_text(files, tokenizer):
    src, tgt = load_split(files, "train")
    loaded = corpus.load(corpus.prepare(files, tokenizer))
    kept = [
        (s, t)
        for s, t in zip(tokenizer.encode(src), tokenizer.encode(tgt))
        if 0 < len(s) <= files.max_len and 0 < len(t) <= files.max_len
    ]
    want_src, want_tgt = [s for s, _ in kept], [t for _, t in kept]
    assert 0 < len(loaded) == len(want_src) < len(src)  # max_len 12 drops some pairs
    assert loaded.src.dtype == torch.uint16 and loaded.src_len.dtype == torch.uint16
    got = [
        (loaded.src[a : a + n].tolist(), loaded.tgt[b : b + m].tolist())
        for a, n, b, m in zip(
            loaded.starts(torch.arange(len(loaded)))[0].tolist(),
            loaded.src_len.tolist(),
            loaded.starts(torch.arange(len(loaded)))[1].tolist(),
            loaded.tgt_len.tolist(),
        )
    ]
    assert got == list(zip(want_src, want_tgt))
    kept = [s for s, t in zip(src, tgt) if all(0 < len(ids) <= 12 for ids in tokenizer.encode([s, t]))]
    assert tokenizer.decode([s for s, _ in got]) == kept


def test_a_damaged_cache_is_rebuilt_not_trusted(files, tokenizer, caplog):
    folder = corpus.prepare(files, tokenizer)
    good = (folder / "src.ids").read_bytes()
    damaged = bytearray(good)
    damaged[10] ^= 0xFF
    (folder / "src.ids").write_bytes(bytes(damaged))
    with caplog.at_level(logging.INFO, logger="mt"):
        assert corpus.prepare(files, tokenizer) == folder
    assert "src.ids is damaged (size or sha256 differ from meta.json)" in caplog.text
    assert (folder / "src.ids").read_bytes() == good
    (folder / "tgt.len").write_bytes(b"")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mt"):
        corpus.prepare(files, tokenizer)
    assert "tgt.len is damaged" in caplog.text
    assert not list(folder.parent.glob("*.tmp-*")) and not list(folder.parent.glob("*.old-*"))


def test_processes_preparing_one_corpus_side_by_side_build_it_once(files, tokenizer, monkeypatch, caplog):
    """Seeds started together share the cache folder: the first builds it while the others wait and
    then read it (a second build renamed the first away under its readers: FileNotFoundError on meta.json
    in 7 of 8 seeds started together on a GPU). flock ties the lock to an open file, so two threads of
    one process take turns as two processes do."""
    builds, started, release = [], threading.Event(), threading.Event()

    def held_binarize(*args):
        builds.append(args[3])
        started.set()
        release.wait(30)
        return binarize.binarize(*args)

    monkeypatch.setattr(corpus, "binarize", held_binarize)
    folders = {}

    def prepare(name):
        folders[name] = corpus.prepare(files, tokenizer)

    first, second = (threading.Thread(target=prepare, args=(n,)) for n in ("first", "second"))
    with caplog.at_level(logging.INFO, logger="mt"):
        first.start()
        assert started.wait(30)
        second.start()
        second.join(0.5)
        assert second.is_alive()  # waiting its turn
        release.set()
        first.join(30)
        second.join(30)
    assert len(builds) == 1 and folders["first"] == folders["second"]
    assert f"waiting for another process binarizing {folders['first']}" in caplog.text
    assert corpus.load(folders["second"]).src.numel() > 0


# prepares the corpus of data.dir argv[1] with tokenizer model argv[2], holding its build (so the
# folder's lock) until a line comes on stdin
HELD_BUILD = """
import sys
from pathlib import Path
from mt.config import DataConfig
from mt.tokenizer import Tokenizer
from mt.training import corpus
real = corpus.binarize
def held(*args):
    print("building", flush=True)
    sys.stdin.readline()
    return real(*args)
corpus.binarize = held
cfg = DataConfig(corpus="files", dir=sys.argv[1], max_len=12)
print(corpus.prepare(cfg, Tokenizer(Path(sys.argv[2]).read_bytes())), flush=True)
"""


def test_a_process_preparing_a_corpus_another_process_builds_waits_and_reads_it(
    files, tokenizer, monkeypatch, caplog, tmp_path
):
    """Two real processes (two threads share a pid, so they cannot tell a lock named per process from
    one named per folder): while one builds the corpus, the other says it waits, builds nothing, and
    then reads the folder the first built."""
    (tmp_path / "spm.model").write_bytes(tokenizer.proto)
    builder = subprocess.Popen(
        [sys.executable, "-c", HELD_BUILD, files.dir, str(tmp_path / "spm.model")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    builds, folders = [], []
    monkeypatch.setattr(corpus, "binarize", lambda *args: builds.append(args) or binarize.binarize(*args))
    second = threading.Thread(target=lambda: folders.append(corpus.prepare(files, tokenizer)))
    try:
        assert builder.stdout.readline() == "building\n"
        with caplog.at_level(logging.INFO, logger="mt"):
            second.start()
            deadline = time.monotonic() + 60
            while (
                second.is_alive() and "waiting for another" not in caplog.text and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            assert second.is_alive() and not builds  # waiting its turn
            builder.stdin.write("\n")
            builder.stdin.flush()
            built = Path(builder.stdout.readline().strip())
            second.join(60)
    finally:
        builder.stdin.close()
        builder.wait(60)
    assert builder.returncode == 0 and not builds and folders == [built]
    assert f"waiting for another process binarizing {built}" in caplog.text
    assert corpus.load(built).src.numel() > 0


def test_a_stale_cache_is_rebuilt_when_the_corpus_changes(files, tokenizer, caplog):
    first = corpus.load(corpus.prepare(files, tokenizer))
    for lang, line in (("de", "Ein Hund läuft."), ("en", "A dog runs.")):
        path = corpus.training_sources(files)[0].with_suffix(f".{lang}")
        path.write_text(path.read_text() + line + "\n")
    with caplog.at_level(logging.INFO, logger="mt"):
        second = corpus.load(corpus.prepare(files, tokenizer))
    assert "the corpus files changed since it was built" in caplog.text
    assert len(second) == len(first) + 1


def test_misaligned_sides_are_an_error_naming_both_files(files, tokenizer):
    src, tgt = corpus.training_sources(files)
    tgt.write_text(tgt.read_text() + "one more\n")
    with pytest.raises(
        DataError, match=rf"^{src} has 400 lines but {tgt} has 401; the two sides must be line-aligned$"
    ):
        corpus.prepare(files, tokenizer)
    with pytest.raises(DataError, match="has 400 lines but .* has 401"):
        tokenizer_sample(files, 1000, 0, tgt.with_name("sample.txt"))


def test_tokenizer_sample_is_seeded_and_in_corpus_order(files, tmp_path):
    src, tgt = load_split(files, "train")
    everything = src + tgt
    assert tokenizer_sample(files, 10_000, 1, tmp_path / "all.txt") == (800, 800)
    assert (tmp_path / "all.txt").read_text().splitlines() == everything
    assert tokenizer_sample(files, 100, 1, tmp_path / "a.txt") == (100, 800)
    assert tokenizer_sample(files, 100, 1, tmp_path / "b.txt") == (100, 800)
    tokenizer_sample(files, 100, 2, tmp_path / "c.txt")
    a, c = ((tmp_path / name).read_text().splitlines() for name in ("a.txt", "c.txt"))
    assert a == (tmp_path / "b.txt").read_text().splitlines() and a != c
    lines = iter(everything)
    assert all(any(line == other for other in lines) for line in a)  # a subsequence: corpus lines in order


def test_empty_and_long_pairs_are_dropped_and_counted(files, tokenizer, caplog):
    caplog.set_level(logging.INFO, logger="mt")
    corpus.prepare(files, tokenizer)
    kept, read = next(
        (int(m.split()[1]), int(m.split()[3])) for m in caplog.messages if m.startswith("kept ")
    )
    assert 0 < kept < read == 400
    with pytest.raises(DataError) as e:
        corpus.prepare(DataConfig(corpus="files", dir=files.dir, max_len=1), tokenizer)
    assert str(e.value) == (
        "no training pairs left of 400 (removed: 0 empty, 400 too long, 0 ratio, 0 copy, 0 language, "
        "0 leak, 0 duplicate); raise data.max_len, or relax data.clean"
    )


def test_bpe_dropout_views_are_seeded_samples_of_the_same_text(files, tokenizer, monkeypatch):
    """Each view re-encodes the pairs with BPE-dropout: the same text in other pieces, the same again
    for the same view, another for another view; view 0 is the plain encoding."""
    sampled = dataclasses.replace(files, max_len=400, bpe_dropout=0.3)
    monkeypatch.setattr(
        binarize, "PAIRS_ENCODED_AT_ONCE", 7
    )  # several chunks: each side of each gets a seed of its own

    def pieces(folder) -> list[list[int]]:
        loaded = corpus.load(folder)
        return [
            loaded.src[a : a + n].tolist()
            for a, n in zip(loaded.starts(torch.arange(len(loaded)))[0].tolist(), loaded.src_len.tolist())
        ]

    plain, one, two = (pieces(corpus.prepare(sampled, tokenizer, view=v)) for v in (0, 1, 2))
    src, _ = load_split(files, "train")
    assert plain == tokenizer.encode(src)
    assert tokenizer.decode(one) == tokenizer.decode(two) == tokenizer.decode(plain)
    assert sum(map(len, one)) > sum(map(len, plain)) and one != two
    assert sum(a != b for a, b in zip(one, plain)) > len(src) // 2
    rebuilt = corpus.prepare(sampled, tokenizer, view=1)
    for name in ("src.ids", "tgt.ids"):
        (rebuilt / name).write_bytes(b"")  # damaged: rebuilt, with the very same draws
    assert pieces(corpus.prepare(sampled, tokenizer, view=1)) == one
    assert tokenizer.encode(src) == plain  # sampling leaves plain encoding (validation, test) alone


def _write(folder, name: str, lines: list[str]) -> None:
    (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_cleaning_removes_a_pair_for_the_first_rule_it_breaks_and_lists_its_line(files, tokenizer, tmp_path):
    """Each rule of data.clean removes its kind of noise, counted under the first rule a pair breaks,
    its line number (1-based) in removed.tsv; every other pair is kept, in order."""
    folder = tmp_path
    de, en = load_split(files, "train")
    val_de, _ = load_split(files, "val")
    _, test_en = load_split(files, "test")
    similar = min(de[20:], key=lambda line: abs(len(line) - len(test_en[0])))  # no ratio outlier
    noisy = [
        ("", en[0]),  # 1 empty source
        (de[1], "   \t "),  # 2 whitespace only
        (de[2], " ".join([en[2]] * 6)),  # 3 ratio: six times as long
        (en[3], en[3]),  # 4 copy
        (en[6], de[6]),  # 5 sides exchanged: each in the other's language
        (val_de[0], en[4]),  # 6 a val source
        (similar, test_en[0]),  # 7 a test target
    ]
    clean = list(zip(de[:20], en[:20]))
    pairs = [clean[0], *noisy, clean[0], *clean[1:], (de[7], en[7])]  # line 9 repeats line 1
    _write(folder, "train.de", [s for s, _ in pairs])
    _write(folder, "train.en", [t for _, t in pairs])
    cfg = dataclasses.replace(files, max_len=100)
    built = corpus.prepare(cfg, tokenizer)
    removed = (built / "removed.tsv").read_text().splitlines()
    assert removed == [
        "2\tempty",
        "3\tempty",
        "4\tratio",
        "5\tcopy",
        "6\tlanguage",
        "7\tleak",
        "8\tleak",
        "9\tduplicate",
        "29\tduplicate",
    ]
    loaded = corpus.load(built)
    kept_src = [
        loaded.src[a : a + n].tolist()
        for a, n in zip(loaded.starts(torch.arange(len(loaded)))[0].tolist(), loaded.src_len.tolist())
    ]
    assert tokenizer.decode(kept_src) == de[:20]
    report = corpus.cleaning_report(built, tmp_path / "removed-pairs.tsv")
    assert report == {
        "pairs_read": 29,
        "kept": 20,
        "removed": {
            "empty": 2,
            "too_long": 0,
            "ratio": 1,
            "copy": 1,
            "language": 1,
            "leak": 2,
            "duplicate": 2,
        },
        "lines": "removed-pairs.tsv",
    }
    assert (tmp_path / "removed-pairs.tsv").read_text().splitlines() == removed


def test_seen_pairs_finds_every_repeat_across_merges(monkeypatch):
    """The compact duplicate memory answers as a set of every pair would, before and after merging its
    recent pairs into the sorted tensor (here every 5 pairs)."""
    monkeypatch.setattr(clean.SeenPairs, "MERGE", 5)
    g = torch.Generator().manual_seed(0)
    pairs = [(f"s{i}", f"t{j}") for i, j in torch.randint(0, 6, (300, 2), generator=g).tolist()]
    seen, answers, naive = clean.SeenPairs(), [], set()
    for start in range(0, 300, 7):  # chunks, a repeat often inside one
        answers += seen.first_seen(clean.pair_keys(pairs[start : start + 7]))
    for pair in pairs:
        answers_naive = pair not in naive
        naive.add(pair)
        assert answers.pop(0) == answers_naive
    distinct = len(set(pairs))
    assert len(seen.old) > 0 and len(seen.old) + len(seen.recent) == distinct  # each once: 8 bytes a pair


@pytest.mark.parametrize(
    "corpus_name, apply, cleaned",
    [("files", "auto", True), ("files", "never", False), ("toy", "auto", False), ("toy", "always", True)],
)
def test_cleaning_applies_to_files_corpora_unless_told(corpus_name, apply, cleaned):
    cfg = DataConfig(corpus=corpus_name, dir="x", clean=CleanConfig(apply=apply))
    assert clean.cleaning_applies(cfg) == cleaned


def test_a_changed_val_file_rebuilds_the_cache_its_leak_rule_read(files, tokenizer, tmp_path, caplog):
    """The leak rule reads the val and test files: a change to them is a change to the cache's key."""
    files = dataclasses.replace(files, max_len=100)
    de, en = load_split(files, "train")
    first = corpus.prepare(files, tokenizer)
    val_de, val_en = load_split(files, "val")
    _write(tmp_path, "val.de", [de[3]] + val_de[1:])  # a training source is now a val line
    with caplog.at_level(logging.INFO, logger="mt"):
        second = corpus.prepare(files, tokenizer)
    assert second != first
    assert "4\tleak" in (second / "removed.tsv").read_text().splitlines()
    assert "4\tleak" not in (first / "removed.tsv").read_text().splitlines()
    never = dataclasses.replace(files, clean=CleanConfig(apply="never"))
    assert (corpus.prepare(never, tokenizer) / "removed.tsv").read_text().splitlines() == [
        line
        for line in (first / "removed.tsv").read_text().splitlines()
        if line.endswith(("empty", "too_long"))
    ]


def test_the_language_rule_tells_chinese_from_english_as_it_tells_the_same_text_spaced():
    """A side in the other side's language is found in Chinese as in Chinese written with a space
    between characters (mt.plumbing.script's words): each verdict the same, on every test pair either
    way round."""
    _, val_en, val_zh = toy_corpus(languages=("de", "en", "zh"))["val"]
    _, test_en, test_zh = toy_corpus(languages=("de", "en", "zh"))["test"]
    chinese, spaced = (
        clean.Languages(val_en, val_zh),
        clean.Languages(val_en, [" ".join(line) for line in val_zh]),
    )
    verdicts = [
        (chinese.wrong(en, 0), chinese.wrong(zh, 1), chinese.wrong(zh, 0), chinese.wrong(en, 1))
        for en, zh in zip(test_en, test_zh)
    ]
    # the rule fires: each side is kept in its own language and found wrong in the other's, all 500
    assert set(verdicts) == {(False, False, True, True)} and len(verdicts) == 500
    assert verdicts == [
        (
            spaced.wrong(en, 0),
            spaced.wrong(" ".join(zh), 1),
            spaced.wrong(" ".join(zh), 0),
            spaced.wrong(en, 1),
        )
        for en, zh in zip(test_en, test_zh)
    ]
    assert verdicts == [(False, False, True, True)] * len(test_en)  # exchanged sides are caught


def test_two_encoding_processes_write_the_bytes_one_process_writes(files, tokenizer, monkeypatch, tmp_path):
    """Chunks encoded in worker processes (here 2, 7 pairs a chunk) come back in corpus order: every file
    of the folder is byte for byte the one-process build's, BPE-dropout's seeded samples and the
    duplicate rule (judged in the main process) included."""
    lines = (tmp_path / "train.de").read_text().splitlines()
    en = (tmp_path / "train.en").read_text().splitlines()
    (tmp_path / "train.de").write_text("\n".join(lines + lines[:40]) + "\n")  # 40 pairs again: the
    (tmp_path / "train.en").write_text("\n".join(en + en[:40]) + "\n")  # short ones are duplicates
    sampled = dataclasses.replace(files, bpe_dropout=0.2)
    monkeypatch.setattr(binarize, "PAIRS_ENCODED_AT_ONCE", 7)
    pools, spawned = [], binarize.multiprocessing.get_context("spawn")

    class Spawn:  # the spawn context, with each pool it starts counted
        def Pool(self, processes, *args):
            pools.append(processes)
            return spawned.Pool(processes, *args)

    monkeypatch.setattr(binarize.multiprocessing, "get_context", lambda method: Spawn())
    built = {}
    for processes in (1, 2):
        monkeypatch.setenv("MT_CACHE_DIR", str(tmp_path / f"cache-{processes}"))
        monkeypatch.setattr(binarize, "binarize_processes", lambda sources, n=processes: n)
        built[processes] = [corpus.prepare(sampled, tokenizer, view=v) for v in (0, 1)]
    assert pools == [2, 2]  # each view of the two-process build encoded in two workers
    for one, two in zip(built[1], built[2]):
        for name in corpus.FILES:
            assert (one / name).read_bytes() == (two / name).read_bytes(), name
    meta = json.loads((built[2][0] / "meta.json").read_text())
    assert meta["removed"]["duplicate"] > 0 and meta["removed"]["too_long"] > 0
    assert (built[2][1] / "src.ids").read_bytes() != (built[2][0] / "src.ids").read_bytes()


def test_a_line_that_is_not_utf8_is_named_by_an_encoding_process_before_the_sides_uneven_end(
    files, tokenizer, monkeypatch
):
    path = corpus.training_sources(files)[1]
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:17] + [b"caf\xe9"] + lines[18:-10]))  # and 10 lines short
    monkeypatch.setattr(binarize, "PAIRS_ENCODED_AT_ONCE", 7)
    monkeypatch.setattr(binarize, "binarize_processes", lambda sources: 2)
    with pytest.raises(DataError) as e:
        corpus.prepare(files, tokenizer)
    assert str(e.value) == f"{path}: line 18 is not valid UTF-8; re-encode the file as UTF-8"


def test_a_loaded_corpus_carries_the_length_index_of_its_lengths(files, tokenizer):
    loaded = corpus.load(corpus.prepare(files, tokenizer))
    made = batching.length_index(loaded.src_len, loaded.tgt_len)
    stored = loaded.length_index()
    assert torch.equal(stored.order, made.order) and torch.equal(stored.lengths, made.lengths)
    assert torch.equal(stored.starts, made.starts) and len(stored.order) == len(loaded)
