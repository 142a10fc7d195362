"""`mt report`: compare runs from their run directories alone, with significance and plots.

One row per run (from card.json), the config keys that differ between runs, and sacreBLEU's paired
bootstrap resampling of BLEU and chrF of every run against the first, on the same test set and
decoding setting. By default each run is compared at its own decoding on test, the result a plain `mt
evaluate --run DIR` wrote: test-tuned where `mt tune` chose the run's decoding (mt.run.folder.result_name
says under which name the card holds it), else the one its config's decode section names (test,
test-beam5, ...); `--setting` compares one named
evaluation of every run, and `RUN@SETTING` another of a run's evaluations (e.g. its averaged checkpoint:
`runs/x@test-beam5 runs/x@test-beam5-averaged`). Runs scored on other references or with other metric
signatures are listed but not compared, and the report says why. Plots (training NLL and val BLEU
against steps and wall time) need matplotlib, the optional `plot` extra; without it the report says
they were skipped.
"""

from __future__ import annotations

from pathlib import Path

from sacrebleu.significance import PairedTest

from mt.plumbing.errors import RunDirError
from mt.plumbing.files import write_text
from mt.plumbing.metrics import HEADLINE, METRICS, PRIMARY, Metric, best_of, improves
from mt.plumbing.script import signature_tokenizer
from mt.report.curves import plot_curves
from mt.report.groups import P_THRESHOLD, groups_section, p_text, repeated_seeds, seed_groups
from mt.report.runs import Run, check_one_tokenizer, comparability, load_runs, results_named
from mt.run.names import chooser_text
from mt.run.provenance import differing_keys

BOOTSTRAP_SAMPLES = 1000


def paired_bootstrap(runs: list[Run]) -> list[dict]:
    """sacreBLEU paired bootstrap resampling of each run against the first: one dict per run with each
    headline metric's score (bleu), 95% CI (bleu_ci) and p-value (bleu_p; None for the baseline)."""
    base = runs[0].result()
    refs = runs[0].lines(base["ref_file"], base["sentences"])
    systems = [(r.label, r.lines(r.result()["hyp_file"], base["sentences"])) for r in runs]
    metrics = {m.key: m.make(signature_tokenizer(base["bleu_signature"])) for m in HEADLINE}
    test = PairedTest(systems, metrics, [refs], test_type="bs", n_samples=BOOTSTRAP_SAMPLES)
    _, scores = test()
    columns = [scores[k] for k in scores if k != "System"]  # one per metric, in HEADLINE's order
    results = [
        {field: value for m, s in zip(HEADLINE, row) for field, value in _tested(m.key, s).items()}
        for row in zip(*columns)
    ]
    for (_, hyps), result in zip(systems[1:], results[1:]):
        if hyps == systems[0][1]:  # sacreBLEU counts resampled differences > 0, so no difference at all
            for m in HEADLINE:  # would get its smallest p, 1 / (resamples + 1)
                result[f"{m.key}_p"] = 1.0
    return results


def _tested(key: str, score) -> dict:
    return {key: score.score, f"{key}_p": score.p_value, f"{key}_ci": score.ci}


def _fmt(value, spec: str = ".2f", missing: str = "–") -> str:
    return missing if value is None else format(value, spec)


_p = p_text  # the one p-value cell (mt.report.groups)


def _verdict(metric: Metric, base: float, score: float, ci: float, p: float) -> str:
    """One metric's line: the change, the run's bootstrap 95% CI half-width, and the p-value; better
    or worse in the metric's own direction."""
    delta, spread = score - base, f"{base:.2f} -> {score:.2f} ± {ci:.2f}"
    if p < P_THRESHOLD:
        direction = "better" if improves(metric.key, score, base) else "worse"
        return f"{metric.label} {direction} by {abs(delta):.2f} ({spread}; p = {p:.4f} < {P_THRESHOLD})"
    return f"{metric.label} {delta:+.2f}, not significant ({spread}; p = {p:.4f})"


