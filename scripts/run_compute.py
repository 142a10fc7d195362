"""The training compute (mt.training.compute's multiply-adds) of runs whose cards do not record it:
trained before cards counted it, or stopped where they were. From each run's last.pt: its config,
tokenizer, output layer and stream position; the binarized corpus is the cached one (or made again, as
training makes it).

    python scripts/run_compute.py runs/multi30k runs/multi30k-target
    python scripts/run_compute.py --config configs/multi30k-best.yaml --steps 7900 [--set key=value]

Prints one JSON line a run: its updates, epochs and the multiply-adds (forward and backward) of every
batch it consumed. A corpus with BPE-dropout views counts the view its epochs read, as training did.
With --config, the same for a config's first --steps updates, untrained: its BPE learned (or its
corpus found in the cache) as `mt train` would, the updates' batches planned as its stream takes them.
"""

from __future__ import annotations

import argparse
import json

from mt.config import load_config
from mt.output_pieces import target_pieces
from mt.run.checkpoint import load_checkpoint
from mt.run.folder import load_run
from mt.run.progress import progress_of
from mt.training import corpus
from mt.training.compute import training_multiply_adds
from mt.training.epochs import BatchStream


def run_compute(run: str) -> dict:
    cfg, tokenizer, model = load_run(run, "last")
    progress = progress_of(load_checkpoint(f"{run}/last.pt"))
    views = range(1, cfg.data.bpe_views + 1) if cfg.data.bpe_dropout else [0]
    pairs = [
        corpus.training_pairs(cfg.data, corpus.prepare(cfg.data, tokenizer, None, view)) for view in views
    ]
    stream = BatchStream(pairs, cfg.train.max_tokens, cfg.train.seed)
    macs = training_multiply_adds(cfg.model, model.output_size, stream, progress.epoch, progress.batch_index)
    return {"run": run, "steps": progress.step, "epochs": progress.epoch, "multiply_adds": macs}


def config_compute(path: str, steps: int, overrides: list[str]) -> dict:
    cfg = load_config(path, overrides)
    tokenizer, pairs, _ = corpus.learn_tokenizer(cfg)
    views = range(1, cfg.data.bpe_views + 1) if cfg.data.bpe_dropout else [0]
    corpora = [
        corpus.training_pairs(cfg.data, corpus.prepare(cfg.data, tokenizer, pairs, view)) for view in views
    ]
    output_size = tokenizer.vocab_size
    if cfg.model.output_pieces == "target":
        output_size = len(target_pieces([c.tgt for c in corpora], tokenizer.vocab_size))
    stream = BatchStream(corpora, cfg.train.max_tokens, cfg.train.seed)
    epoch, index = 0, 0
    for _ in range(steps):  # as BatchStream.take moves: the next epoch once this one is used up
        epoch = max(epoch, 1)
        if index >= len(stream.plan(epoch)):
            epoch, index = epoch + 1, 0
        index = min(index + cfg.train.accumulate, len(stream.plan(epoch)))
    macs = training_multiply_adds(cfg.model, output_size, stream, epoch, index)
    return {
        "config": path,
        "set": overrides,
        "steps": steps,
        "epochs": epoch,
        "output_size": output_size,
        "multiply_adds": macs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*")
    parser.add_argument("--config", help="count a config's first --steps updates instead")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    if args.config:
        print(
            json.dumps(
                config_compute(args.config, args.steps or load_config(args.config).train.max_steps, args.set)
            )
        )
    for run in args.runs:
        print(json.dumps(run_compute(run)), flush=True)


if __name__ == "__main__":
    main()
