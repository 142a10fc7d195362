"""Where the translator computes, and in what precision: the device `auto` names, the precisions a
device runs natively, and the autocast and TF32 settings a precision asks for. Outside training only
`resolve_device` is read (evaluation, the translator): here, they need not import training.
"""

from __future__ import annotations

import contextlib
import logging
import os

import torch

log = logging.getLogger(__name__)


# oneDNN compiles a kernel for each bf16 matmul shape it meets and keeps 1,024 of them by default; an
# epoch of the default's batches meets thousands (each batch shape's rows times every weight, forward and
# backward), so past the cache every update compiled its kernels anew and bf16 ran at fp32's speed
# (docs/cpu-speed, issue 83). Read when oneDNN makes its first kernel: set before that, unless the user did.
ONEDNN_KERNELS = 1 << 15


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
    native_bf16 = any(
        getattr(torch.cpu, name, lambda: False)()
        for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )
    return ["fp32", "bf16"] if native_bf16 else ["fp32"]


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
    cuDNN's kernels; bf16 on a CPU with room for oneDNN's kernels (ONEDNN_KERNELS); a precision this
    device only emulates is one warning. torch >= 2.9 sets TF32 through
    fp32_precision, older torch through allow_tf32: the two must not be mixed."""
    precision = ran_precision(device, precision)
    if precision not in native_precisions(device):
        log.warning(
            "train.precision %s is not native on this %s (native: %s): it runs far slower than fp32",
            precision,
            device.type.upper(),
            ", ".join(native_precisions(device)),
        )
    if device.type == "cpu" and precision == "bf16":
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNELS))
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
