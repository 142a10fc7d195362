"""Issue 94: how a process's memory grows with the number of distinct matmul shapes it meets, in bf16
(plain or under autocast) and fp32: one (M, 512) @ (512, 2048) product and its backward per row count M,
the resident set printed every 200 shapes. Run it with an allocator or oneDNN setting in the environment
to see what each holds (docs/cpu-speed, "bf16's memory by cause").

    python scripts/experiments/matmul_shapes_memory.py bf16|autocast|fp32 [SHAPES]
"""

from __future__ import annotations

import sys
import time

import torch


def resident_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20


def main() -> None:
    kind, shapes = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 800
    torch.set_num_threads(2)
    dtype = torch.bfloat16 if kind == "bf16" else torch.float32
    weight = torch.randn(512, 2048, dtype=dtype, requires_grad=True)
    start, began = resident_mb(), time.perf_counter()
    for i, rows in enumerate(range(200, 200 + shapes)):
        x = torch.randn(rows, 512, dtype=dtype, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=kind == "autocast"):
            y = x @ weight
        y.float().sum().backward()
        if i % 200 == 199:
            grown = resident_mb() - start
            print(f"{kind}: {i + 1} shapes, +{grown:.0f} MB, {time.perf_counter() - began:.1f} s", flush=True)


if __name__ == "__main__":
    main()
