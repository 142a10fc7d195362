"""A long fuzzing soak of every reader (tests/fuzzing.py): many damaged files each, counted, not stopped
at the first failure.

    python scripts/fuzz_soak.py --examples 700            # every reader, 700 damaged files each
    python scripts/fuzz_soak.py --examples 50 --reader card.json --reader best.pt

Prints one row per reader: damaged files tried, read fine, refused cleanly (exit 2, one line, the run
directory untouched), and broke the guarantee (a traceback, an exception, other exit codes, several
lines, a changed run directory, or misaligned translate output), then the first distinct problems.
Run it with PYTHONPATH naming another checkout to count an older mt's failures. Exit code 1 if
anything broke.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fuzzing import DAMAGE, READERS, damage, make_workspace  # noqa: E402


def small_corpus(folder: Path) -> Path:
    """The tests' small corpus: the first 400/40/40 toy pairs as a `files` corpus."""
    from mt.generated.toy import toy_corpus

    toy = toy_corpus()
    folder.mkdir(parents=True)
    for split, n in [("train", 400), ("val", 40), ("test", 40)]:
        for lang, lines in zip(("de", "en"), toy[split]):
            (folder / f"{split}.{lang}").write_text(
                "".join(line + "\n" for line in lines[:n]), encoding="utf-8"
            )
    return folder


def soak(workspace, name: str, examples: int, seed_value: int) -> tuple[collections.Counter, list[str]]:
    valid, read = READERS[name]
    original = valid(workspace)
    counts, problems = collections.Counter(), []

    @settings(
        max_examples=examples,
        derandomize=seed_value == 0,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(DAMAGE)
    def run(ops):
        outcome = read(workspace, damage(original, ops))
        problem = outcome.problem()
        counts["broke" if problem else "worked" if outcome.code == 0 else "refused"] += 1
        if problem and len(problems) < 5 and problem not in problems:
            problems.append(f"{problem}  <- {ops!r}"[:400])

    (seed(seed_value)(run) if seed_value else run)()
    return counts, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=700, help="damaged files per reader")
    parser.add_argument("--reader", action="append", choices=list(READERS), help="only these (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="0: hypothesis's fixed derandomized draws")
    args = parser.parse_args()
    import mt

    print(f"mt from {Path(mt.__file__).parent}; {args.examples} damaged files per reader", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp) / "ws", small_corpus(Path(tmp) / "corpus"))
        total = collections.Counter()
        print(
            "| reader | tried | read fine | refused (exit 2, one line) | broke | seconds |\n"
            "|---|---:|---:|---:|---:|---:|"
        )
        for name in args.reader or list(READERS):
            start = time.perf_counter()
            counts, problems = soak(workspace, name, args.examples, args.seed)
            total.update(counts)
            print(
                f"| {name} | {sum(counts.values())} | {counts['worked']} | {counts['refused']} "
                f"| {counts['broke']} | {time.perf_counter() - start:.0f} |",
                flush=True,
            )
            for problem in problems:
                print(f"|   ↳ {problem} | | | | | |", flush=True)
        print(
            f"| all | {sum(total.values())} | {total['worked']} | {total['refused']} | {total['broke']} | |"
        )
    return 1 if total["broke"] else 0


if __name__ == "__main__":
    sys.exit(main())
