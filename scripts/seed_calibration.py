"""How often `mt report`'s tests call two groups of one config significantly different (p < 0.05): the
between-group test of mt.report.groups against today's single-run paired bootstrap (sacreBLEU's).

    python scripts/seed_calibration.py runs/m30k-seed1 runs/m30k-seed2 runs/m30k-seed3 [--group 3] \\
        [--trials 400] [--resamples 200] [--out calibration.json]

The runs: R >= 2 seeds of one config, each evaluated on one test set (their own decoding on test, as
`mt report` shows them). Two checks:

- simulated: replicas drawn from a Gaussian model of the real seeds' per-sentence statistics (their mean
  plus a random combination of the seeds' deviations from it, weights N(0, 1 / (R - 1)), so that the
  replicas' covariance is the seeds' sample covariance, sentence by sentence and over the corpus), on a
  test set resampled from the real one each trial; two groups of --group replicas each, tested with
  mt.report.groups.between_groups, and their first replicas with the single-run test.
- real: every split of the real seeds into two disjoint groups of --group (or as many as there are),
  and every pair of real seeds with the single-run test, on the test set as it is.

Prints one JSON line: each test's false-positive rate at 0.05 per metric, with the number of comparisons.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

from mt.plumbing.metrics import HEADLINE
from mt.plumbing.script import signature_tokenizer
from mt.report.groups import between_groups, group_statistics, resample_counts, score_of
from mt.report.runs import load_runs

ALPHA = 0.05


def single_run_p(metric, a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor) -> float:
    """sacreBLEU's paired bootstrap p-value of run b against run a (mt report's per-run test): the share
    of resamples whose |difference|, centred on its mean, exceeds the observed one (+1 each)."""
    observed = abs(score_of(metric, b.sum(0)) - score_of(metric, a.sum(0)))
    diffs = torch.tensor(
        [abs(score_of(metric, rb) - score_of(metric, ra)) for ra, rb in zip(counts @ a, counts @ b)]
    )
    return (int(((diffs - diffs.mean()) > observed).sum()) + 1) / (len(diffs) + 1)


def replicas(runs: list[torch.Tensor], count: int, generator: torch.Generator) -> list[torch.Tensor]:
    """`count` synthetic replicas of the seeds `runs` (each (N, K)): the mean plus a Gaussian combination
    of the deviations, cut at 0 (counts cannot be negative)."""
    stacked = torch.stack(runs)  # (R, N, K)
    mean, deviations = stacked.mean(0), stacked - stacked.mean(0)
    weights = torch.randn(count, len(runs), generator=generator, dtype=torch.float64) / (len(runs) - 1) ** 0.5
    return list((mean + torch.einsum("cr,rnk->cnk", weights, deviations)).clamp(min=0))


def simulated(metric, runs: list[torch.Tensor], group: int, trials: int, resamples: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    grouped = single = 0
    n = runs[0].shape[0]
    for trial in range(trials):
        sentences = torch.randint(n, (n,), generator=generator)  # this trial's test set
        drawn = [r[sentences] for r in replicas(runs, 2 * group, generator)]
        a, b = drawn[:group], drawn[group:]
        grouped += between_groups(metric, a, b, resamples, seed=seed + trial).p < ALPHA
        single += single_run_p(metric, a[0], b[0], resample_counts(n, resamples, seed + trial)) < ALPHA
    return {"groups": grouped / trials, "single_run": single / trials, "comparisons": trials}


def real(metric, runs: list[torch.Tensor], group: int, resamples: int, seed: int) -> dict:
    size = min(group, len(runs) // 2)
    splits = [
        (a, b)
        for a in itertools.combinations(range(len(runs)), size)
        for b in itertools.combinations([i for i in range(len(runs)) if i not in a], size)
        if a < b  # each unordered split once
    ]
    grouped = [
        between_groups(metric, [runs[i] for i in a], [runs[i] for i in b], resamples, seed).p
        for a, b in splits
    ]
    counts = resample_counts(runs[0].shape[0], resamples, seed)
    pairs = [
        single_run_p(metric, runs[i], runs[j], counts) for i, j in itertools.combinations(range(len(runs)), 2)
    ]
    return {
        "groups": sum(p < ALPHA for p in grouped) / len(grouped),
        "group_size": size,
        "splits": len(splits),
        "single_run": sum(p < ALPHA for p in pairs) / len(pairs),
        "pairs": len(pairs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--group", type=int, default=3, help="seeds per group")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--resamples", type=int, default=200, help="bootstrap resamples per test")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = load_runs(args.runs)
    if len(rows) < 2 or len({r.result()["refs_sha256"] for r in rows}) != 1:
        parser.error("give two or more runs of one config, evaluated on one test set")
    tokenizer = signature_tokenizer(rows[0].result()["bleu_signature"])
    result = {"runs": args.runs, "group": args.group, "resamples": args.resamples, "alpha": ALPHA}
    for m in HEADLINE:
        metric = m.make(tokenizer)
        stats = group_statistics(rows, rows[0], metric)
        result[m.key] = {
            "simulated": simulated(metric, stats, args.group, args.trials, args.resamples, args.seed),
            "real": real(metric, stats, args.group, args.resamples, args.seed),
        }
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
