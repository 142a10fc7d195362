"""mt/tokenizer.py: one sentencepiece BPE model for both languages with fixed special ids, its round
trip, and models that are damaged or have other special ids refused."""

import json
import subprocess
import sys

import pytest

from mt.config import BOS, EOS, PAD, UNK
from mt.generated.toy import toy_corpus
from mt.plumbing.errors import ConfigError, RunDirError
from mt.tokenizer import Tokenizer, load_tokenizer
from mt.training.bpe import train_tokenizer


def test_special_ids_are_fixed(tokenizer):
    sp = tokenizer.sp
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.vocab_size == 300


def test_one_vocab_for_both_languages(tokenizer, toy):
    de, en = toy["test"]
    ids = tokenizer.encode([de[0], en[0]])
    assert all(4 <= i < tokenizer.vocab_size for seq in ids for i in seq)  # no specials, no unk
    assert UNK not in ids[0] + ids[1]


def test_round_trip(tokenizer, toy):
    lines = toy["test"][0][:50] + toy["test"][1][:50]
    assert tokenizer.decode(tokenizer.encode(lines)) == lines


def test_save_and_load(tokenizer, tmp_path, toy):
    tokenizer.save(tmp_path / "spm.model")
    again = load_tokenizer(tmp_path / "spm.model")
    lines = toy["val"][0][:20]
    assert again.encode(lines) == tokenizer.encode(lines)


def test_vocab_too_large_is_a_config_error():
    with pytest.raises(
        ConfigError, match=r"tokenizer.vocab_size: 5000 is too large for this corpus; set it to at most \d+"
    ):
        train_tokenizer(["ein kleiner Satz", "a small sentence"] * 10, vocab_size=5000)


def test_a_vocabulary_smaller_than_the_characters_is_a_config_error():
    """Chinese text keeps every character at coverage 1.0: each needs a piece, and 20 are too few."""
    with pytest.raises(ConfigError) as refused:
        train_tokenizer(["一只狗看见一只猫。", "这些老师不工作。", "a dog"] * 10, vocab_size=20)
    assert str(refused.value) == (
        "tokenizer.vocab_size: 20 is too small: this corpus's characters and the special pieces need at "
        "least 23; set it higher, or lower tokenizer.character_coverage"
    )


def test_a_model_with_other_special_ids_is_refused():
    import io

    import sentencepiece as spm

    proto = io.BytesIO()  # sentencepiece's defaults: unk 0, bos 1, eos 2, no pad
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["ein kleiner Satz", "a small sentence"] * 20),
        model_writer=proto,
        vocab_size=20,
        minloglevel=2,
    )
    with pytest.raises(
        RunDirError,
        match=r"^x/spm.model: a sentencepiece model without mt's special ids \(pad 0, "
        r"unk 1, bos 2, eos 3\); use the spm.model that mt trained for this run$",
    ):
        Tokenizer(proto.getvalue(), "x/spm.model")


def test_word_starts_are_the_pieces_after_a_space(tokenizer):
    pieces = tokenizer.pieces("Der kleine Hund")
    ids = tokenizer.encode(["Der kleine Hund"])[0]
    assert [tokenizer.starts_word(i) for i in ids] == [p.startswith("\u2581") for p in pieces]
    assert sum(map(tokenizer.starts_word, ids)) == 3


def test_in_chinese_every_piece_starts_a_word(toy):
    """A long Chinese line can be cut before any piece (mt.translate.split_pieces), as spaced text
    before a piece after a space: Chinese has a space mark only at the line's start."""
    _, en, zh = toy_corpus(languages=("de", "en", "zh"))["train"]
    chinese = train_tokenizer(en[:2000] + zh[:2000], vocab_size=500)
    pieces = chinese.pieces(zh[0])
    assert len(pieces) > 5 and sum(p.startswith("\u2581") for p in pieces) == 1
    assert all(chinese.starts_word(i) for i in chinese.encode([zh[0]])[0])


def test_a_piece_that_is_not_utf8_is_a_damaged_model(tokenizer):
    """What the fuzz soak found: sentencepiece parses the model, then a piece fails to decode."""
    data = bytearray(tokenizer.proto)
    i = data.index("\u2581".encode())
    data[i + 1] ^= 0x40  # e2 96 81 -> e2 d6 81: not UTF-8
    with pytest.raises(
        RunDirError, match=r"^x/spm.model: damaged or not a sentencepiece model \(.*\); restore it"
    ):
        Tokenizer(bytes(data), "x/spm.model")


def test_the_same_lines_give_the_same_model_bytes_from_any_file(toy, tmp_path):
    """A model names no training file: the same lines in two folders give one sha256 (issue 24)."""
    src, tgt = toy["train"]
    text = "".join(line + "\n" for line in src[:500] + tgt[:500])
    paths = [tmp_path / "a" / "sample.txt", tmp_path / "another-folder" / "lines.txt"]
    for path in paths:
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
    first, second = (train_tokenizer(path, vocab_size=200) for path in paths)
    assert first.sha256 == second.sha256
    assert b"sample.txt" not in first.proto
    assert first.encode(src[:5]) == train_tokenizer(src[:500] + tgt[:500], vocab_size=200).encode(src[:5])


def test_bpe_dropout_is_seeded_lossless_and_off_by_default(tokenizer, toy):
    lines = toy["train"][0][:50]
    drawn = tokenizer.encode_sampled(lines, 0.3, seed=5)
    assert (
        tokenizer.encode_sampled(lines, 0.3, seed=5) == drawn != tokenizer.encode_sampled(lines, 0.3, seed=6)
    )
    assert tokenizer.decode(drawn) == tokenizer.decode(tokenizer.encode(lines))
    assert sum(map(len, drawn)) > sum(map(len, tokenizer.encode(lines)))  # merges skipped: more pieces
    with pytest.raises(TypeError):
        tokenizer.encode_sampled(["ein Hund", 3], 0.1, seed=5)


def test_bpe_dropout_loop_is_sentencepieces_at_the_ends(tokenizer, toy):
    """At dropout 0 the Python loop segments exactly as sentencepiece does, odd input included (a run of
    unknown characters is one unk); at dropout 1 nothing merges: one piece per normalised character."""
    odd = ["", "  zwei  Hunde ", "½ Ⅻ ŋŋŋ 😀 ok", "Ein\tHund."]
    lines = toy["train"][0][:300] + toy["train"][1][:300] + odd
    assert tokenizer.encode_sampled(lines, 0.0, seed=1) == tokenizer.encode(lines)
    chars = tokenizer.encode_sampled(lines[:20], 1.0, seed=1)
    assert [len(ids) for ids in chars] == [len(tokenizer.sp.normalize(line)) for line in lines[:20]]


def test_bpe_dropout_is_the_same_in_another_process(tokenizer, toy, tmp_path):
    """A resumed run re-samples a view in a new process: the seed alone must decide the pieces."""
    tokenizer.save(tmp_path / "spm.model")
    lines = toy["train"][0][:40]
    (tmp_path / "lines.json").write_text(json.dumps(lines), encoding="utf-8")
    code = (
        "import json, sys; from mt.tokenizer import load_tokenizer; "
        "t = load_tokenizer(sys.argv[1]); lines = json.load(open(sys.argv[2], encoding='utf-8')); "
        "print(json.dumps(t.encode_sampled(lines, 0.3, seed=5)))"
    )
    args = [sys.executable, "-c", code, str(tmp_path / "spm.model"), str(tmp_path / "lines.json")]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == tokenizer.encode_sampled(lines, 0.3, seed=5)
