"""Shared fixtures: the toy corpus, a small tokenizer, random and trained models, tiny run overrides."""

from __future__ import annotations

import pytest
import torch

from mt.config import ModelConfig, TrainConfig
from mt.batching import BatchStream, Pairs
from mt.model import Seq2Seq
from mt.tokenizer import train_tokenizer
from mt.toy import TINY_MODEL, toy_corpus
from mt.step import inverse_sqrt_lr, train_step

# A tiny model on the small corpus (400 toy pairs), on one thread of the CPU (also where a GPU is
# visible: tests/test_gpu.py chooses CUDA itself): every training test starts from this list and adds
# what it is about. With max_tokens 400 an epoch is about 30 batches.
TINY = TINY_MODEL + ["train.device=cpu", "train.log_every=2", "train.valid_every=4", "data.corpus=files"]


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        help="fuzz every reader with 1,000 damaged files instead of CI's 25 (tests/test_fuzz.py)",
    )


def pytest_configure(config):
    import os

    if config.getoption("--fuzz-long"):
        os.environ.setdefault("MT_FUZZ_EXAMPLES", "1000")


@pytest.fixture(scope="session", autouse=True)
def corpus_cache(tmp_path_factory):
    """Binarized corpora of the tests' runs (and their subprocesses) go to a temporary folder."""
    import os

    os.environ["MT_CACHE_DIR"] = str(tmp_path_factory.mktemp("binarized"))


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
def tiny(small_corpus) -> list[str]:
    """TINY with the small corpus: `--set` overrides for configs/toy.yaml."""
    return TINY + [f"data.dir={small_corpus}"]


@pytest.fixture(scope="session")
def tokenizer(toy):
    src, tgt = toy["train"]
    return train_tokenizer(src[:2000] + tgt[:2000], vocab_size=300)


@pytest.fixture
def small_model():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=4, layers=2, d_ff=64, dropout=0.0, max_positions=64)
    return Seq2Seq(cfg, vocab_size=50).eval()


TEXT_MODEL = ModelConfig(d_model=32, n_heads=4, layers=2, d_ff=64, dropout=0.0, max_positions=128)


@pytest.fixture
def text_model(tokenizer):
    """A random model over the toy tokenizer's vocabulary: its hypotheses all run to the length limit."""
    torch.manual_seed(0)
    return Seq2Seq(TEXT_MODEL, tokenizer.vocab_size).eval()


@pytest.fixture(scope="session")
def trained_model(tokenizer, toy):
    """The same architecture after 300 updates on 2,000 toy pairs: it ends hypotheses with eos, at
    different steps for different sentences (tests/test_beam.py checks that it does)."""
    torch.manual_seed(0)
    model = Seq2Seq(TEXT_MODEL, tokenizer.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    src, tgt = toy["train"]
    stream = BatchStream(
        Pairs.from_ids(tokenizer.encode(src[:2000]), tokenizer.encode(tgt[:2000])), 1024, seed=0
    )
    epoch = index = 0
    for step in range(1, 301):
        batches, epoch, index = stream.take(epoch, index, 1)
        train_step(model, optimizer, batches, TrainConfig(), inverse_sqrt_lr(step, 3e-3, 50))
    return model.eval()


@pytest.fixture(params=["text_model", "trained_model"])
def any_model(request):
    """Each decoding test runs on a random model (hypotheses cut at the limit) and a trained one
    (hypotheses ending with eos at different steps)."""
    return request.getfixturevalue(request.param)
