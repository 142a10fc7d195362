"""The training compute (mt.compute's multiply-adds) of runs whose cards do not record it: trained before
cards counted it, or stopped where they were. From each run's last.pt: its config, tokenizer, output
layer and stream position; the binarized corpus is the cached one (or made again, as training makes it).

    python scripts/run_compute.py runs/multi30k runs/multi30k-target

Prints one JSON line a run: its updates, epochs and the multiply-adds (forward and backward) of every
batch it consumed. A corpus with BPE-dropout views counts the view its epochs read, as training did.
"""

from __future__ import annotations

import argparse
import json

from mt import corpus
from mt.batching import BatchStream
from mt.compute import training_multiply_adds
from mt.run.checkpoint import load_checkpoint
from mt.run.folder import load_run
from mt.run.records import progress_of


def run_compute(run: str) -> dict:
    cfg, tokenizer, model = load_run(run, "last")
    progress = progress_of(load_checkpoint(f"{run}/last.pt"))
    views = range(1, cfg.data.bpe_views + 1) if cfg.data.bpe_dropout else [0]
    pairs = [corpus.load(corpus.prepare(cfg.data, tokenizer, None, view)) for view in views]
    stream = BatchStream(pairs, cfg.train.max_tokens, cfg.train.seed)
    macs = training_multiply_adds(cfg.model, model.output_size, stream, progress.epoch, progress.batch_index)
    return {"run": run, "steps": progress.step, "epochs": progress.epoch, "multiply_adds": macs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    for run in parser.parse_args().runs:
        print(json.dumps(run_compute(run)), flush=True)


if __name__ == "__main__":
    main()
