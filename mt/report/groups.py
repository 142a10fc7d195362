"""Runs that differ only in `train.seed`, as groups, and a test between two groups that counts both
sources of noise: training's randomness (the spread across seeds) and the test sentences' sampling.

Clark et al. (2011, "Better hypothesis testing for statistical machine translation: controlling for
optimizer instability") report a system as the mean over replicas with two spreads beside it: across
replicas (s_dev) and across resamples of the test set (s_sel). `between_groups` tests the difference of
two groups' means, D = mean(B) - mean(A), with Welch's t on

    Var(D) = s_A^2 / m + s_B^2 / n + max(0, V_sel - w_A / m - w_B / n)

s^2: the variance of a group's m (n) seeds' scores on this test set (training's randomness, as these
sentences see it). V_sel: the variance of D over bootstrap resamples of the test sentences (one
resample for every run: paired), what another test set would change. Part of V_sel is the seeds' own
sentence-level noise, already in s^2: w, the resamples' variance of one run's deviation from its
group's mean (scaled by m / (m - 1)), takes it out, so that what is added is the configs' difference
varying from sentence to sentence (0 for two groups of one config). Degrees of freedom: Welch-
Satterthwaite's, that last term taken as known. scripts/seed_calibration.py measures the false-positive
rate on groups of one config. A group of one seed borrows the other group's s^2 and w; two groups of
one seed each have neither, and the test then counts the test sentences only, as a paired bootstrap of
two runs does.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

import torch

SEED_KEY = "train.seed"
PARENT_KEY = "train.init_from"
SEEDED = re.compile(r"-seed\d+(?=-|@|$)")  # a run folder named for its seed: NAME-seedK, NAME-seedK-both
# what mt tune wrote into config.yaml before the card became the tuned decoding's one home
TUNED_KEYS = ("decode.beam", "decode.length_penalty", "decode.n_best")
P_THRESHOLD = 0.05
RESAMPLES = 1000


def grouped(items: list, key) -> list[list]:
    """`items` in groups of equal `key(item)`, in order of first appearance."""
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def without_seed(config: dict, tuned: bool = False) -> tuple:
    """A flattened config's items other than train.seed, and for a tuned run (`mt tune`) the decoding
    it chose: what runs of one config's seeds share. A parent run named for its seed (train.init_from
    of `make bit SEEDS=N`: NAME-seedK-both) counts by its name without the seed: each seed of the
    second stage starts from the same seed of the first."""
    skip = {SEED_KEY, *(TUNED_KEYS if tuned else ())}
    return tuple(
        sorted(
            (k, repr(SEEDED.sub("", v) if k == PARENT_KEY and isinstance(v, str) else v))
            for k, v in config.items()
            if k not in skip
        )
    )


def group_label(labels: list[str]) -> str:
    """`make compare SEEDS=N`'s NAME-seed1..N as NAME; other groups as their runs' labels."""
    stems = {re.sub(r"-seed\d+$", "", label) for label in labels}
    if len(labels) > 1 and len(stems) == 1 and all(re.search(r"-seed\d+$", x) for x in labels):
        return stems.pop()
    return ", ".join(labels)


def sentence_statistics(metric, hypotheses: list[str], references: list[str]) -> torch.Tensor:
    """sacreBLEU's sufficient statistics of each sentence (what its corpus score sums): (N, K) float64."""
    return torch.tensor(metric._extract_corpus_statistics(hypotheses, [references]), dtype=torch.float64)


def score_of(metric, summed: torch.Tensor) -> float:
    """The corpus score of summed sentence statistics (K,)."""
    return metric._compute_score_from_stats(summed.tolist()).score


def resample_counts(sentences: int, resamples: int, seed: int) -> torch.Tensor:
    """How often each sentence is drawn in each bootstrap resample: (R, N) float64."""
    drawn = torch.randint(sentences, (resamples, sentences), generator=torch.Generator().manual_seed(seed))
    counts = torch.zeros(resamples, sentences, dtype=torch.float64)
    return counts.scatter_add_(1, drawn, torch.ones_like(drawn, dtype=torch.float64))


