"""mt/plumbing/script.py: the words of text without spaces (one character each, as sacreBLEU's zh tokenizer),
spaced text's words unchanged, sentences joined without a space in such scripts, and the tokenizer's
settings chosen from the text's script."""

from mt.generated.toy import toy_corpus
from mt.plumbing.script import RICH_COVERAGE, join_words, starts_word, tokenizer_settings, unspaced, words


def test_spaced_text_keeps_its_whitespace_words():
    for line in ["Ein Mann läuft.", "  a\tb  c ", "", "l'homme « court » !", "Привет, мир"]:
        assert words(line) == line.split()


def test_each_character_of_a_script_without_spaces_is_a_word():
    assert words("我有3只dog。") == ["我", "有", "3", "只", "dog", "。"]
    assert words("猫が好きです") == ["猫", "が", "好", "き", "で", "す"]
    assert words("这只狗，cats and dogs！") == ["这", "只", "狗", "，", "cats", "and", "dogs", "！"]
    assert words("한국어 문장") == ["한국어", "문장"]  # Korean is written with spaces
    assert words("你好\u3000世界") == ["你", "好", "世", "界"]  # the ideographic space is a space
    assert words("สวัสดีครับ ผม") == ["สวัสดีครับ", "ผม"]  # Thai: not covered, whitespace words


def test_sentences_join_with_a_space_only_where_the_script_has_spaces():
    assert join_words("Ein Hund.", "Er läuft.") == "Ein Hund. Er läuft."
    assert join_words("一只狗。", "它跑了。") == "一只狗。它跑了。"
    assert join_words("一只狗。", "") == "一只狗。" and join_words("", "A.") == "A."
    assert join_words("สวัสดีครับ", "ผมชื่อ") == "สวัสดีครับ ผมชื่อ"
    assert unspaced("。") and unspaced("狗") and not unspaced(".") and not unspaced("a")


def test_a_piece_starts_a_word_after_a_space_or_at_a_seam_of_chinese():
    assert starts_word("\u2581dog") and not starts_word("s") and not starts_word("s", "\u2581dog")
    assert starts_word("狗") and starts_word("dog", "只")
    assert starts_word("子", "\u2581桌")  # BPE left them apart: two pieces, two words
    assert not starts_word("")


def test_tokenizer_settings_follow_the_script():
    _, en, zh = toy_corpus(languages=("de", "en", "zh"))["train"]
    spaced = tokenizer_settings(0.0, en)
    assert spaced["character_coverage"] == 1.0 and spaced["normalization"] == "nmt_nfkc"
    chinese = tokenizer_settings(0.0, en + zh)  # few distinct characters: all kept, forms kept
    assert chinese["character_coverage"] == 1.0 and chinese["normalization"] == "identity"
    assert chinese["chosen_by"].startswith("171 distinct Han/kana/Hangul characters (<= 1000); ")
    rich = ["".join(chr(0x4E00 + i) for i in range(start, start + 50)) for start in range(0, 2000, 50)]
    assert tokenizer_settings(0.0, rich)["character_coverage"] == RICH_COVERAGE
    named = tokenizer_settings(0.999, rich)
    assert named["character_coverage"] == 0.999 and named["chosen_by"].startswith(
        "tokenizer.character_coverage"
    )
