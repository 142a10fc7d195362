"""mt/batching.py: the one planner and the one padded-batch builder. The planner works on length
arrays; the references here are the plain list version it replaced (sort, then cut greedily)."""

import random

import pytest
import torch

import mt.batching
import mt.training.epochs
from mt.batching import (
    Pairs,
    batch_sizes,
    gather_rows,
    make_batch,
    source_batch,
    token_batches,
)
from mt.config import BOS, EOS, PAD, RunConfig, TrainConfig
from mt.training.epochs import BatchStream, epoch_plan, fill_ratio, widened


def reference_batches(src_lens, tgt_lens, max_tokens, ties=None):
    """Indices sorted by (longer side, source, target, ties[i]), cut greedily while batch size x
    longest <= max_tokens."""
    ties = ties or list(range(len(src_lens)))
    order = sorted(
        range(len(src_lens)), key=lambda i: (max(src_lens[i], tgt_lens[i]), src_lens[i], tgt_lens[i], ties[i])
    )
    batches, current, longest = [], [], 0
    for i in order:
        length = max(src_lens[i], tgt_lens[i])
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    batches += [current] if current else []
    return batches


def reference_epoch_rows(src_lens, tgt_lens, max_tokens, seed, epoch):
    """An epoch's batches as the planner's rule states them, built pair by pair: the pairs of each
    group of equal lengths (numbered g in length order) in the order torch.randperm draws from seed
    (seed * 1_000_003 + epoch) * 1_000_003 + g (mt.plumbing.seeds' rule, written out); cut greedily;
    the batches in the order randperm draws from seed * 1_000_003 + epoch."""
    draw = seed * 1_000_003 + epoch
    keys = sorted({(max(s, t), s, t) for s, t in zip(src_lens, tgt_lens)})
    ties = [0] * len(src_lens)
    for g, key in enumerate(keys):
        members = [i for i, (s, t) in enumerate(zip(src_lens, tgt_lens)) if (max(s, t), s, t) == key]
        shuffled = torch.randperm(
            len(members), generator=torch.Generator().manual_seed((draw * 1_000_003 + g) % 2**63)
        )
        for rank, member in enumerate(shuffled.tolist()):
            ties[members[member]] = rank
    batches = reference_batches([s + 1 for s in src_lens], [t + 1 for t in tgt_lens], max_tokens, ties)
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(draw))
    return [batches[b] for b in order.tolist()]


def reference_epoch(src, tgt, max_tokens, seed, epoch):
    """An epoch's padded batches from id lists, built pair by pair."""
    groups = reference_epoch_rows([len(s) for s in src], [len(t) for t in tgt], max_tokens, seed, epoch)
    return [make_batch([src[i] for i in g], [tgt[i] for i in g]) for g in groups]


def lengths_pairs(src_lens, tgt_lens):
    """Pairs of these lengths (their ids do not matter to a plan)."""
    return Pairs.from_ids([[5] * n for n in src_lens], [[6] * n for n in tgt_lens])


def hand_padded(seqs):
    ids = torch.full((len(seqs), max(len(s) for s in seqs)), PAD, dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids


def test_token_batches_and_epoch_plans_are_the_reference_grouping():
    rng = random.Random(0)
    for trial in range(20):
        n = rng.randint(1, 400)
        src, tgt = [rng.randint(1, 30) for _ in range(n)], [rng.randint(1, 30) for _ in range(n)]
        max_tokens = rng.choice([8, 20, 64, 256])  # 8 and 20: some pairs alone exceed the budget
        assert token_batches(src, tgt, max_tokens) == reference_batches(src, tgt, max_tokens)
        plan = epoch_plan(
            lengths_pairs([n - 1 for n in src], [n - 1 for n in tgt]), max_tokens, trial, epoch=2
        )
        expected = reference_epoch_rows([n - 1 for n in src], [n - 1 for n in tgt], max_tokens, trial, 2)
        assert [plan.rows(j).tolist() for j in range(len(plan))] == expected


def test_token_batches_respect_the_budget_and_cover_every_index():
    rng = random.Random(0)
    src, tgt = [rng.randint(1, 40) for _ in range(500)], [rng.randint(1, 40) for _ in range(500)]
    batches = token_batches(src, tgt, 256)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) * max(max(src[i], tgt[i]) for i in b) <= 256 for b in batches)
    assert token_batches([10, 300, 10], [10, 5, 10], 100) == [[0, 2], [1]]  # too long: alone
    assert token_batches([], [], 100) == []


