"""mt's layers against torch's own: the nn.Transformer reference of scripts/reference.py (the yardstick
scripts/bench_train.py times mt against), given mt's weights, computes the same logits and gradients."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from mt.batching import make_batch
from mt.config import ModelConfig
from mt.model import Seq2Seq
from mt.training.loss import label_smoothed_loss
from mt.training.step import batch_loss

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_train import table  # noqa: E402
from reference import ReferenceSeq2Seq, copy_weights, mt_to_reference  # noqa: E402

CFG = ModelConfig(d_model=32, n_heads=4, layers=2, encoder_layers=3, d_ff=64, dropout=0.0, max_positions=64)
V = 50


def pair(norm: str) -> tuple[Seq2Seq, ReferenceSeq2Seq]:
    torch.manual_seed(0)
    cfg = replace(CFG, norm=norm)
    model, reference = Seq2Seq(cfg, V), ReferenceSeq2Seq(cfg, V)
    copy_weights(model, reference)
    return model, reference


def batch():
    g = torch.Generator().manual_seed(1)
    lengths = [(7, 5), (3, 9), (10, 2)]  # padding on both sides
    return make_batch(
        [torch.randint(4, V, (s,), generator=g).tolist() for s, _ in lengths],
        [torch.randint(4, V, (t,), generator=g).tolist() for _, t in lengths],
    )


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_reference_computes_mts_logits_and_gradients(norm):
    model, reference = pair(norm)
    b = batch()
    real = b.tgt_mask  # (B, T): pad positions' outputs are nobody's concern
    ours = model(b.src, b.src_mask, b.tgt_in, b.tgt_mask)  # (B, T, V)
    theirs = reference(b.src, b.src_mask, b.tgt_in, b.tgt_mask)
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)

    for net, logits in ((model, ours), (reference, theirs)):
        loss, _ = label_smoothed_loss(logits.flatten(0, 1), b.tgt_out.flatten(), 0.1)
        loss.backward()
    grads = mt_to_reference(model, {name: p.grad for name, p in model.named_parameters()})
    theirs_grads = dict(reference.named_parameters())
    assert set(grads) == set(theirs_grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, theirs_grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)
    assert float(batch_loss(model, b, 0.1)[0].detach()) == pytest.approx(float(loss.detach()), rel=1e-5)


def test_the_bench_table_compares_mt_with_the_reference_not_the_reference_with_itself():
    row = dict(config="configs/tiny.yaml", precision="fp32", switch="eager", min=1.0, max=2.0, spread=0.1)
    row.update(tflops=0.1, mfu=None, of_probe=0.5, warm_s=1.0)
    rows = [
        {**row, "model": "mt", "tokens_per_s": 300.0},
        {**row, "model": "reference", "tokens_per_s": 200.0},
    ]
    vs_ref = [line.split(" | ")[7] for line in table(rows).splitlines()[2:]]
    assert vs_ref == ["1.50", ""]
