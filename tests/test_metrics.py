"""mt/plumbing/metrics.py: the one list of metrics, each scored with a signature."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
from conftest import metrics, table

from mt.plumbing.errors import ConfigError
from mt.plumbing.metrics import METRICS, corpus_scores
from mt.plumbing.script import bleu_tokenizer, signature_tokenizer
from mt.run.card import read_card

ROOT = Path(__file__).resolve().parents[1]


def test_every_metric_gives_a_score_and_a_signature():
    scores = corpus_scores(["the dog runs .", "a cat"], ["the dog runs .", "a cat sleeps"], tokenize="13a")
    assert set(scores) == {m.key for m in METRICS} | {f"{m.key}_signature" for m in METRICS} | {
        "sentences",
        "length_ratio",
    }
    assert scores["sentences"] == 2 and scores["length_ratio"] == 6 / 7  # 13a tokens: hypotheses / refs


def test_lines_that_repeat_a_word_4_gram_are_counted():
    hypotheses = ["a b c d a b c d", "a b c d e", "", "the the the the the", "a b c a b c"]
    scores = corpus_scores(hypotheses, ["x"] * 5, tokenize="13a")
    assert scores["repeated_4grams"] == 2.0 and scores["repeated_4grams_signature"] == "lines|words|n:4"


def test_repeated_ngrams_in_chinese_are_found_as_in_the_same_text_spaced():
    chinese = ["这只狗看见这只狗看见", "这只狗看见一只猫。", "", "好好好好好"]
    spaced = [" ".join(line) for line in chinese]  # each character a word, written with spaces
    found = corpus_scores(chinese, ["x"] * 4, tokenize="13a")["repeated_4grams"]
    assert found == corpus_scores(spaced, ["x"] * 4, tokenize="13a")["repeated_4grams"] == 2.0


def test_bleu_tokenizer_is_sacrebleus_choice_for_the_target_language():
    assert [bleu_tokenizer("auto", lang) for lang in ("en", "de", "zh", "zh-CN", "ZH_Hans")] == [
        "13a",
        "13a",
        "zh",
        "zh",
        "zh",
    ]
    assert bleu_tokenizer("intl", "zh") == "intl" and bleu_tokenizer("char", "de") == "char"


def test_a_japanese_target_without_mecab_is_scored_by_characters_or_refused(monkeypatch, caplog):
    monkeypatch.setattr(
        "mt.plumbing.script.installed", lambda tokenizer: tokenizer not in ("ja-mecab", "ko-mecab")
    )
    bleu_tokenizer.cache_clear()
    try:
        assert bleu_tokenizer("auto", "ja") == "char"
        assert (
            "scored with sacreBLEU's char tokenizer: ja-mecab is not installed (pip install 'sacrebleu[ja]')"
            in (caplog.text)
        )
        assert bleu_tokenizer("auto", "ko") == "13a"  # Korean is written with spaces
        with pytest.raises(ConfigError) as refused:
            bleu_tokenizer("ko-mecab", "ko")
        assert (
            str(refused.value)
            == "eval.bleu_tokenize: ko-mecab needs its packages: pip install 'sacrebleu[ko]'"
        )
    finally:
        bleu_tokenizer.cache_clear()


def test_chinese_bleu_counts_characters_where_13a_sees_one_word_a_sentence():
    refs = ["这只狗看见一只猫。", "一个男人在桌子下面睡觉。"]
    hyps = ["这只狗看见一只鸟。", "一个女人在桌子下面睡觉。"]  # one word wrong in each
    zh = corpus_scores(hyps, refs, tokenize="zh")
    assert "|tok:zh|" in zh["bleu_signature"] and zh["bleu"] > 50
    assert corpus_scores(hyps, refs, tokenize="13a")["bleu"] < 1  # 13a: no sentence is entirely right
    assert (
        signature_tokenizer(zh["bleu_signature"]) == "zh"
        and signature_tokenizer("nrefs:1|case:mixed") == "13a"
    )
    assert signature_tokenizer("nrefs:1|case:mixed|eff:no|tok:ja-mecab-0.996-IPA|smooth:exp") == "ja-mecab"


def test_a_new_lower_is_better_primary_metric_is_validated_carded_tuned_on_reported_and_plotted(
    tiny, tmp_path
):
    """tests/metric_driver.py adds a throwaway metric to mt.plumbing.metrics's table, lower better, and makes
    it PRIMARY: training validates it and keeps its lowest as best, the card and metrics.jsonl hold it
    (checked by their records), `mt tune` chooses by it, `mt report` stars its lowest and tests it,
    and the curves plot it. Nothing else of mt changes for it."""
    run = tmp_path / "run"
    sets = [
        "train.max_steps=30",
        "train.valid_every=10",
        "train.lr=5e-3",
        "train.tune=true",
        "model.dropout=0.0",
    ]

    def mt(*args: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "metric_driver.py"), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    mt("train", "configs/toy.yaml", "--run-dir", str(run), *(f"--set={s}" for s in tiny + sets))
    validations = [row for row in metrics(run) if "val_words_off" in row]
    assert [row["step"] for row in validations] == [10, 20, 30]
    card = read_card(run)  # the records' checks run on it, words_off's fields among them
    training, tuning = card["training"], card["tuning"]
    assert training["best_metric"] == "words_off"
    scores = [row["val_words_off"] for row in validations]
    assert min(scores) < max(scores)  # so that best.pt's direction shows
    assert training["best_val_words_off"] == min(scores)
    assert training["best_step"] == validations[scores.index(min(scores))]["step"]
    assert tuning["chosen"]["words_off"] == min(tried["words_off"] for tried in tuning["tried"])
    for beam in ("1", "2"):
        mt("evaluate", "--run", str(run), "--device", "cpu", "--beam", beam, "--length-penalty", "1")
    results = read_card(run)["results"]
    assert results["test"]["words_off_signature"] == "nrefs:1|unit:words|version:" + sacrebleu.__version__
    out, curves = tmp_path / "r.md", tmp_path / "curves.json"
    rows = [f"{run}@test", f"{run}@test-beam2"]
    mt("report", *rows, "--out", str(out), CURVES=json.dumps(rows[:1]), CURVES_OUT=str(curves))
    cells = {row["run"].rstrip(" ★"): row for row in table(out.read_text())}
    lowest = min(results[key]["words_off"] for key in ("test", "test-beam2"))
    for key in ("test", "test-beam2"):
        row = cells[f"run@{key}"]
        assert row["words off"] == f"{results[key]['words_off']:.2f}"
        assert row["run"].endswith(" ★") == (results[key]["words_off"] == lowest)
    assert "words off p" in cells["run@test-beam2"]
    steps, scores = json.loads(curves.read_text())[0]
    assert (steps, scores) == ([10, 20, 30], [row["val_words_off"] for row in validations])
