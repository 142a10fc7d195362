"""mt/translator.py: the Python API opens a run once and gives the search of the run's model (what the
commands write), from any thread; odd arguments get the documented result or one clear exception.

Every test here is fast: the shared tiny run (`trained`, 4 updates) is made once per session, and
test-fast makes it anyway. That run's greedy translations are all "", so where a test compares
translations it decodes with a beam or sampling, whose outputs differ from line to line."""

import dataclasses
import subprocess
import sys
import threading

import pytest
from conftest import ODD, ROOT, run_main

from mt.attention import line_alignments
from mt.plumbing.errors import ConfigError, RunDirError
from mt.run.folder import load_run
from mt.translate import SearchRequest, translate_nbest
from mt.translator import Translator

LINES = ODD + ["Der Hund sieht die Katze .", "Die Katze schläft .", "Ein Mann läuft ."]


def searched(run, lines: list[str], **options) -> list[list[tuple[str, float]]]:
    """The n-best lists of the run's best.pt searched directly (mt.translate on load_run's model), not
    through the Translator: what the API and the commands must give."""
    cfg, tokenizer, model = load_run(run)
    decode = dataclasses.replace(cfg.decode, **options)
    return translate_nbest(SearchRequest(model, tokenizer, lines, max_len=cfg.data.max_len), decode)


def test_import_mt_imports_no_torch_until_the_api_is_asked_for():
    probe = "import sys, mt; print('torch' in sys.modules); mt.Translator; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr


@pytest.mark.parametrize(
    "flags,options",
    [
        ([], {}),
        (["--beam", "3"], {"beam": 3}),
        (["--beam", "3", "--n-best", "2"], {"beam": 3, "n_best": 2}),
        (["--sample", "topk:20", "--seed", "3"], {"sample": "topk:20", "seed": 3}),
    ],
)
def test_the_api_and_mt_translate_give_the_search_of_the_runs_model(
    trained, tmp_path, capsys, flags, options
):
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
    translator = Translator.from_run(run, device="cpu", **options)
    found = translator.nbest(LINES)
    assert found == searched(run, LINES, **options)
    assert [len(hyps) for hyps in found[-3:]] == [options.get("n_best", 1)] * 3  # plain lines: n_best each
    if translator.decode.n_best == 1:
        assert translator.translate(LINES) == [hyps[0][0] for hyps in found]
        written = [hyps[0][0] for hyps in found]
    else:
        written = [f"{i} ||| {text} ||| {score:.4f}" for i, hyps in enumerate(found) for text, score in hyps]
    assert (tmp_path / "out").read_text(encoding="utf-8").splitlines() == written
    aligned = translator.align(LINES, [hyps[0][0] for hyps in found])
    assert (tmp_path / "align").read_text().split("\n")[:-1] == aligned
    _, tokenizer, model = load_run(run)
    assert aligned == line_alignments(model, tokenizer, LINES, [hyps[0][0] for hyps in found])


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
    translator = Translator.from_run(run, device="cpu")
    scored = translator.score(src, ref)
    assert [line.split("\t")[:2] for line in out.read_text().splitlines()] == [
        [f"{s.logprob:.4f}", f"{s.score:.4f}"] for s in scored
    ]
    # by hand: a log-probability per reference piece and eos, their sum, divided by the GNMT penalty
    for s, pieces in zip(scored, translator.tokenizer.encode(ref)):
        assert len(s.token_logprobs) == len(pieces) + 1 and all(lp < 0 for lp in s.token_logprobs)
        assert s.logprob == pytest.approx(sum(s.token_logprobs))
        alpha = translator.decode.length_penalty
        assert s.score == pytest.approx(s.logprob / ((5 + len(pieces) + 1) / 6) ** alpha)


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


def test_a_calls_keywords_change_that_call_only(trained):
    run, lines = trained[0], LINES[-3:]
    translator = Translator.from_run(run, device="cpu")
    assert translator.nbest(lines, beam=3, n_best=2) == searched(run, lines, beam=3, n_best=2)
    assert translator.decode.beam == 1 and translator.nbest(lines) == searched(run, lines)
    assert [len(hyps) for hyps in translator.nbest(lines)] == [1, 1, 1]


ONE = ["Der Hund ."]
# (call, the exception it raises): a str is never read as its characters, an item that is not a str
# is named by its index, and every method that takes lines refuses alike
REFUSED = [
    (
        lambda t: t.translate("Der Hund ."),
        "lines: expected a list of str, got str 'Der Hund .'; pass a list: ['Der Hund .']",
    ),
    (
        lambda t: t.translate(ONE, "the"),
        "prefixes: expected a list of str, got str 'the'; pass a list: ['the']",
    ),
    (
        lambda t: t.nbest(b"Der Hund ."),
        "lines: expected a list of str, got bytes b'Der Hund .'; pass a list: [b'Der Hund .']",
    ),
    (
        lambda t: t.score("Der Hund .", ["the dog ."]),
        "sources: expected a list of str, got str 'Der Hund .'; pass a list: ['Der Hund .']",
    ),
    (
        lambda t: t.score(ONE, "the dog ."),
        "references: expected a list of str, got str 'the dog .'; pass a list: ['the dog .']",
    ),
    (
        lambda t: t.align(ONE, "the dog ."),
        "translations: expected a list of str, got str 'the dog .'; pass a list: ['the dog .']",
    ),
    (
        lambda t: t.attention("Der Hund ."),
        "lines: expected a list of str, got str 'Der Hund .'; pass a list: ['Der Hund .']",
    ),
    (lambda t: t.translate(None), "lines: expected a list of str, got None"),
    (lambda t: t.nbest(3), "lines: expected a list of str, got int 3"),
    (lambda t: t.translate(["Der Hund .", None]), "lines[1]: expected str, got None"),
    (lambda t: t.translate(ONE, prefixes=[3]), "prefixes[0]: expected str, got int 3"),
    (lambda t: t.score(ONE, [b"the dog ."]), "references[0]: expected str, got bytes b'the dog .'"),
    (lambda t: t.align([1.5], ["the dog ."]), "lines[0]: expected str, got float 1.5"),
    (lambda t: t.attention([["Der", "Hund"]]), "lines[0]: expected str, got list ['Der', 'Hund']"),
]


