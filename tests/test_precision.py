"""Which precisions a device runs natively, and the TF32 switch (mt.distributed.set_precision)."""

import logging

import torch

from mt import distributed


def test_bf16_on_a_cpu_without_it_is_said_once(monkeypatch, caplog):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    cpu = torch.device("cpu")
    assert distributed.native_precisions(cpu) == ["fp32"]
    with caplog.at_level(logging.WARNING, logger="mt.distributed"):
        distributed.set_precision(cpu, "fp32")
        assert caplog.messages == []
        distributed.set_precision(cpu, "bf16")
    assert caplog.messages == [
        "train.precision bf16 is not native on this CPU (native: fp32): it runs far slower than fp32"
    ]
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert distributed.native_precisions(cpu) == ["fp32", "bf16"]


def test_tf32_only_when_asked_for_through_one_api(monkeypatch):
    """On CUDA: tf32 turns TF32 on for matmuls and convolutions, every other precision turns it off,
    through fp32_precision where torch has it (never mixed with the legacy allow_tf32 flags)."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    cuda = torch.device("cuda", 0)
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    before = matmul.fp32_precision, conv.fp32_precision
    try:
        distributed.set_precision(cuda, "tf32")
        assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "tf32")
        for precision in ("fp32", "bf16", "fp16"):
            distributed.set_precision(cuda, precision)
            assert (matmul.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
    finally:
        matmul.fp32_precision, conv.fp32_precision = before
