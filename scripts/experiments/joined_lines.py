"""What --split-sentences buys on paragraphs: test2016 with every `--join` lines joined into one (sources
and references alike), translated three ways and scored with corpus BLEU/chrF against the joined
references.

    python scripts/experiments/joined_lines.py RUN [--join 3] [--beam 1]

one by one: each original line translated alone, the translations joined as the references are (the
ceiling); split: the joined lines with split_sentences; whole: the joined lines as they are (what a model
trained on single sentences does with a paragraph). Prints one JSON line, with how many paragraphs the
splitter cut back into their lines (a line without final punctuation cannot be cut from the next) and
how many split translations equal the one-by-one ones. The decoding flags are `mt translate`'s, but
that --beam is 1 unless given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: measure
from measure import decoding_flags, open_run, scores, split_of  # noqa: E402

from mt.sentences import sentences_of, splitter  # noqa: E402


def joined(lines: list[str], n: int) -> list[str]:
    return [" ".join(lines[i : i + n]) for i in range(0, len(lines), n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run")
    p.add_argument("--join", type=int, default=3, help="lines joined into one")
    decoding_flags(p, skip=("n_best", "split_sentences"), beam=1)  # split_sentences: one of the three ways
    args = p.parse_args()
    translator = open_run(args.run, args)
    sources, references = split_of(translator, "test")
    paragraphs, joined_refs = joined(sources, args.join), joined(references, args.join)
    found = {
        "one_by_one": joined(translator.translate(sources), args.join),
        "split": translator.translate(paragraphs, split_sentences=True),
        "whole": translator.translate(paragraphs),
    }
    report = {"run": args.run, "join": args.join, "beam": translator.decode.beam, "lines": len(paragraphs)}
    for name, hypotheses in found.items():
        report[name] = scores(hypotheses, joined_refs, translator)
    split = splitter()
    cut = [sentences_of([paragraph], translator.config.data.src_lang, split)[0] for paragraph in paragraphs]
    originals = [sources[i : i + args.join] for i in range(0, len(sources), args.join)]
    report["paragraphs_split_into_their_lines"] = sum(c == o for c, o in zip(cut, originals))
    report["split_equal_to_one_by_one"] = sum(a == b for a, b in zip(found["split"], found["one_by_one"]))
    report["split_minus_one_by_one_bleu"] = round(report["split"]["bleu"] - report["one_by_one"]["bleu"], 2)
    report["whole_minus_one_by_one_bleu"] = round(report["whole"]["bleu"] - report["one_by_one"]["bleu"], 2)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
