"""The binarized training corpus: ids round-trip to text, a damaged or stale cache is rebuilt, the
tokenizer's sample is seeded, and lazily made batches are exactly the list-built ones."""

import logging
import random

import pytest
import torch

from mt import batching, corpus
from mt.config import DataConfig, DataError
from mt.batching import batch_sizes, epoch_plan
from mt.corpus import Corpus, tokenizer_sample
from mt.data import drop_long_pairs, epoch_batches, load_split, make_batch, token_batches


@pytest.fixture
def files(small_corpus, tmp_path):
    """A private copy of the small corpus (tests here change its files)."""
    for path in small_corpus.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    return DataConfig(corpus="files", dir=str(tmp_path), max_len=12)


def test_epoch_plan_is_token_batches_with_the_same_draws():
    rng = random.Random(0)
    for trial in range(20):
        n = rng.randint(1, 400)
        src = torch.tensor([rng.randint(1, 30) for _ in range(n)])
        tgt = torch.tensor([rng.randint(1, 30) for _ in range(n)])
        max_tokens = rng.choice([8, 20, 64, 256])  # 8 and 20: some pairs alone exceed the budget
        plan = epoch_plan(src, tgt, max_tokens, seed=trial, epoch=2)
        expected = token_batches(
            (src + 1).tolist(), (tgt + 1).tolist(), max_tokens, random.Random(trial * 100_003 + 2)
        )
        assert [plan.rows(j).tolist() for j in range(len(plan))] == expected


def test_batch_sizes_by_runs_of_equal_length():
    # lengths 2 x3, 3 x4 with a budget of 7: [2, 2, 2] -> 3 x 3 > 7 cuts; [3, 3], [3, 3]
    assert batch_sizes([2, 3], [3, 4], 7) == [3, 2, 2]
    assert batch_sizes([9], [2], 7) == [1, 1]  # longer than the budget: alone
    assert batch_sizes([2, 3], [1, 1], 100) == [2]


def test_corpus_batch_is_make_batch():
    src = [[5, 6, 7], [8], [9, 10, 11, 12], [13, 14]]
    tgt = [[20], [21, 22, 23], [24, 25], [26, 27, 28, 29, 30]]
    rows = [2, 0, 3]
    got = Corpus.from_ids(src, tgt).batch(torch.tensor(rows))
    want = make_batch([src[i] for i in rows], [tgt[i] for i in rows])
    for name in ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert got.ntokens == want.ntokens


def test_binarized_ids_round_trip_to_the_text(files, tokenizer):
    src, tgt = load_split(files, "train")
    loaded = Corpus.load(corpus.prepare(files, tokenizer))
    want_src, want_tgt = drop_long_pairs(tokenizer.encode(src), tokenizer.encode(tgt), files.max_len)
    assert 0 < len(loaded) == len(want_src) < len(src)  # max_len 12 drops some pairs
    assert loaded.src.dtype == torch.uint16 and loaded.src_len.dtype == torch.uint16
    got = [
        (loaded.src[a : a + n].tolist(), loaded.tgt[b : b + m].tolist())
        for a, n, b, m in zip(
            loaded.src_start.tolist(),
            loaded.src_len.tolist(),
            loaded.tgt_start.tolist(),
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


def test_a_stale_cache_is_rebuilt_when_the_corpus_changes(files, tokenizer, caplog):
    first = Corpus.load(corpus.prepare(files, tokenizer))
    for lang, line in (("de", "Ein Hund läuft."), ("en", "A dog runs.")):
        path = corpus.training_sources(files)[0].with_suffix(f".{lang}")
        path.write_text(path.read_text() + line + "\n")
    with caplog.at_level(logging.INFO, logger="mt"):
        second = Corpus.load(corpus.prepare(files, tokenizer))
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


def test_fill_ratio_counts_the_padded_batches(toy, tokenizer):
    src, tgt = tokenizer.encode(toy["train"][0][:300]), tokenizer.encode(toy["train"][1][:300])
    batches = epoch_batches(src, tgt, 600, seed=3, epoch=1)
    real = sum(int(b.src_mask.sum()) + int(b.tgt_mask.sum()) for b in batches)
    total = sum(b.src.numel() + b.tgt_in.numel() for b in batches)
    lengths = [torch.tensor([len(s) for s in side]) for side in (src, tgt)]
    plan = epoch_plan(*lengths, 600, seed=3, epoch=1)
    assert batching.fill_ratio(Corpus.from_ids(src, tgt), plan) == pytest.approx(real / total, rel=1e-12)