def test_batch_sizes_by_runs_of_equal_length():
    # lengths 2 x3, 3 x4 with a budget of 7: [2, 2, 2] -> 3 x 3 > 7 cuts; [3, 3], [3, 3]
    assert batch_sizes([2, 3], [3, 4], 7) == [3, 2, 2]
    assert batch_sizes([9], [2], 7) == [1, 1]  # longer than the budget: alone
    assert batch_sizes([2, 3], [1, 1], 100) == [2]
    assert batch_sizes([2, 3, 9], [2, 5, 1], 7) == [2, 2, 2, 1, 1]  # runs that end in a full batch


def test_a_length_index_read_a_chunk_at_a_time_is_the_one_read_at_once(monkeypatch):
    rng = random.Random(5)
    src, tgt = [rng.randint(0, 12) for _ in range(1000)], [rng.randint(0, 12) for _ in range(1000)]
    whole = lengths_pairs(src, tgt).length_index()
    monkeypatch.setattr(mt.batching, "PAIRS_WALKED_AT_ONCE", 64)
    chunked = lengths_pairs(src, tgt).length_index()
    assert torch.equal(whole.order, chunked.order) and torch.equal(whole.starts, chunked.starts)
    keys = [(max(src[i], tgt[i]), src[i], tgt[i]) for i in whole.order.tolist()]
    assert keys == sorted(keys) and whole.order.dtype == torch.int32
    for g in range(len(whole.lengths)):  # a group: pairs of its lengths, in corpus order
        members = whole.order[whole.starts[g] : whole.starts[g + 1]].tolist()
        assert members == sorted(members)
        assert {(src[i], tgt[i]) for i in members} == {tuple(whole.lengths[g].tolist())}


def test_pairs_start_where_their_block_and_the_lengths_before_them_say():
    rng = random.Random(2)
    src = [[rng.randint(4, 9)] * rng.randint(0, 5) for _ in range(300)]  # BLOCK is 64: five blocks
    pairs = Pairs.from_ids(src, src)
    rows = torch.tensor([0, 63, 64, 65, 299, 128, 1])
    expected = [sum(len(s) for s in src[:r]) for r in rows.tolist()]
    assert pairs.starts(rows)[0].tolist() == expected


def test_epoch_plans_are_seeded():
    pairs = lengths_pairs([i % 17 + 1 for i in range(300)], [i % 13 + 1 for i in range(300)])
    rows = lambda plan: [plan.rows(j).tolist() for j in range(len(plan))]  # noqa: E731
    first = rows(epoch_plan(pairs, 128, seed=1, epoch=1))
    assert first == rows(epoch_plan(pairs, 128, seed=1, epoch=1))
    assert first != rows(epoch_plan(pairs, 128, seed=1, epoch=2))
    assert first != rows(epoch_plan(pairs, 128, seed=2, epoch=1))
    assert sorted(i for batch in first for i in batch) == list(range(300))


