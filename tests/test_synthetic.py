"""mt.generated.synthetic: the generated corpus behind configs/base.yaml (a GPU-sized workload with no
download) has WMT-like lengths, a learnable word-for-word translation, and the ids a benchmark draws without a
tokenizer; `mt train configs/base.yaml` runs end to end on it."""

import statistics

import pytest
import torch
from conftest import sets

from mt.cli import main
from mt.config import EOS, load_config
from mt.data import load_split
from mt.generated import synthetic


def test_the_corpus_is_fixed_line_aligned_and_shaped_like_wmt():
    made = synthetic.generated_corpus(5000)
    assert {split: len(src) for split, (src, _) in made.items()} == {"train": 5000, "val": 50, "test": 50}
    src, tgt = made["train"]
    assert synthetic._sentences(5000, 1) == (src, tgt)  # the same corpus every time
    words = [len(line.split()) - 1 for line in src]  # without the final "."
    assert [len(line.split()) - 1 for line in tgt] == words  # word for word
    assert 18 <= statistics.median(words) <= 22 and 21 <= statistics.mean(words) <= 25
    assert max(words) > 60 and min(words) >= 1  # a tail, as real text has
    assert set(made["test"][0]).isdisjoint(src)


def test_every_source_word_has_one_translation_and_adjectives_move():
    """Read from the pairs alone, not from the generator's tables: each source word has one target word
    (one to one), and about one word in 7 always moves one place right, past the word after it."""
    src, tgt = synthetic.generated_corpus(5000)["train"]
    pairs = [(s.lower().split()[:-1], t.lower().split()[:-1]) for s, t in zip(src, tgt)]
    meaning: dict[str, str] = {}
    while True:  # a word's translation is within a place of it in every target, less the words known
        candidates: dict[str, set[str]] = {}
        for s, t in pairs:
            known = {meaning[word] for word in s if word in meaning}
            for i, word in enumerate(s):
                if word not in meaning:
                    near = set(t[max(i - 1, 0) : i + 2]) - known
                    candidates[word] = candidates.get(word, near) & near
        found = {word: next(iter(c)) for word, c in candidates.items() if len(c) == 1}
        if not found:
            break
        meaning |= found
    words = {word for s, _ in pairs for word in s}
    assert len(meaning) > 0.9 * len(words) and len(set(meaning.values())) == len(meaning)
    moved, stayed = set(), set()
    known = [(s, t) for s, t in pairs if all(word in meaning for word in s)]
    assert len(known) > len(pairs) // 2
    for s, t in known:  # the words of each pair the same, after the meaning
        assert sorted(meaning[word] for word in s) == sorted(t)
    for s, t in (pair for pair in known if all(a != b for a, b in zip(pair[0], pair[0][1:]))):
        mapped, i = [meaning[word] for word in s], 0  # a word twice in a row hides a move: left out
        while i < len(s) - 1:
            if (mapped[i], mapped[i + 1]) == (t[i + 1], t[i]):
                moved.add(s[i])
                i += 2  # the word moved past is not itself moved
            else:
                assert mapped[i] == t[i]
                stayed.add(s[i])
                i += 1
    assert moved.isdisjoint(stayed) and 0.08 < len(moved) / len(moved | stayed) < 0.22
    assert synthetic._translate([3, 5, 8, 3]) == [5, 3, 8, 3]  # the last word has nothing to swap with


def test_piece_pairs_without_a_tokenizer():
    src, tgt, src_len, tgt_len = synthetic.piece_pairs(2000, 32000, seed=1)
    assert src.numel() == int(src_len.sum()) and tgt.numel() == int(tgt_len.sum())
    assert int(src.min()) > EOS and int(tgt.max()) < 32000 and int(src_len.min()) >= 1
    assert 25 <= float(src_len.float().mean()) <= 35  # ~23 words at ~1.3 pieces
    assert float((tgt_len.float() / src_len.float() - 1).abs().median()) < 0.1
    again = synthetic.piece_pairs(2000, 32000, seed=1)
    assert all(torch.equal(a, b) for a, b in zip((src, tgt, src_len, tgt_len), again))


BASE_ON_A_CPU = [
    "data.synthetic_pairs=2000",
    "tokenizer.vocab_size=2000",
    "train.max_tokens=1200",
    "train.max_steps=3",
    "train.valid_every=3",
    "train.precision=fp32",
    "train.device=cpu",
    "train.threads=2",
    "train.tune=false",  # a random base model's beam search runs to the length limit: minutes
]


@pytest.mark.slow
def test_base_trains_end_to_end_on_a_cpu(tmp_path, capsys):
    """Transformer-base's sizes as configs/base.yaml has them, on a small synthetic corpus, 3 updates."""
    cfg = load_config("configs/base.yaml", BASE_ON_A_CPU)
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.depth, cfg.model.d_ff) == (512, 8, (6, 6), 2048)
    run = tmp_path / "base"
    assert main(["train", "configs/base.yaml", "--run-dir", str(run), *sets(BASE_ON_A_CPU)]) == 0
    assert (run / "best.pt").exists() and (run / "spm.model").exists()
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in load_split(cfg.data, "test")[0][:3]))
    capsys.readouterr()
    assert main(["translate", "--run", str(run), "--input", str(tmp_path / "in.txt")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
