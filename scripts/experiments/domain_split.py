"""A topic of Multi30k as a new domain, for fine-tuning (docs/finetune/): split the corpus by topic, then
score runs' test2016 translations on the topic's lines and on the rest.

    python scripts/experiments/domain_split.py split --out data/finetune
    python scripts/experiments/domain_split.py score --data data/finetune runs/multi30k runs/ft-base \
        runs/ft-dogs

`split` picks the pairs whose English side has one of --words (whole words, any case) and writes two
`data.corpus: files` folders: OUT/rest (the training pairs without the topic; val and test whole) and
OUT/topic (the topic's training and val pairs; test whole), and OUT/topic-test.txt, the topic's test
line numbers. `score` reads each run's --hypotheses file (`mt evaluate --beam 5` writes
hyp-test-beam5.txt) and prints a Markdown table: BLEU and chrF on the topic's test lines, on the rest,
and on all.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mt.config import DataConfig
from mt.data import load_split
from mt.plumbing.metrics import corpus_scores
from mt.plumbing.script import bleu_tokenizer

DOGS = ("dog", "dogs", "puppy", "puppies")


def on_topic(english: list[str], words: tuple[str, ...]) -> list[bool]:
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b", re.IGNORECASE)
    return [bool(pattern.search(line)) for line in english]


def write_pairs(folder: Path, split: str, de: list[str], en: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.de").write_text("".join(line + "\n" for line in de), encoding="utf-8")
    (folder / f"{split}.en").write_text("".join(line + "\n" for line in en), encoding="utf-8")


def split(out: Path, words: tuple[str, ...]) -> None:
    multi30k = DataConfig()
    counts = {}
    for name in ("train", "val", "test"):
        de, en = load_split(multi30k, name)
        topic = on_topic(en, words)
        keep_rest = [not t for t in topic] if name == "train" else [True] * len(de)  # only training held out
        keep_topic = topic if name != "test" else [True] * len(de)  # test whole: scored by line
        for folder, keep in ((out / "rest", keep_rest), (out / "topic", keep_topic)):
            write_pairs(folder, name, *([x for x, k in zip(side, keep) if k] for side in (de, en)))
        counts[name] = (sum(topic), len(de))
        if name == "test":
            (out / "topic-test.txt").write_text("".join(f"{i}\n" for i, t in enumerate(topic) if t))
    for name, (n, total) in counts.items():
        print(f"{name}: {n} of {total} pairs on topic ({100 * n / total:.1f}%)")


def score_runs(data: Path, runs: list[Path], name: str) -> None:
    topic = {int(line) for line in (data / "topic-test.txt").read_text().split()}
    _, ref = load_split(DataConfig(), "test")
    tokenize = bleu_tokenizer("auto", DataConfig().tgt_lang)  # Multi30k's English: 13a
    print("| run | hypotheses | topic BLEU | topic chrF | rest BLEU | rest chrF | all BLEU |")
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        path = run / name
        if not path.exists():
            raise SystemExit(f"{path}: not found; run `mt evaluate --run {run} --beam 5` first")
        hyp = path.read_text(encoding="utf-8").splitlines()
        parts = {
            name: corpus_scores(
                [h for i, h in enumerate(hyp) if keep(i)],
                [r for i, r in enumerate(ref) if keep(i)],
                tokenize=tokenize,
            )
            for name, keep in (("topic", lambda i: i in topic), ("rest", lambda i: i not in topic))
        }
        every = corpus_scores(hyp, ref, tokenize=tokenize)
        print(
            f"| {run} | {path.name} | {parts['topic']['bleu']:.2f} | {parts['topic']['chrf']:.2f} | "
            f"{parts['rest']['bleu']:.2f} | {parts['rest']['chrf']:.2f} | {every['bleu']:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    splitting = commands.add_parser("split")
    splitting.add_argument("--out", default="data/finetune")
    splitting.add_argument("--words", nargs="+", default=list(DOGS))
    scoring = commands.add_parser("score")
    scoring.add_argument("--data", default="data/finetune")
    scoring.add_argument("--hypotheses", default="hyp-test-beam5.txt", help="the file in each run")
    scoring.add_argument("runs", nargs="+")
    args = parser.parse_args()
    if args.command == "split":
        split(Path(args.out), tuple(args.words))
    else:
        score_runs(Path(args.data), [Path(run) for run in args.runs], args.hypotheses)


if __name__ == "__main__":
    main()
