"""Runs `mt` with a hook on Trainer._update: rank 0 saves the weights after every update into the folder
given as the first argument; with FAIL_RANK=r set, rank r raises after its third update.
Usage: [torchrun ...] tests/ddp_driver.py OUT_DIR train CONFIG ..."""
import os, sys, torch
import mt.train as T
OUT = sys.argv[1]
real = T.Trainer._update
def update(self, group, requests):
    out = real(self, group, requests)
    if os.environ.get("FAIL_RANK") == str(self.ranks.rank) and self.p.step == 3:
        raise RuntimeError("injected failure")
    if self.ranks.main and out[0]:
        torch.save({k: v.clone() for k, v in self.model.state_dict().items()}, f"{OUT}/step-{self.p.step}.pt")
    return out
T.Trainer._update = update
from mt.cli import main
sys.exit(main(sys.argv[2:]))
