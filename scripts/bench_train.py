"""Training throughput of one config under several precisions, measured in one process.

    python scripts/bench_train.py configs/multi30k.yaml --steps 30 --precisions fp32 bf16 [--device cuda]

Prints the precisions the device runs natively, then one JSON line per precision: source+target non-pad
tokens/s over `--steps` updates after `--warmup` untimed ones, on the same batches (and on CUDA the
peak memory; fp16 with its grad scaler, as `mt train`). Compare ratios from one run; absolute numbers drift
with whatever else the machine is doing.

On CUDA two more variants, each a row of its own: `--cudnn-attention on` (SDPA may then pick
cuDNN's attention in bf16/fp16, which plans each new shape on the host; `mt train` turns it off) and
`--compile` (torch.compile of the model with dynamic shapes; its compile time lands in the untimed
warmup, which it lengthens to 10 updates).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from mt import corpus
from mt.batching import epoch_plan
from mt.config import load_config
from mt.distributed import native_precisions, resolve_device, set_precision
from mt.model import Seq2Seq
from mt.step import inverse_sqrt_lr, train_step


def measure(
    cfg,
    batches,
    vocab_size: int,
    precision: str,
    warmup: int,
    device: torch.device,
    compiled: bool = False,
    cudnn_attention: bool = False,
) -> dict:
    torch.manual_seed(cfg.train.seed)
    model = Seq2Seq(cfg.model, vocab_size).to(device).train()
    if compiled:
        model = torch.compile(model, dynamic=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    train_cfg = replace(cfg.train, precision=precision)
    set_precision(device, precision)  # as `mt train`: cuDNN's attention off ...
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(cudnn_attention)  # ... unless asked for, to compare
        torch.cuda.reset_peak_memory_stats(device)
    tokens, start, first = 0, 0.0, time.perf_counter()
    for i, batch in enumerate(batches):
        if i == warmup:
            tokens, start = 0, time.perf_counter()
            warmup_seconds = start - first
        lr = inverse_sqrt_lr(i + 1, cfg.train.lr, cfg.train.warmup_steps)
        # the update `mt train` makes; its one host sync per update ends the step's GPU work too
        stats = train_step(model, optimizer, [batch], train_cfg, lr, scaler=scaler, device=device)
        tokens += stats.tokens
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    busy = (
        gpu_busy(model, optimizer, batches[warmup : warmup + 5], train_cfg, scaler, device)
        if device.type == "cuda"
        else None
    )
    return {
        "precision": precision,
        "compile": compiled,
        "cudnn_attention": device.type == "cuda" and torch.backends.cuda.cudnn_sdp_enabled(),
        "steps": len(batches) - warmup,
        "warmup_seconds": round(warmup_seconds, 1),
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "last_loss_per_token": round(stats.loss / stats.target_tokens, 4),
        "peak_gpu_gib": None if peak is None else round(peak, 2),
        "gpu_busy": busy,
    }


def gpu_busy(model, optimizer, batches, train_cfg, scaler, device: torch.device) -> float:
    """The fraction of a few updates' wall time that CUDA kernels ran (torch.profiler): well under 1
    means the GPU waits for the host (Python, launches, syncs)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for batch in batches:
            train_step(model, optimizer, [batch], train_cfg, 1e-4, scaler=scaler, device=device)
        torch.cuda.synchronize(device)
        wall_us = (time.perf_counter() - start) * 1e6
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.time_range.elapsed_us() for e in kernels)  # one stream: kernels do not overlap
    return round(busy_us / wall_us, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument(
        "--cudnn-attention", choices=["on", "off"], default="off", help="CUDA: let SDPA use cuDNN (mt: off)"
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (dynamic shapes)")
    args = parser.parse_args()
    if args.compile:
        args.warmup = max(args.warmup, 10)
    cfg = load_config(args.config, args.set)
    device = resolve_device(args.device)
    print(json.dumps({"device": str(device), "native_precisions": native_precisions(device)}), flush=True)
    tokenizer, pairs = corpus.learn_tokenizer(cfg)  # what `mt train` does: BPE, binarized pairs, epoch 1
    train_pairs = corpus.load(corpus.prepare(cfg.data, tokenizer, pairs))
    plan = epoch_plan(train_pairs.src_len, train_pairs.tgt_len, cfg.train.max_tokens, cfg.train.seed, 1)
    epoch_tokens = int(train_pairs.src_len.sum() + train_pairs.tgt_len.sum()) + 2 * len(
        train_pairs
    )  # eos/bos
    batches = [train_pairs.batch(plan.rows(j)) for j in range(min(args.steps + args.warmup, len(plan)))]
    for precision in args.precisions:
        result = measure(
            cfg,
            batches,
            tokenizer.vocab_size,
            precision,
            args.warmup,
            device,
            args.compile,
            args.cudnn_attention == "on",
        )
        print(
            json.dumps(
                {
                    "config": cfg.name,
                    "threads": torch.get_num_threads(),
                    "device": str(device),
                    **result,
                    "epoch_updates": len(plan),
                    "seconds_per_epoch": round(epoch_tokens / result["tokens_per_s"], 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
