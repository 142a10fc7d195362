"""`mt report`: compare runs from their run directories alone, with significance and plots.

One row per run (from card.json), the config keys that differ between runs, and sacreBLEU's paired
bootstrap resampling of BLEU and chrF of every run against the first, on the same test set and
decoding setting. By default each run is compared at its own decoding on test, the result a plain `mt
evaluate --run DIR` wrote: test-tuned where `mt tune` chose the run's beam and length penalty, else
the one its config's decode section names (test, test-beam5, ...); `--setting` compares one named
evaluation of every run, and `RUN@SETTING` another of a run's evaluations (e.g. its averaged checkpoint:
`runs/x@test-beam5 runs/x@test-beam5-averaged`). Runs scored on other references or with other metric
signatures are listed but not compared, and the report says why. Plots (training NLL and val BLEU
against steps and wall time) need matplotlib, the optional `plot` extra; without it the report says
they were skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.significance import PairedTest

from mt.config import config_to_dict, read_saved_config
from mt.curves import plot_curves
from mt.groups import P_THRESHOLD, groups_section, p_text, seed_groups
from mt.metrics import HEADLINE, METRICS, Metric, improves, signature_tokenizer
from mt.plumbing.config_yaml import flatten
from mt.plumbing.errors import ConfigError, RunDirError
from mt.plumbing.files import write_text
from mt.run.card import read_card
from mt.run.folder import read_metrics
from mt.run.names import chooser_text, evaluation_name
from mt.run.provenance import differing_keys

BOOTSTRAP_SAMPLES = 1000


@dataclass
class Run:
    """What the report reads from one run directory."""

    path: Path
    card: dict
    metrics: list[dict]
    config: dict  # DIR/config.yaml, flattened: {"train.lr": 0.001, ...}
    setting: str = ""  # the evaluation this row shows: RUN@SETTING's, --setting's, or the run's own
    label: str = ""  # the folder name (or the whole path where two runs share one), @SETTING if named

    def result(self) -> dict | None:
        return self.card.get("results", {}).get(self.setting)

    def lines(self, name: str, count: int) -> list[str]:
        """The `count` lines of DIR/name (hypotheses or references that `mt evaluate` wrote)."""
        path = self.path / name
        try:
            lines = path.read_bytes().decode("utf-8").split("\n")[:-1]
        except (OSError, UnicodeDecodeError) as e:
            raise RunDirError(
                f"{path}: cannot read ({getattr(e, 'strerror', None) or e}); run `mt evaluate --run "
                f"{self.path}` again to rewrite it"
            ) from None
        if len(lines) != count:
            raise RunDirError(
                f"{path}: {len(lines)} lines, but card.json says {count} sentences were scored; run "
                f"`mt evaluate --run {self.path}` again to rewrite it"
            )
        return lines


def result_problem(card: dict, setting: str) -> str:
    """What in a checked card (records.Card) the report cannot use for `setting` ("" = nothing)."""
    result = card.get("results", {}).get(setting)
    if result is not None and any(Path(result[k]).name != result[k] for k in ("hyp_file", "ref_file")):
        return f"results.{setting} names files outside the run directory"
    return ""


def split_setting(arg: str | Path) -> tuple[Path, str]:
    """ "runs/x@test-beam5" -> (runs/x, "test-beam5"); a plain path (even one with an @ in it) ->
    (path, "")."""
    path, at, setting = str(arg).rpartition("@")
    return (Path(path), setting) if at and not Path(arg).exists() and setting else (Path(arg), "")


def own_setting(path: Path, card: dict, split: str = "test") -> str:
    """The evaluation a plain `mt evaluate --run DIR --split SPLIT` files a run's result under: SPLIT-tuned
    where the run was tuned (`mt tune` drops those results when it tunes again), else the name of its
    config's decoding (test, test-beam5-lp1.5, ...). A run without that result is refused, with the
    results it has."""
    tuned, plain = f"{split}-tuned", evaluation_name(split, read_saved_config(path / "config.yaml").decode)
    for own in (tuned, plain):
        if own in card.get("results", {}):
            return own
    own = tuned if card.get("tuning") else plain
    raise RunDirError(
        f"{path}: no '{own}' result (the run's own decoding on {split}); run `mt evaluate --run {path} "
        f"--split {split}` first, or compare {_results_named(card)} with --setting"
    )


def _results_named(card: dict) -> str:
    """The results a card holds, for a refusal: "one of its results (test-beam5, val)"."""
    names = ", ".join(sorted(card.get("results", {})))
    return f"one of its results ({names})" if names else "a result (it has none yet)"


def load_runs(paths: list[str | Path], setting: str = "") -> list[Run]:
    """The runs to compare, checked. A row shows the evaluation its RUN@SETTING names, else `setting`,
    else ("") the run's own decoding on test (`own_setting`)."""
    runs, named = [], []
    for path, at_setting in map(split_setting, paths):
        card = read_card(path)
        if not card:
            raise RunDirError(
                f"{path}/card.json: not found; train the run (or run `mt evaluate --run {path}`) first"
            )
        shown = at_setting or setting or own_setting(path, card)
        problem = result_problem(card, shown)
        if problem:
            raise RunDirError(
                f"{path}/card.json: damaged ({problem}); restore it, or delete it and run `mt evaluate "
                f"--run {path}` to write a new one"
            )
        config = flatten(config_to_dict(read_saved_config(path / "config.yaml")))
        runs.append(Run(path, card, read_metrics(path / "metrics.jsonl"), config, shown))
        named.append(at_setting)
    if len({(r.path.resolve(), r.setting) for r in runs}) != len(runs):
        raise ConfigError(
            "the same run directory is given twice (RUN@SETTING compares two of its evaluations)"
        )
    folders = {r.path.resolve(): r.path.name for r in runs}
    names = list(folders.values())
    for run, at_setting in zip(runs, named):
        folder = run.path.name if names.count(run.path.name) == 1 else str(run.path)
        run.label = f"{folder}@{at_setting}" if at_setting else folder
    return runs


