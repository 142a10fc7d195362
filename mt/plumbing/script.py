"""Writing systems: what a word is in text without spaces, and what a script asks of the tokenizer.
Every word-level feature (repeated n-grams, cleaning's language rule, word alignments, the page's word
view, cut points of long lines, joining split sentences) takes its words from here, so Chinese and
Japanese text is split into words one way everywhere; BLEU's tokenizer is mt.metrics' choice.

Chinese and Japanese (Han, kana, their punctuation and full-width forms) are written without spaces
between words and have no word boundary a program can find without a dictionary, so each of their
characters is a word (`words`): what sacreBLEU's `zh` tokenizer does for BLEU. Where text is already
pieces of the tokenizer (word alignments, cut points), their pieces are the words: BPE merges the
characters that go together. Text in other scripts is split at whitespace as before, so its words
are unchanged. Thai, Lao, Khmer and Myanmar are written without spaces too, but their combining marks
are not words and their sentences are separated by spaces: they are left to whitespace, not covered.
"""

from __future__ import annotations

import re

# Chinese and Japanese: scripts without spaces between words, with their punctuation ("。", "，", "「」")
# and full-width forms; not the ideographic space (U+3000), nor half-width Hangul (Korean has spaces)
UNSPACED = (
    "\u2e80-\u2fdf"  # CJK radicals
    "\u3001-\u30ff"  # CJK punctuation, Hiragana, Katakana
    "\u31f0-\u31ff"  # Katakana extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff01-\uff9f"  # full-width ASCII forms, half-width CJK punctuation and Katakana
    "\uffe0-\uffee"  # full-width symbols
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
_WORD = re.compile(f"[{UNSPACED}]|[^\\s{UNSPACED}]+")
_UNSPACED_CHAR = re.compile(f"[{UNSPACED}]")
# scripts with thousands of characters (Han, kana, Hangul syllables), for the tokenizer's coverage
_RICH = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]")


def words(text: str) -> list[str]:
    """`text`'s words: whitespace-separated, and each character of a script without spaces a word of its
    own ("我有3只dog。" -> 我, 有, 3, 只, dog, 。). For text without such characters: `text.split()`,
    taken as such (twice as fast: data.clean's language rule reads every word of a corpus)."""
    return _WORD.findall(text) if _UNSPACED_CHAR.search(text) else text.split()


def unspaced(char: str) -> bool:
    """Whether `char` (one character) belongs to a script written without spaces between words."""
    return bool(_UNSPACED_CHAR.fullmatch(char))


def starts_word(piece: str, before: str = "") -> bool:
    """Whether a sentencepiece piece begins a word: after a space (its U+2581 mark), or at a seam of a
    script without spaces: its first character is one, or the piece `before` it (where known) ends in
    one. Such a script's pieces are words of their own."""
    text = piece.removeprefix("\u2581")
    return piece != text or bool(text) and (unspaced(text[0]) or bool(before) and unspaced(before[-1]))


def join_words(left: str, right: str) -> str:
    """Two pieces of text as one, with a space between them unless the script at the seam is written
    without spaces ("Ein Hund." + "Er läuft." with a space; "一只狗。" + "它跑了。" without)."""
    if not left or not right:
        return left or right
    return left + ("" if unspaced(left[-1]) or unspaced(right[0]) else " ") + right


# ---- what the script asks of the tokenizer -----------------------------------------------------------

RICH_CHARACTERS = 1000  # distinct Han/kana/Hangul characters above which a text's character set is rich
RICH_COVERAGE = 0.9995  # sentencepiece's advice for a rich character set (Chinese, Japanese); else 1.0
UNSPACED_SHARE = 0.01  # of a text's characters in scripts without spaces, from which it keeps its forms


def tokenizer_settings(coverage: float, lines) -> dict:
    """sentencepiece's character_coverage and normalization for joint BPE on `lines`, and why (the
    card's `tokenizer` record). Coverage: `coverage` (tokenizer.character_coverage) where given; for 0
    (auto) RICH_COVERAGE where the text uses a rich character set, so that its rarest characters become
    <unk> rather than spend the vocabulary, else 1.0, every character kept. Normalization: NFKC
    (sentencepiece's nmt_nfkc) unless UNSPACED_SHARE of the characters are in scripts without spaces:
    NFKC would turn their full-width punctuation (，？！：；) into ASCII, which references in those
    scripts do not use, so such text keeps its forms (identity)."""
    rich, unspaced_chars, chars = set(), 0, 0
    for line in lines:
        rich.update(_RICH.findall(line))
        unspaced_chars += len(_UNSPACED_CHAR.findall(line))
        chars += len(line)
    share = unspaced_chars / max(chars, 1)
    is_rich, keeps_forms = len(rich) > RICH_CHARACTERS, share >= UNSPACED_SHARE
    counted = (
        f"{len(rich)} distinct Han/kana/Hangul characters ({'>' if is_rich else '<='} {RICH_CHARACTERS})"
    )
    spaced = f"{'>=' if keeps_forms else '<'} {UNSPACED_SHARE:.0%}"
    why = [
        "tokenizer.character_coverage" if coverage else counted,
        f"{share:.1%} of characters in scripts without spaces ({spaced})",
    ]
    return {
        "character_coverage": coverage or (RICH_COVERAGE if is_rich else 1.0),
        "normalization": "identity" if keeps_forms else "nmt_nfkc",
        "chosen_by": "; ".join(why),
    }
