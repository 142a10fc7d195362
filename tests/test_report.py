"""Run cards, `mt report` (rows, differing keys, paired bootstrap, refusals, plots) and attention maps."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from mt.cli import main
from mt.config import load_config
from mt.errors import ConfigError
from mt.batching import make_batch
from mt.attention import piece_labels, plot_attention
from mt.evaluate import evaluate_run
from mt.report import (
    Run,
    _p,
    load_runs,
    paired_bootstrap,
    plot_curves,
    write_report,
)
from mt.train import train

ROOT = Path(__file__).resolve().parents[1]
REPORT = [
    "model.layers=2",
    "train.log_every=5",
    "train.valid_every=10",
    "train.max_steps=30",
    "train.lr=0.005",
]


@pytest.fixture(scope="module")
def two_runs(tiny, tmp_path_factory):
    """Two tiny toy runs that differ in label smoothing, each evaluated on the test split."""
    root = tmp_path_factory.mktemp("report")
    runs = []
    for name, eps in [("ls01", "0.1"), ("ls0", "0.0")]:
        cfg = load_config(ROOT / "configs/toy.yaml", tiny + REPORT + [f"train.label_smoothing={eps}"])
        train(cfg, root / name)
        evaluate_run(root / name, "test", "cpu")
        runs.append(root / name)
    return runs


@pytest.mark.slow
def test_card_fields_are_present_and_typed(two_runs):
    card = json.loads((two_runs[0] / "card.json").read_text())
    assert card["config"]["name"] == "toy" and len(card["config"]["hash"]) == 12
    assert card["config"]["base"] == "defaults"
    assert card["config"]["differences"]["model.d_model"] == [256, 32]
    assert isinstance(card["parameters"], int) and card["parameters"] > 0
    assert len(card["code"]["git_commit"]) in (40, len("unknown")) and card["precision"] == "fp32"
    assert card["hardware"]["device"] == "cpu" and card["hardware"]["threads"] == 1
    t = card["training"]
    assert (t["steps"], t["epochs"], t["stopped"]) == (30, 1, "reached train.max_steps=30")
    assert all(isinstance(t[k], float) for k in ("wall_s", "train_s", "tokens_per_s", "best_val_bleu"))
    assert t["best_step"] in (10, 20, 30)
    test = card["results"]["test"]
    assert set(test) >= {
        "bleu",
        "chrf",
        "bleu_signature",
        "chrf_signature",
        "length_ratio",
        "refs_sha256",
        "sentences",
        "beam",
        "hyp_file",
        "ref_file",
    }
    assert test["sentences"] == 40 and test["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert isinstance(test["length_ratio"], float) and test["length_ratio"] > 0


@pytest.mark.slow
def test_report_rows_keys_and_p_value(two_runs, tmp_path):
    out, plots = write_report(two_runs, tmp_path / "report.md")
    text = out.read_text()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0].split("|")[-2].strip() == "`train.label_smoothing`"  # the one differing key
    rows = {line.split("|")[1].strip().rstrip(" ★"): line for line in table[1:]}
    assert set(rows) == {"ls01", "ls0"}
    assert rows["ls01"].split("|")[-2].strip() == "0.1" and rows["ls0"].split("|")[-2].strip() == "0.0"
    tests = paired_bootstrap(load_runs(two_runs), "test")  # sacreBLEU's bootstrap is seeded: same p again
    assert rows["ls0"].split("|")[11].strip() == _p(tests[1]["bleu_p"])
    assert rows["ls0"].split("|")[13].strip() == _p(tests[1]["chrf_p"])
    assert rows["ls01"].split("|")[11].strip() == "–"  # the baseline has no p
    assert "`ls0` vs `ls01`: BLEU" in text and text.count("★") == 2  # legend + the best row
    assert (tmp_path / "report-curves.png").read_bytes()[:4] == b"\x89PNG"
    assert plots == "![training NLL and validation BLEU](report-curves.png)"


@pytest.mark.slow
def test_report_refuses_runs_on_another_test_set(two_runs, small_corpus, tmp_path):
    other_data = tmp_path / "other"
    shutil.copytree(small_corpus, other_data)
    for lang in ("de", "en"):
        lines = (other_data / f"test.{lang}").read_text().splitlines()
        (other_data / f"test.{lang}").write_text(
            "".join(line + "\n" for line in lines[::-1])
        )  # same text, reordered
    other = tmp_path / "other-run"
    shutil.copytree(two_runs[1], other)
    evaluate_run(other, "test", "cpu", [f"data.dir={other_data}"])
    text = write_report([two_runs[0], other], tmp_path / "r.md")[0].read_text()
    assert (
        f"> **Not compared:** `{other}` was scored on a different test set (other references) than the "
        f"baseline"
    ) in text
    row = next(line for line in text.splitlines() if line.startswith("| other-run"))
    assert row.split("|")[11].strip() == "–"
    assert "Nothing to test: fewer than two comparable runs." in text


@pytest.mark.slow
def test_a_run_against_its_own_copy_is_not_significant(two_runs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(two_runs[0], copy)
    text = write_report([two_runs[0], copy], tmp_path / "r.md")[0].read_text()
    bleu = json.loads((copy / "card.json").read_text())["results"]["test"]["bleu"]
    assert f"- `copy` vs `ls01`: BLEU +0.00, not significant ({bleu:.2f} -> {bleu:.2f} ± " in text
    assert "p = 1.0000)" in text
    assert text.count("★") == 3  # the legend and both tied runs, not just the first


@pytest.mark.slow
def test_one_run_compares_two_of_its_evaluations(two_runs, tmp_path, capsys):
    """RUN@SETTING: a run's last.pt against its best.pt, on the same test set, in one report."""
    run = two_runs[0]
    evaluate_run(run, "test", "cpu", checkpoint="last")
    text = write_report([run, f"{run}@test-last"], tmp_path / "r.md")[0].read_text()
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ls01")]
    assert [r[1].strip().rstrip(" ★") for r in rows] == ["ls01", "ls01@test-last"]
    card = json.loads((run / "card.json").read_text())["results"]
    assert [r[10].strip() for r in rows] == [
        f"{card['test']['bleu']:.2f}",
        f"{card['test-last']['bleu']:.2f}",
    ]
    assert "- `ls01@test-last` vs `ls01`: BLEU " in text and text.count("](r-curves.png)") == 1
    with pytest.raises(ConfigError, match="the same run directory is given twice"):
        load_runs([f"{run}@test-last", f"{run}@test-last"])
    assert main(["report", f"{run}@test-nope", str(run), "--out", str(tmp_path / "x.md")]) == 2
    assert capsys.readouterr().err == (
        f"mt: error: {run}: the baseline has no 'test-nope' result; run `mt evaluate` on it first\n"
    )


