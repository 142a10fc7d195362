"""mt/translator.py: the Python API opens a run once and gives what the commands give, from any thread."""

import subprocess
import sys
import threading

import pytest
from conftest import ODD, ROOT, run_main

from mt.errors import ConfigError, RunDirError
from mt.translator import Translator

pytestmark = pytest.mark.slow  # the shared tiny run is trained once per session

LINES = ODD + ["Der Hund sieht die Katze .", "Die Katze schläft .", "Ein Mann läuft ."]


def test_import_mt_imports_no_torch_until_the_api_is_asked_for():
    probe = "import sys, mt; print('torch' in sys.modules); mt.Translator; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr


@pytest.mark.parametrize("flags", [[], ["--beam", "3"], ["--beam", "3", "--n-best", "2"]])
def test_translate_gives_what_mt_translate_writes(trained, tmp_path, capsys, flags):
    run = trained[0]
    (tmp_path / "in.de").write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    args = [
        "translate",
        "--run",
        str(run),
        "--input",
        str(tmp_path / "in.de"),
        "--output",
        str(tmp_path / "out"),
    ]
    assert run_main(capsys, *args, "--alignments", str(tmp_path / "align"), *flags)[0] == 0
    options = {flags[i][2:].replace("-", "_"): int(flags[i + 1]) for i in range(0, len(flags), 2)}
    translator = Translator.from_run(run, device="cpu", **options)
    found = translator.nbest(LINES)
    if translator.decode.n_best == 1:
        assert translator.translate(LINES) == [hyps[0][0] for hyps in found]
        written = [hyps[0][0] for hyps in found]
    else:
        written = [f"{i} ||| {text} ||| {score:.4f}" for i, hyps in enumerate(found) for text, score in hyps]
    assert (tmp_path / "out").read_text(encoding="utf-8").splitlines() == written
    aligned = translator.align(LINES, [hyps[0][0] for hyps in found])
    assert (tmp_path / "align").read_text().split("\n")[:-1] == aligned


def test_score_gives_what_mt_score_prints(trained, tmp_path, capsys):
    run, src, ref = trained[0], LINES[-3:], ["the dog sees the cat .", "the cat sleeps .", "a man runs ."]
    for name, lines in (("src", src), ("ref", ref)):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "scores"
    assert (
        run_main(
            capsys,
            "score",
            "--run",
            str(run),
            "--src",
            str(tmp_path / "src"),
            "--ref",
            str(tmp_path / "ref"),
            "--output",
            str(out),
        )[0]
        == 0
    )
    scored = Translator.from_run(run, device="cpu").score(src, ref)
    assert [line.split("\t")[:2] for line in out.read_text().splitlines()] == [
        [f"{s.logprob:.4f}", f"{s.score:.4f}"] for s in scored
    ]


def test_threads_sharing_a_translator_get_what_one_thread_gets(trained):
    translator = Translator.from_run(trained[0], device="cpu", beam=2)
    groups = [LINES[i::4] for i in range(4)]
    alone = [translator.translate(group) for group in groups]
    got: dict[int, list] = {}

    def work(i: int) -> None:
        got[i] = [translator.translate(groups[i]) for _ in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert got == {i: [alone[i]] * 3 for i in range(4)}


def test_options_are_checked_and_named_as_keywords(trained):
    run = trained[0]
    with pytest.raises(ConfigError) as e:
        Translator.from_run(run, device="cpu", n_best=3)
    assert str(e.value) == (
        "n_best=3 is more than the run's beam (1): beam search keeps only that many hypotheses; "
        "pass beam=3 or more"
    )
    translator = Translator.from_run(run, device="cpu")
    with pytest.raises(ConfigError) as e:
        translator.translate(["Der Hund ."], engine="ctranslate2")
    assert str(e.value) == (
        "engine=ctranslate2: the engine is chosen when the run is opened; open it again and pass "
        "engine=ctranslate2"
    )
    with pytest.raises(ConfigError) as e:
        translator.translate(["Der Hund ."], beem=2)
    assert str(e.value) == "beem: not a decoding option; did you mean beam?"
    assert translator.translate(["Der Hund ."], beam=2) == translator.translate(["Der Hund ."], beam=2)
    with pytest.raises(ConfigError) as e:
        translator.translate(["Der Hund .", "Die Katze ."], prefixes=["the"])
    assert str(e.value) == 'prefixes: 1 given for 2 lines; give one per line ("" for none)'
    with pytest.raises(ConfigError) as e:
        translator.score(["Der Hund ."], [])
    assert str(e.value) == "references: 0 given for 1 lines; give one per line"
    with pytest.raises(RunDirError) as e:
        Translator.from_run(run / "nope")
    assert str(e.value) == f"{run / 'nope'}: run directory not found"


def test_the_torch_engine_opens_a_run_configured_for_ctranslate2_int8(trained):
    """mt score, export and attention read the torch model whatever the run's decode section says."""
    config_int8 = ["decode.engine=ctranslate2", "decode.compute_type=int8"]
    translator = Translator.from_run(trained[0], engine="torch", device="cpu", overrides=config_int8)
    assert (translator.decode.engine, translator.decode.compute_type) == ("torch", "default")
    assert translator.config.decode.compute_type == "int8"  # the run's own, as trained
