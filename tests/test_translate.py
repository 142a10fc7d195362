"""mt/translate.py and `mt translate`: one output line per input line whatever the input (odd
characters, long lines cut into parts, gzip), input order restored across batches, and the sacreBLEU
wrapper."""

import gzip
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_main

from mt.batching import make_batch
from mt.cli import main
from mt.config import EOS, ModelConfig
from mt.decode import Hypothesis
from mt.decode_config import DecodeConfig
from mt.plumbing.metrics import corpus_scores
from mt.rescoring.score import score_pairs
from mt.translate import SearchRequest, search_lines, split_pieces, translate_lines, translate_nbest

ROOT = Path(__file__).resolve().parents[1]


def test_translate_keeps_one_line_per_input_line(text_model, tokenizer):
    lines = ["Der Hund sieht die Katze.", "", "   ", "Die Frau liest.", "", "Ein Kind lacht."]
    out = translate_lines(SearchRequest(text_model, tokenizer, lines), DecodeConfig(batch_tokens=32))
    assert len(out) == len(lines)
    assert out[1] == out[2] == out[4] == ""
    assert all("\n" not in line for line in out)


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_restores_input_order(any_model, tokenizer, toy, beam):
    lines = toy["test"][0][:20]
    forward = translate_lines(
        SearchRequest(any_model, tokenizer, lines), DecodeConfig(beam=beam, batch_tokens=64)
    )
    backward = translate_lines(
        SearchRequest(any_model, tokenizer, lines[::-1]), DecodeConfig(beam=beam, batch_tokens=64)
    )
    one_batch = translate_lines(
        SearchRequest(any_model, tokenizer, lines), DecodeConfig(beam=beam, batch_tokens=100_000)
    )
    assert forward == backward[::-1] == one_batch


def test_bleu_of_identity_is_100():
    refs = ["The dog bit the man.", "It was not unexpected."]
    result = corpus_scores(refs, refs, tokenize="13a")
    assert result["bleu"] == pytest.approx(100.0) and result["chrf"] == pytest.approx(100.0)
    assert result["sentences"] == 2


