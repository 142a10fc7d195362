"""Issue 84: each run's best setting of each kind, as `mt tune --mbr --rerank RUN` scored them on val,
evaluated on test (`mt evaluate`'s files and card entries), and the kinds compared as groups over seeds.

    python scripts/experiments/choices_on_test.py runs/m30k-bf16-s1 runs/m30k-bf16-s2 runs/m30k-bf16-s3 \
        --out docs/decoding-choices/groups.md

The kinds: plain beam search (the grid's best), MBR (any pool), MBR over the beam alone (no samples:
the cheap one), reranking (any pool) and reranking of beam 5's pool (the cheaper one); each the
highest val BLEU of its kind in the card's `tuning`. Prints one JSON line per run and kind: the
setting, its val and test BLEU, and the test decoding's seconds (`--lines FILE` reads them back instead
of evaluating). With --out FILE.md: each kind's group over the runs (their seeds) against the plain
beam's group, tested as `mt report`'s Groups section tests groups (mt.report.groups.between_groups: the
seeds' spread and the test sentences'); the settings differ by seed, which `mt report`'s groups (one
setting a group) cannot show.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from mt.decode_config import TUNED
from mt.evaluate import evaluate_run
from mt.plumbing.metrics import HEADLINE
from mt.plumbing.script import signature_tokenizer
from mt.report.groups import between_groups, p_text, sentence_statistics
from mt.run.card import read_card
from mt.translator import Translator

KINDS = {
    "beam": lambda row: not row.get("mbr") and not row.get("rerank"),
    "mbr": lambda row: bool(row.get("mbr")),
    "mbr-beam-only": lambda row: bool(row.get("mbr")) and not row.get("mbr_samples"),
    "rerank": lambda row: bool(row.get("rerank")),
    "rerank-beam5": lambda row: bool(row.get("rerank")) and row["beam"] == 5,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", help="the groups' table, markdown")
    parser.add_argument("--lines", help="the JSON lines an earlier call printed: only the table, from them")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS), help="evaluate these")
    args = parser.parse_args()
    if args.lines:
        found = [json.loads(line) for line in Path(args.lines).read_text().splitlines()]
    else:
        found = [line for run in args.runs for line in evaluated(run, args.device, args.kinds)]
    if args.out:
        Path(args.out).write_text("\n".join(groups_table(found)) + "\n")


def evaluated(run: str, device: str, kinds: list[str]) -> list[dict]:
    """Each kind's best setting on val evaluated on test: a JSON line each, printed and returned."""
    found = []
    tried = read_card(run)["tuning"]["tried"]
    for kind in kinds:
        rows = [row for row in tried if KINDS[kind](row)]
        if not rows:
            continue
        best = max(rows, key=lambda row: row["bleu"])  # the first of a tie: the grid's order
        setting = {key: best[key] for key in TUNED}
        translator = Translator.from_run(run, device=device, **setting)
        start = time.perf_counter()
        result = evaluate_run(translator, "test")
        seconds = time.perf_counter() - start
        line = {"run": run, "kind": kind, "key": result["key"], "val_bleu": best["bleu"]}
        line |= {"test_bleu": round(result["bleu"], 2), "test_chrf": round(result["chrf"], 2)}
        line |= {"seconds": round(seconds, 1), "hyp_file": result["hyp_file"], "ref_file": result["ref_file"]}
        line["tokenize"] = signature_tokenizer(result["bleu_signature"])
        print(json.dumps(line), flush=True)
        found.append(line)
    return found


def groups_table(found: list[dict]) -> list[str]:
    """Each kind's group of runs against the plain beam's: means ± sd over the runs, the difference and
    its p (mt.report.groups.between_groups), and the test decoding's seconds against the beam's."""
    by_kind = {kind: [line for line in found if line["kind"] == kind] for kind in KINDS}
    metrics = {m.key: m.make(found[0].get("tokenize", "13a")) for m in HEADLINE}
    stats = {
        kind: {key: [statistics_of(metric, line) for line in lines] for key, metric in metrics.items()}
        for kind, lines in by_kind.items()
        if lines
    }
    out = [
        "| kind | settings (each seed's, chosen on val) | val BLEU | test BLEU | Δ | p | test chrF | Δ | p "
        "| seconds / beam's |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, lines in by_kind.items():
        if not lines:
            continue
        cells = [
            kind,
            ", ".join(f"`{line['key']}`" for line in lines),
            spread([x["val_bleu"] for x in lines]),
        ]
        for key, metric in metrics.items():
            cells.append(spread([x[f"test_{key}"] for x in lines]))
            test = between_groups(metric, stats["beam"][key], stats[kind][key]) if kind != "beam" else None
            cells += [f"{test.delta:+.2f}", p_text(test.p)] if test else ["", ""]
        ratio = [x["seconds"] / b["seconds"] for x, b in zip(lines, by_kind["beam"])]
        cells.append(f"{statistics.fmean(ratio):.1f}x")
        out.append("| " + " | ".join(cells) + " |")
    return out


def statistics_of(metric, line: dict):
    """A run's sentence statistics for `metric` from the files its evaluation wrote."""
    read = lambda name: Path(line["run"], name).read_text().splitlines()  # noqa: E731
    return sentence_statistics(metric, read(line["hyp_file"]), read(line["ref_file"]))


def spread(values: list[float]) -> str:
    return (
        f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"
        if len(values) > 1
        else f"{values[0]:.2f}"
    )


if __name__ == "__main__":
    main()