def _signatures_without_version(result: dict) -> tuple[str, ...]:
    # the sacrebleu version does not change a score
    # (a result written before a headline metric existed lacks it, and is not compared)
    return tuple(re.sub(r"\|version:[^|]*", "", result.get(f"{m.key}_signature", "")) for m in HEADLINE)


def comparability(base: dict | None, other: dict | None) -> str:
    """Why `other` cannot be compared with `base` (same setting, same test set, same metrics); "" if
    it can."""
    if base is None or other is None:
        return "not evaluated with this decoding setting"
    if base["refs_sha256"] != other["refs_sha256"] or base["sentences"] != other["sentences"]:
        return "scored on a different test set (other references)"
    if _signatures_without_version(base) != _signatures_without_version(other):
        return "scored with different metric signatures"
    return ""


def check_one_tokenizer(runs: list[Run]) -> None:
    """Refuse runs whose BLEU was scored with another tokenizer than the baseline's: tok:zh and tok:13a
    count different units, so neither their scores nor a test between them mean anything."""
    tokenizers = [signature_tokenizer((r.result() or {}).get("bleu_signature", "")) for r in runs]
    for run, tokenizer in zip(runs[1:], tokenizers[1:]):
        if (run.result() or {}).get("bleu_signature") and tokenizer != tokenizers[0]:
            raise RunDirError(
                f"{run.path}: BLEU scored with sacreBLEU's {tokenizer} tokenizer, the baseline "
                f"{runs[0].path} with {tokenizers[0]}; a report compares scores of one tokenizer "
                f"(eval.bleu_tokenize)"
            )


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


_p = p_text  # the one p-value cell (mt.groups)


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
            f"first, or compare {_results_named(runs[0].card)}"
        )
    check_one_tokenizer(runs)
    comparable = [r for r, why in zip(runs, problems) if not why]
    tests = (
        dict(zip([r.label for r in comparable], paired_bootstrap(comparable))) if len(comparable) > 1 else {}
    )
    top = max(r.result()["bleu"] for r in comparable)
    best = [r for r in comparable if r.result()["bleu"] == top]  # ties share the star
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
    """How a row's translations were decoded: "beam 3, length penalty 2.0 (`test-tuned`: tuned on val)"."""
    result = run.result() or {}
    if not result:
        return f"(no `{run.setting}` result)"
    decode = result.get("decode", {})
    how = (
        f"sampled {decode['sample']}"
        if decode.get("sample")
        else f"beam {result['beam']}, length penalty {result['length_penalty']}{chooser_text(decode)}"
    )
    tuned = ": tuned on val" if run.setting.endswith("-tuned") else ""
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
    """One row per run: its card, its scores (mt.metrics; the headline ones with p-values), and the
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
    the evaluation every row shows ("": each run's own, `own_setting`)."""
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
