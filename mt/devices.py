"""Where the translator computes, and in what precision: the device `auto` names, the precisions a
device runs natively, and the autocast and TF32 settings a precision asks for (read by training;
evaluation and the translator read `resolve_device`). And the model's ops whose fast path depends on
the device (mt.model calls them; skip them on a first read): dropout's cheaper mask on a CPU, attention
in fp32 under a CPU's bf16 autocast, the memory cast once for every layer, SDPA's causal flag on CUDA.
"""

from __future__ import annotations

import contextlib
import logging
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

log = logging.getLogger(__name__)


# oneDNN keeps the kernels it built for each bf16 matmul shape (ONEDNN_PRIMITIVE_CACHE_CAPACITY), and ideep,
# torch's layer over it, its per-shape setup (LRU_CACHE_CAPACITY): 1,024 each by default, where an epoch meets
# thousands of shapes. An AMX Xeon builds kernels dearly (at 1,024 bf16 ran at fp32's speed: issue 83); with
# AVX512-BF16 alone, 64 in each ran as fast and held 0.6 GB less (issue 94, docs/cpu-speed). Read when the
# first kernel is made: set before that, unless the user did.
KERNEL_CACHES = {
    "amx": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32768"},
    "avx512_bf16": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "LRU_CACHE_CAPACITY": "64"},
}


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when available, else cpu."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def native_precisions(device: torch.device) -> list[str]:
    """The train.precision values this device runs at full speed: on a CPU, bf16 needs AVX512-BF16 or
    AMX (elsewhere oneDNN falls back to a path ~10x slower than fp32), as torch's CPU feature checks
    (cpuinfo's reading of CPUID) report them; fp16 and tf32 are CUDA's."""
    if device.type == "cuda":
        return (
            ["fp32", "tf32", "bf16", "fp16"] if torch.cuda.is_bf16_supported() else ["fp32", "tf32", "fp16"]
        )
    return ["fp32", "bf16"] if cpu_has("avx512_bf16") or cpu_has("amx_tile") else ["fp32"]


def cpu_has(feature: str) -> bool:
    """Whether torch's CPU feature checks report `feature` ("avx512_bf16", "amx_tile"); older torch has
    fewer checks, and a missing one is a no."""
    return getattr(torch.cpu, f"_is_{feature}_supported", lambda: False)()


def ran_precision(device: torch.device, precision: str) -> str:
    """train.precision as it runs on `device`: auto is bf16 where the device has it natively (the default's
    update 1.19-1.32x fp32's on an AMX Xeon, its test2016 within fp32's seeds: docs/cpu-speed), else fp32."""
    if precision != "auto":
        return precision
    return "bf16" if "bf16" in native_precisions(device) else "fp32"


def autocast(device: torch.device, precision: str):
    """The forward pass's autocast context for train.precision (fp32 and tf32: none)."""
    precision = ran_precision(device, precision)
    if precision in ("fp32", "tf32"):
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def set_precision(device: torch.device, precision: str) -> None:
    """TF32 matmuls and convolutions on CUDA only when asked for (fp32 means fp32), and attention without
    cuDNN's kernels; bf16 on a CPU with the kernel caches its kind needs (KERNEL_CACHES); a
    precision this device only emulates is one warning. torch >= 2.9 sets TF32 through fp32_precision,
    older torch through allow_tf32: the two must not be mixed."""
    precision = ran_precision(device, precision)
    if precision not in native_precisions(device):
        log.warning(
            "train.precision %s is not native on this %s (native: %s): it runs far slower than fp32",
            precision,
            device.type.upper(),
            ", ".join(native_precisions(device)),
        )
    if device.type == "cpu" and precision == "bf16":
        for name, capacity in KERNEL_CACHES["amx" if cpu_has("amx_tile") else "avx512_bf16"].items():
            os.environ.setdefault(name, capacity)
    if device.type != "cuda":
        return
    # cuDNN's attention (bf16/fp16) builds a plan for each new batch shape on the host: on an H100 it
    # made bf16 training 8x slower than flash/efficient attention (scripts/bench_train.py, docs/gpu)
    torch.backends.cuda.enable_cudnn_sdp(False)
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        mode = "tf32" if precision == "tf32" else "ieee"
        torch.backends.cuda.matmul.fp32_precision = torch.backends.cudnn.conv.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"


class Dropout(nn.Module):
    """Inverted dropout with a cheaper mask than `nn.Dropout`.

    torch's CPU generator makes one call per element, which made dropout a quarter of a training
    step. Here each 64-bit random draw gives three 16-bit uniforms (its top 16 bits are not uniform:
    `random_` stays below 2**63), so p is rounded to a multiple of 1/65536.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p, self.on = p, True  # on: train.dropout_start's switch (Seq2Seq.use_dropout)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or not self.on:
            return x
        # CUDA's generator is fast and its dropout kernel fused; under torch.compile the mask's random numbers
        # are made inside the fused kernel, where the in-place random_ below would break the graph at every
        # dropout. The trick below is for eager CPUs.
        if x.is_cuda or torch.compiler.is_compiling():
            return F.dropout(x, self.p, training=True)
        n = x.numel()
        words = torch.empty((n + 2) // 3, dtype=torch.int64, device=x.device).random_()  # (n/3,)
        uniform16 = words.view(torch.int16).view(-1, 4)[:, :3].flatten()[:n].view_as(x)  # little-endian
        scaled_keep = (uniform16 >= round(self.p * 65536) - 32768).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * scaled_keep


def in_autocast_dtype(x: Tensor) -> Tensor:
    """x in autocast's dtype where autocast is on, so that the layers reading it (every decoder layer's
    kv_proj reads the memory) share one cast instead of making one each; else x as it is."""
    if torch.is_autocast_enabled(x.device.type):
        return x.to(torch.get_autocast_dtype(x.device.type))
    return x


def causal_flag(tgt_in: Tensor) -> bool:
    """Whether decoder self-attention uses SDPA's is_causal instead of a (B, 1, T, T) mask: on CUDA,
    where it selects the flash kernel. CPUs keep the explicit mask (and the numerics measured with it)."""
    return tgt_in.is_cuda


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, causal: bool) -> Tensor:
    """`F.scaled_dot_product_attention`: q (B, H, T, Dh) attends to k, v (B, H, L, Dh) -> (B, H, T, Dh).

    Under a CPU's bf16 autocast it runs in fp32: torch's bf16 attention kernel for CPUs took 4.0-4.7x
    its fp32 kernel's time at this model's shapes (forward and backward), a third of a bf16 update on an
    AMX Xeon, where casting q, k and v up costs far less (docs/cpu-speed, issue 83)."""
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            q, k, v = q.float(), k.float(), v.float()
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal
            )
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)