@pytest.mark.parametrize("call,message", REFUSED, ids=[message.split(":")[0] for _, message in REFUSED])
def test_lines_that_are_not_a_list_of_str_are_one_type_error(trained, call, message):
    translator = Translator.from_run(trained[0], device="cpu")
    with pytest.raises(TypeError) as e:
        call(translator)
    assert str(e.value) == message


def test_no_lines_give_no_results_and_any_iterable_of_lines_is_a_list(trained):
    translator = Translator.from_run(trained[0], device="cpu", beam=2)
    assert translator.translate([]) == [] and translator.translate([], split_sentences=True) == []
    assert translator.nbest([]) == [] and translator.nbest([], []) == []
    assert (
        translator.score([], []) == [] and translator.align([], []) == [] and translator.attention([]) == []
    )
    lines = LINES[-3:]
    expected = [hyps[0][0] for hyps in searched(trained[0], lines, beam=2)]
    assert len(set(expected)) == 3  # the three differ, so an order or a count mistake shows
    assert translator.translate(tuple(lines)) == translator.translate(line for line in lines) == expected


# (call, the ConfigError's message, its key): a keyword is checked by decode_config.decoding, the one
# check of the flags, requests and config files, whose "did you mean" names the closest option
KEYWORDS = [
    (lambda t: t.translate(ONE, bem=3), "bem: not a decoding option; did you mean beam?", "bem"),
    (lambda t: t.nbest(ONE, nbest=2), "nbest: not a decoding option; did you mean n_best?", "nbest"),
    (
        lambda t: t.score(ONE, ONE, lenght_penalty=1),
        "lenght_penalty: not a decoding option; did you mean length_penalty?",
        "lenght_penalty",
    ),
    (
        lambda t: t.align(ONE, ONE, split_sentence=True),
        "split_sentence: not a decoding option; did you mean split_sentences?",
        "split_sentence",
    ),
    (
        lambda t: t.attention(ONE, temprature=1.0),
        "temprature: not a decoding option; did you mean temperature?",
        "temprature",
    ),
    (
        lambda t: t.options(xyz=1),
        "xyz: not a decoding option; the options are beam, n_best, length_penalty, max_len_a, max_len_b, "
        "no_repeat_ngram, min_len, batch_tokens, engine, compute_type, sample, temperature, seed, mbr, "
        "mbr_samples, "
        "mbr_temperature, rerank, rerank_weight, split_sentences",
        "xyz",
    ),
    (lambda t: t.translate(ONE, beam="3"), "beam: expected int, got str '3'", "beam"),
    (lambda t: t.nbest(ONE, beam=2.0), "beam: expected int, got float 2.0", "beam"),
    (
        lambda t: t.translate(ONE, split_sentences="yes"),
        "split_sentences: expected bool, got str 'yes'",
        "split_sentences",
    ),
    (
        lambda t: t.score(ONE, ONE, length_penalty="strong"),
        "length_penalty: expected float, got str 'strong'",
        "length_penalty",
    ),
]


@pytest.mark.parametrize(
    "call,message,key", KEYWORDS, ids=[message.split(":")[0] for _, message, _ in KEYWORDS]
)
def test_an_unknown_or_ill_typed_keyword_is_one_config_error_naming_it(trained, call, message, key):
    translator = Translator.from_run(trained[0], device="cpu")
    with pytest.raises(ConfigError) as e:
        call(translator)
    assert isinstance(e.value, ValueError) and (str(e.value), e.value.key) == (message, key)


def test_from_runs_odd_arguments_are_one_clear_error(trained):
    run = trained[0]
    with pytest.raises(ConfigError) as e:
        Translator.from_run(run, device="cpu", bem=3)
    assert str(e.value) == "bem: not a decoding option; did you mean beam?"
    with pytest.raises(ConfigError) as e:
        Translator.from_run(run, device="gpu")
    assert str(e.value) == "device=gpu: not a device; pass auto, cpu or cuda (cuda:N)"
    refused = [
        ({"device": 0}, "device: expected str or torch.device, got int 0"),
        ({"checkpoint": None}, "checkpoint: expected str or Path, got None"),
        (
            {"ensemble": "runs/toy-2"},
            "ensemble: expected a list of str or Path, got str 'runs/toy-2'; pass a list: ['runs/toy-2']",
        ),
        ({"ensemble": [run, 2]}, "ensemble[1]: expected str or Path, got int 2"),
        (
            {"overrides": "data.max_len=20"},
            "overrides: expected a list of str, got str 'data.max_len=20'; pass a list: ['data.max_len=20']",
        ),
    ]
    for arguments, message in refused:
        with pytest.raises(TypeError) as e:
            Translator.from_run(run, **{"device": "cpu", **arguments})
        assert str(e.value) == message
    assert Translator.from_run(run, device="cpu", ensemble=(run,)).ensemble == [run]
