"""The runs `mt report` compares, loaded and checked from their run folders alone: each row's card,
metrics.jsonl and config, the evaluation it shows (RUN@SETTING's, --setting's, or the run's own:
SPLIT-tuned resolved by mt.run.folder.result_name), and whether two rows can be compared at all (the
same test set, the same metric signatures). Rendering them is mt.report.markdown's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mt.config import config_to_dict, read_saved_config
from mt.plumbing.config_yaml import flatten
from mt.plumbing.errors import ConfigError, RunDirError
from mt.plumbing.metrics import HEADLINE
from mt.plumbing.script import signature_tokenizer
from mt.run.card import read_card
from mt.run.folder import result_name
from mt.run.metrics_log import read_metrics


@dataclass
class Run:
    """What the report reads from one run directory."""

    path: Path
    card: dict
    metrics: list[dict]
    config: dict  # DIR/config.yaml, flattened: {"train.lr": 0.001, ...}
    setting: str = ""  # the evaluation this row shows: RUN@SETTING's, --setting's, or the run's own
    label: str = ""  # the folder name (or the whole path where two runs share one), @SETTING if named
    key: str = ""  # the setting's result in the card: SPLIT-tuned resolved (mt.run.folder.result_name)

    def result(self) -> dict | None:
        return self.card.get("results", {}).get(self.key)

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


def own_setting(path: Path, card: dict, split: str = "test") -> tuple[str, str]:
    """(setting, card key) of the evaluation a plain `mt evaluate --run DIR --split SPLIT` files: SPLIT-tuned
    where the run was tuned, else its config's decoding's name (test, test-beam5-lp1.5, ...). A run
    without that result is refused, with the results it has."""
    key = result_name(path, f"{split}-tuned")
    if key in card.get("results", {}):
        return (f"{split}-tuned" if card.get("tuning") else key), key
    raise RunDirError(
        f"{path}: no '{key}' result (the run's own decoding on {split}); run `mt evaluate --run {path} "
        f"--split {split}` first, or compare {results_named(card)} with --setting"
    )


def results_named(card: dict) -> str:
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
        shown = at_setting or setting
        shown, key = (shown, result_name(path, shown)) if shown else own_setting(path, card)
        problem = result_problem(card, key)
        if problem:
            raise RunDirError(
                f"{path}/card.json: damaged ({problem}); restore it, or delete it and run `mt evaluate "
                f"--run {path}` to write a new one"
            )
        config = flatten(config_to_dict(read_saved_config(path / "config.yaml")))
        runs.append(Run(path, card, read_metrics(path / "metrics.jsonl"), config, shown, key=key))
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