def render(runs: list[Run], plots: str) -> str:
    """The Markdown report. `plots` is the Markdown for the plots section."""
    base = runs[0].result()
    problems = [comparability(base, r.result()) for r in runs]
    if problems[0]:
        raise RunDirError(
            f"{runs[0].path}: the baseline has no '{runs[0].setting}' result; run `mt evaluate` on it "
            f"first, or compare {results_named(runs[0].card)}"
        )
    check_one_tokenizer(runs)
    comparable = [r for r, why in zip(runs, problems) if not why]
    tests = (
        dict(zip([r.label for r in comparable], paired_bootstrap(comparable))) if len(comparable) > 1 else {}
    )
    best = best_of(comparable, lambda r: r.result()[PRIMARY.key])  # ties share the star
    out = _header(runs)
    for run, why in zip(runs, problems):
        if why:
            out += [
                f"> **Not compared:** `{run.path}` was {why} than the baseline; its scores are shown "
                f"but no p-value is computed.",
                "",
            ]
    out += _table(runs, tests, best)
    out += ["", "## Verdict", ""] + _verdicts(runs[0], comparable[1:], tests)
    groups = seed_groups(comparable)
    out += [line for note in repeated_seeds(comparable) for line in ("", note)]
    if any(len(group) > 1 for group in groups):
        out += ["", *groups_section(groups, HEADLINE, signature_tokenizer(base["bleu_signature"]))]
    else:
        out += [
            "",
            "Each row is one run, one seed: its p counts the test sentences' sampling, not training's "
            "randomness; `make compare CONFIGS=... SEEDS=3` trains seeds and tests groups of them.",
        ]
    out += ["", "## Runs", ""] + [_run_line(run) for run in runs]
    out += [
        "",
        "## Signatures",
        "",
        *(_signature_line(m, base) for m in METRICS),
        "",
        "## Learning curves",
        "",
        plots,
        "",
    ]
    return "\n".join(out)


def _signature_line(metric, result: dict) -> str:
    note = f" ({metric.note})" if metric.note else ""
    return f"- {metric.label}{note}: `{result.get(f'{metric.key}_signature', '–')}`"


def _header(runs: list[Run]) -> list[str]:
    """The title (the evaluations compared), each run's decoding, and what was measured how."""
    base = runs[0].result()
    shown = dict.fromkeys(run.setting for run in runs)
    return [
        f"# Comparing {len(runs)} runs on " + ", ".join(f"`{name}`" for name in shown),
        "",
        f"Baseline: `{runs[0].path}`. {base['sentences']} sentences, references sha256 "
        f"`{base['refs_sha256'][:12]}`. Decoding: "
        + "; ".join(f"`{run.label}` {_decoding(run)}" for run in runs)
        + f". p: sacreBLEU paired bootstrap resampling ({BOOTSTRAP_SAMPLES} resamples) against the "
        f"baseline; * = p < {P_THRESHOLD}; ± = half-width of the run's bootstrap 95% confidence interval. "
        "★ = best BLEU.",
        "",
    ]


def _decoding(run: Run) -> str:
    """How a row's translations were decoded: "beam 3, length penalty 2.0 (`test-tuned`: `test-beam3-lp2`,
    tuned on val)"."""
    result = run.result() or {}
    if not result:
        return f"(no `{run.setting}` result)"
    decode = result.get("decode", {})
    chooser = chooser_text(decode, run.path)
    how = (
        f"sampled {decode['sample']}"
        if decode.get("sample")
        else f"beam {result['beam']}, length penalty {result['length_penalty']}{chooser}"
    )
    tuned = f": `{run.key}`, tuned on val" if run.setting.endswith("-tuned") else ""
    return f"{how} (`{run.setting}`{tuned})"


def _verdicts(base: Run, others: list[Run], tests: dict[str, dict]) -> list[str]:
    """One line per run compared with the baseline: BLEU's and chrF's change and significance."""
    if not others:
        return ["- Nothing to test: fewer than two comparable runs."]
    b, lines = tests[base.label], []
    for run in others:
        r = tests[run.label]
        verdicts = [_verdict(m, b[m.key], r[m.key], r[f"{m.key}_ci"], r[f"{m.key}_p"]) for m in HEADLINE]
        lines.append(f"- `{run.label}` vs `{base.label}`: {'; '.join(verdicts)}.")
    return lines


