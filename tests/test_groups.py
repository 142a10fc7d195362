"""mt/report/groups.py: runs grouped by config without train.seed, and the test between two groups (seeds'
spread and the test sentences' sampling), checked against hand computations."""

import json
import math
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, table
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from mt.config import load_config, read_saved_config
from mt.evaluate import evaluate_run
from mt.report.curves import band_points
from mt.report.groups import (
    between_groups,
    group_label,
    repeated_seeds,
    resample_counts,
    seed_groups,
    sentence_statistics,
    two_sided_p,
)
from mt.report.markdown import write_report
from mt.report.runs import load_runs
from mt.training.train import train
from mt.translator import Translator

sys.path.insert(0, str(ROOT / "scripts"))
from seed_calibration import replicas, single_run_p  # noqa: E402


class Accuracy:
    """A metric of sacreBLEU's shape whose score is 100 x the share of sentences equal to their
    reference: its variances have closed forms."""

    def _extract_corpus_statistics(self, hypotheses, references):
        return [[float(h == r), 1.0] for h, r in zip(hypotheses, references[0])]

    def _compute_score_from_stats(self, stats):
        return SimpleNamespace(score=100 * stats[0] / stats[1])


def correct(rows: list[list[int]]) -> list[torch.Tensor]:
    """Runs given as 0/1 per sentence -> their (N, 2) statistics."""
    return [torch.tensor([[float(x), 1.0] for x in row], dtype=torch.float64) for row in rows]


@pytest.mark.parametrize(
    "t, df, p", [(2.776445, 4, 0.05), (12.7062, 1, 0.05), (2.0452, 29, 0.05), (1.959964, math.inf, 0.05)]
)
def test_two_sided_p_matches_students_t_tables(t, df, p):
    assert two_sided_p(t, df) == pytest.approx(p, abs=2e-5)
    assert two_sided_p(-t, df) == two_sided_p(t, df) and two_sided_p(0.0, df) == pytest.approx(1.0)


def test_the_test_is_welchs_t_over_seeds_and_the_sentences_beyond_their_noise():
    torch.manual_seed(0)
    n = 600
    easy = torch.rand(n)  # how likely each sentence is right; config b reverses it on half the sentences
    other = torch.where(torch.arange(n) % 2 == 0, easy, 1 - easy)
    a = [(torch.rand(n) < easy).int().tolist() for _ in range(3)]
    b = [(torch.rand(n) < other).int().tolist() for _ in range(2)]
    test = between_groups(Accuracy(), correct(a), correct(b))
    sa, sb = [[100 * sum(r) / n for r in g] for g in (a, b)]
    v_seeds = statistics.variance(sa) / 3 + statistics.variance(sb) / 2
    means = (statistics.fmean(sa), statistics.fmean(sb))
    assert (test.mean_a, test.mean_b) == (pytest.approx(means[0]), pytest.approx(means[1]))
    assert test.sd_a == pytest.approx(statistics.stdev(sa)) and test.se_seeds == pytest.approx(
        math.sqrt(v_seeds)
    )
    # accuracy is linear in the sentences: a bootstrap variance is the per-sentence variance / N
    cols = [[100 * x for x in col] for col in zip(*a, *b)]
    v_sel = statistics.pvariance([statistics.fmean(c[3:]) - statistics.fmean(c[:3]) for c in cols]) / n
    w = [  # one run's deviation from its group's mean, scaled by m / (m - 1)
        statistics.fmean(
            statistics.pvariance([c[j] - statistics.fmean(c[lo:hi]) for c in cols]) for j in range(lo, hi)
        )
        / n
        * (hi - lo)
        / (hi - lo - 1)
        for lo, hi in ((0, 3), (3, 5))
    ]
    assert test.se_sentences**2 == pytest.approx(v_sel - w[0] / 3 - w[1] / 2, rel=0.15)
    parts = [statistics.variance(sa) / 3, statistics.variance(sb) / 2]
    df = (v_seeds + test.se_sentences**2) ** 2 / (parts[0] ** 2 / 2 + parts[1] ** 2 / 1)
    assert test.df == pytest.approx(df)
    t = (test.mean_b - test.mean_a) / math.sqrt(v_seeds + test.se_sentences**2)
    assert test.p == pytest.approx(two_sided_p(t, df))


