"""mt/report/: `mt report` (rows, differing keys, paired bootstrap, refusals, plots) over runs' cards."""

import json
import shutil
import sys

import pytest
from conftest import table
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from mt.cli import main
from mt.evaluate import evaluate_run
from mt.plumbing.errors import ConfigError
from mt.plumbing.metrics import METRICS
from mt.report.curves import plot_curves
from mt.report.markdown import _p, _run_line, _verdict, write_report
from mt.report.runs import Run, load_runs
from mt.translator import Translator


@pytest.mark.slow
def test_report_rows_keys_and_p_value(two_runs, tmp_path):
    out, plots = write_report(two_runs, tmp_path / "report.md")
    text = out.read_text()
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0].split("|")[-2].strip() == "`train.label_smoothing`"  # the one differing key
    rows = {line.split("|")[1].strip().rstrip(" ★"): line for line in lines[1:]}
    assert set(rows) == {"ls01", "ls0"}
    assert rows["ls01"].split("|")[-2].strip() == "0.1" and rows["ls0"].split("|")[-2].strip() == "0.0"
    refs = (two_runs[0] / "ref-test.txt").read_text().splitlines()  # sacreBLEU's own test, from the files
    systems = [(run.name, (run / "hyp-test.txt").read_text().splitlines()) for run in two_runs]
    _, scores = PairedTest(
        systems, {"BLEU": BLEU(), "chrF": CHRF()}, [refs], test_type="bs", n_samples=1000
    )()
    cells = {row["run"].rstrip(" ★"): row for row in table(text)}
    assert cells["ls0"]["BLEU p"] == _p(scores["BLEU"][1].p_value)  # seeded: the same draws
    assert cells["ls0"]["chrF p"] == _p(scores["chrF2"][1].p_value)  # sacreBLEU names it chrF2
    assert cells["ls01"]["BLEU p"] == "–"  # the baseline has no p
    assert "`ls0` vs `ls01`: BLEU" in text and text.count("★") == 2  # legend + the best row
    header = [cell.strip() for cell in lines[0].split("|")]
    assert [m.label for m in METRICS] == [cell for cell in header if cell in {m.label for m in METRICS}]
    assert all(f"- {m.label}" in text for m in METRICS)  # each metric's signature line
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
    evaluate_run(Translator.from_run(other, device="cpu", overrides=[f"data.dir={other_data}"]), "test")
    text = write_report([two_runs[0], other], tmp_path / "r.md")[0].read_text()
    assert (
        f"> **Not compared:** `{other}` was scored on a different test set (other references) than the "
        f"baseline"
    ) in text
    row = next(row for row in table(text) if row["run"] == "other-run")
    assert row["BLEU p"] == "–"
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
    evaluate_run(Translator.from_run(run, "last", device="cpu"), "test")
    text = write_report([run, f"{run}@test-last"], tmp_path / "r.md")[0].read_text()
    rows = table(text)
    assert [r["run"].rstrip(" ★") for r in rows] == ["ls01", "ls01@test-last"]
    card = json.loads((run / "card.json").read_text())["results"]
    assert [r["BLEU"] for r in rows] == [
        f"{card['test']['bleu']:.2f}",
        f"{card['test-last']['bleu']:.2f}",
    ]
    assert text.startswith("# Comparing 2 runs on `test`, `test-last`\n")
    assert "- `ls01@test-last` vs `ls01`: BLEU " in text and text.count("](r-curves.png)") == 1
    with pytest.raises(ConfigError, match="the same run directory is given twice"):
        load_runs([f"{run}@test-last", f"{run}@test-last"])
    assert main(["report", f"{run}@test-nope", str(run), "--out", str(tmp_path / "x.md")]) == 2
    assert capsys.readouterr().err == (
        f"mt: error: {run}: the baseline has no 'test-nope' result; run `mt evaluate` on it first, or "
        f"compare one of its results (test, test-last)\n"
    )