def _run_line(run: Run) -> str:
    """Where a run came from: its base config, parent run or shared tokenizer, code, precision,
    hardware, and why it stopped."""
    c = run.card
    hw, code = c.get("hardware", {}), c.get("code", {})
    device = hw.get("gpu") or f"{hw.get('cpu', '?')}, {hw.get('threads', '?')} threads"
    return (
        f"- `{run.path}`: base {c['config']['base']}{_lineage(c)}, code {code.get('git_commit', '?')[:10]}"
        f"{' (uncommitted changes)' if code.get('dirty') else ''}, {c.get('precision')}, "
        f"{device}, stopped: {c.get('training', {}).get('stopped') or '–'}"
    )


def _lineage(card: dict) -> str:
    parent, shared = card.get("parent"), card.get("tokenizer_from")
    if parent:
        return f", fine-tuned from `{parent['run']}/{parent['checkpoint']}` (sha256 {parent['sha256'][:12]})"
    return f", tokenizer of `{shared['run']}`" if shared else ""


def _table(runs: list[Run], tests: dict[str, dict], best: list[Run]) -> list[str]:
    """One row per run: its card, its scores (mt.plumbing.metrics; the headline ones with p-values), and the
    config keys that differ."""
    keys = differing_keys([run.config for run in runs])
    columns = ["run", "config (hash)", "params", "steps", "epochs", "wall", "tok/s", "multiply-adds"]
    columns += ["best step", *(f"val {m.label}" for m in HEADLINE)]
    columns += [name for m in METRICS for name in ([m.label, "p"] if m.headline else [m.label])]
    columns += ["len ratio"] + [f"`{k}`" for k in keys]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for i, run in enumerate(runs):
        c, t, res = run.card, run.card.get("training", {}), run.result() or {}
        test = tests.get(run.label, {})
        mark = " ★" if any(run is b for b in best) else ""
        scores = [
            _fmt(res.get(m.key)) + (f" | {_p(test.get(f'{m.key}_p'))}" if m.headline else "") for m in METRICS
        ]
        out.append(
            f"| {run.label}{mark} | {c['config']['name']} ({c['config']['hash'][:8]}) "
            f"| {c['parameters'] / 1e6:.2f}M | {t.get('steps', '–')} | {t.get('epochs', '–')} "
            f"| {_fmt(t.get('wall_s'), '.0f')} s | {_fmt(t.get('tokens_per_s'), '.0f')} "
            f"| {_compute(t)} "
            f"| {t.get('best_step', '–')} | {' | '.join(_fmt(t.get(f'best_val_{m.key}')) for m in HEADLINE)} "
            f"| {' | '.join(scores)} | {_fmt(res.get('length_ratio'), '.3f')} |"
            + "".join(f" {keys[k][i]} |" for k in keys)
        )
    return out


def _compute(training: dict) -> str:
    """A row's training multiply-adds (mt.training.compute), with its pipeline's where a teacher adds
    to them."""
    own, pipeline = training.get("multiply_adds"), training.get("pipeline_multiply_adds")
    total = f" ({pipeline:.3g} with its teacher)" if pipeline is not None and pipeline != own else ""
    return _fmt(own, ".3g") + total


def write_report(paths: list[str | Path], out: str | Path, setting: str = "") -> tuple[Path, str]:
    """Write the Markdown report (and its plot beside it); returns (report path, plots note). `setting`:
    the evaluation every row shows ("": each run's own, `mt.report.runs.own_setting`)."""
    runs = load_runs(paths, setting)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_name(out.stem + "-curves.png")
    try:
        # a group's legend names its first run: all its names would crowd the panels out
        plot_curves(runs, png, [(f"{g[0].label} …", g) for g in seed_groups(runs) if len(g) > 1])
        plots = f"![training NLL and validation BLEU]({png.name})"
    except ImportError:
        plots = "Plots skipped: matplotlib is not installed (`pip install -e '.[plot]'`)."
    write_text(out, render(runs, plots))
    return out, plots
