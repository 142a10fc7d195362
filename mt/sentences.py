"""Input lines that hold several sentences (decode.split_sentences): each line split into sentences,
the sentences translated as lines of their own, and their translations joined with one space (none
between Chinese or Japanese sentences: mt.plumbing.script), so the output stays one line per input line.

Models trained on single sentences (Multi30k's captions) drop or garble a second sentence on the same
line. The splitter is sentencex (Wikimedia's, MIT, no dependencies: the optional extra `mt[split]`):
on test2016 with every three lines joined it splits German and English as well as the Moses splitter
and pysbd do (315 and 304 of the 320 and 304 joined lines that can be split back exactly, against 319
and 303), handles „German quotes“ that the Moses port keeps together, and is about 100 times faster.
Its one known miss: German text after a full stop that starts with a digit ("Er kam. 3 Männer ...")
stays one sentence.
"""

from __future__ import annotations

from typing import Callable

from mt.plumbing.errors import ConfigError
from mt.plumbing.script import join_words

Splitter = Callable[[str, str], list[str]]  # (language, line) -> its sentences


def splitter(name: str = "split_sentences") -> Splitter:
    """sentencex's splitter, or a one-line refusal naming the option (`name`) that asked for it."""
    try:
        from sentencex import segment
    except ImportError:
        raise ConfigError(
            f"{name} needs the sentencex package: pip install 'mt[split]' (or sentencex)", "split_sentences"
        ) from None
    return lambda lang, line: list(segment(lang, line))


def sentences_of(lines: list[str], lang: str, split: Splitter) -> tuple[list[str], list[int]]:
    """Each line's sentences, in order, stripped and none empty, and how many each line gave (an empty
    line gives one empty sentence, so that it still gives one empty line)."""
    sentences, counts = [], []
    for line in lines:
        found = [s.strip() for s in split(lang, line)]
        found = [s for s in found if s] or [""]
        sentences += found
        counts.append(len(found))
    return sentences, counts


def join_texts(texts: list[str]) -> str:
    """A line's sentences' translations as one line, joined by a space, or by nothing between
    sentences in a script written without spaces (mt.plumbing.script.join_words: "一只狗。它跑了。"); a
    sentence translated as nothing leaves no space behind (a line of such sentences is "", not " ")."""
    joined = ""
    for text in texts:
        joined = join_words(joined, text)
    return joined


def join_lines(translations: list, counts: list[int], join: Callable[[list], object] = join_texts) -> list:
    """The inverse of `sentences_of`: one item per line, `join` of its sentences' translations."""
    joined, start = [], 0
    for n in counts:
        joined.append(join(translations[start : start + n]))
        start += n
    return joined
