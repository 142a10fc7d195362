"""What --split-sentences buys on paragraphs: test2016 with every `--join` lines joined into one (sources
and references alike), translated three ways and scored with corpus BLEU/chrF against the joined
references.

    python scripts/joined_lines.py RUN [--join 3] [--beam 1]

one by one: each original line translated alone, the translations joined as the references are (the
ceiling); split: the joined lines with split_sentences; whole: the joined lines as they are (what a model
trained on single sentences does with a paragraph). Prints one JSON line, with how many paragraphs the
splitter cut back into their lines (a line without final punctuation cannot be cut from the next) and
how many split translations equal the one-by-one ones.
"""

from __future__ import annotations

import argparse
import json

from mt import Translator
from mt.data import load_split
from mt.metrics import corpus_scores
from mt.sentences import split_lines, splitter


def joined(lines: list[str], n: int) -> list[str]:
    return [" ".join(lines[i : i + n]) for i in range(0, len(lines), n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run")
    p.add_argument("--join", type=int, default=3, help="lines joined into one")
    p.add_argument("--beam", type=int, default=1)
    args = p.parse_args()
    translator = Translator.from_run(args.run, beam=args.beam)
    sources, references = load_split(translator.config.data, "test")
    paragraphs, joined_refs = joined(sources, args.join), joined(references, args.join)
    found = {
        "one_by_one": joined(translator.translate(sources), args.join),
        "split": translator.translate(paragraphs, split_sentences=True),
        "whole": translator.translate(paragraphs),
    }
    report = {"run": args.run, "join": args.join, "beam": args.beam, "lines": len(paragraphs)}
    for name, hypotheses in found.items():
        scores = corpus_scores(hypotheses, joined_refs)
        report[name] = {"bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2)}
    split = splitter()
    cut = [split_lines([paragraph], translator.config.data.src_lang, split)[0] for paragraph in paragraphs]
    originals = [sources[i : i + args.join] for i in range(0, len(sources), args.join)]
    report["paragraphs_split_into_their_lines"] = sum(c == o for c, o in zip(cut, originals))
    report["split_equal_to_one_by_one"] = sum(a == b for a, b in zip(found["split"], found["one_by_one"]))
    report["split_minus_one_by_one_bleu"] = round(report["split"]["bleu"] - report["one_by_one"]["bleu"], 2)
    report["whole_minus_one_by_one_bleu"] = round(report["whole"]["bleu"] - report["one_by_one"]["bleu"], 2)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