def test_two_groups_of_one_config_add_no_sentence_variance_beyond_the_seeds():
    torch.manual_seed(2)
    easy = torch.rand(500)
    runs = correct([(torch.rand(500) < easy).int().tolist() for _ in range(6)])
    test = between_groups(Accuracy(), runs[:3], runs[3:])
    assert test.se_sentences < 0.3 * test.se_seeds  # the truncated estimate of 0, beside the seeds'


def test_one_seed_each_counts_the_sentences_only_and_one_seed_borrows_the_others_spread():
    torch.manual_seed(1)
    rows = [(torch.rand(300) < 0.5).int().tolist() for _ in range(4)]
    single = between_groups(Accuracy(), correct(rows[:1]), correct(rows[1:2]))
    assert single.se_seeds == 0.0 and single.df == math.inf and single.sd_a is None
    d = [100 * (y - x) for x, y in zip(rows[0], rows[1])]  # the paired bootstrap's variance, all of it
    assert single.se_sentences**2 == pytest.approx(statistics.pvariance(d) / 300, rel=0.15)
    assert single.p == pytest.approx(two_sided_p(single.delta / single.se_sentences, math.inf))
    borrowed = between_groups(Accuracy(), correct(rows[:1]), correct(rows[1:]))
    sb = [100 * sum(r) / 300 for r in rows[1:]]
    assert borrowed.se_seeds == pytest.approx(math.sqrt(statistics.variance(sb) * (1 / 1 + 1 / 3)))
    assert borrowed.df == pytest.approx(
        (borrowed.se_seeds**2 + borrowed.se_sentences**2) ** 2
        / ((statistics.variance(sb) / 1) ** 2 / 2 + (statistics.variance(sb) / 3) ** 2 / 2)
    )
    same = between_groups(Accuracy(), correct(rows[1:]), correct(rows[1:]))
    assert same.delta == 0.0 and same.p == 1.0


def test_groups_are_configs_without_the_seed_nor_tuned_decoding_and_keep_settings_apart():
    def run(label, seed, lr, setting="test-tuned", beam=1, tuned=True):
        config = {"train.seed": seed, "train.lr": lr, "decode.beam": beam}
        return SimpleNamespace(
            label=label, config=config, setting=setting, card={"tuning": {}} if tuned else {}
        )

    runs = [
        run("a-seed1", 1, 1),
        run("b", 1, 2),
        run("a-seed2", 2, 1, beam=5),
        run("a-seed1@test", 1, 1, "test"),
    ]
    runs += [run("c-seed1", 1, 3, tuned=False), run("c-seed2", 2, 3, beam=5, tuned=False)]  # beams as asked
    assert [[r.label for r in g] for g in seed_groups(runs)] == [
        ["a-seed1", "a-seed2"],  # each seed's tuning chose its own beam
        ["b"],
        ["a-seed1@test"],
        ["c-seed1"],
        ["c-seed2"],
    ]
    assert group_label(["a-seed1", "a-seed2"]) == "a" and group_label(["x", "y-seed2"]) == "x, y-seed2"


def test_seeds_started_from_their_own_seeds_parent_are_one_group():
    """`make bit SEEDS=N`: seed K's second stage starts from runs/multi30k-bit-seedK-both (issue 80)."""

    def run(label, seed, parent):
        config = {"train.seed": seed, "train.init_from": parent}
        return SimpleNamespace(label=label, config=config, setting="test", card={})

    runs = [run(f"bit-seed{k}", k, f"runs/multi30k-bit-seed{k}-both") for k in (1, 2)]
    runs += [
        run("bit-seed3", 3, "runs/other-seed3-both"),
        run("x", 1, "runs/multi30k-bit-seed1-both@last.pt"),
    ]
    assert [[r.label for r in g] for g in seed_groups(runs)] == [
        ["bit-seed1", "bit-seed2"],
        ["bit-seed3"],
        ["x"],
    ]


@pytest.fixture(scope="module")
def seeded_runs(two_runs, tiny, tmp_path_factory):
    """two_runs (label smoothing 0.1 and 0.0, seed 1) and the same two configs at seed 2."""
    from conftest import REPORT

    root = tmp_path_factory.mktemp("seeds")
    runs = list(two_runs)
    for name, eps in [("ls01-s2", "0.1"), ("ls0-s2", "0.0")]:
        overrides = tiny + REPORT + [f"train.label_smoothing={eps}", "train.seed=2"]
        train(load_config(ROOT / "configs/toy.yaml", overrides), root / name)
        evaluate_run(Translator.from_run(root / name, device="cpu"), "test")
        runs.append(root / name)
    return runs  # ls01, ls0, ls01-s2, ls0-s2


