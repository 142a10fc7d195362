"""mt/sentences.py and decode.split_sentences: several sentences on a line are translated one by one and
joined, one output line per input line, through every door (API, mt translate, mt serve). All fast:
the shared tiny run (`trained`) is made once per session."""

import sys

import pytest
from conftest import run_main

from mt.decode_config import DecodeConfig, decoding
from mt.plumbing.errors import ConfigError
from mt.plumbing.spelling import COMMAND_LINE
from mt.run.names import evaluation_name
from mt.sentences import join_lines, join_texts, sentences_of, splitter
from mt.translator import Translator


def test_lines_split_into_sentences_and_join_back_one_per_line():
    split = splitter()
    lines = ["Ein Mann läuft.  Zwei Hunde spielen im Schnee! ", "", "Keine Satzgrenze hier", "Wer? Ich."]
    sentences, counts = sentences_of(lines, "de", split)
    assert sentences == [
        "Ein Mann läuft.",
        "Zwei Hunde spielen im Schnee!",
        "",
        "Keine Satzgrenze hier",
        "Wer?",
        "Ich.",
    ]
    assert counts == [2, 1, 1, 2]
    assert join_lines(sentences, counts) == [
        "Ein Mann läuft. Zwei Hunde spielen im Schnee!",
        "",
        "Keine Satzgrenze hier",
        "Wer? Ich.",
    ]
    assert join_lines([[1], [2], [3], [4], [5], [6]], counts, len) == [2, 1, 1, 2]
    assert join_lines(["A.", "", "", "", "B.", ""], counts) == ["A.", "", "", "B."]  # no stray spaces
    assert join_texts(["", ""]) == "" and join_texts(["A.", "", "B."]) == "A. B."


def test_chinese_lines_split_at_their_full_stops_and_join_without_spaces():
    lines = ["一只狗在跑。两只猫在睡觉！你呢？", "没有句号"]
    sentences, counts = sentences_of(lines, "zh", splitter())
    assert sentences == ["一只狗在跑。", "两只猫在睡觉！", "你呢？", "没有句号"] and counts == [3, 1]
    assert join_lines(sentences, counts) == lines
    assert join_texts(["It runs.", "Then?", "一只狗。", "", "它跑了。"]) == "It runs. Then?一只狗。它跑了。"


def test_english_abbreviations_and_german_ordinals_do_not_end_a_sentence():
    split = splitter()
    assert sentences_of(["Mr. Smith arrived at 3 p.m. on Monday. He left."], "en", split)[0] == [
        "Mr. Smith arrived at 3 p.m. on Monday.",
        "He left.",
    ]
    german = ["Am 1. Januar kam Dr. Müller, z. B. mit dem Zug. Dann ging er."]
    assert sentences_of(german, "de", split)[0] == [
        "Am 1. Januar kam Dr. Müller, z. B. mit dem Zug.",
        "Dann ging er.",
    ]


def test_without_the_splitter_installed_the_option_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencex", None)  # import fails as if not installed
    with pytest.raises(ConfigError) as e:
        splitter("--split-sentences")
    assert (
        str(e.value)
        == "--split-sentences needs the sentencex package: pip install 'mt[split]' (or sentencex)"
    )


def test_split_sentences_gives_no_n_best_lists_and_names_its_evaluations():
    with pytest.raises(ConfigError) as e:
        decoding(DecodeConfig(beam=4), {"split_sentences": True, "n_best": 3}, COMMAND_LINE)
    assert str(e.value) == (
        "--n-best 3: --split-sentences joins the best translation of each sentence, so it gives no n-best "
        "lists; add --n-best 1, or leave --split-sentences out"
    )
    assert evaluation_name("test", DecodeConfig(beam=5, split_sentences=True)) == "test-beam5-split"


TWO = ["Der Hund sieht die Katze. Die Katze schläft.", "", "Ein Mann läuft."]


def test_a_split_line_is_the_translations_of_its_sentences_joined(fluent):
    translator = Translator.from_run(fluent, device="cpu", beam=2)
    alone = translator.translate(["Der Hund sieht die Katze.", "Die Katze schläft.", "Ein Mann läuft."])
    assert all(alone)  # words: what is joined is seen
    assert translator.translate(TWO, split_sentences=True) == [f"{alone[0]} {alone[1]}", "", alone[2]]
    found = translator.nbest(TWO, split_sentences=True)
    scores = [hyps[0][1] for hyps in translator.nbest(["Der Hund sieht die Katze.", "Die Katze schläft."])]
    assert found[0] == [(f"{alone[0]} {alone[1]}", pytest.approx(sum(scores)))]
    prefixed = translator.translate(TWO, ["the", "", ""], split_sentences=True)[0]  # the first sentence's
    assert prefixed.startswith("the") and prefixed.endswith(" " + alone[1])
    with pytest.raises(ConfigError) as e:
        translator.align(TWO, [prefixed, "", alone[2]], split_sentences=True)
    assert str(e.value) == (
        "alignments: split_sentences joins the translations of a line's sentences, which are aligned one "
        "by one; ask for alignments without split_sentences"
    )


def test_mt_translate_split_sentences_keeps_one_line_per_line(fluent, tmp_path, capsys):
    run = str(fluent)
    (tmp_path / "in").write_text("".join(line + "\n" for line in TWO), encoding="utf-8")
    args = ["translate", "--run", run, "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    assert run_main(capsys, *args, "--split-sentences")[0] == 0
    alone = Translator.from_run(run, device="cpu").translate(
        ["Der Hund sieht die Katze.", "Die Katze schläft.", "Ein Mann läuft."]
    )
    assert all(alone)  # words: what is joined is seen
    assert (tmp_path / "out").read_text().splitlines() == [f"{alone[0]} {alone[1]}", "", alone[2]]
    code, err = run_main(capsys, *args, "--split-sentences", "--alignments", str(tmp_path / "a"))
    assert code == 2 and err.strip().splitlines()[-1] == (
        "mt: error: alignments: --split-sentences joins the translations of a line's sentences, "
        "which are aligned one by one; ask for alignments without --split-sentences"
    )
    assert not (tmp_path / "a").exists()