@dataclass(frozen=True)
class GroupTest:
    """One metric's test of group B against group A."""

    mean_a: float
    mean_b: float
    sd_a: float | None  # the seeds' standard deviation (None: one seed)
    sd_b: float | None
    se_seeds: float  # sqrt(s_A^2 / m + s_B^2 / n); 0 where neither group has two seeds
    se_sentences: float  # sqrt(V_sel)
    df: float  # math.inf: the sentences' normal approximation
    p: float

    @property
    def delta(self) -> float:
        return self.mean_b - self.mean_a


def between_groups(
    metric, a: list[torch.Tensor], b: list[torch.Tensor], resamples: int = RESAMPLES, seed: int = 12345
) -> GroupTest:
    """Test group b's mean score against group a's: each a list of its runs' (N, K) sentence statistics
    (`sentence_statistics`) on one test set."""
    scores = [[score_of(metric, s.sum(0)) for s in group] for group in (a, b)]
    counts = resample_counts(a[0].shape[0], resamples, seed)  # (R, N)
    resampled = [  # each run's score on each resample: (runs, R) per group
        torch.tensor([[score_of(metric, row) for row in counts @ s] for s in group]) for group in (a, b)
    ]
    v_sel = float((resampled[1].mean(0) - resampled[0].mean(0)).var())
    parts = borrowed([seed_variance(x) for x in scores])
    noise = borrowed([run_noise(r) for r in resampled])
    v_seeds = sum(v / len(x) for (v, _), x in zip(parts, scores))
    v_sentences = max(0.0, v_sel - sum(w / len(x) for (w, _), x in zip(noise, scores)))
    df = (
        (v_seeds + v_sentences) ** 2 / sum((v / len(x)) ** 2 / d for (v, d), x in zip(parts, scores))
        if v_seeds > 0
        else math.inf
    )
    delta = statistics.fmean(scores[1]) - statistics.fmean(scores[0])
    total = v_seeds + v_sentences
    return GroupTest(
        *map(statistics.fmean, scores),
        *(statistics.stdev(x) if len(x) > 1 else None for x in scores),
        se_seeds=math.sqrt(v_seeds),
        se_sentences=math.sqrt(v_sentences),
        df=df,
        p=two_sided_p(delta / math.sqrt(total), df) if total > 0 else 1.0,
    )


def seed_variance(scores: list[float]) -> tuple[float, int] | None:
    """(The variance of a group's seeds' scores, its degrees of freedom); None for one seed."""
    return (statistics.variance(scores), len(scores) - 1) if len(scores) > 1 else None


def run_noise(resampled: torch.Tensor) -> tuple[float, int] | None:
    """The test-sentence variance of one run's deviation from its group's expected score, from the
    runs' scores on the resamples (runs, R): what V_sel holds of the seeds' noise rather than of the
    configs' difference, with its degrees of freedom; None for one run."""
    m = resampled.shape[0]
    if m < 2:
        return None
    return float((resampled - resampled.mean(0)).var(1).mean()) * m / (m - 1), m - 1


def borrowed(values: list) -> list[tuple[float, int]]:
    """Each group's estimate, a group of one seed taking the other's; (0, 1) each where neither has one."""
    if values == [None, None]:
        return [(0.0, 1), (0.0, 1)]
    return [mine or other for mine, other in zip(values, values[::-1])]


def two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom (math.inf: the normal): the density
    integrated by Simpson's rule over [0, |t|] (fine: it is smooth, and 2,000 intervals leave < 1e-9)."""
    t = abs(t)
    if math.isinf(df):
        return math.erfc(t / math.sqrt(2))
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(x: float) -> float:
        return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))

    steps = 2000
    h = t / steps
    inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
    return max(0.0, 1.0 - 2 * h / 3 * (density(0.0) + inner + density(t)))


def seed_groups(runs: list) -> list[list]:
    """mt.report's comparable rows grouped by config without train.seed (nor, for tuned runs, the
    decoding each seed's tuning chose) and by the evaluation shown (RUN@SETTING's two rows of one run
    stay apart), one run a seed: a run that repeats its group's seed (a copy of one training, or the
    seed trained again) stands alone (`repeated_seeds` says so)."""
    found = []
    for group in grouped(runs, _config_and_setting):
        by_seed = grouped(group, lambda run: run.config.get(SEED_KEY))
        found += [[same[0] for same in by_seed], *([run] for same in by_seed for run in same[1:])]
    return found


