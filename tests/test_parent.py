"""mt/run/parent.py: a child run starts from its parent's weights and tokenizer, with a new optimizer and
schedule; it resumes as itself and --force-new starts it from the parent again; every mismatch and
damaged parent is refused in one line with nothing written; tokenizer.from_run shares a vocabulary."""

import hashlib
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, file_hashes, metrics, run_main, sets, weights

from mt.config import PAD, load_config
from mt.model import Seq2Seq
from mt.run.card import read_card
from mt.run.parent import parse_init_from
from mt.tokenizer import Tokenizer
from mt.training import corpus
from mt.training.epochs import BatchStream
from mt.training.step import batch_loss
from mt.training.train import train

CHILD = ["model.dropout=0.0", "train.log_every=1", "train.valid_every=2", "train.lr=1e-3"]


@pytest.fixture
def child_config(tiny, trained):
    """The child's config: the parent's (the shared tiny run) without dropout, logging every update."""
    parent = trained[0]
    return lambda *extra: load_config(
        ROOT / "configs/toy.yaml", tiny + CHILD + [f"train.init_from={parent}@last", *extra]
    )


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_init_from_names_a_run_and_a_checkpoint():
    assert parse_init_from("runs/base") == (Path("runs/base"), "best")
    assert parse_init_from("runs/base@last") == (Path("runs/base"), "last")
    assert parse_init_from("runs/base@runs/base/ckpt-40.pt") == (Path("runs/base"), "runs/base/ckpt-40.pt")
    assert parse_init_from("runs/base@") == (Path("runs/base@"), "best")


@pytest.mark.slow
def test_a_child_starts_from_its_parents_weights_and_keeps_its_tokenizer(trained, child_config, tmp_path):
    parent, child = trained[0], tmp_path / "child"
    cfg = child_config("train.max_steps=1")
    train(cfg, child)
    # the first logged loss is the parent's loss on the child's first batch
    tokenizer = Tokenizer((parent / "spm.model").read_bytes())
    (batch,), _, _ = BatchStream(
        corpus.load(corpus.prepare(cfg.data, tokenizer)), cfg.train.max_tokens, cfg.train.seed
    ).take(0, 0, 1)
    model = Seq2Seq(cfg.model, tokenizer.vocab_size)
    model.load_state_dict(weights(parent / "last.pt"))
    with torch.no_grad():
        loss, _ = batch_loss(model.train(), batch, cfg.train.label_smoothing)
    first = metrics(child)[0]
    assert first["step"] == 1 and first["loss"] == pytest.approx(
        loss.item() / (batch.tgt_out != PAD).sum().item(), abs=1e-4
    )
    assert (child / "spm.model").read_bytes() == (parent / "spm.model").read_bytes()
    assert read_card(child)["parent"] == {
        "run": str(parent),
        "checkpoint": "last.pt",
        "sha256": sha256(parent / "last.pt"),
    }
    assert first["lr"] == pytest.approx(1e-3 / cfg.train.warmup_steps)  # its own schedule, from step 1
    training = read_card(child)[
        "training"
    ]  # its compute, and its pipeline's with the parent's (mt.training.compute)
    assert (
        training["pipeline_multiply_adds"]
        == training["multiply_adds"] + read_card(parent)["training"]["multiply_adds"]
    )


@pytest.mark.slow
def test_a_child_resumes_as_itself_and_force_new_starts_from_the_parent_again(child_config, tmp_path):
    straight, child = tmp_path / "straight", tmp_path / "child"
    train(child_config("train.max_steps=4"), straight)
    train(child_config("train.max_steps=2"), child)
    two = weights(child / "last.pt")
    assert train(child_config("train.max_steps=4"), child)["step"] == 4  # resumed, not started again
    assert [r["step"] for r in metrics(child) if "loss" in r] == [1, 2, 3, 4]
    for name, tensor in weights(straight / "last.pt").items():
        assert torch.equal(tensor, weights(child / "last.pt")[name]), name
    assert train(child_config("train.max_steps=2"), child, force_new=True)["step"] == 2
    for name, tensor in two.items():  # from the parent again: the same two updates
        assert torch.equal(tensor, weights(child / "last.pt")[name]), name


@pytest.mark.slow
def test_frozen_parts_keep_the_parents_weights(trained, child_config, tmp_path):
    child = tmp_path / "child"
    train(child_config("train.max_steps=3", "train.freeze=[embeddings, encoder]"), child)
    before, after = weights(trained[0] / "last.pt"), weights(child / "last.pt")
    for name in before:
        frozen = name.startswith(("src_embed", "tgt_embed", "out_proj", "encoder", "enc_norm"))
        assert torch.equal(before[name], after[name]) == frozen, name


