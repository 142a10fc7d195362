"""mt/batching.py: the one planner and the one padded-batch builder. The planner works on length
arrays; the references here are the plain list version it replaced (sort, then cut greedily)."""

import random

import pytest
import torch

from mt.batching import (
    BatchStream,
    Pairs,
    batch_sizes,
    epoch_plan,
    fill_ratio,
    gather_rows,
    make_batch,
    source_batch,
    token_batches,
)
from mt.tokenizer import BOS, EOS, PAD


def reference_batches(src_lens, tgt_lens, max_tokens, rng=None):
    """Indices sorted by (longer side, source, target, a draw), cut greedily while batch size x
    longest <= max_tokens; with `rng`, the batches shuffled."""
    ties = [rng.random() for _ in src_lens] if rng else [0.0] * len(src_lens)
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
    if rng:
        rng.shuffle(batches)
    return batches


def reference_epoch(src, tgt, max_tokens, seed, epoch):
    """An epoch's padded batches from id lists, as the list version made them."""
    rng = random.Random(seed * 100_003 + epoch)
    groups = reference_batches([len(s) + 1 for s in src], [len(t) + 1 for t in tgt], max_tokens, rng)
    return [make_batch([src[i] for i in g], [tgt[i] for i in g]) for g in groups]


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
        plan = epoch_plan(torch.tensor(src) - 1, torch.tensor(tgt) - 1, max_tokens, seed=trial, epoch=2)
        expected = reference_batches(src, tgt, max_tokens, random.Random(trial * 100_003 + 2))
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


def test_epoch_plans_are_seeded():
    src, tgt = torch.tensor([i % 17 + 1 for i in range(300)]), torch.tensor([i % 13 + 1 for i in range(300)])
    rows = lambda plan: [plan.rows(j).tolist() for j in range(len(plan))]  # noqa: E731
    first = rows(epoch_plan(src, tgt, 128, seed=1, epoch=1))
    assert first == rows(epoch_plan(src, tgt, 128, seed=1, epoch=1))
    assert first != rows(epoch_plan(src, tgt, 128, seed=1, epoch=2))
    assert first != rows(epoch_plan(src, tgt, 128, seed=2, epoch=1))


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


def test_fill_ratio_counts_the_padded_batches(toy, tokenizer):
    src, tgt = tokenizer.encode(toy["train"][0][:300]), tokenizer.encode(toy["train"][1][:300])
    batches = reference_epoch(src, tgt, 600, seed=3, epoch=1)
    real = sum(int(b.src_mask.sum()) + int(b.tgt_mask.sum()) for b in batches)
    total = sum(b.src.numel() + b.tgt_in.numel() for b in batches)
    lengths = [torch.tensor([len(s) for s in side]) for side in (src, tgt)]
    plan = epoch_plan(*lengths, 600, seed=3, epoch=1)
    assert fill_ratio(Pairs.from_ids(src, tgt), plan) == pytest.approx(real / total, rel=1e-12)


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
