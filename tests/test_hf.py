"""mt/hf.py: `mt export --format hf`. A toy run of each norm (pre: Pegasus, post: Marian) and output
layer (all, target), exported and reloaded from disk by Transformers alone: its tokenizer gives mt's
ids, its greedy `generate` gives `mt translate --beam 1`'s lines, its teacher-forced log-probabilities
`mt score`'s, and its beam at length penalty 0 (where mt's and Transformers' normalisations agree)
mt's beam. Refusals are one line."""

import json
import os

import pytest
import torch
from conftest import ROOT

from mt.cli import main
from mt.config import load_config
from mt.hf import MODEL_FIELDS, permuted
from mt.model import sinusoidal_positions
from mt.training.train import train
from mt.translator import Translator

transformers = pytest.importorskip("transformers")
LINES = ["Der Hund sieht die Katze .", "Ein Mann läuft im Park .", "Zwei Frauen essen .", ""]


@pytest.fixture(
    scope="module",
    params=[("pre", "all"), ("pre", "target"), ("post", "all"), ("post", "target")],
    ids=["pre-all", "pre-target", "post-all", "post-target"],
)
def exported(request, tiny, tmp_path_factory):
    """(run, export folder) of a 150-update toy run of one norm and output layer."""
    norm, pieces = request.param
    run = tmp_path_factory.mktemp(f"hf-{norm}-{pieces}") / "run"
    overrides = tiny + [
        "train.max_steps=30",
        "train.lr=5e-3",
        f"model.norm={norm}",
        f"model.output_pieces={pieces}",
    ]
    train(load_config(ROOT / "configs/toy.yaml", overrides + ["model.layers=2"]), run)
    assert main(["export", "--run", str(run), "--format", "hf"]) == 0
    return run, run / "hf"


def reloaded(folder):
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    return model, transformers.AutoTokenizer.from_pretrained(folder)


def test_mts_sinusoid_permuted_is_transformers_halves():
    table = sinusoidal_positions(16, 8)
    assert torch.equal(table[:, permuted(8)][:, :4], table[:, 0::2])  # sines first
    assert torch.equal(table[:, permuted(8)][:, 4:], table[:, 1::2])  # then cosines


def test_greedy_scores_and_beam_through_transformers_equal_mts(exported):
    run, folder = exported
    model, tokenizer = reloaded(folder)
    mine = Translator.from_run(run, device="cpu")
    assert [tokenizer(line)["input_ids"] for line in LINES] == [
        ids + [3] for ids in mine.tokenizer.encode(LINES)
    ]
    decode = mine.config.decode

    def generated(line: str, **options) -> str:  # one line, at mt's own length limit a * S + b for it
        batch = tokenizer([line], return_tensors="pt")
        limit = int(decode.max_len_a * batch["input_ids"].size(1) + decode.max_len_b)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=limit, do_sample=False, **options)
        return tokenizer.decode(out[0], skip_special_tokens=True)

    assert [generated(line, num_beams=1) for line in LINES[:3]] == mine.translate(LINES[:3], beam=1)
    beam = [generated(line, num_beams=3, length_penalty=0.0, early_stopping=True) for line in LINES[:3]]
    assert beam == mine.translate(LINES[:3], beam=3, length_penalty=0.0)
    references = mine.translate(LINES[:3], beam=1)
    for line, reference, scored in zip(LINES, references, mine.score(LINES[:3], references)):
        target = mine.tokenizer.encode_target([reference])[0]
        with torch.no_grad():
            logits = model(
                input_ids=torch.tensor([mine.tokenizer.encode([line])[0] + [3]]),
                decoder_input_ids=torch.tensor([[2] + target]),
            ).logits[0]
        theirs = torch.log_softmax(logits.float(), -1)[range(len(target) + 1), target + [3]]
        assert theirs.tolist() == pytest.approx(scored.token_logprobs, abs=1e-4)


def test_the_export_holds_weights_config_generation_tokenizer_and_card(exported):
    run, folder = exported
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "vocab.json", "README.md"} <= names
    umask = os.umask(0)
    os.umask(umask)
    assert (folder / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask  # not safetensors' 0600
    card = json.loads((run / "card.json").read_text())
    assert json.loads((folder / "generation_config.json").read_text())["num_beams"] == card.get(
        "tuning", {}
    ).get("chosen", {}).get("beam", 1)
    assert "## Scores" in (folder / "README.md").read_text() and not (folder.parent / "hf.part").exists()


def test_refusals_are_one_line(exported, capsys, tmp_path):
    run, folder = exported
    assert main(["export", "--run", str(run), "--format", "hf"]) == 2
    assert (
        capsys.readouterr().err == f"mt: error: {folder}: already exists; remove it or give another --out\n"
    )
    assert (
        main(
            [
                "export",
                "--run",
                str(run),
                "--format",
                "hf",
                "--quantization",
                "int8",
                "--out",
                str(tmp_path / "q"),
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith("mt: error: --quantization: Transformers' export is float32")
    )


def test_every_model_field_is_in_the_table():
    from dataclasses import fields

    from mt.config import ModelConfig

    assert {f.name for f in fields(ModelConfig)} == set(MODEL_FIELDS)


def test_an_option_transformers_cannot_hold_is_refused(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    train(
        load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=2", "model.tie_embeddings=false"]),
        run,
    )
    assert main(["export", "--run", str(run), "--format", "hf"]) == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith(
            "mt: error: model.tie_embeddings: False cannot be exported with --format hf (Pegasus and Marian"
        )
    )
    assert not (run / "hf").exists()