@pytest.mark.slow
def test_report_refuses_runs_scored_with_other_metric_signatures(two_runs, tmp_path):
    other = tmp_path / "intl"
    shutil.copytree(two_runs[1], other)
    card = json.loads((other / "card.json").read_text())
    card["results"]["test"]["bleu_signature"] = card["results"]["test"]["bleu_signature"].replace(
        "tok:13a", "tok:intl"
    )
    (other / "card.json").write_text(json.dumps(card))
    text = write_report([two_runs[0], other], tmp_path / "r.md")[0].read_text()
    assert (
        f"> **Not compared:** `{other}` was scored with different metric signatures than the baseline" in text
    )
    assert "Nothing to test: fewer than two comparable runs." in text


@pytest.mark.slow
def test_report_without_matplotlib_still_writes(two_runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    out, plots = write_report(two_runs, tmp_path / "report.md")
    assert "Plots skipped: matplotlib is not installed" in out.read_text()
    assert not (tmp_path / "report-curves.png").exists()


def test_report_needs_cards(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err == (
        f"mt: error: {tmp_path}/card.json: not found; train the run (or run "
        f"`mt evaluate --run {tmp_path}`) first\n"
    )


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


def test_cross_attention_weights_reproduce_the_attention_output(small_model):
    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]])
    weights = small_model.attention(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)["cross"]
    assert len(weights) == 2 and weights[0].shape == (2, 4, 4, 5)  # (B, H, T, S)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 4))
        assert torch.all(w[1, :, :, 3:] == 0)  # padded source positions get nothing
    # the weights are the ones the layer uses: weights @ V through out_proj gives its output
    layer = small_model.decoder[0].cross_attn
    seen = {}
    handle = layer.register_forward_hook(lambda m, args, out: seen.update(args=args, out=out))
    small_model.attention(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
    handle.remove()
    x, k, v, mask = seen["args"]
    mixed = layer.weights(x, k, mask) @ v  # (B, H, T, Dh)
    B, H, T, Dh = mixed.shape
    torch.testing.assert_close(layer.out_proj(mixed.transpose(1, 2).reshape(B, T, H * Dh)), seen["out"])


@pytest.mark.slow
def test_evaluate_rebuilds_a_missing_card_from_metrics(two_runs, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(two_runs[0], run)
    (run / "card.json").unlink()  # as for a run trained before cards existed
    evaluate_run(run, "test", "cpu")
    card = json.loads((run / "card.json").read_text())
    assert card["training"]["rebuilt_from_metrics"] is True
    assert (card["training"]["steps"], card["training"]["epochs"]) == (30, 1)
    assert (
        card["training"]["best_val_bleu"]
        == json.loads((two_runs[0] / "card.json").read_text())["training"]["best_val_bleu"]
    )
    assert card["code"]["recorded_by"] == "evaluate" and "test" in card["results"]


def test_attention_labels_drop_the_word_marker():
    assert piece_labels(["\u2581Der", "\u2581Hu", "nd", "\u2581", ".", "</s>"]) == [
        "Der",
        "Hu",
        "-nd",
        "\u2581",
        "-.",
        "</s>",
    ]


def test_close_bleu_curves_are_not_drawn_as_a_gap(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [
        Run(tmp_path / name, {}, [{"step": 10, "elapsed_s": 60.0, "val_bleu": bleu}], name)
        for name, bleu in (("a", 0.014120), ("b", 0.014145))
    ]
    fig = plot_curves(runs, tmp_path / "c.png")
    for ax in fig.axes[2:]:  # the BLEU panels
        low, high = ax.get_ylim()
        assert high - low >= 2.0 and low < 0.01412 and high > 0.014145


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


@pytest.mark.slow
def test_report_and_attention_say_where_they_wrote(two_runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # defaults are relative: runs/report.md, and the run's own folder
    assert main(["report", *map(str, two_runs)]) == 0
    assert capsys.readouterr().out == "wrote runs/report.md and runs/report-curves.png\n"
    assert (tmp_path / "runs" / "report.md").is_file()
    assert main(["attention", "--run", str(two_runs[0]), "Der Hund ."]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == f"wrote {two_runs[0]}/attention.png"