@pytest.mark.slow
def test_the_report_shows_groups_of_seeds_and_tests_them(seeded_runs, tmp_path):
    ls01, ls0, ls01_s2, ls0_s2 = seeded_runs
    out, _ = write_report([ls01, ls0, ls01_s2, ls0_s2], tmp_path / "report.md")
    text = out.read_text()
    section = text.split("## Groups: runs that differ only in train.seed")[1].split("## Runs")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows[1:]] == ["ls01, ls01-s2", "ls0, ls0-s2"]
    runs = load_runs([ls01, ls01_s2])
    bleus = [r.result()["bleu"] for r in runs]
    mean = f"{statistics.fmean(bleus):.2f} ± {statistics.stdev(bleus):.2f}"
    cells = table(section)
    assert cells[0]["seeds"] == "2" and cells[0]["BLEU"] == mean
    assert cells[0]["BLEU p"] == "–" and cells[1]["BLEU p"] != "–"
    assert "- `ls0, ls0-s2` (2 seeds) vs `ls01, ls01-s2` (2): BLEU" in section
    assert "Each row is one run, one seed" not in text


@pytest.mark.slow
def test_a_report_of_single_runs_says_its_test_counts_test_sentences_only(two_runs, tmp_path):
    out, _ = write_report(two_runs, tmp_path / "report.md")
    text = out.read_text()
    assert "## Groups" not in text
    assert "Each row is one run, one seed: its p counts the test sentences' sampling, not training's" in text


def test_a_groups_curve_is_its_runs_mean_with_a_band_up_to_the_shortest_run():
    def run(name, nll, bleu):
        logs = [{"step": 10 * i, "elapsed_s": 60.0 * i, "loss": 0.0, "nll": x} for i, x in enumerate(nll, 1)]
        vals = [{"step": 20 * i, "elapsed_s": 120.0 * i, "val_bleu": x} for i, x in enumerate(bleu, 1)]
        return SimpleNamespace(path=Path(name), label=name, metrics=logs + vals)

    label, panels = band_points(
        "a", [run("a1", [4.0, 3.0, 2.0], [10.0, 20.0]), run("a2", [5.0, 2.0], [30.0, 10.0])]
    )
    assert label == "a (mean of 2 seeds)"
    assert panels[0, 0] == (
        [10.0, 20.0],
        [4.5, 2.5],
        [4.0, 2.0],
        [5.0, 3.0],
    )  # steps: to the shorter run's end
    assert panels[1, 1] == ([2.0, 4.0], [20.0, 15.0], [10.0, 10.0], [30.0, 20.0])  # minutes


def test_the_calibrations_replicas_have_the_seeds_mean_and_variance():
    runs = [10 + 5 * torch.rand(50, 3, dtype=torch.float64) for _ in range(3)]  # far from 0: no clamping
    drawn = torch.stack(replicas(runs, 20000, torch.Generator().manual_seed(0)))
    seeds = torch.stack(runs)
    assert torch.allclose(drawn.mean(0), seeds.mean(0), atol=0.05)
    assert torch.allclose(drawn.var(0), seeds.var(0), rtol=0.1, atol=0.02)


