"""mt/attention.py: `mt attention`'s heatmap, its piece labels and colour scales."""

import pytest
import torch

from mt.attention import pharaoh, piece_labels, plot_attention, word_alignments, word_starts, words_of
from mt.cli import main


@pytest.mark.slow
def test_attention_command_writes_png(two_runs, tmp_path, capsys):
    out = tmp_path / "att.png"
    assert (
        main(
            [
                "attention",
                "--run",
                str(two_runs[0]),
                "Der Hund sieht die Katze .",
                "--out",
                str(out),
                "--per-head",
            ]
        )
        == 0
    )
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_attention_labels_drop_the_word_marker():
    assert piece_labels(["\u2581Der", "\u2581Hu", "nd", "\u2581", ".", "</s>"]) == [
        "Der",
        "Hu",
        "-nd",
        "\u2581",
        "-.",
        "</s>",
    ]


def test_attention_plot_has_a_colour_scale(tmp_path):
    pytest.importorskip("matplotlib")
    weights = [torch.full((2, 3, 4), 0.25), torch.full((2, 3, 4), 0.25)]  # 2 layers, (H, T, S)
    fig = plot_attention(
        ["\u2581Der", "\u2581Hund", ".", "</s>"],
        ["\u2581The", "\u2581dog", "</s>"],
        weights,
        tmp_path / "a.png",
    )
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 and len(fig.axes) == 4  # one colour bar per panel
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["Der", "Hund", "-.", "</s>"]


def test_a_piece_starting_with_the_space_mark_starts_a_word():
    assert word_starts(["\u2581Ein", "\u2581Bos", "ton", "\u2581Terr", "ier", "."]) == [0, 1, 1, 2, 2, 2]
    assert word_starts(["ab", "\u2581c"]) == [0, 1]  # the first piece always starts a word


def test_in_chinese_each_piece_is_a_word_as_in_the_same_pieces_spaced():
    """Chinese has no space marks after the first piece: each piece of its script is a word (BPE's
    merges), numbered as the same pieces each after a space would be; Latin pieces between them join."""
    pieces = ["\u2581这", "只", "狗", "看见", "了", "DV", "D", "。"]
    spaced = ["\u2581这", "\u2581只", "\u2581狗", "\u2581看见", "\u2581了", "\u2581DV", "D", "\u2581。"]
    assert word_starts(pieces) == word_starts(spaced) == [0, 1, 2, 3, 4, 5, 5, 6]
    assert words_of(pieces) == ["这", "只", "狗", "看见", "了", "DVD", "。"]


def test_word_alignments_line_up_with_the_words_of_both_sides(trained_model, tokenizer, toy):
    src_lines, tgt_lines = toy["test"][0][:20] + [""], toy["test"][1][:20] + [""]
    src, tgt = tokenizer.encode(src_lines), tokenizer.encode(tgt_lines)
    found = word_alignments(trained_model, tokenizer, src, tgt, batch_size=8)
    assert len(found) == 21 and found[-1] == [] and pharaoh([(0, 0), (2, 1)]) == "0-0 2-1"
    for pairs, s, t in zip(found[:-1], src_lines, tgt_lines):
        n_src, n_tgt = len(s.split()), len(t.split())
        assert all(0 <= i < n_src and 0 <= j < n_tgt for i, j in pairs)
        assert {j for _, j in pairs} == set(range(n_tgt))  # every target word is aligned


def test_mt_translate_writes_an_alignment_line_per_input_line(fluent, tmp_path, capsys):
    source, aligned = tmp_path / "in.de", tmp_path / "out.align"
    source.write_text("ein Hund läuft .\n\nzwei Männer\n")
    assert (
        main(["translate", "--run", str(fluent), "--input", str(source), "--alignments", str(aligned)]) == 0
    )
    translations = capsys.readouterr().out.split("\n")
    lines = aligned.read_text().split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == "" and lines[0] and lines[2]
    for line, words, translation in zip(lines, ["ein Hund läuft .", "", "zwei Männer"], translations):
        pairs = [tuple(map(int, pair.split("-"))) for pair in line.split()]
        assert all(0 <= i < len(words.split()) and 0 <= j < len(translation.split()) for i, j in pairs)
        assert {j for _, j in pairs} == set(range(len(translation.split())))  # every target word
