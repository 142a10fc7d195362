"""A small model memorises 100 toy pairs: the whole training path can learn."""
import pytest
import torch

from mt.config import DecodeConfig, ModelConfig
from mt.data import epoch_batches
from mt.evaluate import score, translate_lines
from mt.model import Seq2Seq
from mt.tokenizer import train_tokenizer
from mt.train import inverse_sqrt_lr, label_smoothed_loss


@pytest.mark.slow
def test_overfit_100_toy_pairs(toy):
    torch.manual_seed(0)
    src, tgt = toy["train"][0][:100], toy["train"][1][:100]
    tokenizer = train_tokenizer(src + tgt, vocab_size=250)
    src_ids, tgt_ids = tokenizer.encode(src), tokenizer.encode(tgt)
    model = Seq2Seq(ModelConfig(d_model=64, n_heads=4, layers=2, d_ff=256, dropout=0.0), tokenizer.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    step = 0
    for epoch in range(1, 61):
        for batch in epoch_batches(src_ids, tgt_ids, 512, seed=0, epoch=epoch):
            step += 1
            for group in optimizer.param_groups:
                group["lr"] = inverse_sqrt_lr(step, 3e-3, 50)
            logits = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
            loss, nll = label_smoothed_loss(logits.flatten(0, 1), batch.tgt_out.flatten(), 0.0)
            (loss / batch.ntokens).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert nll.item() / batch.ntokens < 0.05
    hyps = translate_lines(model, tokenizer, src, DecodeConfig())
    assert score(hyps, tgt)["bleu"] > 90
