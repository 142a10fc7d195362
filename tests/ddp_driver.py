"""Runs `mt` with a hook on each counted update: rank 0 saves the weights after every update into the
folder given as the first argument; with FAIL_RANK=r set, rank r raises after its third update.
Usage: [torchrun ...] tests/ddp_driver.py OUT_DIR train CONFIG ..."""

import os
import sys

import torch

import mt.training.train as T

OUT = sys.argv[1]
real = T.count_update


def count_update(s, stats, seconds):
    real(s, stats, seconds)
    if os.environ.get("FAIL_RANK") == str(s.ranks.rank) and s.progress.step == 3:
        raise RuntimeError("injected failure")
    if s.ranks.main and stats.stepped:
        torch.save(
            {k: v.clone() for k, v in s.model.state_dict().items()}, f"{OUT}/step-{s.progress.step}.pt"
        )


T.count_update = count_update
from mt.cli import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