def test_the_single_run_p_value_is_sacrebleus_paired_bootstrap(toy):
    refs = toy["test"][1][:300]
    a = [" ".join(line.split()[:-1]) for line in refs]  # the last word dropped
    b = [line if i % 100 else " ".join(line.split()[1:]) for i, line in enumerate(a)]  # 3 lines lose more
    _, scores = PairedTest([("a", a), ("b", b)], {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=1000)()
    stats = [sentence_statistics(BLEU(), hyps, refs) for hyps in (a, b)]
    mine = single_run_p(BLEU(), *stats, resample_counts(len(refs), 1000, 0))
    assert 0.01 < scores["BLEU"][1].p_value < 0.2  # 0.057 here: a p where the counting shows
    assert mine == pytest.approx(scores["BLEU"][1].p_value, abs=0.03)  # other draws: p within its noise


@pytest.mark.slow
def test_make_compare_with_seeds_trains_each_seed_and_reports_the_groups(tiny, tmp_path):
    variant = tmp_path / "toy-ls0.yaml"
    variant.write_text(f"base: {ROOT / 'configs/toy.yaml'}\ntrain:\n  label_smoothing: 0.0\n")
    report = tmp_path / "report.md"
    done = subprocess.run(
        ["make", "-o", ".venv/.installed", "compare", f"BIN={Path(sys.executable).parent}", "SEEDS=2"]
        + [f"CONFIGS=configs/toy.yaml {variant}", f"RUNS_DIR={tmp_path}", f"REPORT={report}"]
        + ["SET=" + " ".join(tiny + ["train.max_steps=8", "train.valid_every=8"])],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("toy-seed1", "toy-seed2", "toy-ls0-seed1", "toy-ls0-seed2"):
        assert (tmp_path / name / "card.json").exists(), name
    seeds = {
        name: load_runs([tmp_path / name])[0].config["train.seed"] for name in ("toy-seed1", "toy-seed2")
    }
    assert seeds == {"toy-seed1": 1, "toy-seed2": 2}
    rows = [line for line in report.read_text().split("## Groups")[1].splitlines() if line.startswith("| ")]
    assert [row.split("|")[1:3] for row in rows[1:]] == [[" toy ", " 2 "], [" toy-ls0 ", " 2 "]]
    assert re.fullmatch(r"\d+\.\d{4}( \*)?", table(report.read_text().split("## Groups")[1])[1]["BLEU p"])


@pytest.mark.slow
def test_make_bit_with_seeds_trains_each_seeds_two_stages_in_folders_of_their_own(tiny, tmp_path):
    """Issue 80: a second seed of `make bit` had written into the first's folders and been refused;
    with SEEDS each seed's stage 2 starts from its own stage 1 (train.init_from), and the group is
    reported. The recipe's own configs, shrunk to the tiny model on the small corpus."""
    report = tmp_path / "report.md"
    done = subprocess.run(
        ["make", "-o", ".venv/.installed", "bit", f"BIN={Path(sys.executable).parent}", "SEEDS=2"]
        + [f"BIT={tmp_path}/bit", f"REPORT={report}"]
        + ["SET=" + " ".join(tiny + ["train.max_steps=4", "train.valid_every=4", "train.keep_last=0"])],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for seed in (1, 2):
        first, second = (
            read_saved_config(tmp_path / f"bit-seed{seed}{part}/config.yaml") for part in ("-both", "")
        )
        assert first.train.seed == second.train.seed == seed
        assert first.data.both_directions and not second.data.both_directions
        card = json.loads((tmp_path / f"bit-seed{seed}" / "card.json").read_text())
        assert card["parent"]["run"] == f"{tmp_path}/bit-seed{seed}-both" and card["results"]
    rows = [line for line in report.read_text().split("## Groups")[1].splitlines() if line.startswith("| ")]
    assert [row.split("|")[1:3] for row in rows[1:]] == [[" bit ", " 2 "]]


def test_a_run_that_repeats_its_groups_seed_stands_alone_and_is_named():
    """Copies of one training (or the seed trained again by other code) are not seeds: issue 102."""

    def run(label, seed):
        return SimpleNamespace(
            label=label, config={"train.seed": seed, "train.lr": 1}, setting="test", card={}
        )

    runs = [run("a", 1), run("a-copy", 1), run("a-seed2", 2), run("a-old", 1)]
    assert [[r.label for r in g] for g in seed_groups(runs)] == [["a", "a-seed2"], ["a-copy"], ["a-old"]]
    assert repeated_seeds(runs) == [
        "> **Not another seed:** `a-copy`, `a-old`: the config and train.seed (1) of `a`, a copy of one "
        "training or the seed trained again, so each stands alone in the groups; train another seed with "
        "--set train.seed=N."
    ]
    assert repeated_seeds(runs[::2]) == []


def test_a_report_of_three_copies_of_one_run_shows_no_group_of_seeds(two_runs, tmp_path):
    copies = []
    for name in ("one", "two"):
        shutil.copytree(two_runs[0], tmp_path / name)
        copies.append(tmp_path / name)
    text = write_report([two_runs[0], *copies], tmp_path / "report.md")[0].read_text()
    assert "## Groups: runs that differ only in train.seed" not in text
    assert "> **Not another seed:** `one`, `two`: the config and train.seed (1) of `ls01`" in text
