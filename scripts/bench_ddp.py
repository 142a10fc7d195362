"""Training throughput of one process vs N processes under torchrun, on the same global batches.

    python scripts/bench_ddp.py configs/toy.yaml --steps 60 --nproc 2
    python scripts/bench_ddp.py configs/multi30k.yaml --steps 40 --nproc 2

Runs `mt train` once as one process with `threads` = cores and `accumulate` = N, and once under
torchrun as N processes with cores / N threads each and `accumulate` 1, so both take the same batches
per update. Prints the training tokens/s (source + target non-pad, from each run's card.json: all
ranks' tokens over the time spent in updates) and the ratio. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def train(config: str, run: Path, nproc: int, threads: int, accumulate: int, steps: int) -> dict:
    sets = [
        f"train.threads={threads}",
        f"train.accumulate={accumulate}",
        f"train.max_steps={steps}",
        "train.max_minutes=0",
        f"train.valid_every={10 * steps}",
        "train.log_every=10",
    ]
    args = ["train", config, "--run-dir", str(run)] + [a for s in sets for a in ("--set", s)]
    launcher = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "mt",
        ]
        if nproc > 1
        else [sys.executable, "-m", "mt"]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    subprocess.run(
        launcher + args, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return json.loads((run / "card.json").read_text())["training"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = train(args.config, Path(tmp) / "one", 1, args.cores, args.nproc, args.steps)
        many = train(
            args.config, Path(tmp) / "many", args.nproc, max(args.cores // args.nproc, 1), 1, args.steps
        )
    print(f"{args.config}: {args.steps} updates of {args.nproc} batches each")
    print(
        f"  1 process  x {args.cores} threads: {one['tokens_per_s']:8.0f} tokens/s "
        f"({one['train_s']:.1f} s in updates)"
    )
    print(
        f"  {args.nproc} processes x {max(args.cores // args.nproc, 1)} threads: {many['tokens_per_s']:8.0f} "
        f"tokens/s ({many['train_s']:.1f} s in updates)"
    )
    print(f"  ratio {args.nproc} processes / 1 process: {many['tokens_per_s'] / one['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
