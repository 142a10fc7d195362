"""`mt report`'s learning curves: training NLL and validation BLEU against steps and wall time, a line
per run (`runs`: mt.report's rows, each with a path, a label and its metrics.jsonl records), or per
group of seeds (mt.report.groups) its mean with a band from its lowest to its highest run. Drawn with
matplotlib, the optional `plot` extra, imported only when a report is written."""

from __future__ import annotations

import statistics
from pathlib import Path

from mt.plumbing.files import write_figure
from mt.plumbing.metrics import PRIMARY


def curve_points(runs: list) -> list[tuple[str, dict[tuple[int, int], tuple[list, list]]]]:
    """What `plot_curves` draws: per run (a run given twice, RUN@SETTING, once), its label and each
    panel's (x, y) points; panel (row, col): row 0 training NLL, 1 val BLEU; col 0 steps, 1 minutes."""
    latest = {r.path.resolve(): r for r in reversed(runs)}
    points = []
    for run in [r for r in runs if latest[r.path.resolve()] is r]:
        logs = [r for r in run.metrics if "loss" in r]
        vals = [r for r in run.metrics if f"val_{PRIMARY.key}" in r]
        panels = {}
        for col, x in enumerate(("step", "elapsed_s")):
            scale = 1 if x == "step" else 1 / 60
            panels[0, col] = [r[x] * scale for r in logs], [r["nll"] for r in logs]
            panels[1, col] = [r[x] * scale for r in vals], [r[f"val_{PRIMARY.key}"] for r in vals]
        points.append((run.label, panels))
    return points


def band_points(label: str, runs: list) -> tuple[str, dict[tuple[int, int], tuple[list, list, list, list]]]:
    """A group's curves: each panel's (x, mean y, lowest y, highest y) over its runs, point by point up to
    the shortest run's last (x: the runs' mean, steps alike for seeds of one config)."""
    panels = {}
    for key in ((0, 0), (0, 1), (1, 0), (1, 1)):
        curves = [run_panels[key] for _, run_panels in curve_points(runs)]
        n = min(len(xs) for xs, _ in curves)
        columns = [list(zip(*(c[axis][:n] for c in curves))) for axis in (0, 1)]  # per point: every run's
        panels[key] = (
            [statistics.fmean(x) for x in columns[0]],
            [statistics.fmean(y) for y in columns[1]],
            [min(y) for y in columns[1]],
            [max(y) for y in columns[1]],
        )
    return f"{label} (mean of {len(runs)} seeds)", panels


def plot_curves(runs: list, path: Path, groups: list[tuple[str, list]] = ()):
    """Training NLL and val BLEU against steps and against wall time, all runs on each panel; the runs
    of each (label, runs) in `groups` as their mean and band. The NLL, not the label-smoothed loss, so
    that runs with different smoothing share a scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    grouped = {id(run) for _, members in groups for run in members}
    for label, panels in curve_points([run for run in runs if id(run) not in grouped]):
        for (row, col), (xs, ys) in panels.items():
            axes[row][col].plot(xs, ys, label=label, marker="o" if row == 1 else None)
    for label, panels in (band_points(*group) for group in groups):
        for (row, col), (xs, mean, low, high) in panels.items():
            line = axes[row][col].plot(xs, mean, label=label, marker="o" if row == 1 else None)[0]
            axes[row][col].fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    for col, xlabel in enumerate(("step", "wall clock (minutes)")):
        axes[0][col].set(xlabel=xlabel, ylabel="training NLL (unsmoothed)")
        axes[1][col].set(xlabel=xlabel, ylabel=f"validation {PRIMARY.label} (beam train.valid_beam)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a panel no run has points for gets no empty legend
            ax.legend(fontsize=8)
    for ax in axes[1]:  # at least 2 BLEU on the axis: 0.0141 vs 0.0142 must not look like a gap
        low, high = ax.get_ylim()
        if high - low < 2.0:
            ax.set_ylim((low + high) / 2 - 1.0, (low + high) / 2 + 1.0)
    fig.tight_layout()
    write_figure(fig, path)
    plt.close(fig)
    return fig  # closed, but its axes can still be read
