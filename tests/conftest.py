"""Shared fixtures: the toy corpus, a small tokenizer, random and trained models, tiny run overrides,
the tiny runs several test files read (one 4-step run scored on its test split, two 30-step runs for
the report, a run to serve), and the helpers those files share."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mt.batching import Pairs
from mt.cli import main
from mt.config import ModelConfig, TrainConfig, load_config
from mt.evaluate import evaluate_run
from mt.generated.toy import toy_corpus
from mt.model import Seq2Seq
from mt.run.folder import load_run
from mt.serving.limits import ServeLimits
from mt.serving.worker import Worker
from mt.training.bpe import train_tokenizer
from mt.training.epochs import BatchStream
from mt.training.step import inverse_sqrt_lr, train_step
from mt.training.train import train
from mt.translate import SearchRequest, translate_nbest
from mt.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
SHARED = os.environ.get("MT_DATA_DIR", "")
needs_multi30k = pytest.mark.skipif(
    not (SHARED and Path(SHARED, "multi30k").is_dir()), reason="MT_DATA_DIR with multi30k/ not set"
)

# A tiny model on the small corpus (400 toy pairs), on one thread of the CPU (also where a GPU is
# visible: tests/test_gpu.py chooses CUDA itself): every training test starts from this list and adds
# what it is about. With max_tokens 400 an epoch is about 30 batches.
# configs/tiny.yaml's model, on top of configs/toy.yaml: it trains in seconds on one CPU thread
TINY_MODEL = [
    "model.d_model=32",
    "model.d_ff=64",
    "model.layers=1",
    "tokenizer.vocab_size=200",
    "train.max_tokens=400",
    "train.threads=1",
]
# train.tune off: `mt train` would decode val 11 times at its end (tests/test_tune.py turns it on)
TINY = TINY_MODEL + [
    "train.device=cpu",
    "train.log_every=2",
    "train.valid_every=4",
    "data.corpus=files",
    "train.tune=false",
]


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        help="fuzz every reader with 1,000 damaged files instead of CI's 25 (tests/test_fuzz.py)",
    )


def pytest_configure(config):
    if config.getoption("--fuzz-long"):
        os.environ.setdefault("MT_FUZZ_EXAMPLES", "1000")
    # The models the tests train and decode in this process run on one thread, as TINY's runs do, and
    # so do the mt commands they start: at torch's default, a thread a core, they spin against any
    # other work on the machine (issue 80: the shared trained_model took 117 s at 2 threads beside it,
    # 6.9 s at 1). A GPU is used as before.
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


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


def train_on_toy(tokenizer, toy, cfg: ModelConfig, pairs: int, updates: int) -> Seq2Seq:
    """A model of `cfg` after `updates` seeded updates (1,024-token batches, peak lr 3e-3) on the first
    `pairs` toy training pairs, in eval mode."""
    torch.manual_seed(0)
    model = Seq2Seq(cfg, tokenizer.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    src, tgt = toy["train"]
    stream = BatchStream(
        Pairs.from_ids(tokenizer.encode(src[:pairs]), tokenizer.encode(tgt[:pairs])), 1024, seed=0
    )
    epoch = index = 0
    for step in range(1, updates + 1):
        batches, epoch, index = stream.take(epoch, index, 1)
        train_step(model, optimizer, batches, TrainConfig(), inverse_sqrt_lr(step, 3e-3, 50))
    return model.eval()


@pytest.fixture(scope="session")
def trained_model(tokenizer, toy):
    """The same architecture after 300 updates on 2,000 toy pairs: it ends hypotheses with eos, at
    different steps for different sentences (tests/test_decode.py checks that it does)."""
    return train_on_toy(tokenizer, toy, TEXT_MODEL, 2000, 300)


@pytest.fixture(params=["text_model", "trained_model"])
def any_model(request):
    """Each decoding test runs on a random model (hypotheses cut at the limit) and a trained one
    (hypotheses ending with eos at different steps)."""
    return request.getfixturevalue(request.param)


# Helpers: mt as a command (a subprocess, or main() in this process), and what a run directory holds.


def mt_cli(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python -m mt ARGS` in a subprocess of this checkout: its exit code, stdout and stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mt", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def run_main(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


def refused(capsys, folder: Path, *args: str) -> str:
    """`mt ARGS`'s one-line error: it exits 2 and leaves every file under `folder` as it was."""
    before = file_hashes(folder)
    code, err = run_main(capsys, *args)
    assert code == 2 and file_hashes(folder) == before, err
    return err


