"""mt/devices.py: which precisions a device runs natively, what `auto` resolves to, and the switches
a precision sets (autocast, oneDNN's kernel cache, TF32 on CUDA)."""

import logging
import os

import pytest
import torch

from mt import devices


def test_bf16_on_a_cpu_without_it_is_one_warning_and_fp32_none(monkeypatch, caplog):
    # raising=False: torch 2.4 has neither probe, and mt.devices reads them with a default
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    cpu = torch.device("cpu")
    assert devices.native_precisions(cpu) == ["fp32"]
    with caplog.at_level(logging.WARNING, logger="mt.devices"):
        devices.set_precision(cpu, "fp32")
        assert caplog.messages == []
        devices.set_precision(cpu, "bf16")  # once a training: one warning, none for fp32
    assert caplog.messages == [
        "train.precision bf16 is not native on this CPU (native: fp32): it runs far slower than fp32"
    ]
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert devices.native_precisions(cpu) == ["fp32", "bf16"]


@pytest.mark.parametrize("amx", [False, True])
def test_auto_precision_is_bf16_where_the_cpu_has_it_natively(monkeypatch, amx):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    cpu = torch.device("cpu")
    assert devices.ran_precision(cpu, "auto") == ("bf16" if amx else "fp32")
    assert [devices.ran_precision(cpu, p) for p in ("fp32", "bf16")] == ["fp32", "bf16"]
    with devices.autocast(cpu, "auto"):
        assert torch.is_autocast_enabled("cpu") == amx
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == (torch.bfloat16 if amx else torch.float32)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("amx", [False, True])
def test_bf16_on_a_cpu_sizes_the_kernel_caches_by_its_kind_unless_the_user_did(monkeypatch, precision, amx):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    caches = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
    for name in caches:
        monkeypatch.setenv(name, "")  # put back as it was after the test
        monkeypatch.delenv(name)
    devices.set_precision(torch.device("cpu"), precision)
    # an AMX Xeon keeps 32,768 kernels (issue 83: each is dear to build); AVX512-BF16 alone, 64 in each
    # cache (issue 94); fp32 leaves both alone
    expected = (None, None) if precision == "fp32" else ("32768", None) if amx else ("64", "64")
    assert tuple(os.environ.get(name) for name in caches) == expected
    for name in caches:
        monkeypatch.setenv(name, "2048")
    devices.set_precision(torch.device("cpu"), precision)
    assert [os.environ[name] for name in caches] == ["2048", "2048"]


def tf32_switches() -> tuple:
    """(matmul, convolution) TF32 settings through the one API this torch has: fp32_precision ("tf32"
    or "ieee") from 2.9, allow_tf32 (True or False) before."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        return torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def set_tf32_switches(matmul, conv) -> None:
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = matmul, conv
    else:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv


def test_tf32_only_when_asked_for_through_one_api(monkeypatch):
    """On CUDA: tf32 turns TF32 on for matmuls and convolutions, every other precision turns it off,
    through fp32_precision where torch has it (never mixed with the legacy allow_tf32 flags); cuDNN's
    attention is turned off."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    cuda = torch.device("cuda", 0)
    on, off = ("tf32", "ieee") if hasattr(torch.backends.cuda.matmul, "fp32_precision") else (True, False)
    before = tf32_switches()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        devices.set_precision(cuda, "tf32")
        assert not torch.backends.cuda.cudnn_sdp_enabled()  # its per-shape plans made bf16 8x slower
        assert tf32_switches() == (on, on)
        for precision in ("fp32", "bf16", "fp16"):
            devices.set_precision(cuda, precision)
            assert tf32_switches() == (off, off)
    finally:
        set_tf32_switches(*before)
        torch.backends.cuda.enable_cudnn_sdp(True)
