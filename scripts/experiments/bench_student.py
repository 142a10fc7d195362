"""A teacher and its distilled student side by side (issue 44): test2016 sentences/s, BLEU and chrF for
each (model, engine, compute type, beam), repeats alternating between the settings, in one process
per engine (CTranslate2 sets OpenMP's threads for the whole process).

    python scripts/experiments/bench_student.py --teacher runs/multi30k --student runs/multi30k-student \
        --engine torch --out bench.jsonl
    python scripts/experiments/bench_student.py --teacher ... --student ... --engine ctranslate2 \
        --out bench.jsonl
    python scripts/experiments/bench_student.py --table bench.jsonl  # Markdown, ratio to teacher torch beam 5

Each setting is timed `--repeats` times (model loading outside, tokenizing and batching inside);
its line holds the median and the spread. The teacher runs beam 5 (and greedy); the student greedy
and beams 2-5; CTranslate2 runs float32 for the teacher and int8 for the student unless told. The
other decoding flags are `mt translate`'s (--engine torch unless given), for every row alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: measure
from measure import decoding_flags, open_run, scores, split_of, timed  # noqa: E402


def settings(args) -> list[tuple[str, str, str, int]]:
    """(model, run, compute type, beam) of every row this engine times."""
    ct2 = args.engine == "ctranslate2"
    teacher_type, student_type = ("default", args.student_compute_type) if ct2 else ("default", "default")
    rows = [("teacher", args.teacher, teacher_type, beam) for beam in (5, 1)]
    rows += [("student", args.student, student_type, beam) for beam in (1, 2, 3, 5)]
    return rows


def bench(args) -> None:
    opened, lines, refs = {}, None, None
    for model, run, compute_type, _ in settings(args):
        if (run, compute_type) not in opened:
            opened[run, compute_type] = open_run(run, args, device="cpu", compute_type=compute_type)
    lines, refs = split_of(next(iter(opened.values())), args.split)
    times: dict[tuple, list[float]] = {row: [] for row in settings(args)}
    found: dict[tuple, list[str]] = {}
    for _ in range(args.repeats):
        for row in times:  # alternating: drift on a shared machine spreads over every setting alike
            translator = opened[row[1], row[2]]
            seconds, found[row] = timed(lambda: translator.translate(lines, beam=row[3]))
            times[row].append(seconds)
    with open(args.out, "a", encoding="utf-8") as out:
        for (model, run, compute_type, beam), seconds in times.items():
            scored = scores(found[model, run, compute_type, beam], refs, opened[run, compute_type])
            median = statistics.median(seconds)
            record = {
                "model": model,
                "run": run,
                "engine": args.engine,
                "compute_type": compute_type,
                "beam": beam,
                "split": args.split,
                "sentences": len(lines),
                **scored,
                "seconds": [round(s, 3) for s in seconds],
                "sentences_per_s": round(len(lines) / median, 1),
            }
            print(json.dumps(record), flush=True)
            out.write(json.dumps(record) + "\n")


def table(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    base = next(r for r in rows if r["model"] == "teacher" and r["engine"] == "torch" and r["beam"] == 5)
    lines = [
        "| model | engine | compute type | beam | BLEU | chrF | sentences/s (min-max) "
        "| × teacher torch beam 5 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        spread = [round(r["sentences"] / s, 1) for s in r["seconds"]]
        lines.append(
            f"| {r['model']} | {r['engine']} | {r['compute_type']} | {r['beam']} | {r['bleu']:.2f} | "
            f"{r['chrf']:.2f} | {r['sentences_per_s']:.1f} ({min(spread)}-{max(spread)}) | "
            f"{r['sentences_per_s'] / base['sentences_per_s']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher")
    p.add_argument("--student")
    p.add_argument("--student-compute-type", default="int8", help="CTranslate2's, for the student")
    p.add_argument("--split", default="test", choices=["test", "val"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default="bench-student.jsonl", help="JSON lines, appended")
    p.add_argument("--table", type=Path, help="print the Markdown table of this file and stop")
    # the rows fix beam and compute type; sampling would draw, not search, at beams above 1
    skip = ("n_best", "beam", "compute_type", "sample", "temperature", "seed")
    decoding_flags(p, skip=skip, engine="torch")
    args = p.parse_args()
    if args.table:
        print(table(args.table))
    else:
        bench(args)


if __name__ == "__main__":
    main()