def test_a_batch_is_the_hand_padded_pairs():
    src = [[5, 6, 7], [8], [9, 10, 11, 12], [13, 14]]
    tgt = [[20], [21, 22, 23], [24, 25], [26, 27, 28, 29, 30]]
    rows = [2, 0, 3]
    got = Pairs.from_ids(src, tgt).batch(torch.tensor(rows))
    assert torch.equal(got.src, hand_padded([src[i] + [EOS] for i in rows]))
    assert torch.equal(got.tgt_in, hand_padded([[BOS] + tgt[i] for i in rows]))
    assert torch.equal(got.tgt_out, hand_padded([tgt[i] + [EOS] for i in rows]))
    assert torch.equal(got.src_mask, got.src != PAD) and torch.equal(got.tgt_mask, got.tgt_in != PAD)
    assert got.ntokens == 1 + 5 + 2 + 3  # target pieces + eos of each row
    same = make_batch([src[i] for i in rows], [tgt[i] for i in rows])
    assert all(
        torch.equal(getattr(got, k), getattr(same, k)) for k in ("src", "tgt_in", "tgt_out", "tgt_mask")
    )
    ids, mask = source_batch([[5, 6], [], [7]])  # an empty line is eos alone
    assert ids.tolist() == [[5, 6, EOS], [EOS, PAD, PAD], [7, EOS, PAD]] and torch.equal(mask, ids != PAD)
    assert source_batch([[], []])[0].tolist() == [[EOS], [EOS]]


