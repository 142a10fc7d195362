"""A small model memorises 100 toy pairs through `train_step`, the update `mt train` makes."""

import pytest
import torch

from mt.batching import Pairs
from mt.config import ModelConfig, TrainConfig
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.plumbing.metrics import corpus_scores
from mt.training.bpe import train_tokenizer
from mt.training.epochs import BatchStream
from mt.training.step import inverse_sqrt_lr, train_step
from mt.translate import SearchRequest, translate_lines


@pytest.mark.slow
def test_overfit_100_toy_pairs(toy):
    torch.manual_seed(0)
    src, tgt = toy["train"][0][:100], toy["train"][1][:100]
    tokenizer = train_tokenizer(src + tgt, vocab_size=250)
    model = Seq2Seq(ModelConfig(d_model=64, n_heads=4, layers=2, d_ff=256, dropout=0.0), tokenizer.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    stream = BatchStream(Pairs.from_ids(tokenizer.encode(src), tokenizer.encode(tgt)), 512, seed=0)
    no_smoothing = TrainConfig(label_smoothing=0.0, clip_norm=0.0)
    epoch = index = step = 0
    while epoch <= 60:
        batches, epoch, index = stream.take(epoch, index, 1)
        step += 1
        stats = train_step(model, optimizer, batches, no_smoothing, inverse_sqrt_lr(step, 3e-3, 50))
    assert stats.stepped and stats.target_tokens == batches[0].ntokens
    assert stats.nll / stats.target_tokens < 0.05
    hyps = translate_lines(SearchRequest(model, tokenizer, src), DecodeConfig())
    assert corpus_scores(hyps, tgt, tokenize="13a")["bleu"] > 90
