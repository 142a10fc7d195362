"""Issue 67's levers: what the recipe's model learns from, each a pipeline of `mt` commands whose
whole compute stays inside the present recipe's (configs/multi30k-best.yaml, its 7,900 updates with
every one of its 10,000 pieces scored: 2.362e14 multiply-adds, scripts/run_compute.py --config).

    python scripts/experiments/levers.py target --seed 1          # run one lever's pipeline
    python scripts/experiments/levers.py --report                 # every pipeline's figures so far
    python scripts/experiments/levers.py bit --config configs/toy.yaml --scale 0.01 --runs /tmp/smoke
                                                                  # the pipeline's plumbing, in a minute

Every lever scores the target's pieces only (model.output_pieces: target), which alone buys 30% more
updates. The levers:

- target: the recipe, for the budget's updates (10,300);
- vocab8k, vocab6k: a smaller joint vocabulary, for the budget's updates at its smaller output layer;
- bit: both directions first (Ding et al. 2021, data.both_directions) for 3,000 updates, then the
  forward direction from those weights (train.init_from) for the rest;
- selfdistill: 5,000 updates, then that model translates the training sources (CTranslate2 int8,
  beam 5: `mt distill --with-references`) and training goes on from it on references plus
  translations for the rest.

A child run restarts Adam; its schedule warms up over 200 updates to the parent's last learning rate
and falls linearly to 0 at its last update. The target run shares its first 5,000 updates with the
selfdistill parent of its seed (the same config up to train.max_steps): it starts as a copy of that
parent, trained first if missing, and resumes from its last.pt, which equals training in one go
(tests/test_resume.py), so the two levers' shared updates are trained once.

Each pipeline is resumable: every command is `mt`'s own (a finished run is left as it is, a distilled
folder is found again). Runs go to RUNS/r67-LEVER (seed 1) or RUNS/r67-LEVER-sN, a parent beside its
child as ...-parent. Only val is looked at; `--test` evaluates the pipeline's last run on test2016 (for
the lever chosen).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mt.run.folder import result_name

RECIPE = "configs/multi30k-best.yaml"
BUDGET = 2.362e14  # multiply-adds: the recipe's 7,900 updates over all 10,000 pieces
TARGET = ["model.output_pieces=target"]
PEAK, WARMUP = 5.0e-3, 2000  # the recipe's inverse-sqrt schedule, continued by a child's first lr


@dataclass(frozen=True)
class Stage:
    """One training run of a pipeline: `child` starts from the stage before it."""

    steps: int
    sets: list[str] = field(default_factory=list)
    child: bool = False
    distilled: bool = False  # trains on the parent's translations plus the references
    continues: str = ""  # a lever whose first run this one continues (a copy of it, resumed)


LEVERS = {
    "target": [Stage(10300, continues="selfdistill")],
    "vocab8k": [Stage(10900, ["tokenizer.vocab_size=8000"])],
    "vocab6k": [Stage(11600, ["tokenizer.vocab_size=6000"])],
    "bit": [Stage(3000, ["data.both_directions=true"]), Stage(6300, child=True)],
    "selfdistill": [Stage(5000), Stage(5100, child=True, distilled=True)],
}


def run_dir(runs: Path, lever: str, seed: int, last: bool) -> Path:
    name = f"r67-{lever}" + (f"-s{seed}" if seed != 1 else "")
    return runs / (name if last else f"{name}-parent")


def mt(*args: str) -> str:
    """One `mt` command, its log on stderr as it goes; its stdout returned."""
    print("$ mt " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "-m", "mt", *args], stdout=subprocess.PIPE, text=True)
    if done.returncode:
        sys.exit(f"levers: `mt {args[0]}` exited {done.returncode}")
    return done.stdout


def child_sets(parent: Path, stage: Stage) -> list[str]:
    """A child's start: the parent's weights, and a short warmup to the lr the parent stopped at."""
    lr = PEAK * math.sqrt(
        WARMUP / max(WARMUP, json.loads((parent / "card.json").read_text())["training"]["steps"])
    )
    sets = [
        f"train.init_from={parent}",
        "train.schedule=linear",
        "train.warmup_steps=200",
        f"train.lr={lr:.3g}",
    ]
    if stage.distilled:
        mt("export", "--run", str(parent))
        folder = mt(
            "distill", "--teacher", str(parent), "--beam", "5", "--engine", "ctranslate2",
            "--compute-type", "int8", "--with-references",
        ).strip().splitlines()[-1]  # fmt: skip
        sets += ["data.corpus=files", f"data.dir={folder}", "data.clean.apply=never"]
    return sets


def train(config: str, run: Path, sets: list[str]) -> None:
    mt("train", config, "--run-dir", str(run), *[arg for s in sets for arg in ("--set", s)])


def run_lever(
    lever: str, seed: int, runs: Path, test: bool, config: str, scale: float, extra: list[str]
) -> None:
    stages = LEVERS[lever]

    def sets_of(stage: Stage) -> list[str]:
        steps = max(1, round(stage.steps * scale))
        return TARGET + stage.sets + extra + [f"train.seed={seed}", f"train.max_steps={steps}"]

    parent = None
    for i, stage in enumerate(stages):
        run = run_dir(runs, lever, seed, last=i == len(stages) - 1)
        if stage.continues and not run.exists():
            shared_stages = LEVERS[stage.continues]
            shared = run_dir(runs, stage.continues, seed, last=len(shared_stages) == 1)
            train(config, shared, sets_of(shared_stages[0]))
            shutil.copytree(shared, run, ignore=shutil.ignore_patterns("train.lock"))
        train(config, run, sets_of(stage) + (child_sets(parent, stage) if stage.child else []))
        parent = run
    if test:
        mt("evaluate", "--run", str(parent), "--split", "test")


def report(runs: Path) -> None:
    """One line a pipeline's last run: val greedy, the tuned val score, the pipeline's compute."""
    columns = ["run", "updates", "val greedy", "tuned on val", "val tuned", "test2016 tuned"]
    columns += ["multiply-adds", "of budget"]
    print("| " + " | ".join(columns) + " |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for card_path in sorted(runs.glob("r67-*/card.json")):
        if card_path.parent.name.endswith("-parent"):
            continue
        card = json.loads(card_path.read_text())
        t, chosen = card["training"], (card.get("tuning") or {}).get("chosen", {})
        compute = t.get("pipeline_multiply_adds") or t.get("multiply_adds") or 0.0
        test = card.get("results", {}).get(result_name(card_path.parent, "test-tuned"), {}).get("bleu")
        print(
            f"| {card_path.parent.name} | {t['steps']} | {t.get('best_val_bleu') or 0:.2f} "
            f"| beam {chosen.get('beam', '–')}, lp {chosen.get('length_penalty', '–')} "
            f"| {chosen.get('bleu', float('nan')):.2f} | {'–' if test is None else f'{test:.2f}'} "
            f"| {compute:.3e} | {compute / BUDGET:.3f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lever", nargs="?", choices=sorted(LEVERS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=Path, default=Path("runs"))
    parser.add_argument("--test", action="store_true", help="evaluate the last run on test2016 too")
    parser.add_argument("--report", action="store_true", help="print the pipelines' figures")
    parser.add_argument("--config", default=RECIPE, help="the config every stage trains (a smoke test's)")
    parser.add_argument("--scale", type=float, default=1.0, help="every stage's updates times this")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every stage")
    args = parser.parse_args()
    if args.lever:
        run_lever(args.lever, args.seed, args.runs, args.test, args.config, args.scale, args.set)
    if args.report or not args.lever:
        report(args.runs)


if __name__ == "__main__":
    main()
