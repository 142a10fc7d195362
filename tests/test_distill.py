"""mt/distill.py: a teacher's translations of its training sources, made once, line-aligned, resumable
after a kill, checked on reuse; the student trained on them records its teacher.

The fast tests distill with `small_teacher`, the shared tiny run on a corpus of 30 pairs; the slow ones
with `teacher_run`, trained long enough that its translations say something."""

import dataclasses
import json
import re

import pytest
import torch
from conftest import ROOT, run_main, sets

from mt import distill as distill_module
from mt.config import load_config
from mt.data import load_split
from mt.distill import distill
from mt.plumbing.errors import DataError
from mt.plumbing.files import file_sha256
from mt.run.folder import load_run
from mt.training.compute import search_multiply_adds
from mt.training.train import train
from mt.translate import SearchRequest, translate_lines
from mt.translator import Translator


@pytest.fixture
def small_teacher(trained, toy, tmp_path) -> Translator:
    """The shared tiny run (4 updates) opened as the teacher of a 30-pair corpus (5 val and test pairs),
    with beam 2: its greedy translations are all "", its beam's differ from line to line."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for split, n in (("train", 30), ("val", 5), ("test", 5)):
        for lang, lines in zip(("de", "en"), toy[split]):
            (folder / f"{split}.{lang}").write_text(
                "".join(line + "\n" for line in lines[:n]), encoding="utf-8"
            )
    return Translator.from_run(trained[0], device="cpu", beam=2, overrides=[f"data.dir={folder}"])


def test_a_small_teachers_corpus_is_its_models_search_line_by_line_and_found_again(small_teacher, tmp_path):
    folder = distill(small_teacher, tmp_path / "out")
    assert re.fullmatch(r"run-train-beam2-[0-9a-f]{16}", folder.name)  # the run, the settings, their key
    sources, _ = load_split(small_teacher.config.data, "train")
    config, tokenizer, model = load_run(small_teacher.run)  # the model searched directly, not the API
    decode = dataclasses.replace(config.decode, beam=2)
    expected = translate_lines(SearchRequest(model, tokenizer, sources, max_len=config.data.max_len), decode)
    assert len(sources) == 30 and len(set(expected)) > 10
    assert (folder / "train.de").read_text().splitlines() == sources
    assert (folder / "train.en").read_text().splitlines() == expected
    for split in ("val", "test"):
        held_out = load_split(small_teacher.config.data, split)[1]
        assert (folder / f"{split}.en").read_text().splitlines() == held_out and len(held_out) == 5
    record = json.loads((folder / "teacher.json").read_text())
    assert record["sha256"] == [file_sha256(small_teacher.run / "best.pt")] and record["decode"]["beam"] == 2
    lengths = [torch.tensor([len(ids) for ids in tokenizer.encode(x)]) for x in (sources, expected)]
    assert record["translate_multiply_adds"] == search_multiply_adds(
        model.cfg, model.output_size, *lengths, 2
    )
    teacher_card = json.loads((small_teacher.run / "card.json").read_text())["training"]
    assert record["pipeline_multiply_adds"] == teacher_card["multiply_adds"] > 0
    assert distill(small_teacher, tmp_path / "out") == folder and not list(folder.glob("*.partial"))


@pytest.fixture(scope="module")
def teacher_run(tiny, tmp_path_factory):
    """A tiny run trained long enough to say something (90 updates, lr 3e-3): (run dir, overrides)."""
    run = tmp_path_factory.mktemp("teacher") / "run"
    overrides = [
        *tiny,
        "train.max_steps=90",
        "train.lr=3e-3",
        "train.warmup_steps=20",
        "train.valid_every=90",
    ]
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    return run, overrides


@pytest.mark.slow
def test_the_distilled_corpus_is_the_teachers_translations_line_by_line(teacher_run, tmp_path):
    teacher = Translator.from_run(teacher_run[0], device="cpu", beam=2)
    folder = distill(teacher, tmp_path)
    sources, _ = load_split(teacher.config.data, "train")
    assert (folder / "train.de").read_text().splitlines() == sources
    translations = teacher.translate(sources)
    assert (folder / "train.en").read_text().splitlines() == translations and sum(
        map(bool, translations)
    ) > 300
    for split in ("val", "test"):
        assert (folder / f"{split}.en").read_text().splitlines() == load_split(teacher.config.data, split)[1]
    record = json.loads((folder / "teacher.json").read_text())
    assert record["sha256"] == [file_sha256(teacher_run[0] / "best.pt")] and record["decode"]["beam"] == 2
    assert re.fullmatch(r"run-train-beam2-[0-9a-f]{16}", folder.name)
    assert distill(teacher, tmp_path) == folder  # found again, not made again
    other = distill(teacher, tmp_path / "elsewhere")  # made again: the same bytes
    assert (other / "train.en").read_bytes() == (folder / "train.en").read_bytes()
    assert distill(Translator.from_run(teacher_run[0], device="cpu", beam=1), tmp_path) != folder


@pytest.mark.slow
def test_with_references_the_original_pairs_follow_the_teachers(teacher_run, tmp_path, capsys):
    teacher = Translator.from_run(teacher_run[0], device="cpu")
    plain = distill(teacher, tmp_path)
    args = ["distill", "--teacher", str(teacher_run[0]), "--out", str(tmp_path), "--device", "cpu"]
    code, err = run_main(capsys, *args, "--with-references")
    (folder,) = [p for p in tmp_path.iterdir() if p != plain]
    sources, targets = load_split(teacher.config.data, "train")
    assert code == 0 and folder.name.startswith("run-train-") and "-refs-" in folder.name
    last = err.splitlines()[-1]  # after the teacher's warnings on over-long lines
    assert last.startswith(f"{folder}: {2 * len(sources)} training pairs, translated in ")
    assert (folder / "train.de").read_text().splitlines() == sources + sources
    teachers = (plain / "train.en").read_text().splitlines()
    assert (folder / "train.en").read_text().splitlines() == teachers + targets
    assert json.loads((folder / "teacher.json").read_text())["references"] is True
    assert distill(teacher, tmp_path, references=True) == folder  # found again, checked
    assert not list(folder.glob("*.partial"))


def test_a_killed_distillation_resumes_to_the_same_file(small_teacher, tmp_path, monkeypatch):
    teacher = small_teacher
    whole = distill(teacher, tmp_path / "whole")
    monkeypatch.setattr(distill_module, "LINES_FLUSHED_AT_ONCE", 12)
    calls, translate = [], teacher.translate

    def killed(lines, *args, **kwargs):
        calls.append(len(lines))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return translate(lines, *args, **kwargs)

    monkeypatch.setattr(teacher, "translate", killed)
    with pytest.raises(KeyboardInterrupt):
        distill(teacher, tmp_path / "killed")
    (partial,) = (tmp_path / "killed").glob("*/train.en.partial")
    assert len(partial.read_text().splitlines()) == 12
    with open(partial, "a") as f:
        f.write("half a li")  # the kill cut a line: it is dropped
    resumed = distill(teacher, tmp_path / "killed")
    assert calls[2:] == [12, 6]  # the 18 lines it lacked
    assert (resumed / "train.en").read_bytes() == (whole / "train.en").read_bytes()
    assert json.loads((resumed / "teacher.json").read_text())["resumed_at"] == 12


def test_a_damaged_distilled_corpus_is_refused_in_one_line(small_teacher, tmp_path):
    teacher = small_teacher
    folder = distill(teacher, tmp_path)
    (folder / "train.en").write_text("damaged\n")
    with pytest.raises(DataError) as e:
        distill(teacher, tmp_path)
    assert str(e.value) == (
        f"{folder}: damaged distilled corpus (train.en not as teacher.json recorded); delete the folder "
        f"and run mt distill again"
    )


@pytest.mark.slow
def test_a_student_records_its_teacher(teacher_run, tmp_path):
    folder = distill(Translator.from_run(teacher_run[0], device="cpu"), tmp_path, references=True)
    overrides = [*teacher_run[1], f"data.dir={folder}", "model.encoder_layers=2", "model.decoder_layers=1"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), tmp_path / "student")
    teacher = json.loads((tmp_path / "student" / "card.json").read_text())["teacher"]
    assert teacher["run"] == str(teacher_run[0]) and teacher["sha256"] == [
        file_sha256(teacher_run[0] / "best.pt")
    ]
    assert teacher["translate_s"] >= 0 and teacher["references"] is True
    training = json.loads((tmp_path / "student" / "card.json").read_text())["training"]
    assert training["pipeline_multiply_adds"] == pytest.approx(
        training["multiply_adds"] + teacher["pipeline_multiply_adds"] + teacher["translate_multiply_adds"]
    )
    assert teacher["translate_multiply_adds"] > 0 and teacher["pipeline_multiply_adds"] > 0


@pytest.mark.slow
def test_mt_distill_refuses_a_teacher_ensemble_with_another_tokenizer(teacher_run, tmp_path, capsys):
    other = tmp_path / "other"
    overrides = [*teacher_run[1], "tokenizer.vocab_size=150"]
    assert (
        run_main(
            capsys,
            "train",
            "configs/toy.yaml",
            "--run-dir",
            str(other),
            *sets(overrides),
        )[0]
        == 0
    )
    args = ["distill", "--teacher", str(teacher_run[0]), "--out", str(tmp_path), "--device", "cpu"]
    code, err = run_main(capsys, *args, "--ensemble", str(other))
    assert code == 2 and err == (
        f"mt: error: --ensemble {other}: its spm.model is not {teacher_run[0]}'s; the runs of an ensemble "
        f"share one tokenizer (train them with tokenizer.from_run: {teacher_run[0]})\n"
    )
    assert not list(tmp_path.glob("run-*"))  # refused before anything is written


@pytest.mark.slow
def test_self_distillation_counts_the_teachers_training_once(teacher_run, tmp_path):
    """A run that goes on from its teacher on its teacher's translations (train.init_from the teacher):
    its pipeline is its own training, the teacher's and the translating, the teacher's counted once."""
    folder = distill(Translator.from_run(teacher_run[0], device="cpu"), tmp_path, references=True)
    overrides = [
        *teacher_run[1],
        f"data.dir={folder}",
        f"train.init_from={teacher_run[0]}",
        "train.max_steps=4",
    ]
    train(load_config(ROOT / "configs/toy.yaml", overrides), tmp_path / "next")
    card = json.loads((tmp_path / "next" / "card.json").read_text())
    teacher = json.loads((teacher_run[0] / "card.json").read_text())["training"]
    training = card["training"]
    assert training["pipeline_multiply_adds"] == pytest.approx(
        training["multiply_adds"] + teacher["multiply_adds"] + card["teacher"]["translate_multiply_adds"]
    )
