"""mt/attention.py: `mt attention`'s heatmap, its piece labels and colour scales."""

import pytest
import torch

from mt.cli import main
from mt.attention import piece_labels, plot_attention


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