def refused(capsys, tmp_path, tiny, *args: str) -> str:
    """`mt train` with `args`: exit 2, one error line (after the log's first line), no run directory."""
    run_dir = tmp_path / "child"
    code, err = run_main(capsys, "train", "configs/toy.yaml", "--run-dir", str(run_dir), *sets(tiny), *args)
    errors = [line for line in err.splitlines() if line.startswith("mt: error: ")]
    assert code == 2 and len(errors) == 1 and err.endswith(errors[0] + "\n"), err
    assert not run_dir.exists()
    return errors[0].removeprefix("mt: error: ")


@pytest.mark.slow
def test_every_mismatch_and_damaged_parent_is_refused_in_one_line(trained, tiny, tmp_path, capsys):
    parent = trained[0]
    init = ("--init-from", str(parent))
    assert refused(capsys, tmp_path, tiny, *init, "--set", "model.d_model=64", "--set", "model.d_ff=32") == (
        f"train.init_from: model.d_model: 32 in {parent}, 64 here; model.d_ff: 64 in {parent}, 32 here: a "
        f"child describes its parent's network and tokenizer (only model dropouts may differ)"
    )
    assert refused(capsys, tmp_path, tiny, *init, "--set", "tokenizer.vocab_size=300").startswith(
        f"train.init_from: tokenizer.vocab_size: 200 in {parent}, 300 here: "
    )
    missing = tmp_path / "nowhere"
    assert refused(capsys, tmp_path, tiny, "--init-from", str(missing)) == (
        f"train.init_from: {missing}: run directory not found"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused(capsys, tmp_path, tiny, "--init-from", str(empty)).startswith(
        f"train.init_from: {empty / 'best.pt'}: no checkpoint; train first"
    )
    copy = tmp_path / "copy"
    shutil.copytree(parent, copy)
    (copy / "spm.model").unlink()
    assert refused(capsys, tmp_path, tiny, "--init-from", str(copy)) == (
        f"train.init_from: {copy / 'spm.model'}: not found, so {copy / 'best.pt'} cannot be used; "
        f"restore it, or start from another run"
    )
    (copy / "best.pt").write_bytes((parent / "best.pt").read_bytes()[:1000])
    assert refused(capsys, tmp_path, tiny, "--init-from", str(copy)) == (
        f"train.init_from: {copy / 'best.pt'}: damaged or not a checkpoint; delete it or train again"
    )


@pytest.mark.slow
def test_a_parent_that_is_the_run_itself_is_refused(run, tiny, capsys):
    before = file_hashes(run)
    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(run),
        *sets(tiny),
        "--init-from",
        str(run),
        "--force-new",
    )
    assert code == 2 and err.endswith(
        f"\nmt: error: train.init_from: {run} is this run's own directory; name another run, or train in "
        f"another --run-dir\n"
    )
    assert file_hashes(run) == before  # nothing archived


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["train.init_from=x", "train.freeze=[encoder, embeding]"],
            "train.freeze: 'embeding' is not one of embeddings, encoder, decoder",
        ),
        (
            ["train.freeze=[encoder]"],
            "train.freeze: frozen parts of a new model stay random; set train.init_from",
        ),
        (
            ["train.init_from=x", "train.freeze=[embeddings, encoder, decoder]"],
            "train.freeze: embeddings, encoder, decoder is the whole model; leave one part to train",
        ),
        (
            ["train.init_from=x", "tokenizer.from_run=x"],
            "tokenizer.from_run: train.init_from already brings its run's tokenizer; "
            "remove tokenizer.from_run",
        ),
    ],
)
def test_freeze_and_lineage_keys_are_checked_at_load_time(overrides, message):
    from mt.plumbing.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config(ROOT / "configs/toy.yaml", overrides)
    assert str(e.value).endswith(f"{' '.join(overrides)}: {message}")


@pytest.mark.slow
def test_tokenizer_from_run_shares_the_vocabulary_of_a_fresh_model(trained, tiny, tmp_path, capsys):
    parent, other = trained[0], tmp_path / "other"
    cfg = load_config(
        ROOT / "configs/toy.yaml",
        tiny + ["train.max_steps=1", f"tokenizer.from_run={parent}", "train.seed=7"],
    )
    train(cfg, other)
    assert (other / "spm.model").read_bytes() == (parent / "spm.model").read_bytes()
    assert read_card(other)["tokenizer_from"] == {"run": str(parent), "sha256": sha256(parent / "spm.model")}
    assert "parent" not in read_card(other)
    assert refused(
        capsys, tmp_path, tiny, "--set", f"tokenizer.from_run={parent}", "--set", "tokenizer.vocab_size=300"
    ) == (
        f"tokenizer.from_run: tokenizer.vocab_size: 200 in {parent}, 300 here: set them as that run has them"
    )
    copy = tmp_path / "copy"
    shutil.copytree(parent, copy)
    (copy / "spm.model").write_bytes(b"not a sentencepiece model")
    assert refused(capsys, tmp_path, tiny, "--set", f"tokenizer.from_run={copy}").startswith(
        f"tokenizer.from_run: {copy / 'spm.model'}: cannot use it ("
    )