def file_hashes(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "train.log"
    }


def table(text: str) -> list[dict[str, str]]:
    """The first Markdown table of `text`, a dict a row keyed by the header's cells: a `p` column is
    named for the column before it (`BLEU p`), so that a test reads a cell by name, not by position."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    names = [f"{header[i - 1]} p" if name == "p" else name for i, name in enumerate(header)]
    return [dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[1:]]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["model"]


@pytest.fixture(scope="session")
def trained(tiny, tmp_path_factory):
    """The shared tiny run: 4 steps on the small corpus, scored on its test split: (run dir, the
    overrides that made it). Tests that change its files work on a copy (`run`)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    overrides = tiny + ["train.max_steps=4"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    assert main(["evaluate", "--run", str(run), "--device", "cpu"]) == 0
    return run, overrides


@pytest.fixture
def run(trained, tmp_path):
    """A private copy of the shared tiny run."""
    copy = tmp_path / "run"
    shutil.copytree(trained[0], copy)
    return copy


# an epoch is 15 updates of 2 batches, so runs cross epochs; dropout makes the RNG state matter
RESUME = ["train.accumulate=2", "train.warmup_steps=5", "train.valid_every=7", "model.dropout=0.1"]


@pytest.fixture
def tiny_resume(tiny):
    return tiny + RESUME


@pytest.fixture
def tiny_config(tiny_resume):
    return lambda *extra: load_config(ROOT / "configs/toy.yaml", tiny_resume + list(extra))


REPORT = [
    "model.layers=2",
    "train.log_every=5",
    "train.valid_every=10",
    "train.max_steps=30",
    "train.lr=0.005",
]


@pytest.fixture(scope="session")
def two_runs(tiny, tmp_path_factory):
    """Two tiny toy runs that differ in label smoothing, each evaluated on the test split."""
    root = tmp_path_factory.mktemp("report")
    runs = []
    for name, eps in [("ls01", "0.1"), ("ls0", "0.0")]:
        cfg = load_config(ROOT / "configs/toy.yaml", tiny + REPORT + [f"train.label_smoothing={eps}"])
        train(cfg, root / name)
        evaluate_run(Translator.from_run(root / name, device="cpu"), "test")
        runs.append(root / name)
    return runs


@pytest.fixture(scope="session")
def fluent(two_runs) -> Path:
    """A run whose greedy translations are words, differing by line (30 updates at lr 5e-3): the
    shared `trained` run's 4 updates translate every line as "", which an output check cannot tell
    from a right answer. Read only."""
    return two_runs[0]


ODD = [
    "Der Hund sieht die Katze .",
    "",
    "   ",
    "Die\tKatze\x00 schläft\x1b .",
    "Ein Mann\u2028läuft .",
    "kaputt \ufffd hier",
    " ".join(["Der Hund sieht die Katze ."] * 40),
]  # the last: more pieces than max_len


@pytest.fixture(scope="session")
def served(tiny, tmp_path_factory):
    """A run trained for 30 steps, loaded once: (run dir, cfg, tokenizer, model). Its translations are
    words (`fluent`'s training), so the server's answers are compared with something."""
    run = tmp_path_factory.mktemp("served") / "run"
    train(load_config(ROOT / "configs/toy.yaml", tiny + REPORT + ["data.max_len=20"]), run)
    return (run, *load_run(run))


def make_worker(served, **limits) -> Worker:
    return Worker(Translator.from_run(served[0], device="cpu"), ServeLimits(**limits))


def expected(served, lines: list[str], prefixes=None, **options) -> list[list[tuple[str, float]]]:
    run, cfg, tokenizer, model = served
    decode = dataclasses.replace(cfg.decode, **options)
    return translate_nbest(
        SearchRequest(model, tokenizer, lines, max_len=cfg.data.max_len, prefixes=prefixes), decode
    )
