"""Bad input: one line naming the file, line or key, exit code 2, and a run directory left as it was.
Odd translate input: always one output line per input line."""

import hashlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mt.cli import main
from mt.config import load_config
from mt.train import train

ROOT = Path(__file__).resolve().parents[1]


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def run_main(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


def file_hashes(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "train.log"
    }


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """A 4-step run on the small corpus: (run dir, the overrides that made it)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    overrides = tiny + ["train.max_steps=4"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    return run, overrides


@pytest.fixture
def corpus(small_corpus, tmp_path):
    folder = tmp_path / "corpus"
    shutil.copytree(small_corpus, folder)
    return folder


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda d: (d / "train.en").unlink(), "{d}/train.en: file not found"),
        (
            lambda d: ((d / "train.en").unlink(), (d / "train.en").mkdir()),
            "{d}/train.en: cannot read (Is a directory); check the path and its permissions",
        ),
        (lambda d: (d / "train.en").write_text(""), "{d}/train.en: file is empty"),
        (
            lambda d: (d / "train.en").write_text("one\ntwo\n"),
            "{d}/train.de has 400 lines but {d}/train.en has 2; the two sides must be line-aligned",
        ),
        (
            lambda d: (d / "train.de").write_bytes(b"gut\nauch gut\nnicht \xc3\x28 gut\n"),
            "{d}/train.de: line 3 is not valid UTF-8; re-encode the file as UTF-8",
        ),
    ],
)
def test_bad_corpus(capsys, corpus, tmp_path, tiny, damage, message):
    damage(corpus)
    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(tmp_path / "run"),
        *sets(tiny + [f"data.dir={corpus}"]),
    )
    assert code == 2
    assert err.splitlines()[-1] == "mt: error: " + message.format(d=corpus) and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing written, not even train.log


def test_bad_corpus_leaves_an_existing_run_untouched(capsys, small_corpus, tiny, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    run = tmp_path / "run"
    overrides = tiny + [f"data.dir={corpus}", "train.max_steps=2"]
    assert main(["train", "configs/toy.yaml", "--run-dir", str(run), *sets(overrides)]) == 0
    before = file_hashes(run)
    (corpus / "train.en").write_bytes(b"\xff\n")
    overrides[-1] = "train.max_steps=4"  # resume it further: the corpus is read again
    code, err = run_main(capsys, "train", "configs/toy.yaml", "--run-dir", str(run), *sets(overrides))
    assert code == 2 and err.endswith(
        f"mt: error: {corpus}/train.en: line 1 is not valid UTF-8; re-encode the file as UTF-8\n"
    )
    assert file_hashes(run) == before
    code, err = run_main(
        capsys, "train", "configs/toy.yaml", "--run-dir", str(run), "--force-new", *sets(overrides)
    )
    assert code == 2 and "line 1 is not valid UTF-8" in err
    assert file_hashes(run) == before and not list(run.glob("replaced-*"))  # nothing archived either


@pytest.mark.parametrize(
    "text,message",
    [
        ("model: [1, 2\n", "{p}: line 2 is not valid YAML (expected ',' or ']', but got '<stream end>')"),
        ("- model\n- train\n", "{p}: expected a YAML mapping of sections, got list"),
        ("model:\n  layers: three\n", "{p}: model.layers: expected int, got str 'three'"),
        ("model: 3\n", "{p}: model: expected a mapping, got int"),
        ("model:\n  d_model: 30\n", "{p}: model.d_model (30) must be divisible by model.n_heads (4)"),
        ("model:\n  dropout: -0.1\n", "{p}: model.dropout: -0.1 is out of range, must be >= 0.0"),
        ("train:\n  warmup_steps: 0\n", "{p}: train.warmup_steps: 0 is out of range, must be >= 1"),
        ("train:\n  lr: 0\n", "{p}: train.lr: 0.0 is out of range, must be > 0.0"),
        (
            "trian:\n  lr: 1\n",
            "{p}: unknown key 'trian'; did you mean 'train'? valid keys: name, base, data, tokenizer, "
            "model, train, decode",
        ),
        (
            "data:\n  corpus: files\n",
            "{p}: data.dir: data.corpus 'files' needs data.dir, a folder holding "
            "{{train,val,test}}.{{src_lang,tgt_lang}}",
        ),
    ],
)
def test_bad_config(capsys, tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code, err = run_main(capsys, "train", str(path), "--run-dir", str(tmp_path / "run"))
    assert code == 2
    assert err == "mt: error: " + message.format(p=path) + "\n"
    assert not (tmp_path / "run").exists()


def test_unreadable_config(capsys, tmp_path):
    (tmp_path / "c.yaml").write_bytes(b"name: \xff\n")
    code, err = run_main(capsys, "train", str(tmp_path / "c.yaml"))
    assert code == 2
    assert err.startswith(f"mt: error: {tmp_path / 'c.yaml'}: cannot read config (") and err.count("\n") == 1


def test_debug_flag_shows_the_traceback(tmp_path):
    (tmp_path / "c.yaml").write_text("model:\n  d_model: 30\n")
    with pytest.raises(Exception, match="must be divisible"):
        main(["--debug", "train", str(tmp_path / "c.yaml")])


def test_resume_with_a_different_config_is_refused(capsys, trained, tmp_path):
    src, overrides = trained
    run = tmp_path / "run"
    shutil.copytree(src, run)
    before = file_hashes(run)
    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(run),
        *sets(
            overrides
            + ["train.lr=0.005", "model.d_ff=128", "train.max_steps=8", "train.valid_beam=4", "decode.beam=4"]
        ),
    )
    assert code == 2  # decode.* may change (translate's defaults), valid_beam may not (what best.pt means)
    assert err.splitlines()[-1] == (
        f"mt: error: {run} holds a run with a different config (model.d_ff: 64 -> 128, "
        f"train.lr: 0.002 -> 0.005, train.valid_beam: 1 -> 4); resume with the same config, use another "
        f"--run-dir, or --force-new to start "
        f"over"
    )
    assert file_hashes(run) == before

    code, err = run_main(
        capsys,
        "train",
        "configs/toy.yaml",
        "--run-dir",
        str(run),
        "--force-new",
        *sets(overrides + ["model.d_ff=128"]),
    )
    assert code == 0, err
    archived = [p for p in run.iterdir() if p.name.startswith("replaced-")]
    assert len(archived) == 1 and file_hashes(archived[0]) == {
        k: v for k, v in before.items() if k in {p.name for p in archived[0].iterdir()}
    }
    assert torch.load(run / "last.pt", weights_only=True)["config"]["model"]["d_ff"] == 128


def test_checkpoint_from_an_incompatible_config(capsys, trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    ckpt = torch.load(run / "best.pt", weights_only=True)
    ckpt["config"]["model"]["layers"] = 2
    torch.save(ckpt, run / "best.pt")
    code, err = run_main(capsys, "translate", "--run", str(run))
    assert code == 2
    assert err == (
        f"mt: error: {run}/best.pt: weights do not fit the model its config describes (36 missing, e.g. "
        f"encoder.1.self_attn.q_proj.weight); the checkpoint comes from an incompatible config\n"
    )


def test_not_a_checkpoint(capsys, tmp_path):
    (tmp_path / "best.pt").write_bytes(b"this is not a checkpoint")
    code, err = run_main(capsys, "translate", "--run", str(tmp_path))
    assert code == 2
    assert err == f"mt: error: {tmp_path}/best.pt: damaged or not a checkpoint; delete it or train again\n"


@pytest.mark.parametrize(
    "data,lines,warning",
    [
        (b"eins\r\nzwei\r\n", 2, ""),  # CRLF
        (b"eins\nzwei", 2, ""),  # no final newline
        (b"\n\n   \n\t\n", 4, ""),  # empty and blank lines
        (b"gut\nkaputt \xc3\x28 \xff\n", 2, "<stdin>: invalid UTF-8 on line 2, replaced with U+FFFD"),
        (b"a\x00b\x07c\x1b[0m\x7f\n", 1, ""),  # control characters
        ("eins\u2028zwei\x85drei\x0cvier\n".encode(), 1, ""),  # not line breaks
        (("der Hund " * 200 + "\nkurz\n").encode(), 2, "more than the 64 this model takes; translated in"),
    ],
)
def test_translate_odd_input_kinds(trained, capsys, monkeypatch, data, lines, warning):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["translate", "--run", str(trained[0])]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == lines and (out.endswith("\n") or not out)
    assert warning in err and "Traceback" not in err


def test_translate_survives_odd_input(trained):
    run, _ = trained
    long_line = "der kleine Hund sieht die große Katze . " * 40  # ~400 pieces, max_len is 64
    lines = [
        b"Ein Hund .\r",
        b"ein \xff\xfe kaputter Satz",
        b"",
        b"   \t ",
        b"Steuer\x00zeichen \x1b[31m rot \x07",
        long_line.encode(),
        "Zeile\u2028mit Trenner\x85 und \x0c Seitenvorschub".encode(),
        b"ohne Zeilenende",
    ]
    stdin = b"\n".join(lines)  # CRLF on the first line, no final newline
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "mt", "translate", "--run", str(run)],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr.decode()
    got = out.stdout.decode("utf-8").split("\n")
    assert got[-1] == "" and len(got) - 1 == len(lines)  # exactly one output line per input line
    assert got[2] == "" and got[3] == ""  # empty and blank lines stay empty
    err = out.stderr.decode()
    assert "<stdin>: invalid UTF-8 on line 2, replaced with U+FFFD" in err
    assert "line 6: " in err and "more than the 64 this model takes; translated in" in err
    assert "Traceback" not in err


def test_every_kind_of_user_error_is_exit_2_and_anything_else_a_bug():
    from mt.cli import _exit_code
    from mt.errors import ConfigError, DataError, RunDirError, ServeError, UserError

    for kind in (ConfigError, DataError, RunDirError, ServeError):
        assert issubclass(kind, UserError) and _exit_code(kind("x")) == 2
    assert _exit_code(RuntimeError("x")) is None and _exit_code(KeyError("x")) is None
