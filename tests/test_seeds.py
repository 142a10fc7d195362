"""mt/plumbing/seeds.py: every seed mt derives from a config's seed comes from one rule, `derived_seed`,
and each place that draws (an epoch's order, a length group's ties, BPE-dropout, sampling) uses it."""

import re
from pathlib import Path

import torch

from mt.batching import Pairs
from mt.config import DataConfig
from mt.plumbing.seeds import STEP, derived_seed
from mt.tokenizer import Tokenizer
from mt.training import binarize
from mt.training.epochs import epoch_plan
from mt.translate import _sampling_seeds

PACKAGE = Path(__file__).resolve().parents[1] / "mt"


def test_a_seed_takes_its_keys_one_step_each_and_stays_below_2_to_the_63():
    assert derived_seed(7) == 7
    assert derived_seed(7, 3) == 7 * 1_000_003 + 3
    assert derived_seed(7, 3, 2) == derived_seed(derived_seed(7, 3), 2) == (7 * 1_000_003 + 3) * 1_000_003 + 2
    assert 0 <= derived_seed(2**62, 2**40, 5) < 2**63
    # torch's CPU generator keeps the low 32 bits: neighbouring keys and lines keep them apart
    lows = {
        derived_seed(1, line, part, draw) % 2**32
        for line in range(200)
        for part in range(3)
        for draw in range(4)
    }
    assert len(lows) == 200 * 3 * 4


def test_each_draw_is_seeded_by_the_rule():
    pairs = Pairs.from_ids([[5] * (1 + i % 3) for i in range(40)], [[6] * (1 + i % 2) for i in range(40)])
    plan = epoch_plan(pairs, 8, seed=11, epoch=3)
    assert plan.seed == derived_seed(11, 3)
    order = torch.randperm(len(plan.cuts) - 1, generator=torch.Generator().manual_seed(derived_seed(11, 3)))
    assert plan.shuffled.tolist() == order.tolist()
    index = pairs.length_index()  # a length group's ties: drawn from the epoch's seed and the group
    a, z = int(index.starts[0]), int(index.starts[1])
    ties = torch.randperm(z - a, generator=torch.Generator().manual_seed(derived_seed(plan.seed, 0)))
    assert index.rows(a, z, plan.seed).tolist() == index.order[a + ties].long().tolist()
    assert _sampling_seeds(9, [0, 4], [0, 1], 2) == [derived_seed(9, 0, 0, 2), derived_seed(9, 4, 1, 2)]


def test_bpe_dropout_samples_each_side_of_each_chunk_with_a_seed_of_its_own(tokenizer, monkeypatch, tmp_path):
    """Binarizing with BPE-dropout seeds chunk c's side s (0 source, 1 target) by the key 2 * c + s: three
    chunks of two pairs draw six seeds, in corpus order, no two alike (chunk 0's target and chunk 1's
    source included)."""
    drawn = []
    sampled = Tokenizer.encode_sampled

    def recorded(self, lines, dropout, seed):
        drawn.append((lines, seed))
        return sampled(self, lines, dropout, seed)

    monkeypatch.setattr(Tokenizer, "encode_sampled", recorded)
    monkeypatch.setattr(binarize, "PAIRS_ENCODED_AT_ONCE", 2)
    src = ["ein Hund", "eine Katze", "zwei Hunde", "ein Mann", "eine Frau", "ein Kind"]
    tgt = ["a dog", "a cat", "two dogs", "a man", "a woman", "a child"]
    binarize.binarize((src, tgt), tokenizer, DataConfig(), tmp_path, dropout=(0.1, 11))
    assert [seed for _, seed in drawn] == [derived_seed(11, key) for key in range(6)]
    assert [lines for lines, _ in drawn] == [src[0:2], tgt[0:2], src[2:4], tgt[2:4], src[4:6], tgt[4:6]]


def test_no_module_derives_a_seed_by_a_formula_of_its_own():
    """The step appears in seeds.py alone; no other large odd multiplier is folded into a seed."""
    for path in [*PACKAGE.glob("*.py"), *PACKAGE.glob("*/*.py")]:
        if path.name == "seeds.py":
            continue
        text = path.read_text()
        assert f"{STEP:_}" not in text and str(STEP) not in text, path
        assert not re.search(r"seed [*+] ", text), path