def test_report_compares_each_run_at_its_own_decoding_by_default(run, tmp_path, capsys):
    """`mt report A B` with no flags, on runs as `mt train` and `mt evaluate` leave them: a run tuned on
    val, whose evaluation is filed once, as test-beam2-lp1.5, which test-tuned names (no `test`),
    against an untuned one (`test`). A run not evaluated since its tuning is refused, with the results
    it has. Quick (the shared 4-update run): the report's default is what a user meets first (issue 80)."""
    untuned, tuned = run, tmp_path / "tuned"
    shutil.copytree(untuned, tuned)
    card = json.loads((tuned / "card.json").read_text())
    (tuned / "card.json").write_text(json.dumps({**card, "results": {}}))  # as `mt train` leaves it
    assert (
        main(["tune", "--run", str(tuned), "--device", "cpu", "--beams", "2", "--length-penalties", "1.5"])
        == 0
    )
    capsys.readouterr()
    assert main(["report", str(tuned), str(untuned), "--out", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err == (
        f"mt: error: {tuned}: no 'test-beam2-lp1.5' result (the run's own decoding on test); run "
        f"`mt evaluate --run {tuned} --split test` first, or compare a result (it has none yet) with "
        "--setting\n"
    )
    assert main(["evaluate", "--run", str(tuned), "--device", "cpu"]) == 0
    assert main(["report", str(tuned), str(untuned), "--out", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert text.startswith("# Comparing 2 runs on `test-tuned`, `test`\n")
    assert (
        "Decoding: `tuned` beam 2, length penalty 1.5 (`test-tuned`: `test-beam2-lp1.5`, tuned on val); "
        "`run` beam 1, length penalty 1.0 (`test`)."
    ) in text
    rows = {row["run"].rstrip(" ★"): row for row in table(text)}
    results = json.loads((tuned / "card.json").read_text())["results"]
    assert sorted(results) == ["test-beam2-lp1.5"]
    assert rows["tuned"]["BLEU"] == f"{results['test-beam2-lp1.5']['bleu']:.2f}"
    assert "- `run` vs `tuned`: BLEU " in text
    for each in (tuned, untuned):  # README's way to compare beam 5 across tuned runs
        assert (
            main(["evaluate", "--run", str(each), "--device", "cpu", "--beam", "5", "--length-penalty", "1"])
            == 0
        )
    assert (
        main(["report", str(tuned), str(untuned), "--setting", "test-beam5", "--out", str(tmp_path / "5.md")])
        == 0
    )
    assert (tmp_path / "5.md").read_text().startswith("# Comparing 2 runs on `test-beam5`\n")


def _signed(run, tmp_path, old: str, new: str):
    """A copy of `run` whose test result's BLEU signature says `new` where it said `old`."""
    other = tmp_path / new.replace(":", "-")
    shutil.copytree(run, other)
    card = json.loads((other / "card.json").read_text())
    card["results"]["test"]["bleu_signature"] = card["results"]["test"]["bleu_signature"].replace(old, new)
    (other / "card.json").write_text(json.dumps(card))
    return other


@pytest.mark.slow
def test_report_sets_aside_runs_scored_with_other_metric_signatures(two_runs, tmp_path):
    other = _signed(two_runs[1], tmp_path, "smooth:exp", "smooth:floor")
    text = write_report([two_runs[0], other], tmp_path / "r.md")[0].read_text()
    assert (
        f"> **Not compared:** `{other}` was scored with different metric signatures than the baseline" in text
    )
    assert "Nothing to test: fewer than two comparable runs." in text


@pytest.mark.slow
def test_report_refuses_runs_scored_with_another_bleu_tokenizer(two_runs, tmp_path, capsys):
    other = _signed(two_runs[1], tmp_path, "tok:13a", "tok:zh")
    assert main(["report", str(two_runs[0]), str(other), "--out", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err == (
        f"mt: error: {other}: BLEU scored with sacreBLEU's zh tokenizer, the baseline {two_runs[0]} with "
        f"13a; a report compares scores of one tokenizer (eval.bleu_tokenize)\n"
    )
    assert not (tmp_path / "r.md").exists()


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


@pytest.mark.slow
def test_report_and_attention_say_where_they_wrote(two_runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # defaults are relative: runs/report.md, and the run's own folder
    assert main(["report", *map(str, two_runs)]) == 0
    assert capsys.readouterr().out == "wrote runs/report.md and runs/report-curves.png\n"
    assert (tmp_path / "runs" / "report.md").is_file()
    assert main(["attention", "--run", str(two_runs[0]), "Der Hund ."]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == f"wrote {two_runs[0]}/attention.png"


def test_the_runs_section_names_a_parent_or_a_shared_tokenizer(tmp_path):
    card = {"config": {"base": "multi30k.yaml"}, "precision": "fp32", "code": {"git_commit": "abc"}}
    parent = {"run": "runs/ft-base", "checkpoint": "best.pt", "sha256": "0123456789abcdef"}
    child = Run(tmp_path, {**card, "parent": parent}, [], {})
    assert ", fine-tuned from `runs/ft-base/best.pt` (sha256 0123456789ab)," in _run_line(child)
    shared = Run(tmp_path, {**card, "tokenizer_from": {"run": "runs/a", "sha256": "ff"}}, [], {})
    assert ", tokenizer of `runs/a`," in _run_line(shared)
    assert "fine-tuned" not in _run_line(Run(tmp_path, card, [], {}))


def test_a_verdict_follows_the_metrics_direction():
    """A score that falls is better for a lower-is-better metric (a TER, a repeat count), worse for BLEU."""
    bleu = next(m for m in METRICS if m.key == "bleu")
    repeats = next(m for m in METRICS if m.key == "repeated_4grams")
    assert (
        _verdict(bleu, 30.0, 28.5, 0.8, 0.001)
        == "BLEU worse by 1.50 (30.00 -> 28.50 ± 0.80; p = 0.0010 < 0.05)"
    )
    assert _verdict(repeats, 30.0, 28.5, 0.8, 0.001) == (
        "rep. 4-gram lines better by 1.50 (30.00 -> 28.50 ± 0.80; p = 0.0010 < 0.05)"
    )
    assert (
        _verdict(bleu, 30.0, 30.2, 0.8, 0.3)
        == "BLEU +0.20, not significant (30.00 -> 30.20 ± 0.80; p = 0.3000)"
    )
