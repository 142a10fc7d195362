"""Training throughput of one config under several precisions, measured in one process.

    python scripts/bench_train.py configs/multi30k.yaml --steps 30 --precisions fp32 bf16

Prints one JSON line per precision: source+target non-pad tokens/s over `--steps` updates after
`--warmup` untimed ones, on the same batches. Compare ratios from one run; absolute numbers drift
with whatever else the machine is doing.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from mt.config import load_config
from mt.data import drop_long_pairs, epoch_batches, load_split
from mt.model import Seq2Seq
from mt.tokenizer import train_tokenizer
from mt.train import inverse_sqrt_lr, train_step


def measure(cfg, batches, vocab_size: int, precision: str, warmup: int) -> dict:
    torch.manual_seed(cfg.train.seed)
    model = Seq2Seq(cfg.model, vocab_size).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    train_cfg = replace(cfg.train, precision=precision)
    tokens, start = 0, 0.0
    for i, batch in enumerate(batches):
        if i == warmup:
            tokens, start = 0, time.perf_counter()
        lr = inverse_sqrt_lr(i + 1, cfg.train.lr, cfg.train.warmup_steps)
        stats = train_step(model, optimizer, [batch], train_cfg, lr)  # the update `mt train` makes
        tokens += stats.tokens
    seconds = time.perf_counter() - start
    return {"precision": precision, "steps": len(batches) - warmup, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1),
            "last_loss_per_token": round(stats.loss / stats.target_tokens, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    cfg = load_config(args.config, args.set)
    src, tgt = load_split(cfg.data, "train")
    tokenizer = train_tokenizer(src + tgt, cfg.tokenizer.vocab_size, cfg.tokenizer.character_coverage)
    src_ids, tgt_ids = drop_long_pairs(tokenizer.encode(src), tokenizer.encode(tgt), cfg.data.max_len)
    batches = epoch_batches(src_ids, tgt_ids, cfg.train.max_tokens, cfg.train.seed, 1)[: args.steps + args.warmup]
    for precision in args.precisions:
        print(json.dumps({"config": cfg.name, "threads": torch.get_num_threads(),
                          **measure(cfg, batches, tokenizer.vocab_size, precision, args.warmup)}), flush=True)


if __name__ == "__main__":
    main()
