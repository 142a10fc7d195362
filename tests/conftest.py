"""Shared fixtures: a small tokenizer and model built from the generated toy corpus."""
from __future__ import annotations

import pytest
import torch

from mt.config import ModelConfig
from mt.model import Seq2Seq
from mt.tokenizer import train_tokenizer
from mt.toy import toy_corpus


@pytest.fixture(scope="session")
def toy():
    return toy_corpus()


@pytest.fixture(scope="session")
def small_corpus(toy, tmp_path_factory):
    """A folder for data.corpus=files: the first 400/40/40 toy pairs as train/val/test.{de,en}."""
    folder = tmp_path_factory.mktemp("small_corpus")
    for split, n in [("train", 400), ("val", 40), ("test", 40)]:
        de, en = toy[split]
        (folder / f"{split}.de").write_text("".join(line + "\n" for line in de[:n]), encoding="utf-8")
        (folder / f"{split}.en").write_text("".join(line + "\n" for line in en[:n]), encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def tokenizer(toy):
    src, tgt = toy["train"]
    return train_tokenizer(src[:2000] + tgt[:2000], vocab_size=300)


@pytest.fixture
def small_model():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=4, layers=2, d_ff=64, dropout=0.0, max_positions=64)
    return Seq2Seq(cfg, vocab_size=50).eval()


@pytest.fixture
def text_model(tokenizer):
    """A random model over the toy tokenizer's vocabulary."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=4, layers=2, d_ff=64, dropout=0.0, max_positions=128)
    return Seq2Seq(cfg, tokenizer.vocab_size).eval()