def test_a_stream_padded_to_a_multiple_holds_the_same_pairs_in_fewer_shapes(toy, tokenizer):
    """train.pad_multiple: every batch of the stream is the unpadded one's, widened with PAD to a
    multiple of 8 on each side (masks False there, ntokens the same)."""
    src, tgt = tokenizer.encode(toy["train"][0][:300]), tokenizer.encode(toy["train"][1][:300])
    plain = BatchStream(Pairs.from_ids(src, tgt), 600, seed=3)
    cfg = RunConfig(train=TrainConfig(max_tokens=600, seed=3, pad_multiple=8))
    padded = BatchStream.training(Pairs.from_ids(src, tgt), cfg, torch.device("cpu"))  # as mt train makes it
    (ones, _, _), (eights, _, _) = (stream.take(0, 0, 12) for stream in (plain, padded))
    shapes = {(b.src.size(1), b.tgt_in.size(1)) for b in ones}
    assert len({(b.src.size(1), b.tgt_in.size(1)) for b in eights}) < len(shapes)
    for one, eight in zip(ones, eights, strict=True):
        for key in ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask"):
            a, b = getattr(one, key), getattr(eight, key)
            assert b.size(0) == a.size(0) and b.size(1) % 8 == 0 and 0 <= b.size(1) - a.size(1) < 8, key
            assert torch.equal(b[:, : a.size(1)], a) and not b[:, a.size(1) :].any(), key  # PAD is 0
        assert eight.ntokens == one.ntokens
    capped = widened(ones[0], 8, most=ones[0].src.size(1) + 1)  # never past model.max_positions
    assert capped.src.size(1) == min(ones[0].src.size(1) + 1, -(-ones[0].src.size(1) // 8) * 8)


def test_fill_ratio_counts_the_padded_batches(toy, tokenizer):
    src, tgt = tokenizer.encode(toy["train"][0][:300]), tokenizer.encode(toy["train"][1][:300])
    batches = reference_epoch(src, tgt, 600, seed=3, epoch=1)
    real = sum(int(b.src_mask.sum()) + int(b.tgt_mask.sum()) for b in batches)
    total = sum(b.src.numel() + b.tgt_in.numel() for b in batches)
    plan = epoch_plan(Pairs.from_ids(src, tgt), 600, seed=3, epoch=1)
    assert fill_ratio(plan) == pytest.approx(real / total, rel=1e-12)


def test_batch_stream_crosses_epochs_and_is_the_seeded_epochs(toy, tokenizer):
    src, tgt = tokenizer.encode(toy["train"][0][:300]), tokenizer.encode(toy["train"][1][:300])
    flat = lambda b: b.src.tolist() + b.tgt_out.tolist() + b.tgt_in.tolist()  # noqa: E731
    runs = []
    for n in (3, 1):  # how many a take asks for (and so what the worker builds ahead) changes no batch
        stream, epoch, index, taken = BatchStream(Pairs.from_ids(src, tgt), 600, seed=3), 0, 0, {1: [], 2: []}
        while True:
            group, epoch, index = stream.take(epoch, index, n)
            if epoch == 3:
                break
            taken[epoch] += group
        runs.append({e: [flat(b) for b in bs] for e, bs in taken.items()})
    assert runs[0] == runs[1]
    for e in (1, 2):  # every epoch is its seeded batches, each taken once, in order
        assert runs[0][e] == [flat(b) for b in reference_epoch(src, tgt, 600, 3, e)]
    assert runs[0][1] != runs[0][2]


def test_batch_shift_masks_and_ntokens_match_hand_built():
    b = make_batch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    assert b.src.tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert b.src_mask.tolist() == [[True, True, True, True], [True, True, False, False]]
    assert b.tgt_in.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert b.tgt_out.tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert b.tgt_mask.tolist() == [[True, True, True, False], [True, True, True, True]]
    assert b.src_mask.dtype == torch.bool and b.ntokens == 7


def test_a_stream_of_views_reads_view_e_mod_n_in_epoch_e(toy, tokenizer):
    lines = toy["train"][0][:200], toy["train"][1][:200]
    views = [
        Pairs.from_ids(*(tokenizer.encode_sampled(side, 0.2, seed) for side in lines)) for seed in (1, 2)
    ]
    stream = BatchStream(views, 600, seed=3)
    for epoch, view in ((1, 0), (2, 1), (3, 0)):
        got, _, _ = stream.take(epoch, 0, 1000)
        want = [views[view].batch(stream.plan(epoch).rows(j)) for j in range(len(stream.plan(epoch)))]
        assert [b.src.tolist() for b in got] == [b.src.tolist() for b in want]
    assert views[0].src.tolist() != views[1].src.tolist()


def test_uint16_pairs_batch_as_int32_pairs_do_ids_above_32767_included():
    src = [[1, 40000, 65535], [32768, 7]]
    tgt = [[65535], [5, 32767, 40001, 9]]
    wide = Pairs.from_ids(src, tgt)
    narrow = Pairs.of(*(t.to(torch.uint16) for t in (wide.src, wide.tgt, wide.src_len, wide.tgt_len)))
    rows = torch.tensor([1, 0])
    for a, b in zip(vars(wide.batch(rows)).values(), vars(narrow.batch(rows)).values()):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    assert gather_rows(narrow.src, torch.tensor([2, 1, 3])).tolist() == [65535, 40000, 32768]
    part = narrow.subset(rows)
    assert part.src.dtype == torch.uint16 and part.src_len.dtype == torch.uint16
    assert torch.equal(part.batch(torch.arange(2)).tgt_out, wide.batch(rows).tgt_out)


def test_fill_ratio_and_taken_read_an_epochs_batches_a_few_at_a_time(toy, tokenizer, monkeypatch):
    src, tgt = tokenizer.encode(toy["train"][0][:300]), tokenizer.encode(toy["train"][1][:300])
    plan = epoch_plan(Pairs.from_ids(src, tgt), 600, seed=3, epoch=1)
    half = len(plan) // 2
    rows = torch.cat([plan.rows(j) for j in range(half)]).tolist()
    index = plan.index
    group_of = {tuple(lengths): g for g, lengths in enumerate(index.lengths.tolist())}
    counted = torch.bincount(
        torch.tensor([group_of[len(src[i]), len(tgt[i])] for i in rows]), minlength=len(index.lengths)
    )
    whole = fill_ratio(plan)
    assert torch.equal(plan.taken(half), counted)
    monkeypatch.setattr(mt.training.epochs, "BATCHES_AT_ONCE", 3)
    assert torch.equal(plan.taken(half), counted) and fill_ratio(plan) == pytest.approx(whole, rel=1e-12)
