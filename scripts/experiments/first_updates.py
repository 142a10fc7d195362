"""Where a real run's first updates go: each update timed, apart by whether its batch shape is new (issue 94).

scripts/bench_train.py warms every batch shape before its clock starts; `mt train` meets each shape for
the first time inside its updates, where oneDNN builds that shape's kernels. This script runs the loop
`mt train` runs (BatchStream.training with its prefetch thread, `train_step` at the config's
precision, the same seed), without validation, and times each update and each wait for a batch:

    python scripts/experiments/first_updates.py configs/multi30k.yaml --updates 1000 --precision bf16

It prints one JSON line: updates on a shape met for the first time (count, seconds) against updates on
a shape seen before (count, seconds, tokens/s), the seconds spent waiting for batches, tokens/s per
window of `--window` updates, the process's peak RSS and its resident memory at the end by kind of
mapping (heap, anonymous, JIT code, libraries). `--trim-every N` calls glibc's malloc_trim
every N updates (`mt.plumbing.memory.release_freed_memory`, which `mt train` calls at every log
window: this loop calls it only when asked, so that the lever is measured alone).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mt.config import load_config  # noqa: E402
from mt.devices import resolve_device, set_precision  # noqa: E402
from mt.model import Seq2Seq  # noqa: E402
from mt.output_pieces import target_pieces  # noqa: E402
from mt.plumbing.memory import release_freed_memory  # noqa: E402
from mt.training import corpus  # noqa: E402
from mt.training.epochs import BatchStream  # noqa: E402
from mt.training.step import learning_rate, train_step  # noqa: E402


def resident_by_kind() -> dict[str, int]:
    """This process's resident memory now, MB, by kind of mapping (/proc/self/smaps): glibc's main heap,
    anonymous memory (other arenas, large blocks, tensors), anonymous executable memory (JIT-compiled
    code: oneDNN's kernels), shared libraries and other files."""
    found, kind = {}, "other"
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header: address perms offset dev inode [path]
            path, perms = (fields[5] if len(fields) > 5 else ""), fields[1]
            kind = (
                "heap"
                if path == "[heap]"
                else ("anonymous, executable" if "x" in perms else "anonymous")
                if not path
                else "stack"
                if path.startswith("[stack")
                else "libraries"
                if ".so" in path
                else "files and other"
            )
        elif fields[0] == "Rss:":
            found[kind] = found.get(kind, 0) + int(fields[1])
    return {k: round(v / 1024) for k, v in sorted(found.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument(
        "--trim-every", type=int, default=0, help="hand the heap's free pages back every N updates"
    )
    args = parser.parse_args()
    cfg = load_config(args.config, [*args.set, f"train.precision={args.precision}"])
    device = resolve_device("cpu")
    tokenizer, total, _ = corpus.learn_tokenizer(cfg)
    pairs = corpus.training_pairs(cfg.data, corpus.prepare(cfg.data, tokenizer, total))
    torch.manual_seed(cfg.train.seed)
    pieces = target_pieces([pairs.tgt], tokenizer.vocab_size) if cfg.model.output_pieces == "target" else None
    model = Seq2Seq(cfg.model, tokenizer.vocab_size, pieces).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    set_precision(device, args.precision)
    stream = BatchStream.training(pairs, cfg, device)

    seen, position = set(), (0, 0)
    new = {"updates": 0, "seconds": 0.0, "tokens": 0}
    old = {"updates": 0, "seconds": 0.0, "tokens": 0}
    waited, windows, window_tokens, window_seconds = 0.0, [], 0, 0.0
    for step in range(1, args.updates + 1):
        start = time.perf_counter()
        batches, *position = stream.take(*position, cfg.train.accumulate)
        waited += time.perf_counter() - start
        shapes = {(*b.src.shape, b.tgt_in.size(1)) for b in batches}
        start = time.perf_counter()
        stats = train_step(
            model, optimizer, batches, cfg.train, learning_rate(cfg.train, step), device=device
        )
        seconds = time.perf_counter() - start
        kind = old if shapes <= seen else new
        seen |= shapes
        kind["updates"], kind["seconds"], kind["tokens"] = (
            kind["updates"] + 1,
            kind["seconds"] + seconds,
            kind["tokens"] + stats.tokens,
        )
        window_tokens, window_seconds = window_tokens + stats.tokens, window_seconds + seconds
        if args.trim_every and step % args.trim_every == 0:
            release_freed_memory()  # what mt's training loop does at each log window
        if step % args.window == 0:
            windows.append(round(window_tokens / window_seconds))
            window_tokens, window_seconds = 0, 0.0
    for kind in (new, old):
        kind["tokens_per_s"] = round(kind["tokens"] / max(kind["seconds"], 1e-9))
        kind["seconds"] = round(kind["seconds"], 1)
    report = {
        "precision": args.precision,
        "updates": args.updates,
        "new_shape": new,
        "seen_shape": old,
        "waited_s": round(waited, 2),
        "trim_every": args.trim_every,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "rss_now_mb_by_kind": resident_by_kind(),
        "tokens_per_s_by_window": windows,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
