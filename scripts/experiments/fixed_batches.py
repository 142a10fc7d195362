"""One fixed list of batches, timed through two checkouts' updates (issue 94: fp32 at HEAD against e38dd6f).

scripts/bench_train.py times the first batches of its own checkout's epoch, so two checkouts whose
planners draw differently time different batches. This script takes the draw out:

    python scripts/experiments/fixed_batches.py save configs/multi30k.yaml /tmp/batches.pt --steps 200
    python scripts/experiments/fixed_batches.py time /tmp/batches.pt --root /tmp/e38   # e.g. a worktree
    python scripts/experiments/fixed_batches.py time /tmp/batches.pt --root .

`save` (run at HEAD) writes the first `--steps` batches of epoch 1 as `mt train` builds them, with the
vocabulary size and the target's pieces. `time` imports `mt` from `--root`, builds that checkout's model
and Adam as its `mt train` does (the same seed), runs one update on each distinct shape to build its
kernels, then times `--rounds` passes over all the batches, one update a batch: the checkout's
`train_step` at fp32 (or `--precision`). It prints one JSON line: non-pad target tokens/s per round.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch

FIELDS = ["src", "src_mask", "tgt_in", "tgt_out", "tgt_mask"]


def save(config: str, out: str, steps: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from mt.config import load_config
    from mt.output_pieces import target_pieces
    from mt.training import corpus
    from mt.training.epochs import epoch_plan

    cfg = load_config(config)
    tokenizer, total, _ = corpus.learn_tokenizer(cfg)
    pairs = corpus.training_pairs(cfg.data, corpus.prepare(cfg.data, tokenizer, total))
    plan = epoch_plan(pairs, cfg.train.max_tokens, cfg.train.seed, 1)
    batches = [pairs.batch(plan.rows(j)) for j in range(min(steps, len(plan)))]
    torch.save(
        {
            "config": str(Path(config).resolve()),
            "vocab_size": tokenizer.vocab_size,
            "target_pieces": target_pieces([pairs.tgt], tokenizer.vocab_size),
            "batches": [{f: getattr(b, f) for f in FIELDS} | {"ntokens": b.ntokens} for b in batches],
        },
        out,
    )
    print(f"{len(batches)} batches, {sum(b.ntokens for b in batches)} target tokens -> {out}")


def first_of(*modules: str, name: str):
    """`name` from the first of `modules` that imports: the two checkouts keep some things apart."""
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"{name} is in none of {modules}")


def time_checkout(saved_path: str, root: str, rounds: int, precision: str) -> dict:
    sys.path.insert(0, str(Path(root).resolve()))
    from mt.batching import Batch
    from mt.config import load_config
    from mt.model import Seq2Seq

    train_step = first_of("mt.training.step", "mt.step", name="train_step")
    inverse_sqrt_lr = first_of("mt.training.step", "mt.step", name="inverse_sqrt_lr")
    set_precision = first_of("mt.devices", "mt.training.distributed", name="set_precision")

    saved = torch.load(saved_path)
    cfg = load_config(saved["config"], [f"train.precision={precision}"])
    batches = [Batch(**b) for b in saved["batches"]]
    torch.manual_seed(cfg.train.seed)
    pieces = saved["target_pieces"] if cfg.model.output_pieces == "target" else None
    model = Seq2Seq(cfg.model, saved["vocab_size"], pieces).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    device = torch.device("cpu")
    set_precision(device, precision)
    updates = iter(range(1, 10**9))

    def update(batch) -> None:
        lr = inverse_sqrt_lr(next(updates), cfg.train.lr, cfg.train.warmup_steps)
        train_step(model, optimizer, [batch], cfg.train, lr, device=device)

    shapes = {}
    for batch in batches:  # one update on each shape: its kernels are built before the clock runs
        shapes.setdefault((*batch.src.shape, batch.tgt_in.size(1)), batch)
    for batch in shapes.values():
        update(batch)
    tokens, per_round = sum(b.ntokens for b in batches), []
    for _ in range(rounds):
        start = time.perf_counter()
        for batch in batches:
            update(batch)
        per_round.append(round(tokens / (time.perf_counter() - start)))
    import mt

    return {"mt": mt.__file__, "precision": precision, "shapes": len(shapes), "tokens_per_s": per_round}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    saving = sub.add_parser("save")
    saving.add_argument("config")
    saving.add_argument("out")
    saving.add_argument("--steps", type=int, default=200)
    timing = sub.add_parser("time")
    timing.add_argument("batches")
    timing.add_argument("--root", default=".")
    timing.add_argument("--rounds", type=int, default=2)
    timing.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    if args.mode == "save":
        save(args.config, args.out, args.steps)
    else:
        print(json.dumps(time_checkout(args.batches, args.root, args.rounds, args.precision)))


if __name__ == "__main__":
    main()