def test_bleu_matches_sacrebleu_readme_example():
    refs = [
        ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
        ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."],
    ]
    hyps = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    result = corpus_scores(hyps, *refs, tokenize="13a")
    assert result["bleu"] == pytest.approx(48.530827, abs=1e-6)
    assert result["bleu_signature"].startswith("nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert result["chrf_signature"].startswith("nrefs:2|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")


def test_split_pieces_cuts_before_word_starts():
    starts = {10, 20}  # piece ids that begin a word
    ids = [10, 1, 1, 20, 1, 1, 1, 10, 1, 20, 1]
    parts = split_pieces(ids, 4, starts.__contains__)
    assert [p for part in parts for p in part] == ids and all(len(p) <= 4 for p in parts)
    assert parts == [[10, 1, 1], [20, 1, 1, 1], [10, 1, 20, 1]]
    assert split_pieces([1] * 9, 4, starts.__contains__) == [
        [1] * 4,
        [1] * 4,
        [1],
    ]  # no word start: hard cuts


class PiecesAsNumbers:
    """A tokenizer of numbers: "7 8" is pieces 7 and 8, each starting a word."""

    def encode(self, lines: list[str]) -> list[list[int]]:
        return [[int(word) for word in line.split()] for line in lines]

    def starts_word(self, piece: int) -> bool:
        return True


class EchoEngine:
    """An engine that translates a part as itself, scored -1 (log-probability -2) a piece, and ends it
    (writes eos) where its first piece is odd."""

    cfg = ModelConfig(max_positions=4)  # 3 pieces a part, and eos
    training = False

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def search_groups(self, batches, cfg, scores=True):
        return [
            [[Hypothesis(part, -1.0 * len(part), -2.0 * len(part), part[0] % 2 == 1)] for part in parts]
            for parts, _ in batches
        ]


def test_a_line_in_parts_is_their_translations_joined_and_ended_as_its_last_part():
    """A line longer than the model's positions is translated in parts; its one hypothesis holds the
    parts' pieces and summed scores, and it ends (eos written) where its last part does, whatever the
    earlier parts did."""
    lines = ["1 1 1 2 2", "2 2 2 1 1", "1 1", "1 3 5 7 2 4 6"]
    found = search_lines(SearchRequest(EchoEngine(), PiecesAsNumbers(), lines), DecodeConfig())
    assert [h for hyps in found for h in hyps] == [
        Hypothesis([1, 1, 1, 2, 2], -5.0, -10.0, False),
        Hypothesis([2, 2, 2, 1, 1], -5.0, -10.0, True),
        Hypothesis([1, 1], -2.0, -4.0, True),
        Hypothesis([1, 3, 5, 7, 2, 4, 6], -7.0, -14.0, False),  # parts [1 3 5] [7 2 4] [6]
    ]


LONG_LINE = (
    r"WARNING mt.translate: line 1: \d+ pieces, more than the 64 this model takes; translated in \d+ parts"
)


@pytest.mark.parametrize(
    "data,lines,warnings",
    [
        (b"eins\r\nzwei\r\n", 2, []),  # CRLF
        (b"eins\nzwei", 2, []),  # no final newline
        (b"\n\n   \n\t\n", 4, []),  # empty and blank lines
        (
            b"gut\nkaputt \xc3\x28 \xff\n",
            2,
            [r"WARNING mt: <stdin>: invalid UTF-8 on line 2, replaced with U\+FFFD"],
        ),
        (b"a\x00b\x07c\x1b[0m\x7f\n", 1, []),  # control characters
        ("eins\u2028zwei\x85drei\x0cvier\n".encode(), 1, []),  # not line breaks
        (("der Hund " * 200 + "\nkurz\n").encode(), 2, [LONG_LINE]),  # cut into parts
    ],
)
def test_translate_odd_input_kinds(trained, capsys, monkeypatch, data, lines, warnings):
    """Each kind of odd input gives one output line per input line, and stderr holds exactly the
    warnings listed (each line's time left out): clean input warns nothing."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["translate", "--run", str(trained[0])]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == lines and (out.endswith("\n") or not out)
    said = [line.split(" ", 1)[1] for line in err.splitlines()]  # "00:45:11 WARNING mt: ..."
    assert len(said) == len(warnings) and all(map(re.fullmatch, warnings, said)), err


def test_translate_survives_odd_input(fluent):
    run = fluent  # its translations are words, so an empty line's "" is told apart
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
    assert [i for i, line in enumerate(got[:-1]) if not line] == [2, 3]  # only the empty and blank lines
    err = out.stderr.decode()
    assert "<stdin>: invalid UTF-8 on line 2, replaced with U+FFFD" in err
    assert "line 6: " in err and "more than the 64 this model takes; translated in" in err
    assert "Traceback" not in err


def test_translate_reads_gzip_input(capsys, fluent, tmp_path):
    run = fluent  # translations that differ by line: the same output says the same lines were read
    text = (run / "ref-test.txt").read_bytes()
    (tmp_path / "in.de").write_bytes(text)
    (tmp_path / "in.de.gz").write_bytes(gzip.compress(text))
    assert main(["translate", "--run", str(run), "--input", str(tmp_path / "in.de")]) == 0
    plain = capsys.readouterr().out
    assert main(["translate", "--run", str(run), "--input", str(tmp_path / "in.de.gz")]) == 0
    assert capsys.readouterr().out == plain and plain.count("\n") == text.count(b"\n")
    assert len(set(plain.splitlines())) > 1
    (tmp_path / "bad.gz").write_bytes(gzip.compress(text)[:40])
    code, err = run_main(capsys, "translate", "--run", str(run), "--input", str(tmp_path / "bad.gz"))
    assert code == 2 and err == (
        f"mt: error: {tmp_path}/bad.gz: damaged compressed file (Compressed file ended "
        f"before the end-of-stream marker was reached); download or copy it again\n"
    )


def test_lowercased_bleu_ignores_case_and_cased_bleu_does_not():
    refs = ["The dog bit the man.", "It was not unexpected."]
    result = corpus_scores(["the DOG bit the man.", "it was NOT unexpected."], refs, tokenize="13a")
    assert result["bleu_lc"] == pytest.approx(100.0) and result["bleu"] < 50
    assert "case:lc" in result["bleu_lc_signature"] and "case:mixed" in result["bleu_signature"]


def test_scores_equal_the_n_best_scores_of_the_same_hypotheses(trained_model, tokenizer, toy):
    cfg = DecodeConfig(beam=4, n_best=3, length_penalty=0.8)
    src = tokenizer.encode(toy["test"][0][:40])
    found = search_lines(SearchRequest(trained_model, tokenizer, toy["test"][0][:40]), cfg)
    pairs = [(s, h) for s, hyps in zip(src, found) for h in hyps]
    scored = score_pairs(trained_model, [s for s, _ in pairs], [h.tokens for _, h in pairs], cfg)
    # a hypothesis cut at its length limit (1.5 S + 10, S with eos) has no eos, which scoring adds
    ended = [(h, sc) for (s, h), sc in zip(pairs, scored) if len(h.tokens) < int(1.5 * (len(s) + 1) + 10)]
    assert len(ended) >= 0.9 * len(pairs)
    for h, sc in ended:
        assert sc.logprob == pytest.approx(h.logprob, abs=1e-4) and sc.score == pytest.approx(
            h.score, abs=1e-4
        )
        assert len(sc.token_logprobs) == len(h.tokens) + 1 and sum(sc.token_logprobs) == pytest.approx(
            sc.logprob
        )


def test_a_score_is_the_sum_of_its_pieces_log_probabilities_by_hand(text_model, tokenizer):
    src, tgt = tokenizer.encode(["ein Hund"]), tokenizer.encode(["a dog"])
    (scored,) = score_pairs(text_model, src, tgt, DecodeConfig(length_penalty=1.0))
    batch = make_batch(src, tgt)
    with torch.no_grad():
        logits = text_model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)[0]  # (T, V)
    by_hand = [torch.log_softmax(logits[i], -1)[t].item() for i, t in enumerate(tgt[0] + [EOS])]
    assert scored.token_logprobs == pytest.approx(by_hand, abs=1e-5)
    assert scored.score == pytest.approx(sum(by_hand) / ((5 + len(by_hand)) / 6), abs=1e-5)


def test_mt_score_writes_one_line_per_pair_and_refuses_misaligned_files(trained, tmp_path, capsys):
    src, ref, out = tmp_path / "s.de", tmp_path / "r.en", tmp_path / "scores.tsv"
    src.write_text("ein Hund läuft .\nzwei Männer\n")
    ref.write_text("a dog runs .\ntwo men\n")
    code, _ = run_main(
        capsys, "score", "--run", str(trained[0]), "--src", str(src), "--ref", str(ref), "--output", str(out)
    )
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert code == 0 and len(rows) == 2 and all(float(r[0]) < 0 and len(r[2].split()) >= 2 for r in rows)
    ref.write_text("a dog runs .\n")
    code, err = run_main(capsys, "score", "--run", str(trained[0]), "--src", str(src), "--ref", str(ref))
    assert (
        code == 2
        and err == f"mt: error: {src} has 2 lines but {ref} has 1; the two sides must be line-aligned\n"
    )


@pytest.mark.parametrize("beam", [1, 3])
def test_a_forced_prefix_starts_every_translation_and_an_empty_one_changes_nothing(
    any_model, tokenizer, toy, beam
):
    lines, cfg = toy["test"][0][:24], DecodeConfig(beam=beam, n_best=beam)
    prefixes = ["the dog", "", "a"] * 8
    forced = search_lines(SearchRequest(any_model, tokenizer, lines, prefixes=prefixes), cfg)
    for prefix, hyps in zip(tokenizer.encode(prefixes), forced):
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps)
    plain = search_lines(SearchRequest(any_model, tokenizer, lines), cfg)
    assert search_lines(SearchRequest(any_model, tokenizer, lines, prefixes=[""] * 24), cfg) == plain
    # lines without a prefix, batched beside forced ones: the same hypotheses, scores within float
    # rounding (the batch shrinks at other steps, so its matrix products have other shapes)
    for f, h in ((f, h) for f, h, p in zip(forced, plain, prefixes) if not p):
        assert [x.tokens for x in f] == [x.tokens for x in h]
        assert [x.score for x in f] == pytest.approx([x.score for x in h], abs=1e-4)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_prefix_starts_the_translation_as_written_whatever_the_vocabulary_lacks(
    trained_model, tokenizer, toy, beam
):
    lines = toy["test"][0][:3]
    prefixes = ["Ωmega Zürich", "  the dog ", ""]  # Ω, Z and ü are no toy pieces: they decode as ⁇
    assert "⁇" in tokenizer.decode(tokenizer.encode(prefixes[:1]))[0]
    cfg = DecodeConfig(beam=beam, n_best=beam)
    best = translate_lines(SearchRequest(trained_model, tokenizer, lines, prefixes=prefixes), cfg)
    assert best[0].startswith("Ωmega Zürich") and best[1].startswith("the dog") and "⁇" not in best[0]
    assert best[2] == translate_lines(SearchRequest(trained_model, tokenizer, lines[2:]), cfg)[0]
    for line, prefix in zip(
        translate_nbest(SearchRequest(trained_model, tokenizer, lines, prefixes=prefixes), cfg), prefixes
    ):
        assert all(text.startswith(prefix.strip()) for text, _ in line) and len(line) == beam


def test_a_forced_prefix_keeps_true_log_probabilities(trained_model, tokenizer, toy):
    lines = toy["test"][0][:16]
    (found,) = zip(
        *search_lines(SearchRequest(trained_model, tokenizer, lines, prefixes=["the"] * 16), DecodeConfig())
    )
    scored = score_pairs(trained_model, tokenizer.encode(lines), [h.tokens for h in found], DecodeConfig())
    limits = [int(1.5 * (len(src) + 1) + 10) for src in tokenizer.encode(lines)]
    ended = [(h, s) for h, s, limit in zip(found, scored, limits) if len(h.tokens) < limit]  # with eos
    assert len(ended) >= 12  # a cut hypothesis has no eos to compare: most must end, or this checks nothing
    for h, s in ended:
        assert h.logprob == pytest.approx(s.logprob, abs=1e-4)


def test_a_prefix_file_must_have_a_line_per_input_line(trained, tmp_path, capsys):
    source, prefixes = tmp_path / "in.de", tmp_path / "prefix.en"
    source.write_text("ein Hund\nzwei Männer\n")
    prefixes.write_text("a dog\n")
    code, err = run_main(
        capsys, "translate", "--run", str(trained[0]), "--input", str(source), "--prefix-file", str(prefixes)
    )
    assert code == 2 and err.endswith(
        f"mt: error: {prefixes} has 1 lines but the input has 2; give one prefix per input line (an empty "
        f"line for none)\n"
    )


def test_an_ensemble_decodes_with_the_torch_engine(trained, tmp_path, capsys):
    source = tmp_path / "in.de"
    source.write_text("ein Hund\n")
    run = str(trained[0])
    args = ["translate", "--run", run, "--input", str(source), "--ensemble", run, "--engine", "ctranslate2"]
    code, err = run_main(capsys, *args)
    assert code == 2 and err.endswith(
        "mt: error: --ensemble decodes with the torch engine: add --engine torch\n"
    )