def repeated_seeds(runs: list) -> list[str]:
    """The report's note on each run that repeats the train.seed of an earlier run of its group."""
    notes = []
    for group in grouped(runs, _config_and_setting):
        for same in grouped(group, lambda run: run.config.get(SEED_KEY)):
            if len(same) > 1:
                repeats = ", ".join(f"`{run.label}`" for run in same[1:])
                notes.append(
                    f"> **Not another seed:** {repeats}: the config and train.seed "
                    f"({same[0].config.get(SEED_KEY)}) of `{same[0].label}`, a copy of one training or the "
                    f"seed trained again, so each stands alone in the groups; train another seed with "
                    f"--set train.seed=N."
                )
    return notes


def _config_and_setting(run) -> tuple:
    return without_seed(run.config, "tuning" in run.card), run.setting


def groups_section(groups: list[list], metrics: list, tokenizer: str) -> list[str]:
    """`mt report`'s Groups section (where some group has two seeds or more): a row per group with its
    seeds' mean ± standard deviation and the test against the first group, then a verdict each."""
    made = {m.key: m.make(tokenizer) for m in metrics}
    stats = [
        {k: group_statistics(group, groups[0][0], metric) for k, metric in made.items()} for group in groups
    ]
    tests = [None] + [{k: between_groups(made[k], stats[0][k], s[k]) for k in made} for s in stats[1:]]
    columns = ["group", "seeds", *(f"val {m.label}" for m in metrics)]
    columns += [name for m in metrics for name in (m.label, "p")]
    out = [
        "## Groups: runs that differ only in train.seed",
        "",
        "A group's score: the mean over its seeds ± their standard deviation. p: Welch's t of the difference"
        " of means against the first group, counting the seeds' spread and the test sentences' (paired"
        f" bootstrap, {RESAMPLES} resamples; mt.report.groups, after Clark et al. 2011); * = p <"
        f" {P_THRESHOLD}.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for group, test in zip(groups, tests):
        val = " | ".join(
            _spread([r.card.get("training", {}).get(f"best_val_{m.key}") for r in group]) for m in metrics
        )
        cells = [f"{_spread([r.result()[m.key] for r in group])} | {_p(test, m.key)}" for m in metrics]
        out.append(f"| {label_of(group)} | {len(group)} | {val} | {' | '.join(cells)} |")
    out.append("")
    base = f"`{label_of(groups[0])}` ({len(groups[0])})"
    for group, test in zip(groups[1:], tests[1:]):
        said = "; ".join(_verdict(m.label, test[m.key]) for m in metrics)
        out.append(f"- `{label_of(group)}` ({len(group)} seed{'s' * (len(group) != 1)}) vs {base}: {said}.")
    return out


def group_statistics(group: list, base, metric) -> list[torch.Tensor]:
    """Each run's sentence statistics against the baseline run's references (mt.report's rows)."""
    shown = base.result()
    references = base.lines(shown["ref_file"], shown["sentences"])
    return [
        sentence_statistics(metric, run.lines(run.result()["hyp_file"], shown["sentences"]), references)
        for run in group
    ]


def label_of(group: list) -> str:
    return group_label([run.label for run in group])


def _spread(values: list) -> str:
    if None in values:
        return "–"
    return f"{statistics.fmean(values):.2f}" + (
        f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    )


def p_text(p: float | None) -> str:
    """A p-value as a report's cell shows it, starred below P_THRESHOLD; "–" where none is tested."""
    if p is None:
        return "–"
    return f"{p:.4f}" + (" *" if p < P_THRESHOLD else "")


def _p(test: dict | None, key: str) -> str:
    """A row's p-value cell: none for the first group, which the others are tested against."""
    return p_text(None if test is None else test[key].p)


def _verdict(label: str, test: GroupTest) -> str:
    how = "significant" if test.p < P_THRESHOLD else "not significant"
    return (
        f"{label} {test.delta:+.2f}, {how} (p = {test.p:.4f}; standard errors: seeds {test.se_seeds:.2f}, "
        f"test sentences {test.se_sentences:.2f}; df {test.df:.1f})"
    )
